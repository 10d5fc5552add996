"""Agent figures in the UI: table marker and cache column, breakdown bars, detail
view, and the Free cache / Run gc actions run off the GUI thread."""

from __future__ import annotations

import dataclasses
import threading
import time

import pytest
from PySide6.QtCore import Qt

from app.core.agents.directory import AgentDirectory
from app.core.agents.types import AgentReport, DeviceMemory, FreeCacheResult, ModelInfo
from app.core.control.controller import AppController
from app.core.control.records import CacheAction
from app.core.monitor.samples import GpuSample, ProcessSample, Snapshot
from app.core.units import GiB, MiB
from app.ui.agents.agent_actions import cache_summary
from app.ui.agents.model_list import (
    MCOL_CLASS,
    MCOL_DEVICE,
    MCOL_DTYPE,
    MCOL_LAST,
    MCOL_MODE,
    MCOL_NAME,
    MCOL_PARAMS,
    MCOL_SIZE,
)
from app.ui.window.process_rows import AGENT_ROLE, COL_AGENT, COL_CACHE, COL_PID

NOW = 1_700_000_000.0


# -- hand-made data -----------------------------------------------------------------------------

def device(index, allocated, reserved, **kw):
    return DeviceMemory(index=index, allocated=allocated, reserved=reserved, **kw)


def model(name, params, param_bytes, *, index=0, buffers=0, group=None, training=False,
          last_used=None, idle_since=..., dtype="float16", class_name="Net"):
    """``idle_since`` defaults to ``last_used``: the agent's idle clock runs from the
    last forward."""
    return ModelInfo(id=f"{name}-id", name=name, class_name=class_name, params=params,
                     param_bytes=param_bytes, buffer_bytes=buffers, device=f"cuda:{index}",
                     dtype=dtype, training=training, last_used=last_used, group=group,
                     idle_since=last_used if idle_since is ... else idle_since,
                     bytes_by_device={f"cuda:{index}": {"params": param_bytes,
                                                         "buffers": buffers}})


def report(pid, *devices, models=(), torch="2.5.1", **kw):
    defaults = dict(python="3.11.9", torch=torch,
                    torch_status="loaded" if torch else "torch not loaded",
                    cuda_initialized=bool(devices), allocator_backend="native",
                    oom_events=1, received_at=NOW)
    defaults.update(kw)
    return AgentReport(pid=pid, argv=("python", f"job{pid}.py"), devices=tuple(devices),
                       models=tuple(models), **defaults)


def proc(pid, mem):
    return ProcessSample(pid, mem, name="python", user="alice", command=f"python job{pid}.py",
                         create_time=NOW - 100)


def gpu(index, *procs, total=24 * GiB):
    return GpuSample(index=index, name=f"Test GPU {index}", uuid=f"GPU-{index}",
                     memory_total=total, memory_used=sum(p.gpu_memory or 0 for p in procs),
                     memory_free=None, processes=tuple(procs))


def snap(gpus, agents=None, t=10.0):
    return Snapshot(NOW + t, t, "nvml", "550.54", tuple(gpus), agents=agents or {})


def two_agents_on_gpu0():
    """pid 10: 8 GiB NVML, reserved 6, allocated 4 (3 of it parameters) -> cache 2 GiB;
    pid 11: 4 GiB NVML, reserved 3.5, allocated 2 -> cache 1.5 GiB; pid 12: no agent."""
    agents = {
        10: report(10, device(0, 4 * GiB, 6 * GiB),
                   models=[model("model", 25_557_032, 3 * GiB)]),
        11: report(11, device(0, 2 * GiB, int(3.5 * GiB))),
    }
    gpus = [gpu(0, proc(10, 8 * GiB), proc(11, 4 * GiB), proc(12, GiB))]
    return gpus, agents


