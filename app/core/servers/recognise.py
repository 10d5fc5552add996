"""Which processes are model servers, and where their APIs listen.

Pure: a list of ``HostProc`` in, a list of ``Found`` out, so Linux and
Windows shapes (``ollama.exe``, ComfyUI's portable ``python_embeded``,
A1111's ``venv\\Scripts\\python.exe launch.py``) are tested alike.  A server
is recognised by its command line and executable; its children (Ollama's
runner, vLLM's engine workers, TGI's shards, a router's per-model
``llama-server``) are attributed to it, since NVML shows their memory on
their own pids.  The endpoint is always on this host: the port from the
command line or environment, else a port the process listens on, else the
server's default; a wildcard bind is reached on loopback.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from app.core.servers.host import HostProc

LOOPBACK = "127.0.0.1"

LABELS = {
    "ollama": "Ollama", "comfyui": "ComfyUI", "a1111": "AUTOMATIC1111", "forge": "Forge",
    "lmstudio": "LM Studio", "tgw": "text-generation-webui", "vllm": "vLLM",
    "sglang": "SGLang", "llamacpp": "llama.cpp server", "tgi": "TGI",
}
DEFAULT_PORTS = {
    "ollama": 11434, "comfyui": 8188, "a1111": 7860, "forge": 7860, "lmstudio": 1234,
    "tgw": 5000, "vllm": 8000, "sglang": 30000, "llamacpp": 8080, "tgi": 3000,
}


@dataclass(frozen=True, slots=True)
class Found:
    """A recognised server before its API is asked anything."""

    kind: str
    pid: int
    pids: tuple[int, ...]  # it and its descendants
    user: str | None
    host: str  # where to connect: loopback for a wildcard bind
    port: int | None
    api_off: str | None = None  # why its API is not served ("started without --api")
    options: tuple[tuple[str, str], ...] = ()  # flags that matter: gpu_memory_utilization, ...
    runners: tuple[tuple[int, str], ...] = ()  # (child pid, the model file it was given)
    uid: int | None = None  # the server process's owner
    port_owned: bool = False  # one of its processes is seen listening on ``port``

    @property
    def endpoint(self) -> str | None:
        if self.port is None or self.api_off:
            return None
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    def option(self, key: str) -> str | None:
        return dict(self.options).get(key)


def base(path: str) -> str:
    """A path's last part, either separator, lower case, without ``.exe``."""
    name = re.split(r"[\\/]", path.rstrip("\\/"))[-1].lower()
    return name[:-4] if name.endswith(".exe") else name


def _is_python(proc: HostProc) -> bool:
    names = [proc.name, proc.cmdline[0] if proc.cmdline else "", proc.exe or ""]
    return any(re.fullmatch(r"python[0-9.]*w?", base(n)) for n in names if n)


def _script(proc: HostProc) -> tuple[str | None, list[str]]:
    """(the script or ``-m`` module a Python process runs, the arguments after it)."""
    args = list(proc.cmdline[1:])
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "-m" and i + 1 < len(args):
            return "-m " + args[i + 1], args[i + 2:]
        if arg in ("-X", "-W", "-c"):
            if arg == "-c":
                return None, []
            i += 2
            continue
        if arg.startswith("-"):
            i += 1
            continue
        return arg, args[i + 1:]
    return None, []


def _flag(args: Sequence[str], *names: str) -> str | None:
    """The value of ``--name value`` or ``--name=value``; "" for a bare flag."""
    for i, arg in enumerate(args):
        for name in names:
            if arg == name:
                nxt = args[i + 1] if i + 1 < len(args) else ""
                return "" if nxt.startswith("-") else nxt
            if arg.startswith(name + "="):
                return arg[len(name) + 1:]
    return None


def _port(text: str | None) -> int | None:
    try:
        port = int(text) if text else None
    except ValueError:
        return None
    return port if port is not None and 0 < port < 65536 else None


