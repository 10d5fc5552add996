"""The window acting on remote hosts' processes: a request from a remote
process reaches that host's directory only, the detail view shows the host's
own process and names it, a disconnected host's details say why nothing can be
done, a terminate is confirmed naming the host, and the Activity log and the
status bar name the host of what happened there, once."""

from __future__ import annotations

import time

import pytest

from app.core.agents.events import DecisionUpdate, ModelEventRecord
from app.core.agents.types import ModelEvent
from app.core.control.controller import AppController
from app.core.control.hosts import HostControllers
from app.core.control.requests import CollectGarbage, FreeCache, Terminate, Unload
from app.core.monitor.history import History
from app.core.monitor.hosts import DISCONNECTED
from app.core.policies.pressure import UNLOAD, PolicyDecision, UnloadAction
from app.core.units import GiB
from app.ui.shell.controller import ControllerAdapter
from app.ui.window.main_window import MainWindow
from tests.unit.ui.window.two_hosts import EPOCH, PID, Recorded, world


@pytest.fixture
def hosts(qtbot):
    """A window whose controllers act through one recording directory per host."""
    dirs = {"": Recorded(), "gpu1": Recorded(), "gpu2": Recorded()}
    core = HostControllers(AppController(dirs[""], settle_s=0.0), lambda host: dirs[host])
    window = MainWindow(History(), controller=ControllerAdapter(core))
    window.display_timer.stop()
    qtbot.addWidget(window)
    yield window, dirs
    core.close()


def test_free_cache_of_a_remote_process_reaches_its_hosts_directory_only(hosts, qtbot):
    window, dirs = hosts
    window.on_snapshot(world())
    view = window.open_details(PID, "gpu1")
    assert view.free_button.isEnabled()
    view.free_button.click()
    qtbot.waitUntil(lambda: dirs["gpu1"].freed == [PID], timeout=3000)
    assert dirs[""].freed == [] and dirs["gpu2"].freed == []
    qtbot.waitUntil(lambda: window.action_label.text().startswith("gpu1: train.py (1234): freed"),
                    timeout=3000)
    # The same pid here is another process: its own details, its own directory.
    local = window.open_details(PID)
    assert local.title_label.text() == "here.py (1234)"
    local.free_button.click()
    qtbot.waitUntil(lambda: dirs[""].freed == [PID], timeout=3000)
    assert dirs["gpu1"].freed == [PID]


def test_the_detail_view_shows_the_hosts_process_and_names_the_host(hosts):
    window, _dirs = hosts
    window.on_snapshot(world())
    view = window.open_details(PID, "gpu1")
    assert view.title_label.text() == "train.py (1234) on gpu1"
    assert view.windowTitle() == "train.py (1234) on gpu1 — details"
    assert view.command_label.text() == "python train.py"
    assert [r.name.text() for r in view.gpu_rows if r.isVisible()] == ["GPU 0"]
    assert view.model_model.rowCount() == 1 and not view.host_notice.isVisible()


def test_every_request_of_a_remote_detail_view_names_its_host(hosts, monkeypatch):
    window, _dirs = hosts
    window.on_snapshot(world())
    view = window.open_details(PID, "gpu1")
    sent = []
    monkeypatch.setattr(window.controller.core, "submit", sent.append)
    view.free_button.click()
    view.gc_button.click()
    assert view.select_model("unet") and view.unload_cpu_button.isEnabled()
    view.unload_cpu_button.click()
    view.idle_box.setChecked(True)
    view.record_view.record_button.click()
    assert [type(r).__name__ for r in sent] == ["FreeCache", "CollectGarbage", "Unload",
                                                 "SetIdleUnload", "RecordAllocations"]
    assert {r.host for r in sent} == {"gpu1"}
    assert sent[0] == FreeCache.of(PID, "gpu1") and sent[1] == CollectGarbage(PID, "gpu1")
    assert isinstance(sent[2], Unload) and sent[2].model == "unet"


