"""OOM post-mortems, step memory and allocation recording on a real GPU
(skipped without one, see conftest.py).

Each test runs a child under the agent (``main.py run``) that really runs
out of memory or really allocates, and reads what the agent captured back
with the app's client.  Allocations are sized from ``torch.cuda.mem_get_info``
and everything is freed before the child exits.
"""

from __future__ import annotations

import os
import stat
import subprocess
import textwrap
from pathlib import Path

import pytest

from app.core.agents import client as agent_client
from tests.gpu.agent_children import entry_for, read_line, start

MiB = 1024**2

PLAIN_OOM_CHILD = textwrap.dedent("""
    import json, os, sys, time
    import torch

    MiB = 1 << 20
    dev = torch.device("cuda:0")
    model = torch.nn.Linear(1024, 1024).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for i in range(3):  # real optimizer steps, a second apart: sampled after each
        model(torch.randn(64, 1024, device=dev)).sum().backward()
        opt.step()
        opt.zero_grad()
        time.sleep(1.1)
    keep = torch.empty(64 * MiB, dtype=torch.uint8, device=dev)
    torch.cuda.synchronize()
    free, total = torch.cuda.mem_get_info()
    ask = (free + 4 * 1024 * MiB) // (2 * MiB) * (2 * MiB)  # a multiple of the rounding
    error = None
    try:
        torch.empty(ask, dtype=torch.uint8, device=dev)
    except torch.OutOfMemoryError as exc:
        error = str(exc).splitlines()[0]
    print(json.dumps({"pid": os.getpid(), "ask": ask, "free": free, "total": total,
                      "error": error, "uuid": str(torch.cuda.get_device_properties(0).uuid),
                      "allocated": torch.cuda.memory_allocated(0)}), flush=True)
    stop = sys.argv[1]
    while not os.path.exists(stop):
        time.sleep(0.05)
    del keep, model, opt
    torch.cuda.empty_cache()
""")

# Fragmentation: requests between 1 and 10 MiB are carved out of 20 MiB
# segments.  Pairs of 8 MiB blocks fill such segments; freeing the first of
# each pair leaves 8 + 4 MiB free in every segment, in pieces no larger than
# 8 MiB, and no segment wholly free (the allocator's own release of its cache
# before an OOM gives nothing back).  With the card otherwise full, a 12 MiB
# request (its own cudaMalloc) fails although far more than 12 MiB is free.
FRAGMENTATION_CHILD = textwrap.dedent("""
    import json, os, sys, time
    import torch

    MiB = 1 << 20
    dev = torch.device("cuda:0")
    torch.empty(1, device=dev)  # no pause: the observer is attached as CUDA initialises
    free, total = torch.cuda.mem_get_info()
    budget = 3 * 1024 * MiB
    filler = torch.empty(max(0, free - budget) // (2 * MiB) * (2 * MiB), dtype=torch.uint8,
                         device=dev)
    pairs = []
    while True:
        try:
            pairs.append((torch.empty(8 * MiB, dtype=torch.uint8, device=dev),
                          torch.empty(8 * MiB, dtype=torch.uint8, device=dev)))
        except torch.OutOfMemoryError:
            break
    free_now, _ = torch.cuda.mem_get_info()
    topoff = None
    if free_now > 12 * MiB:  # leave no room for a 12 MiB segment
        try:
            topoff = torch.empty((free_now - 4 * MiB) // (2 * MiB) * (2 * MiB),
                                 dtype=torch.uint8, device=dev)
        except torch.OutOfMemoryError:
            pass
    firsts = [a for a, _ in pairs]
    seconds = [b for _, b in pairs]
    del pairs
    firsts.clear()  # every other block free
    torch.cuda.synchronize()
    stats = torch.cuda.memory_stats(0)
    error = None
    try:
        torch.empty(12 * MiB, dtype=torch.uint8, device=dev)
    except torch.OutOfMemoryError as exc:
        error = str(exc).splitlines()[0]
    print(json.dumps({"pid": os.getpid(), "error": error, "blocks": len(seconds),
                      "driver_free": torch.cuda.mem_get_info()[0],
                      "inactive_split": stats.get("inactive_split_bytes.all.current")}),
          flush=True)
    stop = sys.argv[1]
    while not os.path.exists(stop):
        time.sleep(0.05)
    del seconds, filler, topoff
    torch.cuda.empty_cache()
""")

