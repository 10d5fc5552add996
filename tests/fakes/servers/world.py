"""A machine with model servers for tests: one fake GPU, the fake servers as
real processes on it, and the environment a VRAM Steward child needs to see
the same GPU.

    with ServerWorld() as world:
        ollama = world.start_ollama(generate_s=0.5)      # FAKE_OLLAMA_GENERATE_S=0.5
        comfy = world.start_comfyui(node_bytes=734_003_219)
        env = world.env_for_app()                         # for a VRAM Steward child
        ...

``ServerWorld`` makes a scratch directory, writes the ABI fake of
libnvidia-ml's config (one RTX 4090, some memory used by nobody listed) with
a ``procdir`` and live mode, so every server's allocation files show in NVML
at the reader's next call.  Each ``start_*`` picks a free loopback port,
starts the server in its own session (process group) with its output in a
log file, and returns a :class:`Handle` once the port answers HTTP (the
hanging server: once it accepts).  Keyword knobs become the server's
``FAKE_<SERVER>_<NAME>`` variables; ``env=`` adds any others (e.g.
``OLLAMA_KEEP_ALIVE``).  On exit every process group is ended (SIGTERM, then
SIGKILL), waited for, and the scratch directory removed.
"""

from __future__ import annotations

import http.client
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from tests.fakes import nvml_abi
from tests.fakes.nvml_abi import FakeGpu, FakeNvml
from tests.fakes.processes import end, wait_for
from tests.fakes.servers import a1111, comfyui, hanging, lmstudio, ollama, tgw
from tests.fakes.servers.common import base_python

REPO = Path(__file__).resolve().parents[3]

#: The one GPU: total as an RTX 4090 reports it; used: memory no listed process holds.
GPU = FakeGpu(name="NVIDIA GeForce RTX 4090", uuid="GPU-7f3c9a41-2b6e-4d18-9c05-e1a2b3c4d5f6",
              total=25_757_220_864, used=1_187_340_391, reserved=351_272_960, util_gpu=3,
              util_mem=1, temp=41, power_mw=27_381, power_limit_mw=450_000, fan=30)