def _folder(proc: HostProc, script: str) -> str:
    """The folder the script lies in (a relative one under the working folder),
    lower case with forward slashes, for a name check: ``…/ComfyUI``."""
    path = script.replace("\\", "/")
    if not re.match(r"^(/|[A-Za-z]:/)", path):
        path = (proc.cwd or "").replace("\\", "/").rstrip("/") + "/" + path
    return path.rsplit("/", 1)[0].lower()


def _split(text: str) -> list[str]:
    try:
        return shlex.split(text)
    except ValueError:
        return text.split()


def _host_of(bind: str | None) -> str:
    bind = bind.split(",")[0].strip() if bind else bind  # ComfyUI: "0.0.0.0,::"
    if not bind or bind in ("0.0.0.0", "::", "*", "[::]", "localhost"):
        return LOOPBACK
    return bind.strip("[]")


# -- one rule per kind: (kind, port, host, api_off, options) or None -------------------

Rule = tuple[str, int | None, str, str | None, tuple[tuple[str, str], ...]]


def _ollama(proc: HostProc) -> Rule | None:
    names = {base(proc.name), base(proc.cmdline[0]) if proc.cmdline else "", base(proc.exe or "")}
    if "ollama" not in names or "serve" not in proc.cmdline[1:2]:
        return None
    host_env = proc.env.get("OLLAMA_HOST", "")
    host, port = LOOPBACK, None
    if host_env:
        hostpart = re.sub(r"^https?://", "", host_env).rstrip("/")
        host_text, port_text = hostpart, ""
        if re.search(r":\d+$", hostpart):
            host_text, _, port_text = hostpart.rpartition(":")
        host, port = _host_of(host_text or None), _port(port_text)
    options = tuple((k, v) for k, v in proc.env.items() if k == "OLLAMA_KEEP_ALIVE")
    return "ollama", port, host, None, options


def _python_server(proc: HostProc) -> Rule | None:
    if not _is_python(proc):
        return None
    script, args = _script(proc)
    if script is None:
        return None
    name = base(script)
    folder = _folder(proc, script)
    if script == "-m vllm.entrypoints.openai.api_server":
        return _vllm(proc, args)
    if (script.startswith("-m vllm") or name == "vllm") and args[:1] == ["serve"]:
        return _vllm(proc, args[1:])
    if script == "-m sglang.launch_server":
        return ("sglang", _port(_flag(args, "--port")), _host_of(_flag(args, "--host")), None,
                _opts(args, ("--mem-fraction-static", "mem_fraction_static"),
                      ("--enable-memory-saver", "memory_saver")))
    if name == "main.py" and "comfyui" in folder:
        listen = _flag(args, "--listen")
        return "comfyui", _port(_flag(args, "--port")), _host_of(listen), None, ()
    if name in ("launch.py", "webui.py") and re.search(r"webui|forge|stable-diffusion", folder):
        kind = "forge" if "forge" in folder else "a1111"
        # webui-user.sh/.bat passes its flags in COMMANDLINE_ARGS, read inside Python.
        args = [*args, *_split(proc.env.get("COMMANDLINE_ARGS", ""))]
        nowebui = _flag(args, "--nowebui") is not None
        port = _port(_flag(args, "--port")) or (7861 if nowebui else None)
        off = None
        if proc.env_read and not nowebui and _flag(args, "--api") is None:
            off = "started without --api: its API is off"
        return kind, port, _host_of(_flag(args, "--server-name")), off, ()
    if name == "server.py" and "text-generation-webui" in folder:
        on = _flag(args, "--api") is not None or _flag(args, "--nowebui") is not None
        return ("tgw", _port(_flag(args, "--api-port")), LOOPBACK,
                None if on else "started without --api: its API is off", ())
    return None


def _vllm(proc: HostProc, args: Sequence[str]) -> Rule:
    options = _opts(args, ("--gpu-memory-utilization", "gpu_memory_utilization"),
                    ("--enable-sleep-mode", "sleep_mode"))
    if "VLLM_SERVER_DEV_MODE" in proc.env:
        options += (("dev_mode", proc.env["VLLM_SERVER_DEV_MODE"]),)
    return "vllm", _port(_flag(args, "--port")), _host_of(_flag(args, "--host")), None, options