RECORD_CHILD = textwrap.dedent("""
    import json, os, sys, time
    import torch

    dev = torch.device("cuda:0")
    torch.empty(1, device=dev)
    kept = []

    def churn(i):
        x = torch.empty(4 << 20, dtype=torch.uint8, device=dev)
        if i % 10 == 0:
            kept.append(x)  # still alive when recording stops

    print(json.dumps({"pid": os.getpid()}), flush=True)
    stop = sys.argv[1]
    i = 0
    while not os.path.exists(stop):
        churn(i)
        i += 1
        time.sleep(0.002)
        if len(kept) > 200:
            kept.clear()
    kept.clear()
    torch.cuda.empty_cache()
""")


def finish(proc, stop: Path) -> None:
    stop.write_text("stop")
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def test_a_real_oom_is_captured_and_read_back(tmp_path, runtime):
    proc, stop, _ = start(tmp_path, runtime, PLAIN_OOM_CHILD)
    try:
        own = read_line(proc, 300.0)
        assert own["error"] is not None, "the child did not run out of memory"
        entry = entry_for(runtime, own["pid"])
        report = agent_client.query_report(entry, timeout_s=10, models=False)
        assert report.oom_events is not None and report.oom_events >= 1
        cap = report.ooms[-1]
        print(f"\ncapture: {cap.to_json()}")
        assert cap.request == own["ask"]
        assert cap.device == 0 and cap.uuid == own["uuid"]
        assert cap.limit == own["total"]
        assert cap.free is not None and cap.free <= own["total"]
        assert cap.stats["allocated"] is not None and cap.stats["reserved"] is not None
        assert cap.stats["allocated"] >= 64 * MiB
        assert cap.segments is not None and cap.segments.count >= 1
        assert cap.segments.reserved >= cap.segments.allocated >= 64 * MiB
        assert cap.fragmented is False  # asked for more than the whole card
        assert cap.step == 3 and cap.thread == "MainThread" and cap.errors == ()
        assert cap.capture_s is not None
        steps = report.steps
        assert steps is not None and steps.count == 3
        assert steps.samples and all(s.device == 0 and s.allocated > 0 for s in steps.samples)
    finally:
        finish(proc, stop)


def test_a_fragmentation_oom_shows_a_largest_free_block_below_the_request(tmp_path, runtime):
    proc, stop, _ = start(tmp_path, runtime, FRAGMENTATION_CHILD)
    try:
        own = read_line(proc, 300.0)
        if own["error"] is None:
            pytest.skip(f"no fragmentation OOM on this card ({own})")
        entry = entry_for(runtime, own["pid"])
        report = agent_client.query_report(entry, timeout_s=10, models=False)
        cap = report.ooms[-1]
        print(f"\nfragmentation capture: {cap.to_json()}")
        assert cap.request == 12 * MiB
        assert cap.segments is not None and cap.segments.expandable is False
        assert cap.segments.largest_free_block is not None
        assert cap.segments.largest_free_block <= 8 * MiB
        assert cap.segments.free >= 12 * MiB
        assert cap.fragmented is True
        assert cap.stats["inactive_split"] is not None and cap.stats["inactive_split"] > 0
    finally:
        finish(proc, stop)


def test_record_for_two_seconds_names_the_allocating_line(tmp_path, runtime):
    proc, stop, script = start(tmp_path, runtime, RECORD_CHILD)
    try:
        own = read_line(proc, 300.0)
        entry = entry_for(runtime, own["pid"])
        result = agent_client.record(entry, 2, max_entries=100_000)
        assert result.ok, result.error
        print(f"\nrecord: {result.to_json()}")
        assert result.path is not None and os.path.exists(result.path)
        assert stat.S_IMODE(os.stat(result.path).st_mode) == 0o600
        assert result.path.startswith(str(tmp_path / "state" / "recordings"))
        assert result.entries is not None and result.entries > 0
        assert result.truncated is False and 2.0 <= (result.seconds or 0) < 10
        top = result.sites[0]
        assert top.site.startswith(f"{script.name}:") and top.site.endswith(" in churn")
        assert top.count > 10 and top.bytes == top.count * 4 * MiB
        # recording is off again: a second one may start
        again = agent_client.record(entry, 1)
        assert again.ok, again.error
    finally:
        finish(proc, stop)
