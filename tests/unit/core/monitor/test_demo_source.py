"""DemoSource: a scripted, deterministic GPU source (a product feature)."""

from __future__ import annotations

import dataclasses
import re

import pytest

from app.core.monitor.demo_source import RELEASE_S, DemoSource, GiB, MiB, scaled_scenario
from app.core.monitor.report import snapshot_to_table
from app.core.monitor.samples import Container, GpuSample, HostStatus, ProcessSample, Snapshot
from app.core.monitor.source import GpuSource


class FakeClock:
    """A monotonic clock the test moves by hand."""

    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def opened(seed: int = 7, **kwargs) -> tuple[DemoSource, FakeClock]:
    clock = FakeClock()
    src = DemoSource(seed=seed, clock=clock, **kwargs)
    src.open()
    return src, clock


def read_at(src: DemoSource, clock: FakeClock, elapsed: float):
    clock.now = 1000.0 + elapsed
    return src.read()


def proc_by_command(gpus, fragment: str):
    found = [p for g in gpus for p in g.processes if p.command and fragment in p.command]
    assert len(found) <= 1
    return found[0] if found else None


TIMES = [0.0, 0.3, 1.0, 7.9, 8.0, 12.5, 30.0, 44.9, 45.0, 100.0, 479.0, 483.0, 486.5, 900.0, 3600.0]


def _strip_create(gpus):
    # The GpuSample is compared without its processes, which carry create_time.
    return [(dataclasses.replace(g, processes=()),
             tuple(p._replace(create_time=None) for p in g.processes)) for g in gpus]


def _relative_create(gpus, origin):
    return [round(p.create_time - origin, 2) for g in gpus for p in g.processes]


def test_is_a_gpu_source_that_fills_its_own_host_details():
    src = DemoSource()
    assert isinstance(src, GpuSource)
    assert src.name == "demo"
    assert src.wants_host_details is False
    assert src.driver_version() == "demo"


def test_same_seed_and_clock_readings_give_the_same_samples():
    a, ca = opened(seed=3)
    b, cb = opened(seed=3)
    origin_a = origin_b = None
    for t in TIMES:
        ra, rb = read_at(a, ca, t), read_at(b, cb, t)
        # GpuSample equality covers every field; processes compared without
        # create_time, which is wall-clock epoch seconds (open time + script offset).
        assert _strip_create(ra) == _strip_create(rb)
        if origin_a is None:
            origin_a = min(p.create_time for g in ra for p in g.processes)
            origin_b = min(p.create_time for g in rb for p in g.processes)
        assert _relative_create(ra, origin_a) == _relative_create(rb, origin_b)
        # Reading twice at the same instant is also stable.
        assert _strip_create(read_at(a, ca, t)) == _strip_create(ra)


def test_different_seed_changes_the_noise_but_not_the_script():
    a, ca = opened(seed=1)
    b, cb = opened(seed=2)
    differs = False
    for t in TIMES:
        ra, rb = read_at(a, ca, t), read_at(b, cb, t)
        assert [[p.pid for p in g.processes] for g in ra] == [[p.pid for p in g.processes] for g in rb]
        if [[p.gpu_memory for p in g.processes] for g in ra] != [[p.gpu_memory for p in g.processes] for g in rb]:
            differs = True
        if [[p.sm_util for p in g.processes] for g in ra] != [[p.sm_util for p in g.processes] for g in rb]:
            differs = True
    assert differs


def test_default_scenario_has_a_24_gib_and_an_80_gib_gpu():
    src, clock = opened()
    gpus = read_at(src, clock, 10.0)
    assert [g.memory_total for g in gpus] == [24 * GiB, 80 * GiB]
    assert [g.index for g in gpus] == [0, 1]
    assert [g.display_id for g in gpus] == ["0", "1"]
    assert len({g.uuid for g in gpus}) == 2
    for g in gpus:
        assert g.name.endswith("(demo)")
        assert g.power_limit and g.power_draw is not None and 0 < g.power_draw <= g.power_limit
        assert 0 <= g.utilization_gpu <= 100
        assert g.processes


