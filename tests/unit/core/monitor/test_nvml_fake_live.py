"""The ABI fake of libnvidia-ml follows allocation files while a reader runs.

A child process loads the fake through the real ``pynvml`` and keeps one
NVML session open; the test writes and clears per-process allocation files
in the fake's ``procdir`` (as the fake model servers do) and asks the child
what NVML says now.  In live mode the pid appears with its bytes and the
GPU's used memory grows by exactly those bytes, then both go back, without a
re-init; without live mode the figures stay those read at ``nvmlInit``.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.fakes import nvml_abi
from tests.fakes.nvml_abi import FakeGpu, FakeNvml, FakeProcess, clear_allocation, write_allocation
from tests.fakes.processes import end, read_line, wait_for

REPO = Path(__file__).resolve().parents[4]

pytestmark = pytest.mark.skipif(nvml_abi.unavailable_reason() is not None,
                                reason=nvml_abi.unavailable_reason() or "")

#: One NVML session; each line on stdin asks for one reading of every GPU.
READER = textwrap.dedent("""
    import json, sys
    import pynvml

    pynvml.nvmlInit()
    print("ready", flush=True)
    for _ in sys.stdin:
        gpus = []
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            memory = pynvml.nvmlDeviceGetMemoryInfo(handle)
            procs = {str(p.pid): p.usedGpuMemory
                     for p in pynvml.nvmlDeviceGetComputeRunningProcesses(handle)}
            gpus.append({"used": memory.used, "free": memory.free, "procs": procs})
        print(json.dumps(gpus), flush=True)
