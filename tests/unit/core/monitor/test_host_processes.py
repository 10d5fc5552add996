"""HostProcessReader: host-side details of GPU processes through psutil.

Most tests run against the real psutil and real child processes; the
AccessDenied and pid-reuse cases, which cannot be staged from a test, use a
small fake at the psutil boundary that raises psutil's own exceptions.
"""

from __future__ import annotations

import contextlib
import getpass
import os
import subprocess
import sys
import time
import types
from dataclasses import dataclass, field

import psutil
import pytest

from app.core.monitor.host_processes import HostProcessReader
from app.core.monitor.samples import HostStatus, ProcessSample

# Prints once the interpreter is up, so its argv and RSS are settled.
SLEEPER = [sys.executable, "-c", "import time; print('ready', flush=True); time.sleep(30)"]


@pytest.fixture
def spawn():
    """Start real child processes; they are killed and reaped at teardown."""
    children: list[subprocess.Popen] = []

    def start(argv=SLEEPER) -> subprocess.Popen:
        child = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                 stderr=subprocess.DEVNULL, text=True)
        children.append(child)
        assert child.stdout.readline().strip() == "ready"
        return child

    yield start
    for child in children:
        if child.poll() is None:
            child.kill()
        child.wait(timeout=10)
        child.stdout.close()


def kill_and_reap(child: subprocess.Popen) -> None:
    child.kill()
    child.wait(timeout=10)
    for _ in range(100):  # the pid disappears from /proc once reaped
        if not psutil.pid_exists(child.pid):
            return
        time.sleep(0.01)


def gpu_proc(pid: int) -> ProcessSample:
    return ProcessSample(pid=pid, gpu_memory=512 * 1024**2)


def unused_pid() -> int:
    """A pid no process holds: beyond pid_max where the kernel exposes it."""
    try:
        with open("/proc/sys/kernel/pid_max") as f:
            candidate = int(f.read()) + 12345
    except OSError:
        candidate = 2**22 + 12345
    while psutil.pid_exists(candidate):  # pragma: no cover - cannot happen above pid_max
        candidate += 1
    return candidate


# -- real psutil --------------------------------------------------------------

def test_static_fields_of_a_real_child(spawn):
    child = spawn()
    reader = HostProcessReader()
    [out] = reader.enrich([gpu_proc(child.pid)])
    truth = psutil.Process(child.pid)
    assert out.host_status is HostStatus.OK
    assert out.pid == child.pid
    assert out.gpu_memory == 512 * 1024**2  # the driver's figures are left alone
    assert out.name == truth.name()
    assert out.name.startswith("python")
    assert out.user == truth.username() == getpass.getuser()
    assert out.command == " ".join(SLEEPER)
    assert out.create_time == pytest.approx(truth.create_time(), abs=0.01)
    assert abs(out.create_time - time.time()) < 60
    assert out.key == (child.pid, out.create_time)


def test_cpu_percent_is_unknown_on_first_sight_then_a_number(spawn):
    child = spawn()
    reader = HostProcessReader()
    [first] = reader.enrich([gpu_proc(child.pid)])
    assert first.cpu_percent is None  # unknown, not 0
    time.sleep(0.05)
    [second] = reader.enrich([gpu_proc(child.pid)])
    assert isinstance(second.cpu_percent, float)
    assert second.cpu_percent >= 0.0
    assert second.host_status is HostStatus.OK