@pytest.mark.parametrize("t", TIMES + [3 * 3600.0, 10 * 3600.0])
def test_memory_accounting_is_consistent(t):
    src, clock = opened()
    gpus = read_at(src, clock, t)
    for g, spec in zip(gpus, src.gpus):
        assert g.memory_reserved == spec.memory_reserved
        assert g.memory_used + g.memory_free + g.memory_reserved == g.memory_total
        assert g.memory_free >= 0
        proc_sum = sum(p.gpu_memory for p in g.processes)
        driver = spec.overhead + spec.context_overhead * len(g.processes)
        cap = g.memory_total - g.memory_reserved
        assert g.memory_used == min(driver + proc_sum, cap)
        # The default script never needs the cap, and at these times no process has
        # just exited: used is the processes' memory plus the driver's own.
        assert g.memory_used == driver + proc_sum
        assert g.unattributed_memory == driver
        for p in g.processes:
            assert isinstance(p.gpu_memory, int) and p.gpu_memory > 0
            assert p.gpu_memory % MiB == 0  # drivers report whole MiB


def test_processes_carry_host_details_and_simulated_status():
    src, clock = opened()
    gpus = read_at(src, clock, 20.0)
    procs = [p for g in gpus for p in g.processes]
    assert procs
    for p in procs:
        assert p.name and p.user and p.command
        assert p.host_status is HostStatus.SIMULATED
        assert p.create_time is not None and p.cpu_percent is not None and p.host_rss
        assert p.kind in ("compute", "graphics", "compute+graphics")
        assert p.sm_util is not None and 0 <= p.sm_util <= 100
    xorg = proc_by_command(gpus, "Xorg")
    assert (xorg.name, xorg.user, xorg.kind) == ("Xorg", "root", "graphics")
    eval_ = proc_by_command(gpus, "eval.py")
    assert eval_.user == "alice"
    # Processes are listed under the GPU the script puts them on.
    assert proc_by_command(gpus[0:1], "train.py") is not None
    assert proc_by_command(gpus[1:2], "vllm") is not None
    # pids are unique per reading.
    pids = [p.pid for p in procs]
    assert len(pids) == len(set(pids))


def test_training_job_saw_tooths_over_its_45_s_period():
    src, clock = opened()

    def train_mem(t):
        return proc_by_command(read_at(src, clock, t), "train.py").gpu_memory

    rising = [train_mem(t) for t in range(0, 45, 3)]
    assert all(b > a for a, b in zip(rising, rising[1:])), rising
    assert rising[-1] - rising[0] > 4.5 * GiB
    peak = train_mem(44.75)
    after_drop = train_mem(45.25)
    assert peak - after_drop > 5 * GiB
    # Periodic: the next period repeats the same shape (up to noise).
    assert abs(train_mem(45 + 20) - train_mem(20)) < 20 * MiB


def test_leaking_process_grows_until_its_oom_then_exits_and_restarts_with_a_new_pid():
    src, clock = opened()
    first = proc_by_command(read_at(src, clock, 10.0), "serve_embeddings")
    later = proc_by_command(read_at(src, clock, 400.0), "serve_embeddings")
    assert first.pid == later.pid and first.create_time == later.create_time
    assert later.gpu_memory - first.gpu_memory > 5.5 * GiB  # 16 MiB/s for 390 s
    samples = [proc_by_command(read_at(src, clock, t), "serve_embeddings").gpu_memory
               for t in range(0, 556, 30)]
    assert all(b > a for a, b in zip(samples, samples[1:]))
    # Its OOM at 555 s stops the growth; the card had less free than its request.
    at_oom = read_at(src, clock, 555.0)
    frozen = proc_by_command(read_at(src, clock, 557.5), "serve_embeddings")
    assert abs(frozen.gpu_memory - proc_by_command(at_oom, "serve_embeddings").gpu_memory) \
        <= 8 * MiB
    assert at_oom[1].memory_free < 1.5 * GiB

    assert proc_by_command(read_at(src, clock, 560.0), "serve_embeddings") is None  # gone
    reborn = proc_by_command(read_at(src, clock, 605.0), "serve_embeddings")
    assert reborn is not None
    assert reborn.pid != first.pid
    assert reborn.create_time > first.create_time + 558
    assert reborn.gpu_memory < later.gpu_memory  # a fresh start, not the leaked size


