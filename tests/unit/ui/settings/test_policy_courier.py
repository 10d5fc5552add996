"""A policy change runs on a worker thread; its answer, or the server's refusal,
comes back on the GUI thread, and a receiver deleted meanwhile is not called."""

from __future__ import annotations

import threading

from PySide6.QtCore import QCoreApplication, QEvent, QObject

from app.core.remote.errors import RemoteError
from app.core.remote.policy import RemotePolicy
from app.ui.settings.policy_courier import PolicyCourier

POLICY = RemotePolicy(True, 0.8, 0.79, 300.0, 30.0, may_change=True)


def test_the_answer_or_the_refusal_comes_back_on_the_gui_thread(qtbot):
    asked = []

    def set_policy(key, **changes):
        asked.append((key, changes, threading.current_thread() is threading.main_thread()))
        if "enabled" in changes:
            raise RemoteError("only root changes its policy", "not_allowed")
        return POLICY

    courier = PolicyCourier(set_policy)
    got = []
    courier.answered.connect(
        lambda *a: got.append((*a, threading.current_thread() is threading.main_thread())))
    courier.send("gpu1", {"threshold": 0.8})
    qtbot.waitUntil(lambda: len(got) == 1, timeout=5000)
    courier.send("gpu1", {"enabled": False})
    qtbot.waitUntil(lambda: len(got) == 2, timeout=5000)
    assert asked == [("gpu1", {"threshold": 0.8}, False), ("gpu1", {"enabled": False}, False)]
    assert got == [("gpu1", POLICY, None, True),
                   ("gpu1", None, "only root changes its policy", True)]


class Receiver(QObject):
    def __init__(self, calls):
        super().__init__()
        self.calls = calls

    def take(self, *answer):
        self.calls.append(answer)


def test_a_receiver_deleted_while_a_change_is_in_flight_is_not_called(qtbot):
    gate = threading.Event()

    def set_policy(key, **changes):
        gate.wait(5)
        return POLICY

    courier = PolicyCourier(set_policy)
    calls = []
    receiver = Receiver(calls)
    courier.answered.connect(receiver.take)
    courier.send("gpu1", {"threshold": 0.8})
    receiver.deleteLater()
    QCoreApplication.sendPostedEvents(None, QEvent.Type.DeferredDelete)
    gate.set()
    courier.threads[-1].join(5)
    qtbot.wait(20)
    assert calls == []
