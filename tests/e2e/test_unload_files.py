"""End to end: a disk unload in a real child under ``main.py run`` (CPU torch),
against a full disk and against whatever ends the process.

* A small tmpfs with less room than the model: the unload is refused up
  front with the figures, the child goes on computing the same bits, no
  file stays (before: SIGBUS, exit 135, and the files left behind).
* A file over the process's file-size limit: refused up front as well (a
  write past it is SIGXFSZ); a write failing halfway is rolled back (the
  unit tests, ``tests/unit/agent/test_unload_edges.py``).
* SIGTERM, SIGHUP, SIGINT, SIGKILL while a model is unloaded to disk: the
  process ends as it would without the agent and its files are gone with it.
* A folder shared by two "hosts": the leftovers an agent removes at start
  are only those of this host's dead processes.
"""

from __future__ import annotations

import hashlib
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MiB = 1 << 20

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"),
                                reason="Linux: tmpfs, /proc, AF_UNIX agents")

# Blocks of Linear(1024, 1024): 4 MiB of weight each, a storage per tensor.
CHILD = textwrap.dedent("""
    import hashlib, json, os, signal, sys
    import torch

    torch.manual_seed(0)
    blocks = int(os.environ["BLOCKS"])
    head = ([torch.nn.Linear(1024, 4), torch.nn.Linear(4, 1024)]
            if os.environ.get("SMALL_HEAD") else [])
    model = torch.nn.Sequential(*head, *[torch.nn.Linear(1024, 1024)
                                         for _ in range(blocks)]).eval()
    model.requires_grad_(False)
    x = torch.randn(4, 1024)

    def digest():
        with torch.no_grad():
            out = model(x)
        return hashlib.sha256(out.numpy().tobytes()).hexdigest()

    def on_term(signum, frame):  # a job saving its weights when asked to stop
        torch.save(model.state_dict(), os.environ["SAVE_TO"])
        print(json.dumps({"saved": True}), flush=True)
        sys.exit(3)

    if os.environ.get("SAVE_ON_TERM"):
        signal.signal(signal.SIGTERM, on_term)
    print(json.dumps({"pid": os.getpid(), "digest": digest()}), flush=True)
    for line in sys.stdin:
        print(json.dumps({"digest": digest()}), flush=True)
""")


class Child:
    """``main.py run -- python child.py`` answering a digest per stdin line."""

    def __init__(self, tmp: Path, env: dict, blocks: int, limit_bytes: int | None = None) -> None:
        script = tmp / "child.py"
        script.write_text(CHILD)
        env = dict(env, BLOCKS=str(blocks))

        def limit() -> None:
            if limit_bytes is not None:
                resource.setrlimit(resource.RLIMIT_FSIZE, (limit_bytes, limit_bytes))

        self.proc = subprocess.Popen(
            [sys.executable, str(ROOT / "main.py"), "run", "--", sys.executable, str(script)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env=env, preexec_fn=limit, start_new_session=True)
        first = self.line()
        self.pid, self.digest = first["pid"], first["digest"]

    def line(self) -> dict:
        assert self.proc.stdout is not None
        text = self.proc.stdout.readline()
        assert text, "the child ended: %s" % self.stderr()
        return json.loads(text)

    def ask(self) -> str:
        assert self.proc.stdin is not None
        self.proc.stdin.write("digest\n")
        self.proc.stdin.flush()
        return self.line()["digest"]

    def stderr(self) -> str:
        if self.proc.poll() is None:
            return "(running)"
        return self.proc.stderr.read() if self.proc.stderr else ""

    def close(self) -> int:
        if self.proc.poll() is None:
            self.proc.stdin.close()
        return self.proc.wait(30)

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(30)


def cli(env: dict, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "main.py"), *args], capture_output=True,
                          text=True, env=env, timeout=120)


def model_id(env: dict, pid: int) -> str:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        done = cli(env, "models", "--json", "--timeout", "5")
        if done.returncode == 0:
            ids = [m["id"] for m in json.loads(done.stdout) if m["pid"] == pid]
            if ids:
                return ids[0]
        time.sleep(0.3)
    raise AssertionError("no model of %d listed" % pid)


def unload(env: dict, pid: int, mid: str) -> dict:
    done = cli(env, "unload", "--pid", str(pid), "--model", mid, "--to", "disk", "--json")
    result = json.loads(done.stdout)
    return result[0] if isinstance(result, list) else result


@pytest.fixture
def children():
    made: list[Child] = []
    yield made
    for child in made:
        child.kill()


@pytest.fixture
def base_env(tmp_path):
    runtime = tempfile.mkdtemp(prefix="vsf-")
    env = {k: v for k, v in os.environ.items() if k != "VRAM_STEWARD_AGENT"}
    env.update(VRAM_STEWARD_RUNTIME_DIR=runtime, XDG_STATE_HOME=str(tmp_path / "state"),
               XDG_CACHE_HOME=str(tmp_path / "cache"), SAVE_TO=str(tmp_path / "saved.pt"))
    yield env
    shutil.rmtree(runtime, ignore_errors=True)


def offload_folder(env: dict) -> Path:
    return Path(env["XDG_CACHE_HOME"]) / "vram-steward" / "offload"


@pytest.fixture
def small_tmpfs(tmp_path):
    """A 24 MiB tmpfs (root only), unmounted after the test."""
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a tmpfs needs root")
    where = tmp_path / "small"
    where.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=24m,mode=0700", "tmpfs",
                           str(where)], capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip("cannot mount a tmpfs here: %s" % done.stderr.strip())
    yield where
    subprocess.run(["umount", "-l", str(where)], check=False)