def test_eval_process_starts_exits_and_comes_back():
    src, clock = opened()
    assert proc_by_command(read_at(src, clock, 5.0), "eval.py") is None  # not started yet
    running = proc_by_command(read_at(src, clock, 10.0), "eval.py")
    assert running is not None
    ramped = proc_by_command(read_at(src, clock, 30.0), "eval.py")
    assert ramped.pid == running.pid and ramped.gpu_memory > running.gpu_memory
    assert proc_by_command(read_at(src, clock, 50.0), "eval.py") is None  # exited
    again = proc_by_command(read_at(src, clock, 90.0), "eval.py")
    assert again is not None and again.pid != running.pid
    assert again.create_time > running.create_time


def test_read_before_open_opens_implicitly():
    clock = FakeClock(50.0)
    src = DemoSource(clock=clock)
    gpus = src.read()
    assert len(gpus) == 2
    assert src.elapsed() == 0.0


@pytest.mark.parametrize("elapsed", [0.0, 5.0, 61.0, 600.0, 3600.0, 3 * 3600.0, 12 * 3600.0])
def test_scaled_scenario_stays_within_each_gpu(elapsed):
    gpus_spec, procs_spec = scaled_scenario(8, 64)
    assert len(gpus_spec) == 8 and len(procs_spec) == 8 * 64
    src, clock = opened(gpus=gpus_spec, processes=procs_spec)
    gpus = read_at(src, clock, elapsed)
    assert len(gpus) == 8
    for g, spec in zip(gpus, gpus_spec):
        assert 0 < len(g.processes) <= 64
        proc_sum = sum(p.gpu_memory for p in g.processes)
        assert g.memory_used + g.memory_free + g.memory_reserved == g.memory_total
        assert 0 < g.memory_used <= g.memory_total - g.memory_reserved
        # The listed processes never add up to more than the GPU reports; the rest
        # is the driver's (plus a batch job's memory for RELEASE_S after it ends).
        assert g.memory_used == proc_sum + g.unattributed_memory
        assert g.unattributed_memory >= spec.overhead + spec.context_overhead * len(g.processes)
        pids = [p.pid for p in g.processes]
        assert len(pids) == len(set(pids))


def test_scaled_scenario_is_deterministic_for_a_seed():
    assert scaled_scenario(2, 16, seed=5) == scaled_scenario(2, 16, seed=5)
    assert scaled_scenario(2, 16, seed=5) != scaled_scenario(2, 16, seed=6)


# -- unattributed memory and containers ------------------------------------------------------

def test_unattributed_memory_is_the_drivers_few_hundred_mib():
    src, clock = opened()
    for t in (5.0, 30.0, 300.0):
        for g, spec in zip(read_at(src, clock, t), src.gpus):
            driver = spec.overhead + spec.context_overhead * len(g.processes)
            assert g.unattributed_memory == driver
            assert 100 * MiB < g.unattributed_memory < GiB  # a believable driver figure
            assert g.unattributed_memory % (64 * MiB) != 0  # not a made-up round number


def test_unattributed_memory_follows_the_number_of_processes():
    src, clock = opened()
    spec = src.gpus[1]
    before = read_at(src, clock, 5.0)[1]  # eval.py not started yet
    during = read_at(src, clock, 20.0)[1]
    assert len(during.processes) == len(before.processes) + 1
    assert during.unattributed_memory - before.unattributed_memory == spec.context_overhead


