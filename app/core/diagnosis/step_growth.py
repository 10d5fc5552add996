"""Live tensors after each optimizer step: the strong leak signal.

Right after ``optimizer.step()`` only weights, gradients, optimizer state and
whatever the user keeps are alive, so a training loop's ``allocated`` there
is flat.  Rising step after step means something of every step survives it:
a loss or an output accumulated with its graph, tensors appended to a list,
``retain_graph=True``.  A one-off jump (the optimizer's state created at the
first step, a bigger batch once) is not a leak.
"""

from __future__ import annotations

from dataclasses import dataclass

from app.core.agents.steps import StepMemory, StepSample

MiB = 1024**2


@dataclass(frozen=True, slots=True)
class StepConfig:
    min_samples: int = 8  # samples (one per second at most) before anything is said
    max_samples: int = 32  # the last this many are judged
    min_rising: float = 0.75  # share of sample-to-sample steps that rise
    max_jump_share: float = 0.5  # no single step may account for more of the growth
    floor_bytes: int = 16 * MiB  # growth over the samples at least this ...
    floor_fraction: float = 0.01  # ... and this share of the first figure


@dataclass(frozen=True, slots=True)
class StepGrowth:
    device: int  # CUDA ordinal inside the process
    samples: int
    first_step: int
    last_step: int
    first_bytes: int
    last_bytes: int
    bytes_per_step: float
    since: float  # epoch seconds of the first sample judged
    rising: bool


def step_growth(memory: StepMemory | None, config: StepConfig | None = None
                ) -> list[StepGrowth]:
    """One verdict per device with enough samples."""
    if memory is None:
        return []
    config = config or StepConfig()
    by_device: dict[int, list[StepSample]] = {}
    for s in memory.samples:
        by_device.setdefault(s.device, []).append(s)
    out = []
    for device, samples in sorted(by_device.items()):
        samples = sorted(samples, key=lambda s: s.step)[-config.max_samples:]
        if len(samples) < config.min_samples:
            continue
        values = [s.allocated for s in samples]
        diffs = [b - a for a, b in zip(values, values[1:])]
        growth = values[-1] - values[0]
        steps = samples[-1].step - samples[0].step
        rising_share = sum(d > 0 for d in diffs) / len(diffs)
        rising = (growth >= max(config.floor_bytes, config.floor_fraction * values[0])
                  and rising_share >= config.min_rising
                  and max(diffs) <= config.max_jump_share * growth and steps > 0)
        out.append(StepGrowth(device, len(samples), samples[0].step, samples[-1].step,
                              values[0], values[-1], growth / steps if steps > 0 else 0.0,
                              samples[0].time, rising))
    return out


#: The advice a rising step figure gets: the usual causes, most common first.
STEP_LEAK_CAUSES = (
    "a loss or output accumulated with its graph (`total_loss += loss`: use `loss.item()`)",
    "tensors appended to a list without `.detach().cpu()` (outputs, logits, embeddings)",
    "`backward(retain_graph=True)` keeping every step's graph alive",
)
