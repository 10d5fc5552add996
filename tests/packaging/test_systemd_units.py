"""The systemd units in packaging/systemd: each runs ``serve`` on loopback with
options the CLI takes, keeps the real /tmp (agents register there), and says
what the README says it does."""

from __future__ import annotations

import configparser
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from app.cli import build_parser
from app.cli.serve import is_loopback, parse_listen

ROOT = Path(__file__).resolve().parents[2]
UNITS = ROOT / "packaging" / "systemd"
SYSTEM = UNITS / "vram-steward.service"
USER = UNITS / "vram-steward-user.service"
README = ROOT / "README.md"

ANALYZE = shutil.which("systemd-analyze")
needs_analyze = pytest.mark.skipif(ANALYZE is None, reason="systemd-analyze is not installed")


def read_unit(path: Path) -> configparser.ConfigParser:
    """A unit as systemd reads it, near enough: repeated keys allowed (the last
    wins here), no interpolation (``%h`` is systemd's), keys kept as written."""
    unit = configparser.ConfigParser(strict=False, interpolation=None, delimiters=("=",),
                                     comment_prefixes=("#", ";"))
    unit.optionxform = str  # type: ignore[assignment,method-assign]
    unit.read(path, encoding="utf-8")
    return unit


def all_environment(path: Path) -> dict[str, str]:
    """Every ``Environment=`` of the unit (configparser keeps only the last line)."""
    out = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("Environment="):
            for word in shlex.split(line.removeprefix("Environment=")):
                key, _, value = word.partition("=")
                out[key] = value
    return out


def exec_argv(unit: configparser.ConfigParser) -> list[str]:
    return shlex.split(unit["Service"]["ExecStart"])


def truthy(value: str | None) -> bool:
    return (value or "").strip().lower() in ("1", "yes", "true", "on")


@pytest.mark.parametrize("path", [SYSTEM, USER], ids=["system", "user"])
def test_unit_runs_serve_on_loopback_with_options_serve_takes(path: Path) -> None:
    unit = read_unit(path)
    argv = exec_argv(unit)
    assert Path(argv[0]).name == "vram-steward" and argv[0].startswith(("/", "%h/"))
    assert argv[1] == "serve"
    args = build_parser().parse_args(argv[1:])  # SystemExit on an option serve does not take
    host, port = parse_listen(args.listen)
    assert is_loopback(host), f"{path.name} listens on {host}"
    assert port == 9847
    assert not args.stdio and not args.insecure and not args.demo
    assert unit["Service"]["Restart"] == "on-failure"
    assert unit["Service"]["KillSignal"] == "SIGTERM"


@pytest.mark.parametrize("path", [SYSTEM, USER], ids=["system", "user"])
def test_private_tmp_is_off_so_the_agents_registries_are_seen(path: Path) -> None:
    unit = read_unit(path)
    assert not truthy(unit["Service"].get("PrivateTmp"))
    # Agents register under their own $TMPDIR (/tmp); the server must look there too.
    assert "TMPDIR" not in all_environment(path)


def test_system_unit_reads_the_token_file_and_keeps_state_in_its_state_directory() -> None:
    unit = read_unit(SYSTEM)
    args = build_parser().parse_args(exec_argv(unit)[1:])
    assert args.token_file == "/etc/vram-steward/tokens"
    service = unit["Service"]
    assert "User" not in service  # root: every user's agents and NVML's figures for all
    assert service["ProtectSystem"] == "strict"
    assert service["StateDirectory"] == "vram-steward"
    # The app refuses a state folder open to group/others; systemd's default is 0755.
    assert service["StateDirectoryMode"] == "0700"
    assert all_environment(SYSTEM)["VRAM_STEWARD_STATE_DIR"] == "/var/lib/vram-steward"
    # NVML opens /dev/nvidia*: nothing may narrow /dev (ProtectClock implies DeviceAllow=).
    for option in ("PrivateDevices", "ProtectClock", "DevicePolicy", "DeviceAllow",
                   "ProtectProc", "ProcSubset"):
        assert option not in service or not truthy(service[option]), option
    assert unit["Install"]["WantedBy"] == "multi-user.target"


def test_user_unit_exports_gpu_series_and_is_wanted_by_the_user_session() -> None:
    unit = read_unit(USER)
    args = build_parser().parse_args(exec_argv(unit)[1:])
    assert not args.no_gpu_metrics  # a workstation's only server
    assert "--no-gpu-metrics" in USER.read_text(encoding="utf-8")  # the shared host, in a comment
    assert unit["Install"]["WantedBy"] == "default.target"


def _readme_section() -> str:
    text = README.read_text(encoding="utf-8")
    start = text.index("## Servers and fleets")
    end = text.find("\n## ", start + 1)
    return text[start:end if end != -1 else None]


def test_readme_names_the_units_options_as_they_are() -> None:
    """Every ``Option=value`` the README's server section quotes is in a unit."""
    section = _readme_section()
    quoted = re.findall(r"`([A-Z][A-Za-z]+)=([^`\s]+)`", section)
    assert quoted, "the README's server section quotes no unit option"
    units = [read_unit(SYSTEM)["Service"], read_unit(USER)["Service"]]
    env = all_environment(SYSTEM) | all_environment(USER)
    for key, value in quoted:
        if key == "Environment":
            name, _, wanted = value.partition("=")
            assert env.get(name) == wanted, f"Environment={value}"
            continue
        assert any(key in s and s[key] == value for s in units), f"{key}={value}"
    for path in (SYSTEM, USER):
        assert f"packaging/systemd/{path.name}" in section


def _verify(unit: Path, tmp_path: Path, user: bool) -> subprocess.CompletedProcess[str]:
    """``systemd-analyze verify`` of ``unit`` with its command pointed at a
    program that exists here (verify checks that ExecStart's is executable)."""
    text = unit.read_text(encoding="utf-8")
    command = shlex.split(read_unit(unit)["Service"]["ExecStart"])[0]
    copy = tmp_path / "vram-steward.service"
    copy.write_text(text.replace(command, sys.executable), encoding="utf-8")
    env = dict(os.environ)
    argv = [str(ANALYZE), "verify", str(copy)]
    if user:
        runtime = tmp_path / "runtime"
        runtime.mkdir(mode=0o700)
        env["XDG_RUNTIME_DIR"] = str(runtime)
        argv.insert(1, "--user")
    return subprocess.run(argv, capture_output=True, text=True, env=env, check=False)


@needs_analyze
@pytest.mark.parametrize("path,user", [(SYSTEM, False), (USER, True)], ids=["system", "user"])
def test_systemd_analyze_verify_finds_nothing(path: Path, user: bool, tmp_path: Path) -> None:
    result = _verify(path, tmp_path, user)
    output = (result.stdout + result.stderr).strip()
    if result.returncode != 0 and "Failed to initialize manager" in output:
        pytest.skip(f"systemd-analyze cannot run here: {output.splitlines()[-1]}")
    assert result.returncode == 0 and not output, output