""")

BASE_USED = 3_287_461_239
HELPER_BYTES = 611_319_808
ALLOCATED = 4_683_075_271  # a 7B model at Q4_K_M, as Ollama reports it
SECOND = 1_954_020_437


@pytest.fixture(scope="module")
def lib() -> Path:
    return nvml_abi.build()


def fake_with_procdir(procdir: Path, helper_pid: int) -> FakeNvml:
    fake = FakeNvml(procdir=str(procdir))
    for index in range(2):
        fake.gpus.append(FakeGpu(name="NVIDIA GeForce RTX 4090",
                                 uuid=f"GPU-5d1c7a3e-0b2f-4c61-9a8e-71f0c2d4e60{index}",
                                 total=25_757_220_864, used=BASE_USED + index * 7919,
                                 reserved=351_272_960))
    fake.processes.append(FakeProcess(pid=helper_pid, gpu=0, memory=HELPER_BYTES))
    return fake


class Reader:
    """The child holding one NVML session; :meth:`read` asks it for a reading."""

    def __init__(self, env: dict[str, str]) -> None:
        self.proc = subprocess.Popen([sys.executable, "-c", READER], env=env, cwd=REPO,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE)
        assert read_line(self.proc, 60).strip() == b"ready", self.proc.stderr

    def read(self) -> list[dict]:
        assert self.proc.stdin is not None
        self.proc.stdin.write(b"read\n")
        self.proc.stdin.flush()
        line = read_line(self.proc, 30)
        assert line, "the NVML reader did not answer"
        return json.loads(line)

    def close(self) -> str:
        """Ends the child (end of its input, then a signal); what it wrote on stderr."""
        if self.proc.stdin is not None and not self.proc.stdin.closed:
            self.proc.stdin.close()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            end(self.proc)
        err = b""
        if self.proc.stderr is not None and not self.proc.stderr.closed:
            err = self.proc.stderr.read()
            self.proc.stderr.close()
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        return err.decode(errors="replace")


@pytest.fixture
def world(lib, tmp_path):
    """(procdir, start_reader(live)) with a helper process listed by the config."""
    procdir = tmp_path / "procs"
    procdir.mkdir()
    helper = subprocess.Popen(["sleep", "120"])
    fake = fake_with_procdir(procdir, helper.pid)
    config = fake.write(tmp_path / "nvml.conf")
    readers: list[Reader] = []

    def start(live: bool) -> Reader:
        env = fake.env(lib, config, live=live)
        env["PYTHONPATH"] = str(REPO)
        readers.append(Reader(env))
        return readers[-1]

    yield procdir, start
    for reader in readers:
        reader.close()
    helper.kill()
    helper.wait()


def test_live_mode_follows_allocation_files_without_reinit(world):
    procdir, start = world
    reader = start(live=True)
    before = reader.read()
    assert before[0]["procs"] == {next(iter(before[0]["procs"])): HELPER_BYTES}
    assert before[1]["procs"] == {}

    write_allocation(procdir, 424242, 0, ALLOCATED, sm=37)
    after = wait_for("pid 424242 in NVML's process list",
                     lambda: (lambda r: r if "424242" in r[0]["procs"] else None)(reader.read()),
                     timeout=10, every=0.01)
    assert after[0]["procs"]["424242"] == ALLOCATED
    assert after[0]["used"] - before[0]["used"] == ALLOCATED
    assert before[0]["free"] - after[0]["free"] == ALLOCATED
    assert after[1] == before[1]  # the other GPU is untouched

    # A second process on the other GPU, then the first one shrinks in place.
    write_allocation(procdir, 424243, 1, SECOND)
    write_allocation(procdir, 424242, 0, ALLOCATED - SECOND)
    both = wait_for("both allocations", lambda: (lambda r: r if (
        r[1]["procs"].get("424243") == SECOND
        and r[0]["procs"].get("424242") == ALLOCATED - SECOND) else None)(reader.read()),
        timeout=10, every=0.01)
    assert both[0]["used"] - before[0]["used"] == ALLOCATED - SECOND
    assert both[1]["used"] - before[1]["used"] == SECOND

    clear_allocation(procdir, 424242)
    clear_allocation(procdir, 424243)
    clear_allocation(procdir, 424243)  # clearing twice is harmless
    back = wait_for("both pids gone", lambda: (lambda r: r if (
        "424242" not in r[0]["procs"] and "424243" not in r[1]["procs"]) else None)(reader.read()),
        timeout=10, every=0.01)
    assert back == before


def test_without_live_mode_nothing_changes_after_init(world):
    procdir, start = world
    reader = start(live=False)
    before = reader.read()
    write_allocation(procdir, 424242, 0, ALLOCATED)
    deadline = time.monotonic() + 0.3
    while time.monotonic() < deadline:
        assert reader.read() == before
        time.sleep(0.02)


def test_files_present_at_init_count_and_partial_or_malformed_files_do_not(world):
    procdir, start = world
    write_allocation(procdir, 515151, 1, SECOND, sm=12)
    (procdir / ".515152.tmp").write_text(f"gpu=0 mem={ALLOCATED}\n")  # a writer's temporary
    (procdir / "515153").write_text("gpu=0 mem=lots\n")  # malformed: skipped
    (procdir / "515154").write_text(f"gpu=9 mem={ALLOCATED}\n")  # no such GPU: skipped
    reader = start(live=False)
    gpus = reader.read()
    assert gpus[1]["procs"] == {"515151": SECOND}
    assert gpus[1]["used"] == BASE_USED + 7919 + 351_272_960 + SECOND  # v1 folds reserved in
    assert set(gpus[0]["procs"]) == {next(iter(gpus[0]["procs"]))}
    assert gpus[0]["used"] == BASE_USED + 351_272_960
    stderr = reader.close()
    assert "515153" in stderr and "515154" in stderr
    assert "515152" not in stderr and "515151" not in stderr


#: Two threads calling NVML as fast as they can for a while; prints the errors and odd answers.
HAMMER = textwrap.dedent("""
    import json, sys, threading, time
    import pynvml

    pynvml.nvmlInit()
    print("ready", flush=True)
    sys.stdin.readline()
    problems, calls = [], [0, 0]

    def hammer(slot):
        deadline = time.monotonic() + 1.0
        while time.monotonic() < deadline:
            try:
                if pynvml.nvmlDeviceGetCount() != 2:
                    problems.append("count")
                for index in range(2):
                    handle = pynvml.nvmlDeviceGetHandleByIndex(index)
                    memory = pynvml.nvmlDeviceGetMemoryInfo(handle)
                    if memory.used + memory.free != memory.total:
                        problems.append("memory")
                    pynvml.nvmlDeviceGetComputeRunningProcesses(handle)
            except pynvml.NVMLError as e:
                problems.append(str(e))
            calls[slot] += 1

    threads = [threading.Thread(target=hammer, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print(json.dumps({"problems": problems[:20], "calls": calls}), flush=True)
""")


def test_live_re_reads_never_show_a_half_read_config_to_other_threads(lib, tmp_path):
    procdir = tmp_path / "procs"
    procdir.mkdir()
    helper = subprocess.Popen(["sleep", "60"])
    try:
        fake = fake_with_procdir(procdir, helper.pid)
        config = fake.write(tmp_path / "nvml.conf")
        env = fake.env(lib, config, live=True)
        env["PYTHONPATH"] = str(REPO)
        child = subprocess.Popen([sys.executable, "-c", HAMMER], env=env, cwd=REPO,
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        try:
            assert read_line(child, 60).strip() == b"ready"
            assert child.stdin is not None
            child.stdin.write(b"go\n")
            child.stdin.flush()
            deadline = time.monotonic() + 1.0
            n = 0
            while time.monotonic() < deadline:  # a change every couple of milliseconds
                n += 1
                write_allocation(procdir, 600000 + n % 7, n % 2, ALLOCATED - n * 4099)
                if n % 3 == 0:
                    clear_allocation(procdir, 600000 + (n - 3) % 7)
                time.sleep(0.002)
            line = read_line(child, 30)
        finally:
            end(child)
            for stream in (child.stdin, child.stdout):
                if stream is not None:
                    stream.close()
    finally:
        helper.kill()
        helper.wait()
    result = json.loads(line)
    assert result["problems"] == []
    assert min(result["calls"]) > 100
