"""The server's pressure policy as verbs: read with ``policy``, changed with
``set_policy`` by the user whose models it unloads (root only for the system
service), held to the window's bounds, logged."""

from __future__ import annotations

import logging

import pytest

from app.core.serve.access import CONTROL, READ, Caller
from app.core.serve.api import ServerApi
from app.core.serve.params import ApiError
from app.core.serve.policy_verbs import NO_POLICY, reads_every_user

USER, UID = "alice", 1000  # the user the server runs as (not root, whoever runs the tests)
OWNER = Caller(USER, UID, frozenset({READ, CONTROL}), "http")
READER = Caller("dashboards", None, frozenset({READ}), "http")
ROOT = Caller("root", 0, frozenset({READ, CONTROL}), "ssh")
OTHER = Caller("mallory", UID + 1, frozenset({READ, CONTROL}), "http")


def server(engine, every_user=None):
    api = ServerApi(engine, every_user=every_user)
    api.server_uid = UID
    return api


def policy(api, caller=READER):
    return api.call("policy", {}, caller)["result"]


def test_policy_reads_the_engines_runner_and_says_who_may_change_it(demo_engine):
    cfg = demo_engine.collector.policy.config
    seen = policy(server(demo_engine))
    assert (seen["enabled"], seen["threshold"], seen["rearm"], seen["min_idle_s"],
            seen["min_interval_s"]) == (cfg.enabled, cfg.threshold, cfg.rearm, cfg.min_idle_s,
                                        cfg.min_interval_s)
    assert seen["available"] is True
    assert seen["may_change"] is False and "control scope" in seen["why_not"]
    mine = policy(server(demo_engine), OWNER)
    assert mine["may_change"] is True and mine["why_not"] is None


def test_set_policy_changes_the_runner_and_is_logged(demo_engine, caplog):
    caplog.set_level(logging.INFO, logger="app.serve.audit")
    api = server(demo_engine)
    now = api.call("set_policy", {"enabled": False, "threshold": 0.8, "min_idle_s": 600},
                   OWNER)["result"]
    cfg = demo_engine.collector.policy.config
    assert (cfg.enabled, cfg.threshold, cfg.min_idle_s) == (False, 0.8, 600.0)
    assert cfg.rearm == pytest.approx(0.79)  # kept below the lowered threshold
    assert (now["enabled"], now["threshold"], now["min_idle_s"]) == (False, 0.8, 600.0)
    assert policy(api) == {**now, "may_change": False, "why_not": policy(api)["why_not"]}
    (line,) = [r.getMessage() for r in caplog.records if r.name == "app.serve.audit"]
    assert f"{USER} (uid {UID}) via http: set_policy" in line and "threshold=0.8" in line
    assert "was enabled=True" in line


def test_set_policy_needs_the_control_scope(demo_engine):
    before = demo_engine.collector.policy.config
    with pytest.raises(ApiError, match="no control scope") as info:
        server(demo_engine).call("set_policy", {"enabled": False}, READER)
    assert info.value.status == 403
    assert demo_engine.collector.policy.config == before


def test_the_system_service_takes_a_change_from_root_only(demo_engine, caplog):
    caplog.set_level(logging.INFO, logger="app.serve.audit")
    api = server(demo_engine, every_user=True)
    before = demo_engine.collector.policy.config
    seen = policy(api, OWNER)
    assert seen["may_change"] is False and "only root" in seen["why_not"]
    with pytest.raises(ApiError, match="every user of the host") as info:
        api.call("set_policy", {"enabled": False}, OWNER)
    assert info.value.status == 403 and info.value.code == "not_allowed"
    assert demo_engine.collector.policy.config == before
    assert any("set_policy" in r.getMessage() and "refused" in r.getMessage()
               for r in caplog.records if r.name == "app.serve.audit")
    assert policy(api, ROOT)["may_change"] is True
    assert api.call("set_policy", {"enabled": False}, ROOT)["result"]["enabled"] is False
    assert demo_engine.collector.policy.config.enabled is False


def test_another_users_token_does_not_change_this_users_policy(demo_engine):
    before = demo_engine.collector.policy.config
    with pytest.raises(ApiError, match="another user's models") as info:
        server(demo_engine).call("set_policy", {"enabled": False}, OTHER)
    assert info.value.code == "not_allowed"
    assert demo_engine.collector.policy.config == before


@pytest.mark.parametrize("params, error", [
    ({"threshold": 1.5}, "'threshold' must be between 0.1 and 0.99"),
    ({"threshold": 0.05}, "'threshold' must be between"),
    ({"rearm": 0.99}, "'rearm' must be between 0.05 and 0.98"),
    ({"threshold": 0.8, "rearm": 0.85}, "must be at least 0.01 below 'threshold'"),
    ({"min_idle_s": -1}, "'min_idle_s' must be between 0 and 604800"),
    ({"min_interval_s": 1e9}, "'min_interval_s' must be between"),
    ({"enabled": "yes"}, "'enabled' must be true or false"),
    ({"threshold": "90"}, "'threshold' must be a number"),
    ({"threshhold": 0.8}, "unknown parameter 'threshhold'"),
    ({}, "nothing to change"),
])
def test_bad_values_are_refused_and_nothing_changes(demo_engine, params, error):
    before = demo_engine.collector.policy.config
    with pytest.raises(ApiError, match=error) as info:
        server(demo_engine).call("set_policy", params, OWNER)
    assert info.value.code == "bad_request"
    assert demo_engine.collector.policy.config == before


def test_a_server_without_a_policy_says_so(demo_engine, monkeypatch):
    monkeypatch.setattr(demo_engine.collector, "policy", None)
    api = server(demo_engine)
    seen = policy(api, OWNER)
    assert seen["available"] is False and seen["may_change"] is False
    assert seen["why_not"] == NO_POLICY
    with pytest.raises(ApiError, match="runs no pressure policy") as info:
        api.call("set_policy", {"enabled": True}, OWNER)
    assert info.value.code == "no_policy"


def test_the_system_service_is_told_by_its_directory():
    class Hub:
        all_users = True

    class Wrapped:
        agents = Hub()

    assert reads_every_user(Wrapped()) and reads_every_user(Hub())
    assert not reads_every_user(object()) and not reads_every_user(None)


def test_an_ssh_session_runs_no_policy_and_takes_no_change(demo_engine):
    from app.core.serve.policy_verbs import SSH_SESSION

    runner = demo_engine.collector.policy
    runner.set_config(type(runner.config)(enabled=False))  # serve --stdio's default
    api = ServerApi(demo_engine, session=True)
    api.server_uid = UID
    seen = policy(api, OWNER)
    assert seen["available"] is False and seen["may_change"] is False
    assert seen["why_not"] == SSH_SESSION
    with pytest.raises(ApiError, match="SSH session runs no pressure policy") as info:
        api.call("set_policy", {"enabled": True}, ROOT)
    assert info.value.code == "session" and not runner.config.enabled
