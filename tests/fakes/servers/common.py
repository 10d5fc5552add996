"""What every fake model server shares: a JSON HTTP handler on
``http.server.ThreadingHTTPServer``, this process's GPU allocation in the
fake NVML, a tiny clock, environment knobs, and the device figures a server
reads from CUDA (taken from the fake NVML's config and allocation files).

Environment common to all fakes:

* ``FAKE_NVML_PROCDIR``: the fake NVML's allocation-file directory; unset,
  the servers hold no (visible) GPU memory.
* ``FAKE_GPU``: index of the GPU their memory is on (default 0).
* ``FAKE_NVML_CONFIG``: the fake NVML's config, read for the device's total
  and used memory (what ``torch.cuda.mem_get_info`` would say).
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import sys
import threading
import time
import traceback
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from tests.fakes.nvml_abi import clear_allocation, write_allocation

# ------------------------------------------------------------------- knobs


def env_str(name: str, default: str) -> str:
    value = os.environ.get(name)
    return default if value is None or value == "" else value


def env_int(name: str, default: int) -> int:
    return int(env_str(name, str(default)))


def env_float(name: str, default: float) -> float:
    return float(env_str(name, str(default)))


def gpu_index() -> int:
    return env_int("FAKE_GPU", 0)


def base_python() -> str:
    """The base interpreter behind this one (a venv's python is a link to it):
    what the fakes run under, and what their renamed links point at."""
    return os.path.realpath(sys.executable)


def launcher(path: str, module: str, argv: bool = True) -> None:
    """A tiny script at ``path`` that runs ``module``'s ``main()`` (``PYTHONPATH``
    names the repository root); ``argv``: main gets ``sys.argv[1:]``."""
    call = "main(sys.argv[1:])" if argv else "main([])"
    with open(path, "w") as f:
        f.write(f"import sys\nfrom {module} import main\nsys.exit({call})\n")


# ------------------------------------------------------------------- clock


class Clock:
    """Wall time for timestamps, monotonic time for durations, and sleeps that
    end early when asked to stop."""

    @staticmethod
    def now() -> float:
        return time.time()

    @staticmethod
    def now_ns() -> int:
        return time.time_ns()

    @staticmethod
    def monotonic() -> float:
        return time.monotonic()

    @staticmethod
    def sleep(seconds: float, stop: threading.Event | None = None) -> bool:
        """Sleeps ``seconds``; False when ``stop`` was set first."""
        if stop is None:
            time.sleep(max(seconds, 0.0))
            return True
        return not stop.wait(max(seconds, 0.0))


CLOCK = Clock()


# -------------------------------------------------------------- allocation


class Allocation:
    """GPU memory one process holds, as the fake NVML shows it (an allocation
    file named by the pid).  Thread-safe; without ``FAKE_NVML_PROCDIR`` it only
    keeps the figure."""

    def __init__(self, pid: int | None = None, gpu: int | None = None,
                 procdir: str | None = None) -> None:
        self.pid = os.getpid() if pid is None else pid
        self.gpu = gpu_index() if gpu is None else gpu
        self.procdir = procdir if procdir is not None else os.environ.get("FAKE_NVML_PROCDIR") or None
        self._lock = threading.Lock()
        self.nbytes = 0
        self.sm: int | None = None

    def set(self, nbytes: int, sm: int | None = None) -> None:
        """Now ``nbytes`` (0: none, the file goes), SM ``sm`` % when given."""
        with self._lock:
            self.nbytes, self.sm = max(int(nbytes), 0), sm
            self._write()

    def add(self, delta: int) -> int:
        with self._lock:
            self.nbytes = max(self.nbytes + int(delta), 0)
            self._write()
            return self.nbytes

    def busy(self, sm: int | None) -> None:
        """Same bytes, SM % ``sm`` (None: idle, no utilisation sample)."""
        with self._lock:
            self.sm = sm
            self._write()

    def clear(self) -> None:
        with self._lock:
            self.nbytes, self.sm = 0, None
            self._write()

    def _write(self) -> None:
        if self.procdir is None:
            return
        if self.nbytes > 0:
            write_allocation(self.procdir, self.pid, self.gpu, self.nbytes, sm=self.sm)
        else:
            clear_allocation(self.procdir, self.pid)


# ------------------------------------------------------- device (CUDA view)

_PAIR = re.compile(r'(\w+)=("([^"]*)"|\S+)')


def device_memory(gpu: int | None = None) -> dict[str, Any]:
    """The device as CUDA reports it (``cudaMemGetInfo``): ``total``, ``free``
    (total less used and driver-reserved memory), ``used``, and its ``name``,
    read from the fake NVML's config and allocation files.  Without a config,
    an RTX 4090 with nothing else on it."""
    index = gpu_index() if gpu is None else gpu
    out: dict[str, Any] = {"name": "NVIDIA GeForce RTX 4090", "total": 25_757_220_864,
                           "used": 0, "reserved": 0}
    procdir = os.environ.get("FAKE_NVML_PROCDIR") or None
    config = os.environ.get("FAKE_NVML_CONFIG")
    if config:
        try:
            lines = Path(config).read_text().splitlines()
        except OSError:
            lines = []
        seen = 0
        for line in lines:
            word, _, rest = line.strip().partition(" ")
            if word == "procdir":
                procdir = rest.strip()
            elif word == "gpu":
                if seen == index:
                    fields = {m.group(1): m.group(3) if m.group(3) is not None else m.group(2)
                              for m in _PAIR.finditer(rest)}
                    out["name"] = fields.get("name", out["name"])
                    out["total"] = int(fields.get("total", out["total"]))
                    out["used"] = int(fields.get("used", 0))
                    out["reserved"] = int(fields.get("reserved", 0))
                seen += 1
    if procdir:
        try:
            names = os.listdir(procdir)
        except OSError:
            names = []
        for name in names:
            if not name.isdigit():
                continue
            try:
                text = Path(procdir, name).read_text()
            except OSError:
                continue
            for line in text.splitlines():
                fields = dict(m.group(1, 2) for m in _PAIR.finditer(line))
                if fields.get("gpu") == str(index) and fields.get("mem", "").isdigit():
                    out["used"] += int(fields["mem"])
    out["free"] = max(out["total"] - out["used"] - out["reserved"], 0)
    return out


def ram() -> dict[str, int]:
    """Host memory from /proc/meminfo: ``total`` and ``available`` bytes."""
    values = {"MemTotal": 0, "MemAvailable": 0}
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            key, _, rest = line.partition(":")
            if key in values:
                values[key] = int(rest.split()[0]) * 1024
    except OSError:
        pass
    return {"total": values["MemTotal"], "available": values["MemAvailable"]}


def rss() -> int:
    """This process's resident memory in bytes."""
    try:
        pages = int(Path("/proc/self/statm").read_text().split()[1])
    except (OSError, IndexError, ValueError):
        return 0
    return pages * os.sysconf("SC_PAGE_SIZE")


