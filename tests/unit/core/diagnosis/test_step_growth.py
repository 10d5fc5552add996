"""Step growth: allocated after optimizer steps rising step after step is a leak."""

from __future__ import annotations

from app.core.agents.steps import StepMemory, StepSample
from app.core.diagnosis.step_growth import step_growth

MiB = 1024**2


def memory(values: list[int], device: int = 0) -> StepMemory:
    return StepMemory(len(values) * 3, tuple(
        StepSample(i * 3, 1000.0 + i, device, v) for i, v in enumerate(values)))


def test_rising_after_every_step_is_a_step_leak():
    (g,) = step_growth(memory([4000 * MiB + i * 12 * MiB for i in range(12)]))
    assert g.rising
    assert g.bytes_per_step == 4 * MiB  # 12 MiB every 3 steps
    assert g.samples == 12 and g.first_step == 0 and g.last_step == 33


def test_flat_is_no_leak():
    (g,) = step_growth(memory([4000 * MiB] * 12))
    assert not g.rising


def test_a_one_off_jump_is_no_leak():
    # The optimizer's state is created at the first step, then nothing grows.
    (g,) = step_growth(memory([3000 * MiB] + [4000 * MiB] * 11))
    assert not g.rising


def test_too_few_samples_say_nothing_and_devices_are_apart():
    assert step_growth(memory([i * 50 * MiB for i in range(5)])) == []
    assert step_growth(None) == []
    mixed = StepMemory(40, memory([i * 50 * MiB for i in range(10)], 0).samples
                       + memory([1000 * MiB] * 10, 1).samples)
    by_device = {g.device: g.rising for g in step_growth(mixed)}
    assert by_device == {0: True, 1: False}
