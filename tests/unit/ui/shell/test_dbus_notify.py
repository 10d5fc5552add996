"""DbusNotifier: desktop notifications over a real, private D-Bus session bus.

The bus round trip runs in a child process under ``dbus-run-session`` (see
dbus_scenario.py); the fake server it talks to is pure-Python jeepney, so the
signature and types checked here are what went over the wire, not what
QtDBus believes it sent.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from app.ui.shell.dbus_notify import (
    NOTIFY_SIGNATURE,
    action_list,
    body_text,
    clamp_timeout,
    clamp_urgency,
    escape_markup,
)

ROOT = Path(__file__).resolve().parents[4]
SCENARIO = Path(__file__).with_name("dbus_scenario.py")
DESKTOP_HINT = ["s", "vram-steward"]


def _run_scenario(argv: list[str], env_updates: dict[str, str],
                  timeout: float) -> tuple[dict[str, Any], float]:
    env = dict(os.environ)
    env.pop("DBUS_SESSION_BUS_ADDRESS", None)
    env.update(QT_QPA_PLATFORM="offscreen", PYTHONPATH=str(ROOT), **env_updates)
    t0 = time.monotonic()
    proc = subprocess.run(argv, check=False, cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=timeout)
    elapsed = time.monotonic() - t0
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, (
        f"scenario failed (rc={proc.returncode})\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}")
    return json.loads(lines[-1][len("RESULT "):]), elapsed


@pytest.fixture(scope="module")
def bus_run() -> dict[str, Any]:
    if shutil.which("dbus-run-session") is None:
        pytest.skip("dbus-run-session is not installed (Debian/Ubuntu package: dbus-daemon)")
    pytest.importorskip("jeepney", reason="the fake notification server needs jeepney")
    result, _ = _run_scenario(
        ["dbus-run-session", "--", sys.executable, str(SCENARIO), "session"], {}, timeout=120)
    return result


# -- over a real bus ----------------------------------------------------------

def test_available_follows_the_name_owner(bus_run: dict[str, Any]) -> None:
    assert bus_run["available_before"] is False
    assert bus_run["available_before_s"] < 1.0
    assert bus_run["notify_without_server"] is None
    assert bus_run["available_after"] is True
    assert bus_run["available_after_stop"] is False


def test_notify_goes_out_with_the_exact_signature_and_types(bus_run: dict[str, Any]) -> None:
    rec = bus_run["notify"]
    assert rec["signature"] == NOTIFY_SIGNATURE == "susssasa{sv}i"
    assert rec["accepted"] is True
    assert rec["app_name"] == "VRAM Steward"
    assert rec["replaces_id"] == 0
    assert rec["icon"] == "vram-steward"
    assert rec["summary"] == "GPU 0 is 95% full"
    assert rec["body"] == "python train.py holds 20 GiB"
    assert rec["actions"] == ["free", "Free caches"]
    assert rec["hints"] == {"urgency": ["y", 2], "desktop-entry": DESKTOP_HINT}
    assert rec["timeout"] == -1
    assert bus_run["capabilities"] == ["actions", "body"]


def test_server_id_round_trips_including_uint32_range(bus_run: dict[str, Any]) -> None:
    assert bus_run["id"] == bus_run["notify"]["id"] == 1
    rec = bus_run["replace_notify"]
    assert rec["signature"] == NOTIFY_SIGNATURE  # an empty action list is still "as"
    assert rec["replaces_id"] == 4_000_000_000
    assert bus_run["replaced_id"] == 4_000_000_000
    assert rec["actions"] == []
    assert rec["hints"] == {"urgency": ["y", 0], "desktop-entry": DESKTOP_HINT}


def test_action_reaches_the_notifier_only_for_its_own_ids(bus_run: dict[str, Any]) -> None:
    assert bus_run["action_wait_ok"] is True
    assert bus_run["actions"] == [[bus_run["id"], "free"]]


def test_close_and_closed_signal(bus_run: dict[str, Any]) -> None:
    assert bus_run["close_ok"] is True
    assert bus_run["close_event"]["id"] == bus_run["id"]
    assert bus_run["closed_wait_ok"] is True
    assert bus_run["closed"] == [[bus_run["id"], 3]]


def test_server_without_actions_gets_none_and_markup_is_escaped(bus_run: dict[str, Any]) -> None:
    assert bus_run["caps_refresh_ok"] is True
    assert bus_run["capabilities_plain"] == ["body", "body-markup"]
    rec = bus_run["plain_notify"]
    assert rec["signature"] == NOTIFY_SIGNATURE
    assert rec["actions"] == []
    assert rec["body"] == "a &lt; b &amp; c"
    assert rec["hints"] == {"urgency": ["y", 1], "desktop-entry": DESKTOP_HINT}
    assert bus_run["plain_id"] == rec["id"]


def test_fake_server_rejects_untyped_marshalling(bus_run: dict[str, Any]) -> None:
    # Plain Python values through QDBusMessage: int32 replaces_id, "av" actions.
    assert bus_run["naive_reply"] == ["ErrorMessage", "org.freedesktop.DBus.Error.InvalidArgs"]
    assert bus_run["naive_notify"]["accepted"] is False
    assert bus_run["naive_notify"]["signature"] != NOTIFY_SIGNATURE


def test_real_server_is_never_introspected(bus_run: dict[str, Any]) -> None:
    assert "Introspect" not in bus_run["server_calls"]
    assert "Notify" in bus_run["server_calls"]
    assert bus_run["plain_calls"] == ["GetCapabilities", "Notify"]


# -- without a bus ------------------------------------------------------------

def test_without_a_session_bus_nothing_is_sent_and_nothing_hangs(tmp_path: Path) -> None:
    address = f"unix:path={tmp_path / 'no-such-bus'}"
    result, elapsed = _run_scenario([sys.executable, str(SCENARIO), "no-bus"],
                                    {"DBUS_SESSION_BUS_ADDRESS": address}, timeout=60)
    assert result["available"] is False
    assert result["notify"] is None
    assert result["capabilities"] == []
    assert result["close"] is False
    assert result["construct_s"] < 2.0
    assert result["available_s"] < 1.0
    assert result["notify_s"] < 1.0
    assert elapsed < 30.0


# -- Qt-free helpers ----------------------------------------------------------

def test_escape_markup() -> None:
    assert escape_markup("a < b & c > d") == "a &lt; b &amp; c &gt; d"
    assert escape_markup("&lt;") == "&amp;lt;"


def test_body_is_escaped_only_for_markup_servers() -> None:
    assert body_text("x < y", {"body"}) == "x < y"
    assert body_text("x < y", {"body", "body-markup"}) == "x &lt; y"


def test_action_list_is_flat_and_needs_the_capability() -> None:
    pairs = [("free", "Free caches"), ("open", "Open")]
    assert action_list(pairs, {"actions"}) == ["free", "Free caches", "open", "Open"]
    assert action_list(pairs, {"body"}) == []
    assert action_list([], {"actions"}) == []


def test_clamps() -> None:
    assert [clamp_urgency(u) for u in (-3, 0, 1, 2, 9)] == [0, 0, 1, 2, 2]
    assert [clamp_timeout(t) for t in (-5, -1, 0, 5000, 2**40)] == [-1, -1, 0, 5000, 2**31 - 1]