def test_rss_matches_psutil(spawn):
    child = spawn()
    reader = HostProcessReader()
    [out] = reader.enrich([gpu_proc(child.pid)])
    rss = psutil.Process(child.pid).memory_info().rss
    assert out.host_rss is not None and out.host_rss > 1024**2
    assert abs(out.host_rss - rss) <= max(1024**2, rss // 10)  # a sleeping child barely moves


def test_our_own_process(spawn):
    reader = HostProcessReader()
    [out] = reader.enrich([gpu_proc(os.getpid())])
    me = psutil.Process()
    assert out.host_status is HostStatus.OK
    assert out.command == " ".join(me.cmdline())
    assert out.user == getpass.getuser()


def test_pid_that_never_existed_is_not_visible():
    reader = HostProcessReader()
    pid = unused_pid()
    [out] = reader.enrich([gpu_proc(pid)])
    assert out.host_status is HostStatus.NOT_VISIBLE
    assert out.name is None and out.user is None and out.command is None
    assert out.cpu_percent is None and out.host_rss is None
    assert out.gpu_memory == 512 * 1024**2
    # Asking again does not turn it into "exited".
    [again] = reader.enrich([gpu_proc(pid)])
    assert again.host_status is HostStatus.NOT_VISIBLE


def test_process_seen_then_killed_is_exited(spawn):
    child = spawn()
    reader = HostProcessReader()
    [alive] = reader.enrich([gpu_proc(child.pid)])
    assert alive.host_status is HostStatus.OK
    kill_and_reap(child)
    [gone] = reader.enrich([gpu_proc(child.pid)])
    assert gone.host_status is HostStatus.EXITED
    assert gone.cpu_percent is None and gone.host_rss is None
    # What was known before it exited is kept, so the row still says what it was.
    assert gone.command == alive.command and gone.name == alive.name
    [still_gone] = reader.enrich([gpu_proc(child.pid)])
    assert still_gone.host_status is HostStatus.EXITED


def test_several_processes_in_one_call_keep_their_order(spawn):
    a, b = spawn(), spawn()
    missing = unused_pid()
    reader = HostProcessReader()
    out = reader.enrich([gpu_proc(a.pid), gpu_proc(missing), gpu_proc(b.pid)])
    assert [p.pid for p in out] == [a.pid, missing, b.pid]
    assert [p.host_status for p in out] == [HostStatus.OK, HostStatus.NOT_VISIBLE, HostStatus.OK]


def test_prune_bounds_the_cache_and_forgets_seen_pids(spawn):
    a, b = spawn(), spawn()
    reader = HostProcessReader()
    reader.enrich([gpu_proc(a.pid), gpu_proc(b.pid)])
    reader.prune({a.pid})
    assert set(reader._entries) == {a.pid}  # the cache holds only live pids
    reader.prune(set())
    assert reader._entries == {}
    # b was forgotten: once it is gone it reads as never seen (not visible).
    kill_and_reap(b)
    [out] = reader.enrich([gpu_proc(b.pid)])
    assert out.host_status is HostStatus.NOT_VISIBLE


def test_prune_of_many_pids_keeps_cache_bounded(spawn):
    children = [spawn() for _ in range(4)]
    reader = HostProcessReader()
    for child in children:
        reader.enrich([gpu_proc(child.pid)])
        reader.prune({child.pid})
        assert len(reader._entries) == 1


# -- fake psutil (AccessDenied, pid reuse) -------------------------------------

@dataclass
class FakeProc:
    """What the fake OS knows about one pid."""

    create_time: float = 1000.0
    name: str = "python"
    username: str = "alice"
    cmdline: list = field(default_factory=lambda: ["python", "train.py"])
    rss: int = 3 * 1024**3
    cpu: float = 42.0
    denied: set = field(default_factory=set)  # getter names raising AccessDenied


class FakePsutil(types.SimpleNamespace):
    """A psutil stand-in: same exception classes, same caching semantics.

    Like psutil, a ``Process`` object caches ``create_time()`` from when it
    was made; the other getters read the pid's current state.
    """

    def __init__(self) -> None:
        super().__init__()
        self.NoSuchProcess = psutil.NoSuchProcess
        self.AccessDenied = psutil.AccessDenied
        self.ZombieProcess = psutil.ZombieProcess
        self.Error = psutil.Error
        self.table: dict[int, FakeProc] = {}
        self.calls: list[tuple[int, str]] = []
        self.Process = self._process

    def _process(self, pid: int) -> FakeProcess:
        self.calls.append((pid, "Process"))
        if pid not in self.table:
            raise psutil.NoSuchProcess(pid)
        return FakeProcess(self, pid)


class FakeProcess:
    def __init__(self, ps: FakePsutil, pid: int) -> None:
        self._ps = ps
        self.pid = pid
        spec = ps.table[pid]
        self._create_time = None if "create_time" in spec.denied else spec.create_time

    def _spec(self, getter: str) -> FakeProc:
        self._ps.calls.append((self.pid, getter))
        spec = self._ps.table.get(self.pid)
        if spec is None:
            raise psutil.NoSuchProcess(self.pid)
        if getter in spec.denied:
            raise psutil.AccessDenied(self.pid)
        return spec

    @contextlib.contextmanager
    def oneshot(self):
        yield

    def create_time(self):
        self._spec("create_time")
        return self._create_time  # cached, as psutil does

    def name(self):
        return self._spec("name").name

    def username(self):
        return self._spec("username").username

    def cmdline(self):
        return list(self._spec("cmdline").cmdline)

    def cpu_percent(self):
        return self._spec("cpu_percent").cpu

    def memory_info(self):
        return types.SimpleNamespace(rss=self._spec("memory_info").rss, vms=0)


def test_access_denied_keeps_what_could_be_read():
    ps = FakePsutil()
    ps.table[10] = FakeProc(denied={"username", "cmdline", "memory_info"})
    reader = HostProcessReader(ps)
    [first] = reader.enrich([gpu_proc(10)])
    assert first.host_status is HostStatus.ACCESS_DENIED
    assert first.name == "python"
    assert first.create_time == 1000.0
    assert first.user is None and first.command is None and first.host_rss is None
    assert first.cpu_percent is None  # first sight
    [second] = reader.enrich([gpu_proc(10)])
    assert second.host_status is HostStatus.ACCESS_DENIED
    assert second.cpu_percent == 42.0  # readable, so shown
    assert second.host_rss is None


def test_access_denied_on_every_getter():
    ps = FakePsutil()
    ps.table[11] = FakeProc(denied={"create_time", "name", "username", "cmdline",
                                    "cpu_percent", "memory_info"})
    reader = HostProcessReader(ps)
    for _ in range(2):
        [out] = reader.enrich([gpu_proc(11)])
        assert out.host_status is HostStatus.ACCESS_DENIED
        assert (out.name, out.user, out.command, out.cpu_percent, out.host_rss,
                out.create_time) == (None,) * 6
        assert out.gpu_memory == 512 * 1024**2


def test_access_denied_only_for_memory_still_reports_static_fields():
    ps = FakePsutil()
    ps.table[12] = FakeProc(denied={"memory_info"})
    reader = HostProcessReader(ps)
    [out] = reader.enrich([gpu_proc(12)])
    assert out.host_status is HostStatus.ACCESS_DENIED
    assert (out.name, out.user, out.command) == ("python", "alice", "python train.py")


def test_access_denied_while_opening_the_process_does_not_crash():
    ps = FakePsutil()

    def denied_process(pid):
        raise psutil.AccessDenied(pid)

    ps.Process = denied_process
    reader = HostProcessReader(ps)
    [out] = reader.enrich([gpu_proc(13)])
    assert out.host_status is HostStatus.ACCESS_DENIED
    assert out.name is None and out.host_rss is None


def test_unknown_user_and_empty_cmdline():
    ps = FakePsutil()
    ps.table[14] = FakeProc(cmdline=[], name="kworker/0:1")

    def no_passwd_entry():
        raise KeyError("getpwuid(): uid not found: 12345")

    reader = HostProcessReader(ps)
    [out] = reader.enrich([gpu_proc(14)])
    assert out.command == "[kworker/0:1]"
    ps.table[15] = FakeProc()
    real_process = ps.Process

    def process_without_user(pid):
        proc = real_process(pid)
        proc.username = no_passwd_entry
        return proc

    ps.Process = process_without_user
    [out] = reader.enrich([gpu_proc(15)])
    assert out.user is None
    assert out.name == "python"
    assert out.host_status is HostStatus.OK  # no permission problem, just no name


def test_pid_reuse_refreshes_static_fields():
    ps = FakePsutil()
    ps.table[20] = FakeProc(create_time=1000.0, name="python", username="alice",
                            cmdline=["python", "old.py"], rss=1 * 1024**3)
    reader = HostProcessReader(ps)
    reader.enrich([gpu_proc(20)])
    [old] = reader.enrich([gpu_proc(20)])
    assert old.command == "python old.py" and old.cpu_percent == 42.0
    # The old process exits and the kernel hands pid 20 to a new one.
    ps.table[20] = FakeProc(create_time=2000.0, name="ffmpeg", username="bob",
                            cmdline=["ffmpeg", "-i", "x.mp4"], rss=2 * 1024**3, cpu=7.0)
    [new] = reader.enrich([gpu_proc(20)])
    assert new.host_status is HostStatus.OK
    assert (new.name, new.user, new.command) == ("ffmpeg", "bob", "ffmpeg -i x.mp4")
    assert new.create_time == 2000.0
    assert new.key != old.key  # history keeps them apart
    assert new.host_rss == 2 * 1024**3
    assert new.cpu_percent is None  # a new process: no CPU baseline yet
    [later] = reader.enrich([gpu_proc(20)])
    assert later.cpu_percent == 7.0 and later.name == "ffmpeg"


def test_fake_psutil_is_not_called_for_an_empty_list():
    ps = FakePsutil()
    reader = HostProcessReader(ps)
    assert reader.enrich([]) == []
    reader.prune(set())
    assert ps.calls == []


def test_exited_in_fake_after_being_seen():
    ps = FakePsutil()
    ps.table[30] = FakeProc()
    reader = HostProcessReader(ps)
    [out] = reader.enrich([gpu_proc(30)])
    assert out.host_status is HostStatus.OK
    del ps.table[30]
    [out] = reader.enrich([gpu_proc(30)])
    assert out.host_status is HostStatus.EXITED
    [out] = reader.enrich([gpu_proc(31)])
    assert out.host_status is HostStatus.NOT_VISIBLE


# -- the /proc path (Linux): one read per pid per tick --------------------------

linux_only = pytest.mark.skipif(not os.path.exists("/proc/self/stat"), reason="needs Linux /proc")

def record_opens(monkeypatch) -> list[str]:
    """Paths the reader opens from now on (its one /proc read per pid goes through os.open)."""
    opened: list[str] = []
    real_open = os.open

    def counting_open(path, *args, **kwargs):
        opened.append(str(path))
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr("app.core.monitor.host_processes.os.open", counting_open)
    return opened


BUSY = [sys.executable, "-c",
        "import time; print('ready', flush=True)\nwhile True: pass"]


@linux_only
def test_each_tick_reads_one_proc_file_per_pid(spawn, monkeypatch):
    children = [spawn() for _ in range(3)]
    reader = HostProcessReader()
    samples = [gpu_proc(c.pid) for c in children]
    reader.enrich(samples)  # first sight: static fields through psutil
    opened = record_opens(monkeypatch)
    monkeypatch.setattr(psutil, "Process", None)  # no psutil call once a pid is known
    for _ in range(3):
        out = reader.enrich(samples)
        assert all(p.host_status is HostStatus.OK for p in out)
    assert opened == [f"/proc/{c.pid}/stat" for c in children] * 3


@linux_only
def test_create_time_is_exactly_psutils(spawn):
    child = spawn()
    [out] = HostProcessReader().enrich([gpu_proc(child.pid)])
    assert out.create_time == psutil.Process(child.pid).create_time()


@linux_only
def test_cpu_percent_of_a_busy_process_matches_psutil(spawn):
    child = spawn(BUSY)
    reader = HostProcessReader()
    truth = psutil.Process(child.pid)
    reader.enrich([gpu_proc(child.pid)])
    truth.cpu_percent()
    time.sleep(0.5)
    [out] = reader.enrich([gpu_proc(child.pid)])
    expected = truth.cpu_percent()
    assert out.cpu_percent is not None and out.cpu_percent > 10  # a spinning loop (on a busy CI too)
    assert out.cpu_percent == pytest.approx(expected, abs=15)


def write_proc(root, pid: int, *, start: int, utime: int = 10, stime: int = 5,
               rss_pages: int = 1000, comm: str = "python", cgroup: str | None = None) -> None:
    """A /proc/<pid>/stat laid out as proc(5) says (comm may hold spaces and parens)."""
    (root / "stat").write_text("cpu  1 2 3 4\nbtime 1700000000\n")
    d = root / str(pid)
    d.mkdir(exist_ok=True)
    fields = ["S", "1", str(pid), str(pid), "0", "-1", "4194304", "100", "0", "0", "0",
              str(utime), str(stime), "0", "0", "20", "0", "1", "0", str(start), "123456789",
              str(rss_pages)] + ["0"] * 30
    (d / "stat").write_text(f"{pid} ({comm}) " + " ".join(fields) + "\n")
    if cgroup is not None:
        (d / "cgroup").write_text(cgroup)


def test_proc_path_detects_pid_reuse_from_the_start_time(tmp_path):
    ps = FakePsutil()
    ps.table[40] = FakeProc(name="python", cmdline=["python", "old.py"])
    write_proc(tmp_path, 40, start=5000, rss_pages=256)
    reader = HostProcessReader(ps, proc_root=str(tmp_path))
    [old] = reader.enrich([gpu_proc(40)])
    assert old.command == "python old.py" and old.host_rss == 256 * os.sysconf("SC_PAGE_SIZE")
    assert old.create_time == 5000 / os.sysconf("SC_CLK_TCK") + 1700000000
    # The kernel hands pid 40 to a new process: a new start time in the same read.
    ps.table[40] = FakeProc(name="ffmpeg", username="bob", cmdline=["ffmpeg", "-i", "x.mp4"])
    write_proc(tmp_path, 40, start=9000, comm="ffmpeg) (x")
    [new] = reader.enrich([gpu_proc(40)])
    assert (new.name, new.user, new.command) == ("ffmpeg", "bob", "ffmpeg -i x.mp4")
    assert new.key != old.key and new.cpu_percent is None  # no CPU baseline for a new process


def test_proc_path_cpu_percent_from_tick_deltas(tmp_path):
    ps = FakePsutil()
    ps.table[41] = FakeProc()
    write_proc(tmp_path, 41, start=100, utime=1000, stime=0)
    reader = HostProcessReader(ps, proc_root=str(tmp_path))
    [first] = reader.enrich([gpu_proc(41)], now=10.0)
    assert first.cpu_percent is None  # unknown on first sight, not 0
    ticks = os.sysconf("SC_CLK_TCK")
    write_proc(tmp_path, 41, start=100, utime=1000 + 3 * ticks, stime=0)  # 3 s of CPU in 2 s
    [second] = reader.enrich([gpu_proc(41)], now=12.0)
    assert second.cpu_percent == 150.0


def test_proc_path_reads_the_container_once(tmp_path):
    ps = FakePsutil()
    ps.table[42] = FakeProc()
    cid = "3f4e2a1b9c0d" + "ab" * 26
    write_proc(tmp_path, 42, start=100, cgroup=f"0::/system.slice/docker-{cid}.scope\n")
    reader = HostProcessReader(ps, proc_root=str(tmp_path))
    [out] = reader.enrich([gpu_proc(42)])
    assert out.container is not None
    assert (out.container.runtime, out.container.id) == ("docker", cid)
    (tmp_path / "42" / "cgroup").unlink()
    [again] = reader.enrich([gpu_proc(42)])
    assert again.container == out.container  # cached for the life of the process


def test_proc_path_hidden_pid_is_access_denied_with_known_fields(tmp_path, monkeypatch):
    ps = FakePsutil()
    ps.table[43] = FakeProc()
    write_proc(tmp_path, 43, start=100)
    reader = HostProcessReader(ps, proc_root=str(tmp_path))
    [seen] = reader.enrich([gpu_proc(43)])
    real_open = os.open

    def hidepid(path, *args, **kwargs):
        if str(path).endswith("/43/stat"):
            raise PermissionError(13, "Permission denied", str(path))
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr("app.core.monitor.host_processes.os.open", hidepid)
    [out] = reader.enrich([gpu_proc(43)])
    assert out.host_status is HostStatus.ACCESS_DENIED
    assert out.command == seen.command and out.cpu_percent is None and out.host_rss is None
    [unknown] = HostProcessReader(ps, proc_root=str(tmp_path)).enrich([gpu_proc(43)])
    assert unknown.host_status is HostStatus.ACCESS_DENIED and unknown.name is None


def test_proc_path_exited_and_never_seen(tmp_path):
    ps = FakePsutil()
    ps.table[44] = FakeProc()
    write_proc(tmp_path, 44, start=100)
    reader = HostProcessReader(ps, proc_root=str(tmp_path))
    [alive] = reader.enrich([gpu_proc(44)])
    (tmp_path / "44" / "stat").unlink()
    [gone] = reader.enrich([gpu_proc(44)])
    assert gone.host_status is HostStatus.EXITED and gone.command == alive.command
    [never] = reader.enrich([gpu_proc(45)])
    assert never.host_status is HostStatus.NOT_VISIBLE


@linux_only
def test_a_pid_on_two_gpus_is_read_once_per_tick_and_shows_the_same_figures(spawn, monkeypatch):
    child = spawn(BUSY)
    reader = HostProcessReader()
    reader.enrich([gpu_proc(child.pid)], now=time.monotonic())
    time.sleep(0.3)
    opened = record_opens(monkeypatch)
    now = time.monotonic()
    [on_gpu0] = reader.enrich([gpu_proc(child.pid)], now)
    time.sleep(0.01)  # another GPU's process list, a moment later in the same tick
    [on_gpu1] = reader.enrich([gpu_proc(child.pid)], now)
    assert opened == [f"/proc/{child.pid}/stat"]
    assert on_gpu0.cpu_percent == on_gpu1.cpu_percent and on_gpu0.cpu_percent > 10
    assert on_gpu0.host_rss == on_gpu1.host_rss


def test_psutil_path_reads_a_pid_once_per_tick():
    ps = FakePsutil()
    ps.table[50] = FakeProc(cpu=42.0)
    reader = HostProcessReader(ps)
    reader.enrich([gpu_proc(50)], now=1.0)
    ps.calls.clear()
    first = reader.enrich([gpu_proc(50)], now=2.0)
    second = reader.enrich([gpu_proc(50)], now=2.0)
    assert first == second and first[0].cpu_percent == 42.0
    assert [c for c in ps.calls if c[1] == "cpu_percent"] == [(50, "cpu_percent")]


def test_a_pid_exiting_mid_tick_reads_exited_on_each_of_its_gpus(tmp_path):
    ps = FakePsutil()
    ps.table[46] = FakeProc(cmdline=["python", "ddp.py"])
    write_proc(tmp_path, 46, start=100)
    reader = HostProcessReader(ps, proc_root=str(tmp_path))
    reader.enrich([gpu_proc(46)], now=1.0)
    (tmp_path / "46" / "stat").unlink()
    first = reader.enrich([gpu_proc(46)], now=2.0)
    second = reader.enrich([gpu_proc(46)], now=2.0)  # its row on another GPU
    assert first == second
    assert first[0].host_status is HostStatus.EXITED and first[0].command == "python ddp.py"
    [later] = reader.enrich([gpu_proc(46)], now=3.0)
    assert later.host_status is HostStatus.EXITED and later.command == "python ddp.py"


def test_an_odd_proc_answer_for_one_pid_leaves_only_its_figures_unknown(tmp_path):
    ps = FakePsutil()
    ps.table[47] = FakeProc()
    ps.table[48] = FakeProc(name="other")
    write_proc(tmp_path, 47, start=100)
    write_proc(tmp_path, 48, start=200)
    reader = HostProcessReader(ps, proc_root=str(tmp_path))
    reader.enrich([gpu_proc(47), gpu_proc(48)], now=1.0)
    (tmp_path / "47" / "stat").write_text("47 (python) S 1 2 3 x y z\n")  # truncated, not numbers
    odd, fine = reader.enrich([gpu_proc(47), gpu_proc(48)], now=2.0)
    assert odd.host_rss is None and odd.cpu_percent is None and odd.name == "python"
    assert odd.host_status is HostStatus.OK  # still there: not "exited"
    assert fine.host_status is HostStatus.OK and fine.host_rss is not None


@linux_only
def test_with_a_refresh_period_each_process_is_read_once_per_period(spawn, monkeypatch):
    """A headless server reads /proc once a second per process while it ticks
    four times: in between, the rows are the last read's; a row the driver
    changed (its GPU memory) is joined again from the same figures."""
    children = [spawn() for _ in range(2)]
    reader = HostProcessReader(refresh_s=1.0)
    samples = [gpu_proc(c.pid) for c in children]
    first = reader.enrich(samples, now=100.0)
    opened = record_opens(monkeypatch)
    assert reader.enrich(samples, now=100.5) == first and opened == []
    grown = [samples[0]._replace(gpu_memory=samples[0].gpu_memory + 1), samples[1]]
    again = reader.enrich(grown, now=100.6)
    assert opened == [] and again[0].gpu_memory == grown[0].gpu_memory
    assert again[0]._replace(gpu_memory=first[0].gpu_memory) == first[0]
    later = reader.enrich(samples, now=101.1)  # a second on: read again, with a CPU %
    assert opened == [f"/proc/{c.pid}/stat" for c in children]
    assert all(p.cpu_percent is not None for p in later)