class FakeDirectory(AgentDirectory):
    """Records the thread of every call; can block, fail or raise."""

    def __init__(self, freed=None, fail=None, raises=None, block=False) -> None:
        self.freed = freed or {}
        self.fail = fail
        self.raises = raises
        self.threads: list[int] = []
        self.calls: list[tuple[str, int]] = []
        self.gate = threading.Event()
        if not block:
            self.gate.set()

    def reports(self):
        return {}

    def entries(self):
        return []

    def free_cache(self, pid, timeout_s=30.0):
        self.threads.append(threading.get_ident())
        self.calls.append(("free", pid))
        self.gate.wait(5)
        if self.raises:
            raise self.raises
        if self.fail:
            return FreeCacheResult(pid=pid, ok=False, error=self.fail)
        freed = self.freed.get(pid, 0)
        return FreeCacheResult(pid=pid, ok=True, reserved_before=freed, reserved_after=0,
                               freed=freed)

    def collect_garbage(self, pid, timeout_s=30.0):
        self.threads.append(threading.get_ident())
        self.calls.append(("gc", pid))
        return {"ok": True, "collected": 42, "seconds": 0.012, "error": None}


def with_runner(window, directory, settle_s=0.2):
    """Actions through a controller on ``directory`` (the window's adapter around it)."""
    from app.ui.shell.controller import ControllerAdapter

    controller = ControllerAdapter(AppController(directory, settle_s=settle_s), window)
    window.set_controller(controller)
    return controller


def table_row(window, pid):
    model_ = window.table.model()
    return next(r for r in range(model_.rowCount())
                if model_.index(r, COL_PID).data() == str(pid))


def cell(window, pid, col, role=Qt.ItemDataRole.DisplayRole):
    return window.table.model().index(table_row(window, pid), col).data(role)


# -- process table ------------------------------------------------------------------------------

def test_table_marks_agent_processes_and_shows_their_cache(window):
    gpus, agents = two_agents_on_gpu0()
    agents[13] = report(13, torch=None)  # torch not loaded: no allocator figures
    gpus = [dataclasses.replace(gpus[0], processes=gpus[0].processes + (proc(13, GiB),))]
    assert window.table.isColumnHidden(COL_AGENT)  # no agent seen yet: columns hidden
    window.on_snapshot(snap(gpus, agents))
    assert not window.table.isColumnHidden(COL_AGENT)
    assert not window.table.isColumnHidden(COL_CACHE)

    assert cell(window, 10, COL_AGENT) == "2.5.1"
    assert cell(window, 10, COL_AGENT, Qt.ItemDataRole.DecorationRole) is not None
    assert "torch 2.5.1" in cell(window, 10, COL_AGENT, Qt.ItemDataRole.ToolTipRole)
    assert cell(window, 10, COL_CACHE) == "2.0 GiB"
    assert "reserved 6.0 GiB" in cell(window, 10, COL_CACHE, Qt.ItemDataRole.ToolTipRole)
    assert cell(window, 11, COL_CACHE) == "1.5 GiB"
    # No agent: marker blank, cache unknown (n/a, never 0).
    assert cell(window, 12, COL_AGENT) == ""
    assert cell(window, 12, COL_AGENT, Qt.ItemDataRole.DecorationRole) is None
    assert cell(window, 12, COL_CACHE) == "n/a"
    assert "No VRAM Steward agent" in cell(window, 12, COL_CACHE, Qt.ItemDataRole.ToolTipRole)
    # Agent without torch: said so; its cache is unknown too.
    assert cell(window, 13, COL_AGENT) == "torch not loaded"
    assert cell(window, 13, COL_CACHE) == "n/a"


def test_cache_of_zero_is_zero_not_na(window):
    agents = {10: report(10, device(0, 4 * GiB, 4 * GiB))}
    window.on_snapshot(snap([gpu(0, proc(10, 5 * GiB))], agents))
    assert cell(window, 10, COL_CACHE) == "0 B"


# -- GPU panel breakdown ------------------------------------------------------------------------

