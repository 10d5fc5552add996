"""End to end, with a real second local user (the neighbour): the window's hub,
the CLI and ``run`` trust only folders, files and sockets of their own user.

1. The neighbour creates ``$TMPDIR/vram-steward-<our uid>`` first (0777) and
   plants an agent there: it is never listed nor sent a single request; a
   real agent started with ``main.py run`` uses a private fallback beside it
   and is listed; ``run`` and the CLI say so in one line on stderr.
2. An entry in our own registry naming a socket the neighbour serves: the
   peer check (SO_PEERCRED) refuses it before anything is sent.
3. ``VRAM_STEWARD_STATE_DIR`` names a folder the neighbour can write, with
   planted links: nothing is written through them, and a line says so.

Needs root (the neighbour is created with useradd); skips elsewhere.  TMPDIR
is a sticky scratch dir of the test's, never the real /tmp.
"""

from __future__ import annotations

import glob
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from app.agent.paths import UnsafeDir
from app.core.agents import client as agent_client
from app.core.agents.hub import AgentHub
from app.core.agents.types import AgentEntry
from app.core.diagnosis.report_store import ReportStore
from app.core.paths import history_db_path
from app.core.store.recorder import HistoryRecorder
from tests.fakes.neighbour import FakeNeighbourAgent, as_neighbour, neighbour, sticky_tmpdir
from tests.unit.core.diagnosis.test_report_store import report

ROOT = Path(__file__).resolve().parents[2]
MAIN = str(ROOT / "main.py")
UID = os.getuid() if hasattr(os, "getuid") else 0
#: The program ``run`` starts: says its pid once the agent has registered, ends on a line.
WAIT = "import os, sys; print(os.getpid(), flush=True); sys.stdin.readline()"

pytestmark = pytest.mark.skipif(os.name != "posix", reason="POSIX: users, modes, AF_UNIX")


