"""The pressure policy never unloads a model reloaded less than RELOAD_GRACE_S ago
(the agent's own rule too): it says so in its "nothing eligible" reason."""

from __future__ import annotations

import pytest

from app.agent.protocol import RELOAD_GRACE_S
from app.core.policies.pressure import NOTHING_ELIGIBLE, UNLOAD, PolicyRunner, PressurePolicy
from tests.fakes.directories import EmptyDirectory
from tests.unit.core.policies.test_pressure import NOW, gpu, model, report, snap, watched


def _just_reloaded(mid: str, ago: float, **kw):
    """Idle for an hour by its agent's clock (a reload is no forward), reloaded ``ago`` s
    before its report."""
    return model(mid, idle_s=3600, reloaded_at=NOW - ago, **kw)


def test_a_model_reloaded_12_s_ago_is_not_unloaded_and_the_reason_says_why():
    r = report(10, _just_reloaded("a", 12))
    policy = watched(PressurePolicy(), r)
    [d] = policy.evaluate(snap(gpu(fraction=0.95), r))
    why = f"reloaded 12 s ago (< {RELOAD_GRACE_S:g} s)"
    assert d.kind == NOTHING_ELIGIBLE and d.actions == ()
    assert d.skipped == ((10, "a", "name-a", why),)
    assert f"name-a (10): {why}" in d.reason


def test_the_others_go_while_the_reloaded_one_stays():
    r = report(10, _just_reloaded("a", 5, gib=10), model("b", idle_s=900, gib=10))
    [d] = watched(PressurePolicy(), r).evaluate(snap(gpu(fraction=0.95), r))
    assert d.kind == UNLOAD and [a.model for a in d.actions] == ["b"]
    assert (10, "a", "name-a", f"reloaded 5 s ago (< {RELOAD_GRACE_S:g} s)") in d.skipped


@pytest.mark.parametrize("ago", [RELOAD_GRACE_S, RELOAD_GRACE_S + 1, 3600.0])
def test_once_the_grace_has_passed_it_may_go(ago):
    r = report(10, _just_reloaded("a", ago))
    [d] = watched(PressurePolicy(), r).evaluate(snap(gpu(fraction=0.95), r))
    assert d.kind == UNLOAD and [a.model for a in d.actions] == ["a"]


def test_a_reload_time_ahead_of_the_apps_clock_counts_as_just_now():
    r = report(10, _just_reloaded("a", -30))
    [d] = watched(PressurePolicy(), r).evaluate(snap(gpu(fraction=0.95), r))
    assert d.kind == NOTHING_ELIGIBLE and "reloaded 0 s ago" in d.skipped[0][3]


def test_the_runner_sends_nothing_for_a_model_just_reloaded():
    class Recording(EmptyDirectory):
        def __init__(self) -> None:
            super().__init__()
            self.unloads: list[tuple[int, str]] = []

        def unload(self, pid, model, **kw):  # type: ignore[override]
            self.unloads.append((pid, model))
            return super().unload(pid, model, **kw)

    directory = Recording()
    r = report(10, _just_reloaded("a", 30))
    runner = watched(PolicyRunner(directory, synchronous=True), r)
    [d] = runner.observe(snap(gpu(fraction=0.95), r))
    assert d.kind == NOTHING_ELIGIBLE and directory.unloads == []