def test_breakdown_is_shown_for_the_right_process_on_the_right_gpu(window):
    agents = {7: report(7, device(1, 5 * GiB, 8 * GiB),
                        models=[model("net", 1000, 3 * GiB, index=1)])}
    gpus = [gpu(0, proc(3, 2 * GiB)), gpu(1, proc(7, 10 * GiB), proc(8, GiB), total=80 * GiB)]
    window.on_snapshot(snap(gpus, agents))
    s0 = window.panels["0"].agent_section
    s1 = window.panels["1"].agent_section
    assert not s0.isHidden() and not s1.isHidden()
    assert s0.visible_rows() == []
    assert not s0.empty_label.isHidden()
    (row,) = s1.visible_rows()
    assert row.pid == 7 and "(7)" in row.name.text()
    # context = NVML − reserved, cache = reserved − allocated, tensors = allocated − params.
    assert row.bar.sizes == {"context": 2 * GiB, "cache": 3 * GiB, "tensors": 2 * GiB,
                             "parameters": 3 * GiB}
    assert row.figures.text() == "10.0 GiB · cache 3.0 GiB"
    tip = row.bar.toolTip()
    assert "GPU 1" in tip
    assert "NVML used: 10.0 GiB" in tip
    assert "Context & non-PyTorch: 2.0 GiB" in tip
    assert "Cache: 3.0 GiB" in tip
    assert "Live tensors: 5.0 GiB" in tip
    assert "model parameters: 3.0 GiB" in tip


def test_free_all_button_states_the_sum_beforehand(window):
    gpus, agents = two_agents_on_gpu0()
    window.on_snapshot(snap(gpus, agents))
    button = window.panels["0"].agent_section.free_all_button
    assert button.text() == "Free all caches (≈3.5 GiB)"
    assert not button.isEnabled()  # no action runner: actions unavailable
    with_runner(window, FakeDirectory())
    assert button.isEnabled()
    assert "2 processes" in button.toolTip()

    # Nothing cached: no figure, disabled.
    empty = {pid: dataclasses.replace(r, devices=(device(0, 4 * GiB, 4 * GiB),))
             for pid, r in agents.items()}
    window.on_snapshot(snap(gpus, empty, t=11.0))
    assert button.text() == "Free all caches"
    assert not button.isEnabled()
    assert "Nothing to free" in button.toolTip()


def test_gpu_without_agent_processes_has_its_button_disabled(window):
    gpus, agents = two_agents_on_gpu0()
    gpus.append(gpu(1, proc(20, GiB)))
    with_runner(window, FakeDirectory())
    window.on_snapshot(snap(gpus, agents))
    button = window.panels["1"].agent_section.free_all_button
    assert button.text() == "Free all caches" and not button.isEnabled()


# -- actions ---------------------------------------------------------------------------------------

def test_free_cache_runs_off_the_gui_thread_and_reports_the_nvml_release(window, qtbot):
    gpus, agents = two_agents_on_gpu0()
    fake = FakeDirectory(freed={10: 2 * GiB}, block=True)
    runner = with_runner(window, fake, settle_s=0.3)
    window.on_snapshot(snap(gpus, agents))
    view = window.open_details(10)
    assert view.free_button.text() == "Free cache (≈2.0 GiB)"
    assert view.free_button.isEnabled()

    qtbot.mouseClick(view.free_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: fake.calls == [("free", 10)], timeout=3000)
    # Running: the button says so and cannot be clicked again.
    assert view.free_button.text() == "Freeing…" and not view.free_button.isEnabled()
    assert "Freeing" in window.action_label.text()
    fake.gate.set()
    qtbot.waitUntil(lambda: not runner.busy_pids(), timeout=3000)
    assert fake.threads and threading.get_ident() not in fake.threads

    assert window.action_label.text().startswith("job10.py (10): freed 2.0 GiB")
    assert "measuring" in window.action_label.text()
    # A snapshot right away is too early to judge (the driver may lag behind).
    dropped = [dataclasses.replace(gpus[0], processes=(
        proc(10, int(6.1 * GiB)), proc(11, 4 * GiB), proc(12, GiB)))]
    window.on_snapshot(snap(dropped, agents, t=11.0))
    assert "measuring" in window.action_label.text()
    time.sleep(0.35)
    window.on_snapshot(snap(dropped, agents, t=12.0))
    text = window.action_label.text()
    assert text == "job10.py (10): freed 2.0 GiB — NVML shows 1.9 GiB released"
    assert "NVML shows 1.9 GiB released" in view.result_label.text()
    assert view.free_button.text() == "Free cache (≈2.0 GiB)"  # from the (unchanged) report


