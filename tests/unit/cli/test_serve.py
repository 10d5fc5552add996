"""``serve`` and ``--host`` as a user runs them: real processes, real sockets."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from app.cli.serve import is_loopback, parse_listen

ROOT = Path(__file__).resolve().parents[3]


def env(state: Path) -> dict:
    return {**os.environ, "VRAM_STEWARD_STATE_DIR": str(state), "PYTHONPATH": str(ROOT)}


def cli(state: Path, *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "app", *args], capture_output=True,
                          text=True, env=env(state), cwd=ROOT, timeout=timeout)


@pytest.fixture
def state(tmp_path):
    path = tmp_path / "state"
    path.mkdir(mode=0o700)
    return path


@pytest.fixture
def demo_serve(state):
    proc = subprocess.Popen([sys.executable, "-m", "app", "serve", "--demo", "--listen",
                             "127.0.0.1:0"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env(state), cwd=ROOT)
    first = proc.stdout.readline()
    assert first.startswith("listening on http://127.0.0.1:"), proc.stderr.read()
    yield proc, first.split()[-1]
    if proc.poll() is None:
        proc.kill()
    proc.wait()


@pytest.mark.parametrize("text, expected", [
    ("127.0.0.1:0", ("127.0.0.1", 0)), ("0.0.0.0", ("0.0.0.0", 9847)),
    ("[::1]:9000", ("::1", 9000)), (":8080", ("127.0.0.1", 8080))])
def test_parse_listen(text, expected):
    assert parse_listen(text) == expected


@pytest.mark.parametrize("text", ["host:port", "127.0.0.1:70000"])
def test_parse_listen_refuses(text):
    with pytest.raises(ValueError):
        parse_listen(text)


def test_loopback():
    assert is_loopback("127.0.0.2") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("10.1.2.3")


def test_serve_prints_where_it_listens_then_ends_cleanly_on_sigterm(demo_serve, state):
    proc, url = demo_serve
    tokens = state / "serve-tokens"
    assert tokens.stat().st_mode & 0o777 == 0o600  # generated: control needs it
    status = cli(state, "status", "--json", "--host", url)
    assert status.returncode == 0, status.stderr
    data = json.loads(status.stdout)
    assert data["wire"] == 1 and data["source"] == "demo" and data["gpus"]
    assert data["agents"] and "diagnoses" in data
    local = json.loads(cli(state, "status", "--json", "--demo", "--interval", "0").stdout)
    assert [g["uuid"] for g in data["gpus"]] == [g["uuid"] for g in local["gpus"]]
    assert set(local) <= set(data)  # the same contract, whichever host answers
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(10) == 0


def test_every_command_answers_from_the_host(demo_serve, state):
    _, url = demo_serve
    tokens = str(state / "serve-tokens")
    agents = json.loads(cli(state, "agents", "--json", "--host", url).stdout)
    assert {a["pid"] for a in agents} == {18822, 20417, 23890}
    models = json.loads(cli(state, "models", "--json", "--host", url).stdout)
    assert "pipe.unet" in {m["name"] for m in models}
    doctor = json.loads(cli(state, "doctor", "--json", "--host", url).stdout)
    assert doctor["host"] == url and doctor["diagnoses"]
    refused = cli(state, "free-cache", "--pid", "18822", "--host", url)
    assert refused.returncode != 0 and "--token-file" in refused.stdout + refused.stderr
    freed = cli(state, "free-cache", "--pid", "18822", "--json", "--host", url,
                "--token-file", tokens)
    assert freed.returncode == 0 and json.loads(freed.stdout)[0]["ok"]
    pinned = cli(state, "pin", "--pid", "18822", "--model", "m1", "--host", url,
                 "--token-file", tokens)
    assert pinned.returncode == 0 and "pinned" in pinned.stdout
    history = cli(state, "history", "--host", url)
    assert history.returncode != 0 and "keeps no history" in history.stderr


def test_sigint_ends_it_too(demo_serve):
    proc, _ = demo_serve
    proc.send_signal(signal.SIGINT)
    assert proc.wait(10) == 0


def test_an_open_address_needs_tls_or_insecure(state):
    result = cli(state, "serve", "--demo", "--listen", "0.0.0.0:0")
    assert result.returncode == 2 and "needs TLS" in result.stderr and not result.stdout


def test_a_dead_host_is_one_line_on_stderr(state):
    result = cli(state, "status", "--host", "http://127.0.0.1:1")
    assert result.returncode == 2 and not result.stdout
    assert "connection refused" in result.stderr and "Traceback" not in result.stderr
    both = cli(state, "status", "--demo", "--host", "http://127.0.0.1:1")
    assert both.returncode == 2 and "--demo and --host" in both.stderr
    bad = cli(state, "agents", "--host", "gpu-box")
    assert bad.returncode == 2 and "expected ssh://" in bad.stderr


def test_stdio_speaks_first_and_ends_with_its_input(state):
    proc = subprocess.Popen([sys.executable, "-m", "app", "serve", "--demo", "--stdio"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=env(state), cwd=ROOT)
    hello = json.loads(proc.stdout.readline())
    assert hello["type"] == "hello" and hello["wire"] == 1
    proc.stdin.write(b'{"wire": 1, "id": 7, "method": "agents"}\n')
    proc.stdin.flush()
    answer = json.loads(proc.stdout.readline())
    assert answer["id"] == 7 and len(answer["result"]) == 3
    # A session lasts one connection: it runs no pressure policy beside the host's own.
    proc.stdin.write(b'{"wire": 1, "id": 8, "method": "policy"}\n')
    proc.stdin.flush()
    policy = json.loads(proc.stdout.readline())["result"]
    assert policy["enabled"] is False and policy["available"] is False
    assert "SSH session" in policy["why_not"]
    started = time.monotonic()
    proc.stdin.close()
    assert proc.wait(10) == 0 and time.monotonic() - started < 10
    assert b"listening" not in proc.stdout.read()


def test_serve_never_imports_qt(state):
    code = ("import sys\nfrom app.cli import main\nrc = main(['serve', '--demo', '--stdio'])\n"
            "qt = sorted(m for m in sys.modules if m.split('.')[0] in "
            "('PySide6', 'shiboken6', 'pyqtgraph'))\nprint(rc, qt, file=sys.stderr)\n")
    done = subprocess.run([sys.executable, "-c", code], stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, env=env(state), cwd=ROOT, timeout=60)
    assert done.stderr.strip().endswith("0 []"), done.stderr
    assert json.loads(done.stdout.splitlines()[0])["type"] == "hello"


@pytest.mark.parametrize("period", ["0.01", "60", "fast"])
def test_the_period_has_the_windows_bounds(state, period):
    result = cli(state, "serve", "--demo", "--period", period)
    assert result.returncode == 2 and "--period" in result.stderr
