"""A GPU host for the remote tests (``test_ssh_remote``, ``test_serve_users``,
``test_serve_remote``): the pieces are real, only the driver is the fake.

* :class:`Host`: a sticky scratch ``TMPDIR`` (so every user's runtime folder,
  ``<TMPDIR>/vram-steward-<uid>``, lies in it and never in the real /tmp), the
  ABI-level fake of libnvidia-ml describing one GPU, and each user's
  environment (private state and cache folders, the fake's variables).
* :class:`Agent`: ``python -m app run -- python AGENT`` (the documented way to
  load the agent) running CPU torch with one eval model, as root or, through
  ``setpriv``, as the neighbour (``tests.fakes.neighbour``).
* :class:`Serve`: ``python -m app serve`` on a free loopback port, first line
  ``listening on URL``.
* :func:`cli`: one CLI command, run as a user would.

The neighbour cannot enter root's home, where this venv's interpreter may
live: it runs a system Python of the same version with the venv's
site-packages on ``PYTHONPATH`` (:func:`neighbour_python`).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import sysconfig
import tempfile
import textwrap
import time
from pathlib import Path

from tests.fakes import nvml_abi
from tests.fakes.neighbour import sticky_tmpdir
from tests.fakes.nvml_abi import FakeNvml
from tests.fakes.processes import end, read_line, serve_url

REPO = Path(__file__).resolve().parents[2]
SITE = sysconfig.get_paths()["purelib"]
SETPRIV = shutil.which("setpriv")

#: A program with one eval model, used once, then idle until killed (at most 3 min).
AGENT = textwrap.dedent("""
    import json, os, time
    import torch

    torch.manual_seed(0)
    encoder = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.ReLU(),
                                  torch.nn.Linear(64, 4)).eval()
    for p in encoder.parameters():
        p.requires_grad_(False)
    with torch.no_grad():
        encoder(torch.randn(2, 16))
    print(json.dumps({"pid": os.getpid()}), flush=True)
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        time.sleep(0.1)
""")


def unavailable_reason() -> str | None:
    return nvml_abi.unavailable_reason()


def private_dir(parent: str, name: str, owner: tuple[int, int] | None = None) -> str:
    """``parent/name``, 0700, of ``owner`` (uid, gid) when given."""
    path = os.path.join(parent, name)
    os.mkdir(path, 0o700)
    if owner is not None:
        os.chown(path, *owner)
    return path


def neighbour_python(uid: int, gid: int) -> tuple[str, str] | str:
    """(interpreter, PYTHONPATH) with which the neighbour runs the app and CPU
    torch, or why there is none: this interpreter when the neighbour may run
    it, else a system Python of the same version with the venv's packages."""
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    path = os.pathsep.join([str(REPO), SITE])
    for python in (sys.executable, f"/usr/bin/{version}", f"/usr/local/bin/{version}"):
        if not os.path.exists(python):
            continue
        done = subprocess.run(
            [SETPRIV or "setpriv", f"--reuid={uid}", f"--regid={gid}", "--clear-groups",
             "env", python, "-c", "import psutil, torch"],  # exec'd as the neighbour
            env={"PATH": "/usr/bin:/bin", "PYTHONPATH": path, "HOME": "/"}, cwd="/",
            capture_output=True, text=True, timeout=60)
        if done.returncode == 0:
            return python, path
    return (f"the neighbour (uid {uid}) can run no {version} with this venv's packages "
            f"(sys.executable {sys.executable} lies where it cannot enter, no /usr/bin/{version})")


