"""An OOM report: its Activity row, its notification with "Open report", and the
dialog with the report's own figures."""

from __future__ import annotations

import json

from PySide6.QtGui import QGuiApplication

from app.core.control.requests import FreeCache, Unload
from app.core.policies.alerts import Alert
from app.ui.doctor.oom_dialog import OomDialog
from app.ui.shell.notifier import OPEN_REPORT_ACTION, Channel, PlatformAnswers
from tests.unit.ui.doctor.samples import feed, later, oom_report, snapshot

NO_TRAY_GNOME = PlatformAnswers(tray=False, dbus=True, linux=True)
NOTHING = PlatformAnswers(tray=False, dbus=False, linux=True)


def test_a_new_report_makes_an_activity_row_that_opens_it(window):
    report = oom_report()
    window.on_snapshot(snapshot(oom_reports=[report]))
    rows = window.activity.rows()
    assert len(rows) == 1
    row = rows[0]
    assert row[1] == "train.py (20417)" and row[3] == "OOM on GPU 0"
    assert row[4] == "other processes"
    assert row[7].startswith("OOM in train.py on GPU 0: asked for 2.0 GiB; other processes "
                             "held the memory")
    # It arrives once: the next snapshot carries no new report, no new row.
    window.on_snapshot(later(snapshot()))
    assert len(window.activity.rows()) == 1
    item = window.activity.tree.topLevelItem(0)
    window.activity.tree.itemDoubleClicked.emit(item, 0)
    (dialog,) = window.findChildren(OomDialog)
    assert dialog.report is report
    # The live report is listed with the past ones too.
    assert window.doctor.past_list.topLevelItemCount() == 1


def test_the_dialog_shows_the_reports_figures(qtbot):
    report = oom_report()
    dialog = OomDialog(report)
    qtbot.addWidget(dialog)
    assert dialog.title.text() == "train.py ran out of GPU memory asking for 2.0 GiB"
    # One sentence a line, as a Doctor card lists its evidence.
    assert dialog.explanation.text().split("\n") == [
        "·  train.py asked for 2.0 GiB with 0.8 GiB free on GPU 0.",
        "·  serve_embeddings.py held 6.0 GiB, 4.5 GiB of it an idle model."]
    figs = {k: v.text() for k, v in dialog.figure_labels.items()}
    assert figs["Asked for"] == "2.0 GiB"
    assert figs["Free on the GPU"] == "819 MiB"
    assert figs["Cached in the process"] == "1.0 GiB"
    assert figs["Largest free block"] == "512 MiB"
    assert figs["GPU used / total"] == "23.2 GiB / 24.0 GiB"
    rows = dialog.holder_rows()
    assert [r[0] for r in rows] == ["train.py (this one)", "serve_embeddings.py", "notebook.py"]
    assert rows[0][2:6] == ["14.0 GiB", "12.0 GiB", "1.0 GiB", "yes"]
    assert rows[1][6] == "clip (4.5 GiB, idle 25 min 00 s)"
    assert rows[2][3:6] == ["n/a", "n/a", "no"]  # no agent: unknown, never blank or 0
    # The bar: one segment per holder, then what no listed process held.
    assert [b for _, b, _ in dialog.bar.segments] == [h.gpu_memory for h in report.holders] + [
        report.unattributed]
    assert dialog.bar.request == report.request
    # Fixes ranked; the app's own are buttons that send requests.
    sent = []
    dialog.request.connect(sent.append)
    assert [b.text() for b in dialog.fixes.buttons] == ["Unload clip", "Free cache"]
    for b in dialog.fixes.buttons:
        b.click()
    assert sent == [Unload(23890, "m1", name="clip"), FreeCache((23890,))]
    assert len(dialog.fixes.copy_buttons) == 1
    text = dialog.copy_json()
    assert json.loads(QGuiApplication.clipboard().text()) == json.loads(text)
    assert json.loads(text)["id"] == report.id and dialog.copied.text() == "Copied."


def test_a_report_raises_a_notification_that_opens_it(shell):
    shell.start(answers=NO_TRAY_GNOME)
    feed(shell, snapshot())
    report = oom_report()
    feed(shell, later(snapshot(oom_reports=[report])))
    summary, body, actions = shell.dbus.calls[-1]
    assert summary == report.title
    assert body.startswith("OOM in train.py on GPU 0: asked for 2.0 GiB")
    assert "Best fix: Unload idle model clip" in body
    assert actions[0] == (OPEN_REPORT_ACTION, "Open report")
    # One Activity row for it (the report's), not a second one for the alert.
    assert [r[3] for r in shell.window.activity.rows()] == ["OOM on GPU 0"]
    nid = len(shell.dbus.calls)
    shell.dbus.action_invoked.emit(nid, OPEN_REPORT_ACTION)
    (dialog,) = shell.window.findChildren(OomDialog)
    assert dialog.report is report


def test_the_alerts_own_oom_notification_carries_the_report(shell):
    shell.start(answers=NOTHING)  # the banner
    report = oom_report()
    alert = Alert("oom", "0", "train.py ran out of GPU memory", "train.py (20417) hit CUDA "
                  "out of memory (1 so far).", pid=20417, count=1)
    shell.policy.evaluate = lambda snap: [alert]
    feed(shell, snapshot(oom_reports=[report]))
    banner = shell.window.alert_banner
    assert not banner.isHidden() and banner.alert is alert
    assert banner.action_labels() == ["Open report"]
    assert shell.notifier.sent[-1] == (Channel.BANNER, alert)
    banner._action_buttons[0].click()
    (dialog,) = shell.window.findChildren(OomDialog)
    assert dialog.report is report