def test_an_exited_process_memory_stays_unattributed_until_the_driver_releases_it():
    src, clock = opened()
    last = proc_by_command(read_at(src, clock, 557.75), "serve_embeddings")
    assert last is not None
    base = src.gpus[1].overhead
    ctx = src.gpus[1].context_overhead
    for t in (558.0, 558.0 + RELEASE_S - 0.25):
        g = read_at(src, clock, t)[1]
        assert proc_by_command([g], "serve_embeddings") is None  # no longer listed ...
        # ... but its memory is still in use, frozen at what it held when it exited.
        lingering = g.unattributed_memory - base - ctx * len(g.processes)
        assert abs(lingering - last.gpu_memory) <= 8 * MiB
        assert g.memory_used == sum(p.gpu_memory for p in g.processes) + g.unattributed_memory
    released = read_at(src, clock, 558.0 + RELEASE_S + 0.25)[1]
    assert released.unattributed_memory == base + ctx * len(released.processes)


def test_some_demo_processes_run_in_containers():
    src, clock = opened()
    gpus = read_at(src, clock, 20.0)
    vllm = proc_by_command(gpus, "vllm")
    assert vllm.container == Container(
        "docker", vllm.container.id, "vllm-llama3")
    assert re.fullmatch(r"[0-9a-f]{64}", vllm.container.id)
    assert vllm.container.label == "docker vllm-llama3"
    eval_ = proc_by_command(gpus, "eval.py")
    assert eval_.container.runtime == "podman" and eval_.container.name is None
    assert eval_.container.label == f"podman {eval_.container.id[:12]}"
    assert proc_by_command(gpus, "train.py").container is None
    assert proc_by_command(gpus, "Xorg").container is None
    # A restarted job comes back in its container.
    again = proc_by_command(read_at(src, clock, 90.0), "eval.py")
    assert again.pid != eval_.pid and again.container == eval_.container


def test_scaled_scenario_processes_are_not_in_containers():
    gpus_spec, procs_spec = scaled_scenario(1, 8)
    src, clock = opened(gpus=gpus_spec, processes=procs_spec)
    assert all(p.container is None for g in read_at(src, clock, 1.0) for p in g.processes)


# -- the text table (``status``) --------------------------------------------------------------

def test_status_table_lists_unattributed_memory_and_containers_of_the_demo():
    src, clock = opened()
    gpus = read_at(src, clock, 20.0)
    text = snapshot_to_table(Snapshot(1_700_000_000.0, 20.0, "demo", "demo", gpus), width=200)
    lines = text.splitlines()
    for g in gpus:
        header = next(i for i, line in enumerate(lines) if line.startswith(f"[{g.index}]"))
        block = lines[header + 1:header + 2 + len(g.processes)]
        # After the GPU's processes, in the memory column: "unattributed <size>".
        assert block[-1].split() == ["unattributed", *_size_words(g.unattributed_memory)]
        # ... right-aligned with the processes' memory figures.
        size_end = {line.index("iB") for line in block}
        assert len(size_end) == 1
    vllm = next(line for line in lines if " 9121 " in line)
    assert "[docker vllm-llama3] python -m vllm" in vllm
    eval_ = next(line for line in lines if "eval.py" in line)
    assert "[podman de9b9a136cce] python eval.py" in eval_
    train = next(line for line in lines if "train.py" in line)
    assert "[" not in train  # not in a container: nothing added


def _size_words(n):
    return (f"{n / GiB:.1f} GiB" if n >= GiB else f"{n / MiB:.0f} MiB").split()


def test_status_table_says_nothing_of_unattributed_memory_when_unknown_or_zero():
    def gpu(index, used, procs):
        return GpuSample(index=index, name="GPU", uuid=None, memory_total=24 * GiB,
                         memory_used=used, memory_free=None, processes=tuple(procs))

    snap = Snapshot(1_700_000_000.0, 1.0, "nvml", "550.54", (
        gpu(0, 2 * GiB, [ProcessSample(1, 2 * GiB)]),  # all of it attributed: 0
        gpu(1, 3 * GiB, [ProcessSample(2, None)]),  # a process's memory unknown
        gpu(2, None, []),  # used unknown
        gpu(3, GiB + 437 * MiB, [ProcessSample(3, GiB)]),
    ))
    text = snapshot_to_table(snap)
    assert text.count("unattributed") == 1
    assert re.search(r"^\s+unattributed\s+437 MiB$", text, re.MULTILINE)
    assert "0 MiB" not in text and "unattributed    n/a" not in text
