"""A real Prometheus scraping real ``serve`` processes, each on its own ABI-level
fake of libnvidia-ml: the pieces of ``test_prometheus``.

A :class:`Serve` is ``python -m app serve`` on 127.0.0.2 with a private state
and runtime folder; :class:`Prometheus` is ``/usr/bin/prometheus`` on a free
loopback port with its own config and TSDB folder, scraping every second.
"""

from __future__ import annotations

import getpass
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

from tests.fakes import nvml_abi
from tests.fakes.nvml_abi import FakeNvml
from tests.fakes.processes import end, serve_url, wait_for

REPO = Path(__file__).resolve().parents[2]
DASHBOARD = REPO / "resources" / "grafana" / "vram-steward.json"
PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"
PROMTOOL = shutil.which("promtool") or "/usr/bin/promtool"

#: What Grafana puts in place of the dashboard's variables when every host and GPU is chosen.
GRAFANA_VARIABLES = {"$instance": ".*", "$gpu": ".*", "$__rate_interval": "1m",
                     "$__range": "5m", "$__interval": "1s"}


def unavailable_reason() -> str | None:
    """Why the real-Prometheus test cannot run here, or None."""
    for tool in (PROMETHEUS, PROMTOOL):
        if not (os.path.isfile(tool) and os.access(tool, os.X_OK)):
            return f"{tool} is missing (Debian package prometheus)"
    return nvml_abi.unavailable_reason()


def private_dir(prefix: str) -> Path:
    """A fresh 0700 folder (the app uses state and runtime folders only when private)."""
    return Path(tempfile.mkdtemp(prefix=prefix))


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def http_get(url: str, token: str | None = None, timeout: float = 5.0) -> tuple[int, bytes]:
    request = urllib.request.Request(url)
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