def test_a_disconnected_hosts_details_keep_its_figures_and_say_why_nothing_acts(hosts):
    window, _dirs = hosts
    since = EPOCH - 60
    window.on_snapshot(world(gpu2=DISCONNECTED, since=since))
    view = window.open_details(PID, "gpu2")
    clock = time.strftime("%H:%M:%S", time.localtime(since))
    assert view.host_notice.isVisible()
    assert view.host_notice.text().startswith(f"gpu2 is disconnected since {clock} (connection "
                                              "refused: is `serve` running on gpu2?)")
    assert view.title_label.text() == "serve.py (1234) on gpu2"
    assert view.model_model.rowCount() == 1  # its last report, still shown
    for button in (view.free_button, view.gc_button, view.terminate_button):
        assert not button.isEnabled()
    assert view.free_button.toolTip() == (f"gpu2 is disconnected since {clock}: actions wait "
                                          "until it is connected again")
    assert not view.record_view.record_button.isEnabled()
    # Connected again: the actions come back.
    window.on_snapshot(world(t=1.0))
    assert not view.host_notice.isVisible() and view.free_button.isEnabled()


def test_terminate_of_a_remote_process_names_the_host_and_carries_it(hosts, monkeypatch):
    window, _dirs = hosts
    window.on_snapshot(world(gpu2=DISCONNECTED, since=EPOCH))
    sent = []
    monkeypatch.setattr(window.controller.core, "submit", sent.append)
    dialog = window.terminate_process(PID, "gpu1")
    assert dialog is not None and dialog.windowTitle() == "Terminate a process on gpu1"
    text = dialog.text_label.text()
    assert text.startswith("Terminate train.py (1234) on gpu1?") and "10.0 GiB on GPU 0@gpu1" in text
    dialog.terminate_button.click()
    assert sent == [Terminate(PID, EPOCH - 600, host="gpu1")]
    # A disconnected host's process is refused at once, with the reason.
    assert window.terminate_process(PID, "gpu2") is None
    assert window.action_label.text().startswith(
        "gpu2: Could not terminate serve.py (1234): gpu2 is disconnected since")
    assert window.activity.rows()[0][1] == "gpu2: serve.py (1234)"


def event(seq: int = 7) -> ModelEventRecord:
    ev = ModelEvent(seq, EPOCH, "unet", "pipe.unet", "unload", "offloaded", "cpu",
                    3 * GiB, 3 * GiB, 0.4, "idle")
    return ModelEventRecord(PID, ev, "0@gpu1", EPOCH, "Unloaded pipe.unet (3.0 GiB → CPU, "
                            "0.4 s, idle)", 10 * GiB)


def test_a_remote_event_names_its_host_and_is_shown_once(hosts):
    window, _dirs = hosts
    window.on_snapshot(world(fresh=True, model_events=(event(),)))
    (row,) = window.activity.rows()
    assert row[1] == "gpu1: train.py (1234)" and row[3] == "Unloaded → CPU"
    assert "GPU 0@gpu1" in row[-1]
    assert window.action_label.text() == ("gpu1: train.py (1234): Unloaded pipe.unet "
                                          "(3.0 GiB → CPU, 0.4 s, idle)")
    assert [m.seq for m in window.markers.markers.get("0@gpu1", ())] == [7]
    # Later views of the host did not bring it: it is not shown again.
    window.on_snapshot(world(t=1.0, model_events=(event(),)))
    assert len(window.activity.rows()) == 1


def test_a_remote_servers_policy_decision_is_shown_naming_the_host(hosts):
    window, _dirs = hosts
    action = UnloadAction(PID, "unet", "pipe.unet", 0, "GPU-gpu1-0", "cuda:0", 3 * GiB, 900.0)
    decision = PolicyDecision(1, EPOCH, 0, "GPU-gpu1-0", 76 * GiB, 80 * GiB, UNLOAD,
                              "GPU 0 at 95 %", (action,), threshold=0.9)
    window.on_snapshot(world(fresh=True, policy_decisions=(DecisionUpdate(decision, True),)))
    assert window.activity.rows()[0][1:4] == ["gpu1: train.py (1234)", "pipe.unet",
                                              "Decided: unload"]
    assert window.action_label.text() == ("gpu1: Auto-unload: GPU 0 at 95 % ≥ 90 %: "
                                          "unloading pipe.unet (3.0 GiB)")
    assert window.auto_unload.acting is None  # this machine's control: untouched
    view = window.open_details(PID, "gpu1")
    assert view.model_model.rowCount() == 1
    assert "unet" in view._pending  # the server's unload in flight, as the detail view shows