class World:
    """The neighbour, a sticky TMPDIR, our private state dir, and the env for children."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.uid, self.gid = neighbour()
        self.tmp = sticky_tmpdir()
        self.ours = tempfile.mkdtemp(prefix="vsto")  # private, ours: state dir, our files
        self.state = os.path.join(self.ours, "state")
        self.env = {k: v for k, v in os.environ.items()
                    if k not in ("VRAM_STEWARD_RUNTIME_DIR", "VRAM_STEWARD_AGENT")}
        self.env.update(TMPDIR=self.tmp, VRAM_STEWARD_STATE_DIR=self.state,
                        XDG_STATE_HOME=self.ours, PYTHONDONTWRITEBYTECODE="1")
        monkeypatch.setattr(tempfile, "tempdir", self.tmp)
        monkeypatch.delenv("VRAM_STEWARD_RUNTIME_DIR", raising=False)
        monkeypatch.setenv("VRAM_STEWARD_STATE_DIR", self.state)

    def cli(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, MAIN, *args], env=self.env, capture_output=True,
                              text=True, timeout=timeout, stdin=subprocess.DEVNULL)

    def run_agent(self) -> tuple[subprocess.Popen, int]:
        """``main.py run -- python -c WAIT``: a real agent, loaded the documented way."""
        proc = subprocess.Popen([sys.executable, MAIN, "run", "--", sys.executable, "-c", WAIT],
                                env=self.env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.strip().isdigit(), proc.stderr.read() if proc.stderr else line
        return proc, int(line)

    def close(self) -> None:
        subprocess.run(["rm", "-rf", self.tmp, self.ours], check=False)


@pytest.fixture
def world(monkeypatch):
    made = World(monkeypatch)
    yield made
    made.close()


def finish(proc: subprocess.Popen) -> str:
    """End a ``run_agent`` child; its stderr."""
    _out, err = proc.communicate("\n", timeout=30)
    assert proc.returncode == 0, err
    return err


def test_a_squatted_runtime_dir_is_never_read_and_agents_use_a_private_fallback(world):
    primary = os.path.join(world.tmp, f"vram-steward-{UID}")

    def squat() -> None:
        for path in (primary, os.path.join(primary, "s")):
            os.mkdir(path)
            os.chmod(path, 0o777)

    as_neighbour(squat, world.uid, world.gid)
    fake = FakeNeighbourAgent(world.uid, world.gid, primary, os.path.join(primary, "s"),
                              os.path.join(world.tmp, "neighbour.log"))
    proc = None
    try:
        assert os.path.exists(os.path.join(primary, "agents", f"{fake.pid}.json"))
        ignored = (f"vram-steward: {primary} belongs to uid {world.uid}, not you: ignored; "
                   f"agents use a private {primary}-* instead")
        listed = world.cli("agents", "--json")
        assert listed.returncode == 0, listed.stderr
        assert json.loads(listed.stdout) == []
        assert listed.stderr.splitlines() == [ignored]  # once per command
        freed = world.cli("free-cache", "--all")
        assert freed.returncode != 0 and "TiB" not in freed.stdout
        assert freed.stderr.splitlines()[0] == ignored
        for args in (["unload", "--pid", str(fake.pid), "--model", "m2"],
                     ["record", "--pid", str(fake.pid), "--seconds", "1"]):
            done = world.cli(*args)
            assert done.returncode != 0 and "no agent" in done.stderr, done
            assert done.stderr.splitlines()[0] == ignored

        proc, real = world.run_agent()
        fallbacks = glob.glob(primary + "-*")
        assert len(fallbacks) == 1 and os.stat(fallbacks[0]).st_uid == UID
        assert os.path.exists(os.path.join(fallbacks[0], "agents", f"{real}.json"))
        line = (f"vram-steward: {primary} belongs to uid {world.uid}, not you: using "
                f"{fallbacks[0]} instead")
        listed = world.cli("agents", "--json")
        assert [r["pid"] for r in json.loads(listed.stdout)] == [real]
        assert listed.stderr.splitlines() == [line]
        freed = world.cli("free-cache", "--all", "--json")
        assert [r["pid"] for r in json.loads(freed.stdout)] == [real]
        assert freed.stderr.splitlines() == [line]

        hub = AgentHub(period_s=0.05, registry_period_s=0.05)
        try:
            hub.start()
            deadline = time.monotonic() + 10
            while real not in hub.reports() and time.monotonic() < deadline:
                time.sleep(0.05)
            time.sleep(0.3)  # a few more scans and polls
            assert [e.pid for e in hub.entries()] == [real]
            assert set(hub.reports()) == {real}
            assert hub.notices() == [line]
            assert not hub.free_cache(fake.pid, 2.0).ok
        finally:
            hub.close()

        err = finish(proc)
        proc = None
        assert err.splitlines() == [line]  # ``run`` says it before the command starts
        with open(os.path.join(world.state, "agent.log")) as fh:
            assert line in fh.read()  # the agent's own record of it
        assert fake.requests() == []
    finally:
        if proc is not None:
            proc.kill()
            proc.wait()
        fake.close()


def test_an_entry_naming_a_socket_someone_else_serves_is_refused_unspoken_to(world):
    runtime = tempfile.mkdtemp(prefix="vstr")  # ours, private: the registry is trusted
    world.env["VRAM_STEWARD_RUNTIME_DIR"] = runtime
    sockets = os.path.join(world.tmp, "theirs")
    as_neighbour(lambda: os.mkdir(sockets, 0o755), world.uid, world.gid)
    fake = FakeNeighbourAgent(world.uid, world.gid, None, sockets,
                              os.path.join(world.tmp, "neighbour.log"))
    try:
        folder = os.path.join(runtime, "agents")
        os.mkdir(folder, 0o700)
        path = os.path.join(folder, f"{fake.pid}.json")
        with os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as fh:
            json.dump(fake.entry_json, fh)

        listed = world.cli("agents", "--json")
        assert listed.returncode == 0, listed.stderr
        (record,) = json.loads(listed.stdout)
        assert record["pid"] == fake.pid and record["devices"] == []
        assert f"is served by uid {world.uid}, not you: refused" in record["error"]
        freed = world.cli("free-cache", "--all")
        assert freed.returncode != 0 and "TiB" not in freed.stdout

        entry = AgentEntry.from_json(fake.entry_json, path=path)
        assert entry is not None
        assert not agent_client.free_cache(entry, 2.0).ok
        with pytest.raises(agent_client.AgentUnavailable, match="not you"):
            agent_client.query_report(entry, 2.0)
        assert fake.requests() == []
    finally:
        fake.close()
        subprocess.run(["rm", "-rf", runtime], check=False)


def test_a_state_dir_others_can_write_is_refused_and_nothing_goes_through_its_links(
        world, monkeypatch):
    shared = os.path.join(world.tmp, "shared-state")
    world.env["VRAM_STEWARD_STATE_DIR"] = shared
    monkeypatch.setenv("VRAM_STEWARD_STATE_DIR", shared)
    runtime = tempfile.mkdtemp(prefix="vstr")
    world.env["VRAM_STEWARD_RUNTIME_DIR"] = runtime
    notes = os.path.join(world.ours, "notes.txt")
    with open(notes, "w") as fh:
        fh.write("mine\n")
    oom = report(1_700_000_000.0, pid=os.getpid())
    wal_target = os.path.join(world.ours, "wal-target")
    report_target = os.path.join(world.ours, "report-target")

    def plant() -> None:
        os.mkdir(shared)
        os.chmod(shared, 0o777)
        os.symlink(notes, os.path.join(shared, "agent.log"))
        os.symlink(wal_target, os.path.join(shared, "history.sqlite3-wal"))
        reports = os.path.join(shared, "oom-reports")
        os.mkdir(reports)
        os.chmod(reports, 0o777)
        os.symlink(report_target, os.path.join(reports, f".{oom.id}.{os.getppid()}.tmp"))

    try:
        as_neighbour(plant, world.uid, world.gid)
        planted = sorted(os.listdir(shared))
        line = (f"vram-steward: {shared} (VRAM_STEWARD_STATE_DIR) belongs to uid {world.uid}, "
                "not you: refused; history, OOM reports, recordings and agent.log are neither "
                "read nor written there")

        proc, _pid = world.run_agent()  # the agent logs its start (to agent.log)
        err = finish(proc)
        with open(notes) as fh:
            assert fh.read() == "mine\n"
        assert err.splitlines() == [line]
        for args in (["history", "--since", "1h"], ["doctor", "--oom"]):
            done = world.cli(*args)
            assert done.returncode != 0 and done.stderr.splitlines() == [line], done

        recorder = HistoryRecorder(history_db_path(), sources=None)
        try:
            assert not recorder.wait_ready(5.0)
            assert f"belongs to uid {world.uid}" in (recorder.message or "")
        finally:
            recorder.close()
        with pytest.raises(UnsafeDir):
            ReportStore().save(oom)
        assert ReportStore().list() == []

        with open(notes) as fh:
            assert fh.read() == "mine\n"
        assert not os.path.lexists(wal_target) and not os.path.lexists(report_target)
        assert sorted(os.listdir(shared)) == planted
        assert os.listdir(os.path.join(shared, "oom-reports")) == [f".{oom.id}.{os.getpid()}.tmp"]
    finally:
        subprocess.run(["rm", "-rf", runtime], check=False)