# -------------------------------------------------------------------- HTTP


class BadRequest(Exception):
    """A body that is not the JSON a route expects."""


Route = Callable[["Handler"], None]


class App:
    """Routes of one fake server: ``(method, path) -> fn(handler)``."""

    #: Value of the Server header (None: none, as Go's net/http sends).
    server_header: str | None = None

    def __init__(self) -> None:
        self.routes: dict[tuple[str, str], Route] = {}

    def route(self, method: str, *paths: str) -> Callable[[Route], Route]:
        def register(fn: Route) -> Route:
            for path in paths:
                self.routes[(method, path)] = fn
            return fn
        return register

    def find(self, method: str, path: str) -> Route | None:
        return self.routes.get((method, path))

    def dispatch(self, h: Handler) -> None:
        """Before the route: auth and other checks (override), then the route."""
        fn = self.find(h.command, h.path_only)
        if fn is None and h.command == "HEAD":
            fn = self.find("GET", h.path_only)
        if fn is not None:
            fn(h)
        elif any(path == h.path_only for (_, path) in self.routes):
            self.method_not_allowed(h)
        else:
            self.not_found(h)

    def not_found(self, h: Handler) -> None:
        h.send_json(404, {"detail": "Not Found"})

    def method_not_allowed(self, h: Handler) -> None:
        h.send_json(405, {"detail": "Method Not Allowed"})


