"""The window's part in a model server's unload: sent from the detail view or a row's
menu, run by the controller (off the GUI thread), its outcome shown beside the model,
in the status bar and, when it failed, in the Activity log."""

from __future__ import annotations

import threading

from app.core.agents.directory import AgentDirectory
from app.core.agents.types import ModelActionResult
from app.core.control.requests import Unload
from app.core.units import GiB
from app.ui.window.process_rows import COL_COMMAND
from tests.unit.ui.agents import servers as srv
from tests.unit.ui.agents.test_agent_views import with_runner


class ServerModels(AgentDirectory):
    """The servers' unloads as the routing directory answers them (outcome and note)."""

    def __init__(self, outcome: str = "freed", note: str = "Ollama unloaded it",
                 freed: int | None = int(4.4 * GiB)) -> None:
        self.outcome, self.note, self.freed = outcome, note, freed
        self.calls: list[tuple[str, int, str, int]] = []

    def reports(self):
        return {}

    def entries(self):
        return []

    def free_cache(self, pid, timeout_s=30.0):
        raise AssertionError("no cache to free in a model server")

    def collect_garbage(self, pid, timeout_s=30.0):
        raise AssertionError("no gc in a model server")

    def unload(self, pid, model, to="cpu", force=False, reason="manual", timeout_s=300.0):
        self.calls.append(("unload", pid, model, threading.get_ident()))
        ok = self.outcome in ("freed", "pending")
        return ModelActionResult(pid, model, ok, error=None if ok else self.note,
                                 code=None if ok else self.outcome.replace(" ", "_"),
                                 outcome=self.outcome, note=self.note,
                                 freed_bytes=self.freed if self.outcome == "freed" else None)

    def reload(self, pid, model, timeout_s=300.0):
        self.calls.append(("reload", pid, model, threading.get_ident()))
        return ModelActionResult(pid, model, True, outcome="reloaded",
                                 note="the checkpoint was loaded back onto the GPU")


def test_unload_from_the_runners_details_reaches_the_server_and_shows_what_was_freed(window,
                                                                                    qtbot):
    directory = ServerModels()
    with_runner(window, directory)
    window.on_snapshot(srv.snapshot())
    view = window.open_details(srv.RUNNER)  # the runner: its memory is the server's
    button = view.server_view.button_of("qwen2.5:7b")
    assert button.isEnabled()
    button.click()
    qtbot.waitUntil(lambda: view.server_view.note_of("qwen2.5:7b") == "freed 4.4 GiB",
                    timeout=5000)
    (kind, pid, model, thread), = directory.calls
    assert (kind, pid, model) == ("unload", srv.OLLAMA, "qwen2.5:7b")  # the server's pid and id
    assert thread != threading.get_ident()  # never on the GUI thread
    assert window.action_label.text() == "Ollama 0.12.3 (4242): qwen2.5:7b: freed 4.4 GiB"
    window.on_snapshot(srv.snapshot(t=11.0))  # the outcome stays with the next snapshot
    assert view.server_view.note_of("qwen2.5:7b") == "freed 4.4 GiB"


def test_a_pending_unload_is_said_to_be_pending(window, qtbot):
    directory = ServerModels("pending", "ComfyUI frees after the prompt it is running")
    with_runner(window, directory)
    window.on_snapshot(srv.snapshot())
    view = window.open_details(srv.COMFY)
    view.server_view.button_of("all").click()
    want = "still pending — ComfyUI frees after the prompt it is running"
    qtbot.waitUntil(lambda: view.server_view.note_of("all") == want, timeout=5000)
    assert window.action_label.text().endswith(want)


def test_not_freed_is_an_error_in_the_activity_log(window, qtbot):
    directory = ServerModels("not freed", "NVML shows no drop after 15 s")
    runner = with_runner(window, directory)
    finished = []
    runner.finished.connect(finished.append)
    window.on_snapshot(srv.snapshot())
    window.submit(Unload(srv.OLLAMA, "qwen2.5:7b", name="qwen2.5:7b"))
    qtbot.waitUntil(lambda: bool(finished), timeout=5000)
    text = "Ollama 0.12.3 (4242): qwen2.5:7b: not freed — NVML shows no drop after 15 s"
    assert window.action_label.text() == text
    row = window.activity.rows()[0]
    assert row[1:4] == ["Ollama 0.12.3 (4242)", "qwen2.5:7b", "Unload failed"]
    assert row[7] == text


def test_a_rows_menu_unloads_through_the_window(window, qtbot):
    directory = ServerModels()
    runner = with_runner(window, directory)
    finished = []
    runner.finished.connect(finished.append)
    window.on_snapshot(srv.snapshot())
    row = window.table.visible_row_of("0", srv.RUNNER)
    menu = window.table.menu_for(window.table.model().index(row, COL_COMMAND))
    entries = {a.text(): a for a in menu.actions() if a.text()}
    assert not entries["Unload llama3.2:3b (Ollama): generating now"].isEnabled()
    entries["Unload qwen2.5:7b (Ollama)"].trigger()
    qtbot.waitUntil(lambda: bool(finished), timeout=5000)
    assert [c[:3] for c in directory.calls] == [("unload", srv.OLLAMA, "qwen2.5:7b")]
    menu.deleteLater()


def test_details_button_opens_a_server_row(window):
    window.on_snapshot(srv.snapshot())
    assert not window.details_button.isHidden()  # shown once servers (or agents) appear
    window.table.selectRow(window.table.visible_row_of("1", srv.VLLM))
    assert window.details_button.isEnabled()
    window.details_button.click()
    assert window.details is not None and window.details.pid == srv.VLLM
    assert window.details.server_view.title_label.text() == "vLLM 0.8.5"