@dataclass
class Handle:
    """One started server."""

    name: str
    proc: subprocess.Popen
    port: int
    home: Path  # the directory it runs in
    log: Path
    children: list[int] = field(default_factory=list)

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def log_text(self) -> str:
        try:
            return self.log.read_text(errors="replace")
        except OSError:
            return ""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def group_members(pgid: int) -> list[int]:
    """Pids whose process group is ``pgid`` (zombies included)."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if int(fields[2]) == pgid and fields[0] != "Z":
            out.append(int(entry))
    return out


class ServerWorld:
    def __init__(self, gpu: FakeGpu = GPU) -> None:
        self.gpu = gpu
        self.handles: list[Handle] = []
        self._count = 0

    # ---------------------------------------------------------- lifetime

    def __enter__(self) -> ServerWorld:
        reason = nvml_abi.unavailable_reason()
        if reason:
            raise RuntimeError(reason)
        self.lib = nvml_abi.build()
        self.dir = Path(tempfile.mkdtemp(prefix="vram-steward-servers-"))
        self.procdir = self.dir / "procs"
        self.procdir.mkdir()
        self.fake = FakeNvml(gpus=[self.gpu], procdir=str(self.procdir))
        self.config = self.fake.write(self.dir / "nvml.conf")
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        for handle in reversed(self.handles):
            self.stop(handle)
        self.handles.clear()
        shutil.rmtree(self.dir, ignore_errors=True)

    def stop(self, handle: Handle, timeout: float = 5.0) -> None:
        """SIGTERM to the server's group (it ends its children and frees its
        memory), SIGKILL to whatever is left, and waits until none is."""
        pgid = handle.proc.pid
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(pgid, sig)
            except ProcessLookupError:
                pass
            if sig == signal.SIGTERM:
                try:
                    handle.proc.wait(timeout)
                except subprocess.TimeoutExpired:
                    pass
        end(handle.proc, signal.SIGKILL)
        wait_for(f"{handle.name}'s processes to end", lambda: not group_members(pgid), timeout=10,
                 every=0.05)

    # ------------------------------------------------------ environments

    def env_for_app(self, base: dict[str, str] | None = None) -> dict[str, str]:
        """What a VRAM Steward child needs to see this GPU (live: it follows
        the servers' memory without re-init)."""
        env = self.fake.env(self.lib, self.config, base=base, live=True)
        env["PYTHONPATH"] = os.pathsep.join([str(REPO)] + [p for p in env.get("PYTHONPATH", "").split(
            os.pathsep) if p])
        return env

    def server_env(self, prefix: str, knobs: dict[str, object],
                   extra: dict[str, str] | None = None) -> dict[str, str]:
        env = self.fake.env(self.lib, self.config, live=True)
        env.update({"PYTHONPATH": str(REPO), "PYTHONDONTWRITEBYTECODE": "1",
                    "FAKE_NVML_PROCDIR": str(self.procdir), "FAKE_GPU": "0"})
        for name, value in knobs.items():
            env[f"FAKE_{prefix}_{name.upper()}"] = str(value)
        env.update(extra or {})
        return env

    def allocations(self) -> dict[int, int]:
        """pid -> bytes, as the allocation files say now."""
        out = {}
        for path in self.procdir.iterdir():
            if path.name.isdigit():
                try:
                    fields = dict(kv.split("=", 1) for kv in path.read_text().split())
                except (OSError, ValueError):
                    continue
                out[int(path.name)] = int(fields["mem"])
        return out

    # ----------------------------------------------------------- starting

    def _home(self, name: str) -> Path:
        self._count += 1
        home = self.dir / f"{name}-{self._count}"
        home.mkdir()
        return home

    def _start(self, name: str, cmd: list[str], cwd: Path, env: dict[str, str], port: int,
               probe: str | None, stdin: object = subprocess.DEVNULL) -> Handle:
        log = self.dir / f"{name}-{self._count}.log"
        with open(log, "wb") as out:
            proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdin=stdin, stdout=out,
                                    stderr=subprocess.STDOUT, start_new_session=True)
        handle = Handle(name=name, proc=proc, port=port, home=cwd, log=log)
        self.handles.append(handle)
        deadline = time.monotonic() + 30
        while True:
            if proc.poll() is not None:
                raise AssertionError(f"{name} exited with {proc.returncode}:\n{handle.log_text()}")
            if answers(port, probe):
                return handle
            if time.monotonic() > deadline:
                raise AssertionError(f"{name} did not answer on port {port}:\n{handle.log_text()}")
            time.sleep(0.02)

    def start_ollama(self, *, env: dict[str, str] | None = None,
                     user: tuple[int, int] | None = None, **knobs: object) -> Handle:
        """``<home>/bin/ollama serve`` (FAKE_OLLAMA_* knobs, e.g. ``models=``,
        ``generate_s=``, ``partial=``); ``user`` (uid, gid): run as that user,
        as the ``ollama`` service user runs it (through ``setpriv``)."""
        home = self._home("ollama")
        ollama.prepare(home)
        port = free_port()
        extra = {"OLLAMA_HOST": f"127.0.0.1:{port}", "OLLAMA_MODELS": str(home / "models")}
        extra.update(env or {})
        cmd = ollama.command(home)
        if user is not None:
            self._share_with(home, user)
            cmd = ["setpriv", f"--reuid={user[0]}", f"--regid={user[1]}", "--clear-groups",
                   *cmd]
        return self._start("ollama", cmd, home, self.server_env("OLLAMA", knobs, extra), port,
                           "/")

    def _share_with(self, home: Path, user: tuple[int, int]) -> None:
        """Let another user run a server here: its home its own, the GPU's
        config readable and the allocation folder writable (sticky)."""
        os.chmod(self.dir, 0o755)
        os.chmod(self.config, 0o644)
        os.chmod(self.procdir, 0o1777)
        link = home / "bin" / "ollama"
        system = f"/usr/bin/python{sys.version_info.major}.{sys.version_info.minor}"
        if link.is_symlink() and not _reachable_by_all(os.readlink(link)) \
                and os.path.exists(system):
            link.unlink()  # the user cannot enter where this interpreter lives (/root)
            link.symlink_to(system)
        for root, dirs, files in os.walk(home):
            for name in dirs + files:
                os.lchown(os.path.join(root, name), *user)
        os.chown(home, *user)

    def start_comfyui(self, *, args: tuple[str, ...] = (), env: dict[str, str] | None = None,
                      **knobs: object) -> Handle:
        """``<python> main.py --listen 127.0.0.1 --port N`` in ``ComfyUI/``
        (FAKE_COMFY_* knobs: ``render_s=``, ``model_bytes=``, ``node_bytes=``)."""
        comfy = comfyui.prepare(self._home("comfyui"))
        port = free_port()
        cmd = [base_python(), "main.py", "--listen", "127.0.0.1", "--port", str(port), *args]
        return self._start("comfyui", cmd, comfy, self.server_env("COMFY", knobs, env), port,
                           "/system_stats")

    def start_a1111(self, auth: str | None = None, *, nowebui: bool = False,
                    args: tuple[str, ...] = (), env: dict[str, str] | None = None,
                    **knobs: object) -> Handle:
        """``<python> launch.py --api --port N [--api-auth user:pass] [--nowebui]``
        in ``stable-diffusion-webui/`` (FAKE_A1111_* knobs: ``render_s=``, ``model_bytes=``)."""
        webui = a1111.prepare(self._home("a1111"))
        port = free_port()
        cmd = [base_python(), "launch.py", "--api", "--port", str(port)]
        if auth:
            cmd += ["--api-auth", auth]
        if nowebui:
            cmd.append("--nowebui")
        return self._start("a1111", cmd + list(args), webui, self.server_env("A1111", knobs, env),
                           port, "/sdapi/v1/progress")

    def start_lmstudio(self, token: str | None = None, *, env: dict[str, str] | None = None,
                       **knobs: object) -> Handle:
        """``llmster`` with its script on stdin (FAKE_LMSTUDIO_* knobs: ``load_s=``)."""
        home = self._home("lmstudio")
        link, script = lmstudio.prepare(home)
        port = free_port()
        extra = {"FAKE_PORT": str(port)}
        if token:
            extra["FAKE_LMSTUDIO_TOKEN"] = token
        extra.update(env or {})
        with open(script, "rb") as stdin:
            return self._start("lmstudio", [str(link)], home, self.server_env("LMSTUDIO", knobs, extra),
                               port, "/v1/models", stdin=stdin)

    def start_tgw(self, api_key: str | None = None, *, admin_key: str | None = None,
                  nowebui: bool = True, args: tuple[str, ...] = (),
                  env: dict[str, str] | None = None, **knobs: object) -> Handle:
        """``<python> server.py --api --api-port N [--api-key K] [--admin-key A]
        [--nowebui]`` in ``text-generation-webui/`` (FAKE_TGW_* knobs: ``models=``, ``load_s=``)."""
        server_env = self.server_env("TGW", knobs, env)
        webui = tgw.prepare(self._home("tgw"), server_env.get("FAKE_TGW_MODELS"))
        port = free_port()
        cmd = [base_python(), "server.py", "--api", "--api-port", str(port)]
        if api_key:
            cmd += ["--api-key", api_key]
        if admin_key:
            cmd += ["--admin-key", admin_key]
        if nowebui:
            cmd.append("--nowebui")
        return self._start("tgw", cmd + list(args), webui, server_env, port, "/v1/internal/health")

    def start_hanging(self) -> Handle:
        """A ComfyUI-shaped server that accepts connections and never answers."""
        comfy = hanging.prepare(self._home("hanging"))
        port = free_port()
        cmd = [base_python(), "main.py", "--listen", "127.0.0.1", "--port", str(port)]
        return self._start("hanging", cmd, comfy, self.server_env("HANGING", {}), port, None)


def _reachable_by_all(path: str) -> bool:
    """Whether every folder above ``path`` lets others through."""
    folder = os.path.dirname(os.path.abspath(path))
    while folder != os.path.dirname(folder):
        if not os.stat(folder).st_mode & 0o001:
            return False
        folder = os.path.dirname(folder)
    return True


def answers(port: int, path: str | None) -> bool:
    """Whether the port accepts (``path`` None) or answers an HTTP GET of ``path``."""
    if path is None:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return True
        except OSError:
            return False
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
    try:
        conn.request("GET", path)
        conn.getresponse().read()
        return True
    except (OSError, http.client.HTTPException):
        return False
    finally:
        conn.close()