def _opts(args: Sequence[str], *pairs: tuple[str, str]) -> tuple[tuple[str, str], ...]:
    return tuple((key, value) for flag, key in pairs
                 if (value := _flag(args, flag)) is not None)


def _binary_server(proc: HostProc) -> Rule | None:
    head = base(proc.cmdline[0]) if proc.cmdline else base(proc.name)
    args = proc.cmdline[1:]
    if head == "vllm" and "serve" in args[:1]:
        return _vllm(proc, args[1:])
    if head in ("llmster", "lm studio", "lm-studio", "lmstudio") and \
            not any(a.startswith("--type=") for a in args):  # not an Electron helper
        return "lmstudio", None, LOOPBACK, None, ()
    if head == "llama-server":
        return ("llamacpp", _port(_flag(args, "--port")), _host_of(_flag(args, "--host")), None,
                _opts(args, ("--sleep-idle-seconds", "sleep_idle")))
    if head == "text-generation-launcher":
        return "tgi", _port(_flag(args, "--port")), _host_of(_flag(args, "--hostname")), None, ()
    return None


RULES: tuple[Callable[[HostProc], Rule | None], ...] = (_ollama, _python_server, _binary_server)


def recognise(procs: Sequence[HostProc]) -> list[Found]:
    """Every model server among ``procs``; a server inside another's tree
    (Ollama's or text-generation-webui's ``llama-server``) is that one's."""
    children: dict[int, list[int]] = {}
    for p in procs:
        if p.ppid is not None:
            children.setdefault(p.ppid, []).append(p.pid)
    by_pid = {p.pid: p for p in procs}
    matched: dict[int, Rule] = {}
    for p in procs:
        for rule in RULES:
            hit = rule(p)
            if hit is not None:
                matched[p.pid] = hit
                break
    # A llama.cpp server that Ollama or text-generation-webui started is their
    # runner; any other server under another one is a server of its own.
    runners = {pid for pid, hit in matched.items() if hit[0] == "llamacpp"
               and _ancestor_kind(by_pid, pid, matched) in ("ollama", "tgw")}
    own = {pid for pid in matched if pid not in runners}
    found = []
    for pid, (kind, port, host, off, options) in sorted(matched.items()):
        if pid in runners:
            continue
        proc = by_pid[pid]
        tree = _descendants(pid, children, stop=own)
        port = port or _listening(proc, kind) or DEFAULT_PORTS[kind]
        given = tuple((child, model) for child in tree
                        if child in by_pid and (model := _flag(by_pid[child].cmdline,
                                                               "--model", "-m")))
        pids = (pid, *tree)
        owned = any(port in by_pid[p].ports for p in pids if p in by_pid)
        found.append(Found(kind, pid, pids, proc.user, host, port, off, options, given,
                           proc.uid, owned))
    return found


def _ancestor_kind(by_pid: dict[int, HostProc], pid: int, matched: dict[int, Rule]
                   ) -> str | None:
    seen = {pid}
    parent = by_pid[pid].ppid
    while parent is not None and parent in by_pid and parent not in seen:
        if parent in matched:
            return matched[parent][0]
        seen.add(parent)
        parent = by_pid[parent].ppid
    return None


def _descendants(pid: int, children: dict[int, list[int]], stop: set[int]) -> list[int]:
    """``pid``'s descendants, without the servers in ``stop`` and theirs."""
    out: list[int] = []
    stack = list(children.get(pid, ()))
    while stack and len(out) < 256:
        child = stack.pop()
        if child in out or child == pid or child in stop:
            continue
        out.append(child)
        stack.extend(children.get(child, ()))
    return sorted(out)


def _listening(proc: HostProc, kind: str) -> int | None:
    """A port the process listens on: its default if among them, else the only one."""
    if DEFAULT_PORTS[kind] in proc.ports:
        return DEFAULT_PORTS[kind]
    return proc.ports[0] if len(proc.ports) == 1 else None


__all__ = ["DEFAULT_PORTS", "LABELS", "Found", "base", "recognise"]
