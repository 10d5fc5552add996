"""The idle timer's bounds where a value enters the agent: ``set_policy`` and
``VRAM_STEWARD_IDLE_UNLOAD`` (10 s to 30 days; NaN, infinities and booleans refused)."""

from __future__ import annotations

import math

import pytest

from app.agent import idle_policy, protocol, requests
from app.agent.errors import BadParams

LOW, HIGH = protocol.IDLE_UNLOAD_MIN_S, protocol.IDLE_UNLOAD_MAX_S
REFUSED = [1e-300, 0, -1, -math.inf, LOW - 0.01, HIGH + 1, math.nan, math.inf, 10 ** 400,
           True, False, "600", [600]]


@pytest.mark.parametrize("value", [LOW, int(LOW), 600, 86400.5, HIGH, int(HIGH)])
def test_set_policy_takes_a_timer_within_the_bounds(value):
    assert requests.idle_unload_s({"idle_unload_s": value}) == float(value)
    assert requests.idle_unload_s({"idle_unload_s": None}) is None


@pytest.mark.parametrize("value", REFUSED)
def test_set_policy_refuses_a_timer_out_of_the_bounds_and_names_them(value):
    with pytest.raises(BadParams) as err:
        requests.idle_unload_s({"idle_unload_s": value})
    assert "idle_unload_s" in str(err.value)
    if not isinstance(value, (bool, str, list)):
        assert f"{LOW:g} s" in str(err.value) and f"{HIGH / 86400:g} days" in str(err.value)


def _agent_log(state) -> list[str]:
    path = state / "agent.log"
    return path.read_text().splitlines() if path.exists() else []


@pytest.fixture
def state(tmp_path, monkeypatch):
    folder = tmp_path / "state"
    folder.mkdir(mode=0o700)
    monkeypatch.setenv("VRAM_STEWARD_STATE_DIR", str(folder))
    return folder


@pytest.mark.parametrize("text", ["1e-300", "5", "0", "-60", "nan", "inf", "-inf",
                                  str(HIGH + 1), "1e999", "soon", "10 min"])
def test_the_variable_out_of_bounds_is_ignored_with_one_log_line(state, monkeypatch, text):
    monkeypatch.setenv("VRAM_STEWARD_IDLE_UNLOAD", text)
    assert idle_policy.ttl_from_env() is None
    lines = _agent_log(state)
    assert len(lines) == 1 and f"ignoring VRAM_STEWARD_IDLE_UNLOAD={text!r}" in lines[0]


@pytest.mark.parametrize("text", [f"{LOW:g}", "600", f"{HIGH:g}"])
def test_the_variable_within_the_bounds_is_the_timer(state, monkeypatch, text):
    monkeypatch.setenv("VRAM_STEWARD_IDLE_UNLOAD", text)
    assert idle_policy.ttl_from_env() == float(text)
    assert _agent_log(state) == []
