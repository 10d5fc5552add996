"""A server that hangs: started with ComfyUI's shape (``<python> main.py
--listen 127.0.0.1 --port N`` in a ``ComfyUI/`` directory), it accepts TCP
connections, reads whatever comes, and never answers (as a server whose
event loop is stuck).  Connections stay open until the client gives up or
the process ends.  It holds no GPU memory.
"""

from __future__ import annotations

import os
import signal
import socket
import sys
import threading
from pathlib import Path

from tests.fakes.servers.comfyui import parse_args
from tests.fakes.servers.common import launcher


def prepare(root: str | os.PathLike[str]) -> Path:
    """``root/ComfyUI/main.py`` that calls :func:`main`."""
    comfy = Path(root) / "ComfyUI"
    comfy.mkdir(parents=True, exist_ok=True)
    launcher(str(comfy / "main.py"), "tests.fakes.servers.hanging")
    return comfy


def _swallow(conn: socket.socket) -> None:
    with conn:
        try:
            while conn.recv(65536):
                pass
        except OSError:
            pass


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    host = args.listen.split(",")[0]
    listener = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind((host, args.port))
    listener.listen(64)
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
    print(f"To see the GUI go to: http://{host}:{args.port}", flush=True)
    while True:
        conn, _ = listener.accept()
        threading.Thread(target=_swallow, args=(conn,), daemon=True).start()
