"""The pieces of ``test_remote_hosts``: real ``serve`` processes the window's
``Fleet`` watches, and what the sampler thread does with it.

* :class:`Server`: ``python -m app serve`` on a fixed loopback address (so it
  can be killed, frozen and started again on the same port), with or without
  history;
* :func:`self_signed`: a certificate for one IP address, as ``openssl`` makes it;
* :class:`Watch`: ``fleet.views()`` every tenth of a second on a thread of its
  own, as the sampler does: the latest view of each host, the stored history
  each handed out, how many fresh snapshots arrived, and a local snapshot
  carrying the views for the controllers.
"""

from __future__ import annotations

import collections
import contextlib
import os
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from app.core.monitor.hosts import HostView
from app.core.monitor.samples import Snapshot
from app.core.remote.fleet import Fleet
from tests.e2e.remote_world import REPO, Host
from tests.fakes.processes import end, serve_url


class Server:
    """``serve --listen ADDRESS`` as root on ``host``; ``history``: it records
    history into the host's state folder (and hands it out)."""

    def __init__(self, host: Host, listen: str, *args: str, history: bool = False) -> None:
        self.host = host
        self.args = [*args] if history else ["--no-history", *args]
        self.folder = tempfile.mkdtemp(prefix="serve-", dir=host.tmp)
        self.log = open(os.path.join(self.folder, "stderr"), "ab")  # noqa: SIM115
        self.url = self._start(listen)
        self.address = self.url.split("://", 1)[1]

    def _start(self, listen: str) -> str:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "app", "serve", "--listen", listen, "--period", "0.25",
             "--no-auto-unload", *self.args],
            env=self.host.env(), cwd=REPO, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=self.log)
        try:
            return serve_url(self.proc, self.errors)
        except AssertionError:
            self.stop()
            raise

    def errors(self) -> str:
        return Path(self.log.name).read_text(errors="replace")

    def stored_gpus(self) -> int:
        """How many GPUs have a sample in the history this server records
        (0 until its first flush, or with ``--no-history``)."""
        path = os.path.join(self.host.root_home, "state", "history.sqlite3")
        try:
            with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as db:
                return int(db.execute("SELECT COUNT(DISTINCT gpu) FROM sample").fetchone()[0])
        except sqlite3.Error:
            return 0

    def kill(self) -> None:
        """SIGKILL: no goodbye to its clients, nothing flushed."""
        self.stop(signal.SIGKILL)

    def restart(self) -> None:
        """Started again on the same address (a port its clients know)."""
        url = self._start(self.address)
        assert url == self.url, (url, self.url)

    def freeze(self) -> None:
        os.kill(self.proc.pid, signal.SIGSTOP)

    def thaw(self) -> None:
        os.kill(self.proc.pid, signal.SIGCONT)

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGCONT)  # a frozen one must hear SIGTERM
        end(self.proc, sig)
        if self.proc.stdout is not None:
            self.proc.stdout.close()

    def close(self) -> None:
        self.stop()
        self.log.close()


def self_signed(folder: str, ip: str) -> tuple[str, str] | str:
    """(certificate, key) for ``ip``, or why ``openssl`` could not make them."""
    cert, key = os.path.join(folder, f"{ip}.pem"), os.path.join(folder, f"{ip}.key")
    made = subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
         "-nodes", "-days", "1", "-subj", f"/CN={ip}", "-addext", f"subjectAltName=IP:{ip}",
         "-keyout", key, "-out", cert], capture_output=True, text=True, timeout=30)
    if made.returncode != 0:
        return f"openssl cannot make a certificate: {made.stderr.strip()}"
    return cert, key


class Watch:
    """The sampler thread's part: every ``every`` seconds, the fleet's views."""

    def __init__(self, fleet: Fleet, every: float = 0.1) -> None:
        self.fleet = fleet
        self.every = every
        self._lock = threading.Lock()
        self._latest: dict[str, HostView] = {}
        self._seeds: dict[str, list[Any]] = collections.defaultdict(list)
        self._arrivals: collections.Counter[str] = collections.Counter()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="watch")
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            for view in self.fleet.views():
                with self._lock:
                    self._latest[view.key] = view
                    if view.seed is not None:
                        self._seeds[view.key].append(view.seed)
                    if view.fresh:
                        self._arrivals[view.key] += 1

    def view(self, key: str) -> HostView | None:
        with self._lock:
            return self._latest.get(key)

    def state(self, key: str) -> str | None:
        view = self.view(key)
        return None if view is None else view.state

    def seeds(self, key: str) -> list[Any]:
        with self._lock:
            return list(self._seeds[key])

    def arrivals(self, key: str) -> int:
        with self._lock:
            return self._arrivals[key]

    def snapshot(self) -> Snapshot:
        """This machine's snapshot (no GPUs here) carrying every host's view."""
        with self._lock:
            views = tuple(self._latest.values())
        return Snapshot(time.time(), time.monotonic(), "nvml", None, (), hosts=views)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