class Serve:
    """``python -m app serve --listen 127.0.0.2:0`` backed by ``fake``."""

    def __init__(self, fake: FakeNvml, lib: Path, runtime: Path,
                 token: str | None = None) -> None:
        self.fake = fake
        self.folder = private_dir("vsprom-")
        self.token = token
        config = fake.write(self.folder / "nvml.conf")
        env = fake.env(lib, config)
        env.update(PYTHONPATH=str(REPO), PYTHONDONTWRITEBYTECODE="1",
                   VRAM_STEWARD_STATE_DIR=str(self.folder / "state"),
                   VRAM_STEWARD_RUNTIME_DIR=str(runtime))
        env.pop("VRAM_STEWARD_TOKEN", None)
        args = [sys.executable, "-m", "app", "serve", "--listen", "127.0.0.2:0",
                "--period", "0.25", "--no-history", "--no-auto-unload"]
        if token is not None:
            tokens = self.folder / "tokens"
            fd = os.open(tokens, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as fh:
                fh.write(f"{token} {getpass.getuser()} read\n")
            args += ["--token-file", str(tokens)]
        self.stderr = open(self.folder / "stderr", "wb")  # noqa: SIM115 (closed in stop)
        self.process = subprocess.Popen(args, env=env, cwd=REPO, stdin=subprocess.DEVNULL,
                                        stdout=subprocess.PIPE, stderr=self.stderr)
        try:
            self.url = serve_url(self.process, self.log)
        except AssertionError:
            self.stop()
            raise
        self.instance = urllib.parse.urlsplit(self.url).netloc

    def metrics(self) -> tuple[int, bytes]:
        return http_get(f"{self.url}/metrics", self.token)

    def log(self) -> str:
        return (self.folder / "stderr").read_text(errors="replace")

    def stop(self) -> None:
        end(self.process)
        if self.process.stdout is not None:
            self.process.stdout.close()
        self.stderr.close()
        shutil.rmtree(self.folder, ignore_errors=True)


class Prometheus:
    """``prometheus`` scraping each target every second (Bearer token where given)."""

    def __init__(self, targets: list[tuple[str, str | None]]) -> None:
        self.folder = private_dir("vsprom-tsdb-")
        jobs = []
        for n, (instance, token) in enumerate(targets):
            job: dict[str, Any] = {"job_name": f"vram-steward-{n}",
                                   "static_configs": [{"targets": [instance]}]}
            if token is not None:
                credentials = self.folder / f"token-{n}"
                credentials.write_text(token)
                credentials.chmod(0o600)
                job["authorization"] = {"type": "Bearer",
                                        "credentials_file": str(credentials)}
            jobs.append(job)
        config = {"global": {"scrape_interval": "1s", "scrape_timeout": "1s",
                             "evaluation_interval": "1s"},
                  "scrape_configs": jobs}
        self.config = self.folder / "prometheus.yml"
        self.config.write_text(json.dumps(config, indent=1))  # JSON is YAML
        check = subprocess.run([PROMTOOL, "check", "config", str(self.config)],
                               capture_output=True, text=True, timeout=30)
        assert check.returncode == 0, check.stdout + check.stderr
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.stderr = open(self.folder / "stderr", "wb")  # noqa: SIM115 (closed in stop)
        self.process = subprocess.Popen(
            [PROMETHEUS, f"--config.file={self.config}",
             f"--storage.tsdb.path={self.folder / 'data'}",
             f"--web.listen-address=127.0.0.1:{self.port}", "--log.level=warn"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=self.stderr)
        wait_for("Prometheus to be ready", self._ready, timeout=30.0)

    def _ready(self) -> bool:
        if self.process.poll() is not None:
            raise AssertionError(f"prometheus exited: {self.log()}")
        try:
            return http_get(f"{self.url}/-/ready", timeout=1.0)[0] == 200
        except OSError:
            return False

    def query(self, expr: str) -> list[dict[str, Any]]:
        """The instant vector ``expr`` gives now."""
        url = f"{self.url}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
        status, body = http_get(url)
        answer = json.loads(body)
        assert status == 200 and answer["status"] == "success", (expr, answer)
        return answer["data"]["result"]

    def value(self, expr: str) -> str | None:
        """The one sample's value as Prometheus writes it, None when there is none."""
        result = self.query(expr)
        assert len(result) <= 1, (expr, result)
        return result[0]["value"][1] if result else None

    def log(self) -> str:
        return (self.folder / "stderr").read_text(errors="replace")

    def stop(self) -> None:
        end(self.process, wait_s=15.0)
        self.stderr.close()
        shutil.rmtree(self.folder, ignore_errors=True)


# --------------------------------------------------------------- the dashboard

def dashboard_queries(path: Path = DASHBOARD) -> list[tuple[str, str]]:
    """(where, PromQL) of every query in the dashboard: panel targets, annotations,
    template variables (``label_values(selector, label)`` as given)."""
    board = json.loads(path.read_text())
    out: list[tuple[str, str]] = []

    def panels(items: list[dict]) -> None:
        for panel in items:
            panels(panel.get("panels", []))
            for target in panel.get("targets", []):
                out.append((f"panel {panel['title']!r} {target['refId']}", target["expr"]))

    panels(board["panels"])
    for note in board["annotations"]["list"]:
        if "expr" in note:
            out.append((f"annotation {note['name']!r}", note["expr"]))
    for var in board["templating"]["list"]:
        if var["type"] == "query":
            query = var["query"]
            out.append((f"variable {var['name']!r}",
                        query["query"] if isinstance(query, dict) else query))
    return out


LABEL_VALUES = re.compile(r"^label_values\((?P<selector>.+),\s*(?P<label>\w+)\)$")


def as_promql(expr: str) -> tuple[str, str | None]:
    """The query Prometheus runs for ``expr`` with every host and GPU chosen, and
    for a ``label_values`` variable the label its answer must carry."""
    for name, value in GRAFANA_VARIABLES.items():
        expr = expr.replace(name, value)
    match = LABEL_VALUES.match(expr.strip())
    if match:
        return match["selector"], match["label"]
    return expr, None