class Handler(BaseHTTPRequestHandler):
    """One request: parsed path and query, the body, JSON and chunked replies."""

    protocol_version = "HTTP/1.1"
    server: Server

    # ---------------------------------------------------------- plumbing

    def log_message(self, format: str, *args: Any) -> None:
        sys.stderr.write("%s %s\n" % (self.log_date_time_string(), format % args))

    def send_response(self, code: int, message: str | None = None) -> None:
        self._responded = True
        self.log_request(code)
        self.send_response_only(code, message)
        if self.server.app.server_header:
            self.send_header("Server", self.server.app.server_header)
        self.send_header("Date", self.date_time_string())

    def _handle(self) -> None:
        parts = urlsplit(self.path)
        self.path_only = parts.path
        self.query = {k: v[-1] for k, v in parse_qs(parts.query, keep_blank_values=True).items()}
        self._body: bytes | None = None
        self._chunked = False
        self._responded = False
        try:
            self.server.app.dispatch(self)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        except Exception as e:
            traceback.print_exc()
            if self._responded:
                self.close_connection = True
            else:
                self.send_json(500, {"error": f"{type(e).__name__}: {e}"})
        finally:
            if self._body is None:
                self._drain()

    do_GET = do_POST = do_HEAD = do_DELETE = do_PUT = do_PATCH = do_OPTIONS = _handle

    def _drain(self) -> None:
        try:
            self.body()
        except (OSError, ValueError):
            self.close_connection = True

    # ------------------------------------------------------------ request

    def body(self) -> bytes:
        if self._body is None:
            if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
                data = b""
                while True:
                    size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                    if size == 0:
                        while self.rfile.readline().strip():
                            pass
                        break
                    data += self.rfile.read(size)
                    self.rfile.readline()
                self._body = data
            else:
                length = int(self.headers.get("Content-Length") or 0)
                self._body = self.rfile.read(length) if length > 0 else b""
        return self._body

    def json(self, default: Any = None) -> Any:
        """The body as JSON; ``default`` when there is none; BadRequest when it is not JSON."""
        raw = self.body()
        if not raw.strip():
            return default
        try:
            return json.loads(raw)
        except ValueError as e:
            raise BadRequest(str(e)) from e

    def bearer(self) -> str | None:
        value = self.headers.get("Authorization")
        if value is None or not value.startswith("Bearer "):
            return None
        return value[len("Bearer "):]

    # ------------------------------------------------------------- replies

    def send_bytes(self, status: int, data: bytes, content_type: str,
                   headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)
        self.wfile.flush()

    def send_json(self, status: int, obj: Any, headers: dict[str, str] | None = None,
                  content_type: str = "application/json") -> None:
        data = json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode()
        self.send_bytes(status, data, content_type, headers)

    def send_text(self, status: int, text: str, content_type: str = "text/plain; charset=utf-8",
                  headers: dict[str, str] | None = None) -> None:
        self.send_bytes(status, text.encode(), content_type, headers)

    def start_chunked(self, status: int, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        self._chunked = True

    def write_chunk(self, data: bytes) -> None:
        if data:
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self.wfile.flush()

    def end_chunked(self) -> None:
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()


class Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 64

    def __init__(self, address: tuple[str, int], app: App) -> None:
        self.app = app
        super().__init__(address, Handler)


class Server6(Server):
    address_family = socket.AF_INET6


def listen(app: App, hosts: list[str], port: int) -> list[Server]:
    """One server per address (IPv6 ones that cannot bind here are left out)."""
    servers: list[Server] = []
    for host in hosts:
        try:
            servers.append((Server6 if ":" in host else Server)((host, port), app))
        except OSError:
            if ":" in host and servers:
                continue  # no IPv6 here; the IPv4 address serves
            raise
    return servers


def serve(servers: list[Server], cleanup: Callable[[], None] | None = None,
          banner: str | None = None) -> int:
    """Serves until SIGTERM/SIGINT, then runs ``cleanup`` (children, allocation)."""
    done = threading.Event()

    def stop(signum: int, frame: Any) -> None:
        done.set()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    threads = [threading.Thread(target=s.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)
               for s in servers]
    for t in threads:
        t.start()
    if banner:
        print(banner, flush=True)
    try:
        while not done.wait(0.5):
            pass
    finally:
        for s in servers:
            s.shutdown()
            s.server_close()
        if cleanup is not None:
            cleanup()
    return 0