def used_bytes(path: Path) -> int:
    st = os.statvfs(path)
    return (st.f_blocks - st.f_bfree) * st.f_frsize


def test_a_disk_too_small_refuses_the_unload_up_front(tmp_path, base_env, small_tmpfs,
                                                      children):
    env = dict(base_env, XDG_CACHE_HOME=str(small_tmpfs))
    child = Child(tmp_path, env, blocks=8)  # 32 MiB of weights, 24 MiB of room
    children.append(child)
    result = unload(env, child.pid, model_id(env, child.pid))
    assert result["ok"] is False and result["code"] == "refused", result
    assert "needs 32 MiB" in result["error"] and " free in " in result["error"], result
    assert child.proc.poll() is None, child.stderr()
    assert child.ask() == child.digest  # resident, exact
    assert list(offload_folder(env).iterdir()) == []
    assert used_bytes(small_tmpfs) < MiB
    assert child.close() == 0


def test_a_file_over_the_file_size_limit_is_refused_up_front(tmp_path, base_env, children):
    """The process's file-size limit (1 MiB; ``ulimit -f``) lets the small
    head's files (16 KiB each) through and not the 4 MiB ones: asked before
    the first byte, since a write past it is SIGXFSZ (CPython ignores it; a
    host embedding Python may not)."""
    env = dict(base_env, SMALL_HEAD="1")
    child = Child(tmp_path, env, blocks=2, limit_bytes=MiB)
    children.append(child)
    result = unload(env, child.pid, model_id(env, child.pid))
    assert result["ok"] is False and result["code"] == "refused", result
    assert "file-size limit of 1 MiB" in result["error"], result
    assert child.proc.poll() is None, child.stderr()
    assert child.ask() == child.digest
    assert list(offload_folder(env).iterdir()) == []
    assert child.close() == 0


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT,
                                    signal.SIGKILL])
def test_the_files_go_with_the_process_however_it_ends(tmp_path, base_env, children, signum):
    env = base_env
    child = Child(tmp_path, env, blocks=2)
    children.append(child)
    result = unload(env, child.pid, model_id(env, child.pid))
    assert result["ok"], result
    folder = offload_folder(env)
    assert list(folder.iterdir()) == []  # no names at all while it runs
    os.kill(child.pid, signum)
    code = child.proc.wait(30)
    # killed by the signal, as without the agent (Python's KeyboardInterrupt
    # exit re-raises SIGINT), and `run` says so as a shell does
    assert code == 128 + signum, (code, child.stderr())
    assert list(folder.iterdir()) == []


def test_a_signal_handler_saving_the_weights_saves_them_exactly(tmp_path, base_env, children):
    env = dict(base_env, SAVE_ON_TERM="1")
    child = Child(tmp_path, env, blocks=2)
    children.append(child)
    assert unload(env, child.pid, model_id(env, child.pid))["ok"]
    os.kill(child.pid, signal.SIGTERM)
    assert child.line() == {"saved": True}
    assert child.proc.wait(30) == 3
    import torch

    torch.manual_seed(0)
    expected = torch.nn.Sequential(*[torch.nn.Linear(1024, 1024) for _ in range(2)])
    saved = torch.load(env["SAVE_TO"])
    assert all(torch.equal(saved[k], v) for k, v in expected.state_dict().items())
    assert list(offload_folder(env).iterdir()) == []


def _identity_fields() -> tuple[str, str, int]:
    from app.agent.storage import leftovers

    me = leftovers.current()
    return me.host, me.boot, me.pidns


def test_an_agent_starting_removes_only_this_hosts_dead_leftovers(tmp_path, base_env,
                                                                 children):
    """Two hosts share the folder (a home on a network filesystem): files of the
    other host (another boot id and host name) stay, even where their pid is
    not running here; this host's files of a dead process go."""
    host, boot, pidns = _identity_fields()
    folder = offload_folder(base_env)
    folder.mkdir(parents=True, mode=0o700)
    os.chmod(folder.parent, 0o700)
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True).stdout.strip()
    other_host = hashlib.sha1(b"node-17").hexdigest()[:8]
    other_boot = "0123456789abcdef0123456789abcdef"
    mine_live = "%s-%s-%d-%d-%s-m1-0.bin" % (host, boot, pidns, os.getpid(),
                                             _start_ticks(os.getpid()))
    planted = {
        "%s-%s-%d-%s-99-m1-0.bin" % (host, boot, pidns, dead): False,  # ours, gone
        "%s-%s-%d-%d-1-m1-0.bin" % (host, boot, pidns, os.getpid()): False,  # pid reused
        mine_live: True,  # this test process: alive
        "%s-%s-%d-%s-99-m1-0.bin" % (other_host, other_boot, pidns, dead): True,
        "%s-%s-%d-%d-5-m1-0.bin" % (other_host, other_boot, pidns, os.getpid()): True,
        "%s-%s-%d-%s-99-m1-0.bin" % (host, boot, pidns + 1, dead): True,  # a container
        "notes.txt": True,
    }
    for name in planted:
        (folder / name).write_bytes(b"x" * 4096)
    child = Child(tmp_path, base_env, blocks=1)
    children.append(child)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if {p.name for p in folder.iterdir()} == {n for n, keep in planted.items() if keep}:
            break
        time.sleep(0.2)
    assert {p.name for p in folder.iterdir()} == {n for n, keep in planted.items() if keep}
    assert child.close() == 0


def _start_ticks(pid: int) -> int:
    data = Path("/proc/%d/stat" % pid).read_text()
    return int(data[data.rindex(")") + 2:].split()[19])