def test_free_all_caches_frees_each_agent_process_and_measures_the_gpu(window, qtbot):
    gpus, agents = two_agents_on_gpu0()
    fake = FakeDirectory(freed={10: 2 * GiB, 11: int(1.5 * GiB)})
    runner = with_runner(window, fake, settle_s=0.0)
    window.on_snapshot(snap(gpus, agents))
    section = window.panels["0"].agent_section
    qtbot.mouseClick(section.free_all_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: not runner.busy_pids() and window.last_action.done, timeout=3000)
    assert sorted(fake.calls) == [("free", 10), ("free", 11)]  # pid 12 has no agent
    assert threading.get_ident() not in fake.threads
    after = [gpu(0, proc(10, 6 * GiB), proc(11, int(2.5 * GiB)), proc(12, GiB))]
    # Not the first snapshot after the answers: it may have been sampled while they ran.
    window.on_snapshot(snap(gpus, agents, t=10.5))
    assert not window.last_action.measured
    window.on_snapshot(snap(after, agents, t=11.0))
    action = window.last_action
    assert action.measured
    assert action.released == {10: 2 * GiB, 11: int(1.5 * GiB)}
    assert action.gpu_released == int(3.5 * GiB)
    assert window.action_label.text() == (
        "GPU 0: freed 3.5 GiB in 2 processes — NVML shows 3.5 GiB released on GPU 0")
    assert "job10.py (10): freed 2.0 GiB, NVML 2.0 GiB released" in window.action_label.toolTip()
    assert section.result_label.text() == "Freed 3.5 GiB · NVML shows 3.5 GiB released"


@pytest.mark.parametrize("fake", [FakeDirectory(raises=ConnectionError("agent went away")),
                                  FakeDirectory(fail="busy: another action is running")],
                         ids=["raises", "not-ok"])
def test_action_errors_are_shown_not_raised(window, qtbot, fake):
    gpus, agents = two_agents_on_gpu0()
    runner = with_runner(window, fake)
    window.on_snapshot(snap(gpus, agents))
    view = window.open_details(10)
    qtbot.mouseClick(view.free_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: not runner.busy_pids() and window.last_action.done, timeout=3000)
    reason = "agent went away" if fake.raises else "busy: another action is running"
    assert window.action_label.text() == f"job10.py (10): free cache failed: {reason}"
    assert reason in view.result_label.text()
    assert "color: #D55E00" in view.result_label.styleSheet()
    assert view.free_button.isEnabled()  # can be tried again


def test_no_directory_is_an_error_message(window, qtbot):
    gpus, agents = two_agents_on_gpu0()
    runner = with_runner(window, lambda: None)
    window.on_snapshot(snap(gpus, agents))
    window.free_cache(10)
    qtbot.waitUntil(lambda: not runner.busy_pids() and window.last_action.done, timeout=3000)
    assert "no agent connection" in window.action_label.text()


