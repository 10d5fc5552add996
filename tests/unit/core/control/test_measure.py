"""An action's figures, measured once and said one way: what moved, what the
allocator released (and how much of it the model's weights account for), what
NVML shows, and why NVML may differ."""

from __future__ import annotations

from app.core.agents.types import ModelEvent
from app.core.control.measure import (
    ActionFigures,
    model_action_text,
    nvml_text,
    released_text,
)
from app.core.units import GiB, MiB

TEXT_ENCODER = 235 * MiB
CACHE = int(2.1 * GiB)


def unload_event(moved=TEXT_ENCODER, released=TEXT_ENCODER + CACHE, seconds=0.04):
    return ModelEvent(seq=1, time=0.0, model="m2", name="pipe.text_encoder", action="unload",
                      state="offloaded", target="cpu", bytes_moved=moved,
                      bytes_released=released, seconds=seconds, reason="pressure")


def test_a_release_larger_than_the_model_is_not_credited_to_it():
    f = ActionFigures.of_event(unload_event())
    assert f.moved == TEXT_ENCODER and f.released == TEXT_ENCODER + CACHE
    assert f.own == TEXT_ENCODER  # the model's share: at most what it moved
    assert f.cache_before == CACHE  # the rest was cache the process held before
    assert released_text(f) == "allocator released 2.3 GiB (2.1 GiB of it cache held before)"
    assert model_action_text("unload", "pipe.text_encoder", f, "cpu", 0.04) == (
        "unloaded pipe.text_encoder to CPU: moved 235 MiB, allocator released 2.3 GiB "
        "(2.1 GiB of it cache held before), 40 ms")


def test_a_release_no_larger_than_the_move_is_the_models_own():
    f = ActionFigures.of_event(unload_event(moved=GiB, released=GiB - 3 * MiB))
    assert f.own == GiB - 3 * MiB and f.cache_before == 0
    assert released_text(f) == "allocator released 1021 MiB"
    unknown = ActionFigures(moved=GiB)
    assert unknown.own is None and released_text(unknown) == "allocator release unknown"


def test_nvml_is_measuring_then_explains_a_difference_from_the_allocator():
    agent = ActionFigures.of_event(unload_event(moved=int(1.6 * GiB), released=int(3.7 * GiB)))
    assert nvml_text(agent) == ""  # nobody measures it (an agent's own unload)
    measuring = ActionFigures(agent.moved, agent.released, measuring=True)
    assert nvml_text(measuring) == "measuring with NVML…"
    same = ActionFigures(agent.moved, agent.released, nvml=int(3.7 * GiB) - 2 * MiB,
                         measured=True)
    assert nvml_text(same) == "NVML shows 3.7 GiB released"
    # The snapshot NVML was read from lists 2.1 GiB of cache again: said, with the gap.
    regrown = ActionFigures(agent.moved, agent.released, nvml=int(1.6 * GiB),
                            cache_after=int(2.1 * GiB), measured=True)
    assert nvml_text(regrown) == (
        "NVML shows 1.6 GiB released (2.1 GiB less than the allocator's: the process held "
        "more again by then (2.1 GiB of cache))")
    more = ActionFigures(agent.moved, agent.released, nvml=4 * GiB, measured=True)
    assert "more than the allocator's: other memory left the process" in nvml_text(more)
    assert nvml_text(ActionFigures(measured=True)) == "NVML release unknown"
    assert nvml_text(ActionFigures(released=GiB, nvml=0, measured=True)).startswith(
        "NVML shows nothing released")


def test_a_reload_says_what_moved_back_and_what_nvml_shows_more():
    ev = ModelEvent(seq=2, time=0.0, model="m1", name="pipe.unet", action="reload",
                    state="resident", target="cpu", bytes_moved=int(1.6 * GiB),
                    bytes_released=None, seconds=0.2, reason="manual")
    f = ActionFigures.of_event(ev)
    assert f.released is None
    assert model_action_text("reload", "pipe.unet", f, seconds=0.2) == (
        "reloaded pipe.unet: moved 1.6 GiB, 0.2 s")
    measured = ActionFigures(f.moved, None, nvml=-int(1.6 * GiB), measured=True)
    assert model_action_text("reload", "pipe.unet", measured, seconds=0.2) == (
        "reloaded pipe.unet: moved 1.6 GiB, 0.2 s, NVML shows 1.6 GiB more in use")


def test_a_batch_sums_what_is_known():
    total = ActionFigures.total([ActionFigures.of_event(unload_event()),
                                 ActionFigures.of_event(unload_event(moved=int(1.6 * GiB),
                                                                     released=int(1.6 * GiB))),
                                 ActionFigures()])
    assert total.moved == TEXT_ENCODER + int(1.6 * GiB)
    assert total.released == TEXT_ENCODER + CACHE + int(1.6 * GiB)
    assert total.cache_before == CACHE
    assert ActionFigures.total([]) == ActionFigures()
