"""What the demo's simulated agents say about memory over time: the OOM their
leaking server hits, the training job's optimizer steps, and a recording of
allocations by call site.  Figures follow the demo's NVML figures (see
:mod:`app.core.agents.demo`), so a post-mortem of the demo's OOM adds up.
"""

from __future__ import annotations

import math

from app.core.agents.oom import OomCapture, SegmentSummary
from app.core.agents.recording import AllocationSite, RecordResult
from app.core.agents.steps import StepMemory, StepSample
from app.core.monitor.demo_source import DemoProcess, MiB

#: Seconds per optimizer step of the demo's training job (ResNet-50, batch 256).
STEP_S = 0.35
#: Step samples a report carries (as the agent: the last few, one a second at most).
STEP_SAMPLES = 16
#: The allocator's block rounding inside a segment: the largest free block.
LARGEST_FREE_BLOCK = 20 * MiB

#: Where each demo script allocates while recording: (site, bytes/s, allocations/s,
#: share still alive when recording stops).  The embedding server's line 57 is its
#: leak: it keeps every batch's output in a list.
SITES = {
    "train.py": (
        ("train.py:88 in train_step: out = model(images)", 9.5e9, 420.0, 0.0),
        ("train.py:90 in train_step: loss.backward()", 6.1e9, 310.0, 0.0),
        ("train.py:92 in train_step: optimizer.step()", 0.3e9, 160.0, 0.0),
    ),
    "serve_embeddings.py": (
        ("serve_embeddings.py:51 in embed: hidden = model(**batch)", 1.9e9, 95.0, 0.0),
        ("serve_embeddings.py:57 in embed: self.recent.append(out)", 14 * MiB, 0.8, 1.0),
        ("serve_embeddings.py:44 in tokenize: batch.to(device)", 0.2e9, 40.0, 0.0),
    ),
    "eval.py": (
        ("eval.py:31 in evaluate: logits = model(**batch).logits", 4.2e9, 210.0, 0.0),
        ("eval.py:33 in evaluate: preds.append(logits.argmax(-1))", 2 * MiB, 12.0, 1.0),
    ),
    "ipykernel": (),
}


def oom_capture(proc: DemoProcess, gpu: int, uuid: str, when: float, free: int,
                memory_total: int, allocated: int, reserved: int) -> OomCapture:
    """The capture of ``proc``'s scripted OOM: its request did not fit in ``free``."""
    cache = max(0, reserved - allocated)
    segments = max(1, reserved // (20 * MiB))
    return OomCapture(
        seq=1, time=when, device=gpu, uuid=uuid, request=int(proc.oom_request),
        limit=memory_total, free=free,
        stats={"allocated": allocated, "reserved": reserved, "active": allocated,
               "inactive_split": min(cache, 37 * MiB), "peak_allocated": allocated,
               "peak_reserved": reserved, "num_alloc_retries": 1, "num_ooms": 1},
        segments=SegmentSummary(count=segments, reserved=reserved, allocated=allocated,
                                free=cache, largest_free_block=min(cache, LARGEST_FREE_BLOCK),
                                expandable=False),
        step=None, thread="MainThread", capture_s=0.0031)


def step_memory(local: float, now: float, device: int, allocated: int) -> StepMemory:
    """The training job's steps: one sample a second, flat ``allocated`` (no leak)."""
    count = int(max(0.0, local) / STEP_S)
    samples = []
    last_second = math.floor(local)
    for s in range(max(1, last_second - STEP_SAMPLES + 1), last_second + 1):
        samples.append(StepSample(int(s / STEP_S), now - (local - s), device, allocated))
    return StepMemory(count, tuple(samples))


def record_result(pid: int, command: str, seconds: float, max_entries: int | None,
                  device: int) -> RecordResult:
    """A plausible recording of ``seconds`` of the script's allocations."""
    found: tuple[tuple[str, float, float, float], ...] = ()
    for match, sites in SITES.items():
        if match in command:
            found = sites
            break
    entries = int(sum(2 * rate * seconds for _, _, rate, _ in found))
    limit = max_entries if max_entries is not None else 100_000
    result = tuple(AllocationSite(site, int(size * seconds), max(1, int(rate * seconds)),
                                  int(size * seconds * live))
                   for site, size, rate, live in found)
    return RecordResult(pid, True, path=None, entries=min(entries, limit), seconds=seconds,
                        device=device, truncated=entries > limit,
                        sites=tuple(sorted(result, key=lambda s: -s.bytes)))