def test_run_gc(window, qtbot):
    gpus, agents = two_agents_on_gpu0()
    fake = FakeDirectory()
    runner = with_runner(window, fake)
    window.on_snapshot(snap(gpus, agents))
    view = window.open_details(11)
    qtbot.mouseClick(view.gc_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: not runner.busy_pids() and window.last_action.done, timeout=3000)
    assert fake.calls == [("gc", 11)] and threading.get_ident() not in fake.threads
    assert view.result_label.text() == "job11.py (11): gc collected 42 objects in 12 ms"


def test_release_measurement_for_an_ended_process():
    gpus, _ = two_agents_on_gpu0()
    before = snap(gpus)
    action = CacheAction.free([10], before, {10: "job10.py (10)"})
    action.results[10] = FreeCacheResult(10, True, freed=GiB)
    action.done_at = 100.0
    assert not action.measure(snap([gpu(0, proc(11, GiB))]), now=100.2, settle_s=0.5)
    assert action.measure(snap([gpu(0, proc(11, GiB))]), now=100.6, settle_s=0.5)
    assert cache_summary(action) == "job10.py (10): freed 1.0 GiB — NVML: the process has ended"


# -- detail view ------------------------------------------------------------------------------------

def test_detail_view_header_breakdown_and_models(window):
    models = [
        model("unet", 859_520_964, 1_719_041_928, group="StableDiffusionPipeline",
              last_used=NOW - 180, class_name="UNet2DConditionModel"),
        model("model", 25_557_032, 102_228_128, buffers=212_904, training=True,
              dtype="float32", class_name="ResNet"),
    ]
    agents = {10: report(10, device(0, 4 * GiB, 6 * GiB, num_alloc_retries=3),
                         models=models, oom_events=2)}
    window.on_snapshot(snap([gpu(0, proc(10, 8 * GiB))], agents))
    window.table.selectRow(0)
    assert window.details_button.isEnabled()
    window.details_button.click()
    view = window.details
    assert view is not None and view.isVisible() and view.pid == 10
    assert view.title_label.text() == "job10.py (10)"
    assert view.command_label.text() == "python job10.py"
    f = {k: v.text() for k, v in view.facts.items()}
    assert f["Python"] == "3.11.9" and f["PyTorch"] == "2.5.1"
    assert f["Allocator"] == "native" and f["CUDA"] == "initialised"
    assert f["OOMs"] == "2" and f["Alloc retries"] == "3"
    (row,) = [r for r in view.gpu_rows if not r.isHidden()]
    assert row.name.text() == "GPU 0"
    assert row.bar.sizes["context"] == 2 * GiB and row.bar.sizes["cache"] == 2 * GiB

    m = view.models_view.model()
    rows = {m.index(r, MCOL_NAME).data(): [m.index(r, c).data() for c in range(m.columnCount())]
            for r in range(m.rowCount())}
    unet = rows["unet (StableDiffusionPipeline)"]
    assert unet[MCOL_CLASS] == "UNet2DConditionModel"
    assert unet[MCOL_PARAMS] == "860 M"
    assert unet[MCOL_SIZE] == "1.6 GiB"
    assert unet[MCOL_DEVICE] == "cuda:0" and unet[MCOL_DTYPE] == "float16"
    assert unet[MCOL_MODE] == "eval" and unet[MCOL_LAST] == "idle 3 min 00 s"
    resnet = rows["model"]
    assert resnet[MCOL_PARAMS] == "25.6 M"
    assert resnet[MCOL_SIZE] == "98 MiB"  # parameters + buffers
    assert resnet[MCOL_MODE] == "train" and resnet[MCOL_LAST] == "n/a"  # unknown, not 0
    assert view.models_title.text() == "Models (2)"


