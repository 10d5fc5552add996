"""A model's moves take it from its own calls: a storm of unload requests gets
``busy`` once the model was moved for its share of the last seconds; an
automatic unload never takes a model reloaded within the grace; requests for
one model never interleave."""

from __future__ import annotations

import threading
import time

import pytest
import torch

from app.agent import churn, protocol, storage
from app.agent.errors import ActionError

from .test_manager import Net, env, frozen  # noqa: F401 (fixture)


def test_move_time_admits_while_under_the_share_of_the_window():
    moved = churn.MoveTime()
    budget = churn.SHARE * churn.WINDOW_S
    assert moved.wait_s(100.0) == 0.0
    moved.add(100.0, budget * 0.6)
    assert moved.wait_s(100.0) == 0.0
    moved.add(101.0, budget * 0.6)
    wait = moved.wait_s(101.0)
    assert wait == pytest.approx(100.0 + churn.WINDOW_S - 101.0)  # when the first falls out
    assert moved.wait_s(100.0 + churn.WINDOW_S + 0.01) == 0.0
    assert moved.used(100.0 + churn.WINDOW_S + 0.01) == pytest.approx(budget * 0.6)


def test_a_long_move_is_admitted_when_the_model_was_not_moved_lately():
    moved = churn.MoveTime()
    assert moved.wait_s(0.0) == 0.0
    moved.add(5.0, 5.0)  # one unload of 5 s: far over the share, but alone
    assert moved.wait_s(5.0) > 0


def test_a_storm_of_unloads_gets_busy_with_when_to_try_again(env, monkeypatch):
    monkeypatch.setattr(churn, "WINDOW_S", 2.0)
    model = frozen(Net())
    [mid] = env.track(model)
    x = torch.randn(2, 16)
    ref = model(x)
    outcomes = []
    for _ in range(30):
        try:
            env.manager.handle_unload({"model": mid, "to": "disk"})
            outcomes.append("unloaded")
            model(x)  # the host's call brings it back
        except ActionError as exc:
            outcomes.append(exc.code)
            if exc.code == protocol.BUSY:
                assert "being moved for" in str(exc) and "can start in" in str(exc)
                break
    assert outcomes[0] == "unloaded" and outcomes[-1] == protocol.BUSY
    moved = env.manager.moved.of(env.tracker.guard(model))
    assert moved.used(time.monotonic()) > churn.SHARE * churn.WINDOW_S
    time.sleep(churn.WINDOW_S + 0.05)
    assert env.manager.handle_unload({"model": mid, "to": "disk"})["ok"]
    assert torch.equal(model(x), ref)


def test_an_automatic_unload_waits_a_minute_after_a_reload(env):
    model = frozen(Net())
    [mid] = env.track(model)
    x = torch.randn(2, 16)
    model(x)
    g = env.tracker.guard(model)
    assert g.reloaded_at is None
    env.manager.handle_unload({"model": mid, "to": "disk"})
    model(x)  # reloaded for a call
    assert g.reloaded_at is not None and time.time() - g.reloaded_at < 5
    with pytest.raises(ActionError, match=r"reloaded \d+ s ago: automatic unloads wait 60 s"):
        env.manager.handle_unload({"model": mid, "to": "disk", "reason": "pressure"})
    info = {}
    env.manager.annotate(model, info, env.tracker.figures(model))
    assert info["reloaded_at"] == g.reloaded_at
    assert info["auto_unload_blocker"].startswith("reloaded ")
    assert env.manager.handle_unload({"model": mid, "to": "disk"})["ok"]  # a person may
    model(x)
    g.reloaded_mono -= churn.RELOAD_GRACE_S  # a minute later
    assert env.manager.handle_unload({"model": mid, "to": "disk", "reason": "pressure"})["ok"]


def test_a_reload_request_waits_for_the_unload_of_the_same_model(env, monkeypatch):
    """(A reload request meets the model unloading: it waits for the unload's
    end, then brings it back; the events keep that order.)"""
    model = frozen(Net())
    [mid] = env.track(model)
    x = torch.randn(2, 16)
    ref = model(x)
    real = storage.devices.copy_bytes
    copying, go_on = threading.Event(), threading.Event()

    def slow(dst, src, nb):
        copying.set()
        go_on.wait(5)
        real(dst, src, nb)

    monkeypatch.setattr(storage.devices, "copy_bytes", slow)
    unloaded: list = []
    u = threading.Thread(target=lambda: unloaded.append(
        env.manager.handle_unload({"model": mid, "to": "disk"})))
    u.start()
    assert copying.wait(5)
    reloaded: list = []
    r = threading.Thread(target=lambda: reloaded.append(env.manager.handle_reload({"model": mid})))
    r.start()
    time.sleep(0.2)
    assert reloaded == []  # waits: the unload holds the model's requests
    go_on.set()
    u.join(10)
    r.join(10)
    assert unloaded[0]["ok"] and reloaded[0]["ok"]
    assert [e["action"] for e in env.manager.recent_events()] == ["unload", "reload"]
    assert env.tracker.guard(model).state == "resident"
    assert torch.equal(model(x), ref)