class Host:
    """One fake GPU host: ``fake``'s GPUs, a sticky TMPDIR, each user's env."""

    def __init__(self, fake: FakeNvml) -> None:
        self.fake = fake
        self.tmp = sticky_tmpdir()
        self.lib = nvml_abi.build()
        self.config = fake.write(Path(self.tmp) / "nvml.conf")
        os.chmod(self.config, 0o644)
        self.root_home = private_dir(self.tmp, "root")

    def env(self, home: str | None = None, pythonpath: str | None = None) -> dict[str, str]:
        """The environment of a process of the user whose private folder is
        ``home`` (default root's): the fake driver, TMPDIR, state and caches."""
        home = home or self.root_home
        base = {k: v for k, v in os.environ.items()
                if not k.startswith(("VRAM_STEWARD_", "XDG_", "FAKE_NVML_"))}
        env = self.fake.env(self.lib, self.config, base=base)
        env.update(TMPDIR=self.tmp, HOME=home, XDG_STATE_HOME=home, XDG_CACHE_HOME=home,
                   VRAM_STEWARD_STATE_DIR=os.path.join(home, "state"),
                   PYTHONPATH=pythonpath or str(REPO), PYTHONDONTWRITEBYTECODE="1")
        return env

    def remote_command(self) -> str:
        """``--remote-command``: this venv's app under root's env of this host."""
        env = self.env()
        names = ("LD_LIBRARY_PATH", "FAKE_NVML_CONFIG", "TMPDIR", "HOME", "XDG_STATE_HOME",
                 "XDG_CACHE_HOME", "VRAM_STEWARD_STATE_DIR", "PYTHONPATH",
                 "PYTHONDONTWRITEBYTECODE")
        assigned = " ".join(f"{name}={env[name]}" for name in names)
        return f"env {assigned} {sys.executable} -m app"

    def runtime(self, uid: int) -> str:
        return os.path.join(self.tmp, f"vram-steward-{uid}")

    def close(self) -> None:
        subprocess.run(["rm", "-rf", self.tmp], check=False)


class Agent:
    """A real agent in a real process (``run`` forwards SIGTERM to it)."""

    def __init__(self, host: Host, name: str, user: tuple[int, int] | None = None,
                 python: str = sys.executable, pythonpath: str | None = None) -> None:
        self.home = private_dir(host.tmp, name, user)
        self.script = os.path.join(host.tmp, f"{name}.py")
        Path(self.script).write_text(AGENT)
        os.chmod(self.script, 0o644)
        os.mkdir(os.path.join(self.home, "state"), 0o700)
        if user is not None:
            os.chown(os.path.join(self.home, "state"), *user)
        argv = [python, "-m", "app", "run", "--", python, self.script]
        if user is not None:
            argv = [SETPRIV or "setpriv", f"--reuid={user[0]}", f"--regid={user[1]}",
                    "--clear-groups", *argv]
        self.log = open(os.path.join(host.tmp, f"{name}.log"), "wb")  # noqa: SIM115
        self.proc = subprocess.Popen(argv, env=host.env(self.home, pythonpath), cwd=self.home,
                                     stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                     stderr=self.log)
        self.pid = int(json.loads(self._line(90.0))["pid"])
        self.registry = os.path.join(host.runtime(user[0] if user else os.getuid()), "agents",
                                     f"{self.pid}.json")
        deadline = time.monotonic() + 30
        while not os.path.exists(self.registry):
            if time.monotonic() > deadline:
                self.stop()
                raise AssertionError(f"agent {self.pid} never registered ({self.registry})")
            time.sleep(0.05)

    def _line(self, timeout: float) -> str:
        line = read_line(self.proc, timeout).decode()
        if not line:
            self.stop()
            raise AssertionError(f"the agent's program did not start: {self.errors()}")
        return line

    def errors(self) -> str:
        return Path(self.log.name).read_text(errors="replace")

    def stop(self) -> None:
        end(self.proc, wait_s=15.0)
        pid = getattr(self, "pid", None)
        if pid is not None:  # the program leads its own group (``run``): nothing stays
            try:
                os.killpg(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        self.log.close()


class Serve:
    """``python -m app serve --listen ADDRESS`` on ``host`` as root."""

    def __init__(self, host: Host, *args: str, listen: str = "127.0.0.1:0") -> None:
        self.folder = tempfile.mkdtemp(prefix="serve-", dir=host.tmp)
        self.log = open(os.path.join(self.folder, "stderr"), "wb")  # noqa: SIM115
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "app", "serve", "--listen", listen, "--period", "0.25",
             "--no-history", "--no-auto-unload", *args],
            env=host.env(), cwd=REPO, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=self.log)
        try:
            self.url = serve_url(self.proc, self.errors)
        except AssertionError:
            self.stop()
            raise

    def errors(self) -> str:
        return Path(self.log.name).read_text(errors="replace")

    def stop(self, sig: int = signal.SIGTERM) -> None:
        end(self.proc, sig)
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        self.log.close()


def token_file(folder: str, lines: list[str], name: str = "tokens") -> str:
    """A 0600 token file of ours holding ``lines``."""
    path = os.path.join(folder, name)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write("\n".join(lines) + "\n")
    return path


def cli(host: Host, *args: str, timeout: float = 60.0,
        env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """``python -m app ARGS`` as root on ``host``."""
    return subprocess.run([sys.executable, "-m", "app", *args], env=env or host.env(),
                          cwd=REPO, capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL)
