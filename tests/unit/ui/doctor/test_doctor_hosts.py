"""The Doctor tab and OOM reports with remote hosts: every host's diagnoses,
each card naming its host, fixes that act on that host, a disconnected host's
cards kept with their fixes off, and a remote OOM report named by its host."""

from __future__ import annotations

import dataclasses
import time

from app.core.diagnosis.types import Diagnosis, Fix
from app.core.monitor.hosts import DISCONNECTED
from app.core.units import GiB
from tests.unit.ui.doctor import samples
from tests.unit.ui.window.two_hosts import EPOCH, PID, world


def idle(gpu: str) -> Diagnosis:
    return Diagnosis("idle_process", "warning", "train.py (pid 1234) holds 10 GiB, idle",
                     ("no kernel for 20 min",),
                     (Fix("free_cache", "Free its cache: gives 2.0 GiB", 2 * GiB, pid=PID),
                      Fix("stop_process", "Stop it", 10 * GiB, pid=PID)),
                     gpu=gpu, pid=PID, command="train.py", since=EPOCH - 600)


def test_each_hosts_diagnoses_are_cards_naming_their_host(window, monkeypatch):
    snap = world(diagnoses=(idle("0@gpu1"),))
    window.on_snapshot(dataclasses.replace(snap, diagnoses=(idle("0"),)))
    cards = window.doctor.cards
    assert set(cards) == {("", "idle_process", "0", PID), ("gpu1", "idle_process", "0@gpu1", PID)}
    since = time.strftime("%H:%M", time.localtime(EPOCH - 600))
    assert cards[("gpu1", "idle_process", "0@gpu1", PID)].where.text() == \
        f"gpu1 · GPU 0 · train.py ({PID}) · since {since}"
    assert cards[("", "idle_process", "0", PID)].where.text().startswith("this machine · GPU 0")
    # A remote card's fixes act on its host.
    monkeypatch.setattr(type(window.controller.core), "available", property(lambda s: True))
    sent = []
    window.doctor.request.disconnect()
    window.doctor.request.connect(sent.append)
    remote = cards[("gpu1", "idle_process", "0@gpu1", PID)].fixes
    (free,) = remote.buttons
    free.click()
    terminate = remote.terminate_buttons[PID]
    assert terminate.isEnabled(), terminate.toolTip()  # the host's snapshot, its user
    terminate.click()
    assert [(type(r).__name__, r.host) for r in sent] == [("FreeCache", "gpu1"),
                                                          ("Terminate", "gpu1")]


def test_a_disconnected_hosts_cards_stay_with_their_fixes_off(window, monkeypatch):
    monkeypatch.setattr(type(window.controller.core), "available", property(lambda s: True))
    # gpu2's last snapshot had a finding: it stays, saying the host is disconnected.
    snap = world(gpu2=DISCONNECTED, since=EPOCH)
    gpu2 = snap.hosts[1]
    gpu2 = dataclasses.replace(gpu2, snapshot=dataclasses.replace(gpu2.snapshot,
                                                                  diagnoses=(idle("0@gpu2"),)))
    window.on_snapshot(dataclasses.replace(snap, hosts=(snap.hosts[0], gpu2)))
    card = window.doctor.cards[("gpu2", "idle_process", "0@gpu2", PID)]
    clock = time.strftime("%H:%M:%S", time.localtime(EPOCH))
    assert card.where.text().startswith(f"gpu2 (disconnected since {clock}) · GPU 0")
    assert not any(b.isEnabled() for b in card.fixes.buttons)
    terminate = card.fixes.terminate_buttons[PID]
    assert not terminate.isEnabled()
    assert "gpu2 is disconnected since" in terminate.toolTip()


def test_a_remote_oom_report_names_its_host(window, monkeypatch):
    report = samples.oom_report()
    window.on_snapshot(world(fresh=True, oom_reports=(report,)))
    row = window.activity.rows()[0]
    assert row[1] == "gpu1: train.py" and row[3] == "OOM on GPU 0"
    assert row[-1].startswith("gpu1: OOM in train.py")
    assert window.doctor.report_hosts == {report.id: "gpu1"}
    assert window.doctor.past_list.topLevelItem(0).text(1) == "gpu1: train.py"
    dialog = window.open_oom_report(report.id)
    assert dialog is not None and dialog.windowTitle() == "Out of memory on gpu1 — train.py"
    assert dialog.title.text().startswith("gpu1: train.py ran out of GPU memory")
    sent = []
    monkeypatch.setattr(type(window.controller.core), "available", property(lambda s: True))
    dialog.request.disconnect()
    dialog.request.connect(sent.append)
    dialog.fixes.set_can_act(True)
    for button in dialog.fixes.buttons:
        button.click()
    assert sent and {r.host for r in sent} == {"gpu1"}
    dialog.close()
    # The next view of gpu1 did not bring it again: one row, one report.
    window.on_snapshot(world(t=1.0, oom_reports=(report,)))
    assert len([r for r in window.activity.rows() if r[3].startswith("OOM")]) == 1