def test_detail_view_shows_a_name_and_command_that_look_like_html_as_text(window):
    hostile = "<b>x</b> <img src=/etc/x>"
    agents = {10: report(10, device(0, 4 * GiB, 6 * GiB), errors=(f"bad {hostile}",))}
    sample = ProcessSample(10, 8 * GiB, name=hostile, user="alice",
                           command=f"./serve {hostile}", create_time=NOW - 100)
    window.on_snapshot(snap([gpu(0, sample)], agents))
    view = window.open_details(10)
    for label in (view.title_label, view.command_label, view.errors_label,
                  view.result_label, *view.facts.values()):
        assert label.textFormat() == Qt.TextFormat.PlainText
    assert view.title_label.text() == f"{hostile} (10)"
    assert view.command_label.text() == f"./serve {hostile}"
    assert view.errors_label.text() == f"⚠ bad {hostile}"
    tip = view.command_label.toolTip()
    assert "<img" not in tip and "./serve &lt;b&gt;x&lt;/b&gt; &lt;img src=/etc/x&gt;" in tip


def test_detail_view_follows_the_process_leaving(window):
    gpus, agents = two_agents_on_gpu0()
    with_runner(window, FakeDirectory())
    window.on_snapshot(snap(gpus, agents))
    view = window.open_details(10)
    assert view.free_button.isEnabled()
    window.on_snapshot(snap([gpu(0, proc(11, 4 * GiB))], {11: agents[11]}, t=11.0))
    assert "not reporting" in view.facts["Agent"].text()
    assert not view.free_button.isEnabled() and not view.gc_button.isEnabled()
    assert not view.no_models_label.isHidden()


def test_double_click_on_an_agent_row_opens_details(window, qtbot):
    gpus, agents = two_agents_on_gpu0()
    window.on_snapshot(snap(gpus, agents))
    table = window.table
    with qtbot.waitSignal(table.details_requested) as blocker:
        table.doubleClicked.emit(table.model().index(table_row(window, 11), 0))
    assert blocker.args == [11, ""]
    assert window.details is not None and window.details.pid == 11
    # A row without an agent opens nothing.
    with qtbot.assertNotEmitted(table.details_requested):
        table.doubleClicked.emit(table.model().index(table_row(window, 12), 0))
    assert table.model().index(table_row(window, 12), 0).data(AGENT_ROLE) is None


# -- zero agents ----------------------------------------------------------------------------------

def test_everything_works_with_zero_agents(window, demo_feed):
    with_runner(window, FakeDirectory())
    demo_feed.step(window, 8)
    window.refresh()
    assert all(p.agent_section.isHidden() for p in window.panels.values())
    assert window.table.isColumnHidden(COL_AGENT) and window.table.isColumnHidden(COL_CACHE)
    assert window.details_button.isHidden()
    assert window.free_all_caches("0") is None
    assert window.action_label.text() == ""


def test_agents_disappearing_hide_the_section(window):
    gpus, agents = two_agents_on_gpu0()
    window.on_snapshot(snap(gpus, agents))
    assert not window.panels["0"].agent_section.isHidden()
    window.on_snapshot(snap(gpus, {}, t=11.0))
    assert window.panels["0"].agent_section.isHidden()
    assert cell(window, 10, COL_CACHE) == "n/a"


def test_demo_agents_render_in_the_window(window):
    """The demo's simulated agents end to end (through the real Collector)."""
    demo_agents = pytest.importorskip("app.core.agents.demo")
    from tests.unit.ui.conftest import DemoFeed

    feed = DemoFeed()
    feed.collector.agents = demo_agents.DemoAgents(feed.source)
    snap_ = feed.step(window, 4 * 20)
    assert snap_.agents
    rows = window.panels["0"].agent_section.visible_rows()
    assert {r.pid for r in rows} == {p for p in snap_.agents
                                     if any(q.pid == p for q in snap_.gpus[0].processes)}
    assert window.panels["0"].agent_section.free_all_button.text().startswith(
        "Free all caches (≈")


def test_memory_figures_in_mib_are_exact_in_tooltips(window):
    agents = {10: report(10, device(0, 300 * MiB, 812 * MiB))}
    window.on_snapshot(snap([gpu(0, proc(10, 1300 * MiB))], agents))
    (row,) = window.panels["0"].agent_section.visible_rows()
    assert "Cache: 512 MiB" in row.bar.toolTip()
    assert "Context & non-PyTorch: 488 MiB" in row.bar.toolTip()


