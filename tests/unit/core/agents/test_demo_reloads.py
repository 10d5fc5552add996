"""The demo's agents keep the real agent's rules: the idle timer's bounds, and no
automatic unload of a model reloaded less than RELOAD_GRACE_S ago (``reloaded_at``)."""

from __future__ import annotations

import math

import pytest

from app.agent.protocol import IDLE_UNLOAD_MAX_S, IDLE_UNLOAD_MIN_S, RELOAD_GRACE_S
from tests.unit.core.agents.test_demo import model_named, report_for, setup


@pytest.mark.parametrize("seconds", [1e-300, 5, 0, -60, math.nan, math.inf,
                                     IDLE_UNLOAD_MAX_S + 1, True])
def test_an_idle_timer_out_of_bounds_is_refused_and_changes_nothing(seconds):
    src, agents, clock, _ = setup(20.0)
    nb = report_for(agents, "ipykernel")
    answer = agents.set_idle_unload(nb.pid, seconds)
    assert answer["ok"] is False and answer["code"] == "bad_params"
    assert "idle_unload_s" in answer["error"]
    clock.now += 0.25
    src.read()
    r = report_for(agents, "ipykernel")
    assert r.idle_unload_s is None and all(m.state == "resident" for m in r.models)


@pytest.mark.parametrize("seconds", [IDLE_UNLOAD_MIN_S, IDLE_UNLOAD_MAX_S])
def test_an_idle_timer_at_the_bounds_is_taken(seconds):
    _, agents, _, _ = setup(20.0)
    nb = report_for(agents, "ipykernel")
    assert agents.set_idle_unload(nb.pid, seconds)["idle_unload_s"] == seconds


def _reloaded_vae(agents, src):
    """The notebook's VAE unloaded and reloaded by hand now; its model id and pid."""
    nb = report_for(agents, "ipykernel")
    vae = model_named(nb, "pipe.vae")
    assert agents.unload(nb.pid, vae.id).ok and agents.reload(nb.pid, vae.id).ok
    m = model_named(report_for(agents, "ipykernel"), "pipe.vae")
    assert m.state == "resident" and m.reloaded_at == pytest.approx(src.now())
    return nb.pid, vae.id


def test_a_pressure_unload_waits_out_the_grace_after_a_reload_a_manual_one_does_not():
    src, agents, clock, _ = setup(20.0)
    assert model_named(report_for(agents, "ipykernel"), "pipe.vae").reloaded_at is None
    pid, vae = _reloaded_vae(agents, src)
    clock.now += 12
    refused = agents.unload(pid, vae, reason="pressure")
    assert refused.code == "refused"
    assert refused.error == f"reloaded 12 s ago (< {RELOAD_GRACE_S:g} s)"
    clock.now += RELOAD_GRACE_S - 12
    assert agents.unload(pid, vae, reason="pressure").ok
    assert agents.reload(pid, vae).ok
    assert agents.unload(pid, vae).ok  # by hand: at once


def test_the_demos_own_idle_timer_spares_a_model_just_reloaded():
    src, agents, clock, _ = setup(20.0)
    pid, vae = _reloaded_vae(agents, src)
    assert agents.set_idle_unload(pid, IDLE_UNLOAD_MIN_S)["ok"]
    clock.now += RELOAD_GRACE_S / 2
    src.read()
    r = report_for(agents, "ipykernel")
    assert model_named(r, "pipe.vae").state == "resident"
    assert model_named(r, "pipe.unet").state == "offloaded"  # idle for hours, never reloaded
    clock.now += RELOAD_GRACE_S / 2
    src.read()
    assert model_named(report_for(agents, "ipykernel"), "pipe.vae").state == "offloaded"
    last = [e for _, e in agents.events_since(0)[0] if e.model == vae][-1]
    assert (last.action, last.reason) == ("unload", "idle")
