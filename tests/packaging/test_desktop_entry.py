"""The Linux desktop entry, and what packaging/linux/install.sh and uninstall.sh do
with it: a per-user install whose menu entry starts the app on a double click."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

from tests.packaging.desktop_entry import exec_argv, read_entry

ROOT = Path(__file__).resolve().parents[2]
LINUX = ROOT / "packaging" / "linux"
ENTRY = LINUX / "vram-steward.desktop"
METAINFO = "io.github.vram_steward.vram_steward.metainfo.xml"
ICON_SIZES = (16, 24, 32, 48, 64, 128, 256, 512)

pytestmark = pytest.mark.skipif(os.name == "nt", reason="the Linux install scripts need a POSIX sh")

VALIDATOR = shutil.which("desktop-file-validate")
needs_validator = pytest.mark.skipif(VALIDATOR is None,
                                     reason="desktop-file-validate is not installed")

# A stand-in for a built program: records how it was started.
RECORDER = '#!/bin/sh\nprintf "%s\\n" "$0" "$@" > "$STARTED_LOG"\n'


def make_executable(path: Path, text: str = RECORDER) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def validate(path: Path) -> None:
    result = subprocess.run([VALIDATOR, str(path)], capture_output=True, text=True, check=False)
    output = result.stdout + result.stderr
    assert result.returncode == 0 and "error:" not in output and "warning:" not in output, output


class Home:
    """A user's home in tmp_path, and the scripts run against it."""

    def __init__(self, tmp_path: Path, prefix: Path | None = None) -> None:
        self.home = tmp_path / "home"
        self.data = tmp_path / "data"
        self.config = tmp_path / "config"
        self.prefix = prefix or self.home / ".local" / "opt" / "vram-steward"
        self.link = self.home / ".local" / "bin" / "vram-steward"
        self.log = tmp_path / "started.log"
        self.home.mkdir(exist_ok=True)
        self.env = {k: v for k, v in os.environ.items() if not k.startswith(("XDG_", "VRAM_"))}
        self.env.update(HOME=str(self.home), XDG_DATA_HOME=str(self.data),
                        XDG_CONFIG_HOME=str(self.config), STARTED_LOG=str(self.log))
        if prefix is not None:
            self.env["VRAM_STEWARD_PREFIX"] = str(prefix)

    @property
    def entry(self) -> Path:
        return self.data / "applications" / "vram-steward.desktop"

    def run(self, script: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        result = subprocess.run(["sh", str(script), *args], env=self.env, capture_output=True,
                                text=True, timeout=60, check=False)
        if check:
            assert result.returncode == 0, result.stdout + result.stderr
        return result

    def install(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        return self.run(LINUX / "install.sh", *args, check=check)

    def uninstall(self) -> None:
        self.run(LINUX / "uninstall.sh")

    def double_click(self) -> list[str]:
        """Start the menu entry's command as a launcher would; its argv as it saw it."""
        argv = exec_argv(read_entry(self.entry)["Exec"])
        subprocess.run(argv, env=self.env, check=True, timeout=60)
        return self.log.read_text().splitlines()


@pytest.fixture
def bundle(tmp_path: Path) -> Path:
    """A stand-in for dist/vram-steward with PyInstaller's layout (incl. a relative link)."""
    root = tmp_path / "dist" / "vram-steward"
    make_executable(root / "vram-steward")
    make_executable(root / "vram-steward-cli")
    agent = root / "_internal" / "app" / "agent" / "_bootstrap" / "sitecustomize.py"
    agent.parent.mkdir(parents=True)
    agent.write_text("# agent\n")
    (root / "_internal" / "libexample.so").symlink_to("app/agent/_bootstrap/sitecustomize.py")
    return root


def test_shipped_entry_names_the_app_its_icon_and_command() -> None:
    entry = read_entry(ENTRY)
    assert entry["Type"] == "Application"
    assert entry["Exec"] == "vram-steward"
    assert entry["Icon"] == "vram-steward"  # the name the app and hicolor use
    assert entry["Terminal"] == "false"
    assert "System" in entry["Categories"].split(";")


@needs_validator
def test_shipped_entry_validates() -> None:
    validate(ENTRY)


def test_bundle_install_puts_everything_in_place(tmp_path: Path, bundle: Path) -> None:
    user = Home(tmp_path)
    user.install(str(bundle))

    assert (user.prefix / "vram-steward").is_file()
    assert (user.prefix / "_internal" / "app" / "agent" / "_bootstrap"
            / "sitecustomize.py").is_file()
    copied_link = user.prefix / "_internal" / "libexample.so"
    assert copied_link.is_symlink() and copied_link.read_text() == "# agent\n"
    assert user.link.resolve() == (user.prefix / "vram-steward").resolve()
    for size in ICON_SIZES:
        icon = user.data / "icons" / "hicolor" / f"{size}x{size}" / "apps" / "vram-steward.png"
        source = ROOT / "resources" / "icons" / f"vram-steward-{size}.png"
        assert icon.read_bytes() == source.read_bytes()
    assert (user.data / "icons" / "hicolor" / "scalable" / "apps" / "vram-steward.svg").is_file()
    assert (user.data / "metainfo" / METAINFO).read_bytes() == (LINUX / METAINFO).read_bytes()

    entry = read_entry(user.entry)
    assert exec_argv(entry["Exec"]) == [str(user.prefix / "vram-steward")]
    # Everything else is the shipped entry, unchanged.
    assert {k: v for k, v in entry.items() if k != "Exec"} == \
        {k: v for k, v in read_entry(ENTRY).items() if k != "Exec"}


def test_double_clicking_the_installed_entry_starts_the_installed_bundle(
        tmp_path: Path, bundle: Path) -> None:
    user = Home(tmp_path)
    user.install(str(bundle))
    assert user.double_click() == [str(user.prefix / "vram-steward")]


@needs_validator
def test_installed_entry_validates(tmp_path: Path, bundle: Path) -> None:
    user = Home(tmp_path)
    user.install(str(bundle))
    validate(user.entry)


@pytest.mark.parametrize("name", ["with space", 'all $ of ` them " 100% \\ here'])
def test_paths_with_reserved_characters_are_quoted(tmp_path: Path, bundle: Path,
                                                   name: str) -> None:
    user = Home(tmp_path, prefix=tmp_path / name / "vram-steward")
    user.install(str(bundle))
    assert user.double_click() == [str(user.prefix / "vram-steward")]
    if VALIDATOR:
        validate(user.entry)


def test_from_source_entry_runs_the_checkout_with_its_virtualenv(tmp_path: Path) -> None:
    # A checkout of its own (a space in its path), so the entry can be started for real.
    checkout = tmp_path / "my checkout"
    shutil.copytree(LINUX, checkout / "packaging" / "linux")
    shutil.copytree(ROOT / "resources" / "icons", checkout / "resources" / "icons")
    python = make_executable(checkout / ".venv" / "bin" / "python")
    (checkout / "main.py").write_text("")
    user = Home(tmp_path)

    user.run(checkout / "packaging" / "linux" / "install.sh", "--from-source")

    assert user.double_click() == [str(python), str(checkout / "main.py")]
    assert not user.link.exists()  # the virtualenv has its own vram-steward command
    assert (user.data / "icons" / "hicolor" / "48x48" / "apps" / "vram-steward.png").is_file()
    if VALIDATOR:
        validate(user.entry)


def test_from_source_without_a_virtualenv_says_how_to_make_one(tmp_path: Path) -> None:
    checkout = tmp_path / "checkout"
    shutil.copytree(LINUX, checkout / "packaging" / "linux")
    user = Home(tmp_path)
    result = user.run(checkout / "packaging" / "linux" / "install.sh", "--from-source",
                      check=False)
    assert result.returncode != 0
    assert ".venv/bin/python" in result.stderr
    assert not user.entry.exists()


def test_install_without_a_bundle_says_how_to_build_one(tmp_path: Path) -> None:
    user = Home(tmp_path)
    result = user.install(str(tmp_path / "nowhere"), check=False)
    assert result.returncode != 0
    assert "packaging/build.py" in result.stderr
    assert not user.entry.exists() and not user.prefix.exists()


def test_reinstall_replaces_the_previous_bundle(tmp_path: Path, bundle: Path) -> None:
    user = Home(tmp_path)
    user.install(str(bundle))
    (user.prefix / "_internal" / "left-over.py").write_text("")
    user.install(str(bundle))
    assert not (user.prefix / "_internal" / "left-over.py").exists()
    assert (user.prefix / "vram-steward").is_file()


def test_install_never_replaces_a_directory_it_did_not_make(tmp_path: Path,
                                                            bundle: Path) -> None:
    user = Home(tmp_path, prefix=tmp_path / "precious")
    (user.prefix / "notes.txt").parent.mkdir()
    (user.prefix / "notes.txt").write_text("mine")
    result = user.install(str(bundle), check=False)
    assert result.returncode != 0
    assert (user.prefix / "notes.txt").read_text() == "mine"


def test_a_command_of_the_same_name_is_left_alone(tmp_path: Path, bundle: Path) -> None:
    user = Home(tmp_path)
    make_executable(user.link, "#!/bin/sh\necho pip-installed\n")
    user.install(str(bundle))
    assert not user.link.is_symlink() and "pip-installed" in user.link.read_text()
    user.uninstall()
    assert "pip-installed" in user.link.read_text()


def test_uninstall_removes_what_install_added_and_nothing_else(tmp_path: Path,
                                                               bundle: Path) -> None:
    user = Home(tmp_path)
    other_icon = user.data / "icons" / "hicolor" / "48x48" / "apps" / "other.png"
    other_icon.parent.mkdir(parents=True)
    other_icon.write_bytes(b"")
    settings = user.config / "vram-steward" / "vram-steward.ini"
    settings.parent.mkdir(parents=True)
    settings.write_text("[General]\n")
    user.install(str(bundle))
    autostart = user.config / "autostart" / "vram-steward.desktop"
    autostart.parent.mkdir(parents=True)
    # What "Start at login" writes for the installed bundle.
    autostart.write_text("[Desktop Entry]\nType=Application\nName=VRAM Steward\n"
                         f"Exec={read_entry(user.entry)['Exec']} --minimised\n")

    user.uninstall()

    assert not user.prefix.exists()
    assert not user.link.exists() and not user.link.is_symlink()
    assert not autostart.exists()
    left = {p.relative_to(user.data).as_posix() for p in user.data.rglob("*") if p.is_file()}
    assert left <= {"icons/hicolor/48x48/apps/other.png", "applications/mimeinfo.cache"}
    assert other_icon.is_file() and settings.is_file()