def test_details_of_a_pytorch_process_without_an_agent_say_how_to_invite_it(window):
    from app.core.diagnosis.agentless import AgentlessEnv, no_agent

    shot = snap([gpu(0, proc(12, 3 * GiB))])
    finding = no_agent([(shot.gpus[0], shot.gpus[0].processes[0])],
                       AgentlessEnv("/srv/sd/venv", None, "venv"))
    window.on_snapshot(dataclasses.replace(shot, diagnoses=(finding,)))
    view = window.open_details(12)
    text = view.facts["Agent"].text()
    assert "vram-steward agent install --env /srv/sd/venv" in text and "next start" in text
    assert view.facts["PyTorch"].text() == "n/a"


# -- model servers in the detail view -------------------------------------------------------------

def test_details_of_a_model_server_without_an_agent_show_the_server_alone(qtbot):
    from app.ui.agents.agent_views import ProcessDetailView
    from tests.unit.ui.agents import servers as srv

    view = ProcessDetailView()
    qtbot.addWidget(view)
    for pid in (srv.OLLAMA, srv.RUNNER):  # the server and its runner: the same server
        view.set_process(pid)
        view.update_snapshot(srv.snapshot())
        view.show()
        assert view.server_view.isVisible()
        assert view.server_view.title_label.text() == "Ollama 0.12.3"
        assert [r.model_id for r in view.server_view.rows] == ["qwen2.5:7b", "llama3.2:3b"]
        # What only an agent knows is not shown (rather than n/a everywhere).
        for hidden in (view.facts_box, view.breakdown_box, view.models_box, view.gc_button,
                       view.free_button):
            assert hidden.isHidden()
        assert view.terminate_button.isVisible()


def test_server_buttons_in_the_detail_view_send_through_its_request(qtbot):
    from app.core.control.requests import Unload
    from app.ui.agents.agent_views import ProcessDetailView
    from tests.unit.ui.agents import servers as srv

    view = ProcessDetailView()
    qtbot.addWidget(view)
    view.set_process(srv.COMFY)
    view.update_snapshot(srv.snapshot())
    view.show()
    with qtbot.waitSignal(view.request, timeout=1000) as sent:
        view.server_view.button_of("all").click()
    assert sent.args == [Unload(srv.COMFY, "all", name="models loaded by ComfyUI",
                                size=srv.comfyui().models[0].vram_bytes)]


def test_an_agent_in_a_managed_server_keeps_its_figures_and_points_to_the_servers_unload(qtbot):
    from app.ui.agents.agent_views import ProcessDetailView
    from tests.unit.ui.agents import servers as srv

    agents = {srv.COMFY: report(srv.COMFY, device(1, 5 * GiB, 6 * GiB),
                              models=[model("unet", 2_567_463_684, int(4.8 * GiB), index=1,
                                            idle_since=None)],
                              managed_by="ComfyUI")}
    view = ProcessDetailView()
    qtbot.addWidget(view)
    view.set_process(srv.COMFY)
    view.update_snapshot(srv.snapshot(agents=agents))
    view.show()
    assert view.server_view.isVisible() and view.server_view.button_of("all").isEnabled()
    assert view.facts_box.isVisible() and view.models_box.isVisible()
    assert view.facts["PyTorch"].text() == "2.5.1"
    assert [r for r in view.gpu_rows if not r.isHidden()]  # the allocator's breakdown stays
    assert view.selected_model() is not None
    assert not view.unload_cpu_button.isEnabled() and not view.unload_disk_button.isEnabled()
    assert view.unload_cpu_button.toolTip() == "ComfyUI manages unet: use ComfyUI's unload (above)"
    assert view.model_result.text() == "Managed by ComfyUI: use its unload above"
