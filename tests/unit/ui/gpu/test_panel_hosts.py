"""A remote GPU's panel names its host beside the GPU's name, always visible,
and greys its last figures while the host is not connected."""

from __future__ import annotations

from app.ui.gpu.panel import GpuPanel
from tests.unit.ui.window.host_snapshots import gpu


def test_the_host_stays_visible_when_the_name_is_cut(qtbot):
    panel = GpuPanel("0@gpu1")
    qtbot.addWidget(panel)
    panel.update_sample(gpu(0, "gpu1", 20))
    panel.resize(1200, 300)
    panel.show()
    qtbot.waitExposed(panel)
    assert panel.title_label.text() == "GPU 0"
    assert panel.name_label.text() == "NVIDIA A100-SXM4-80GB — gpu1"
    panel.resize(560, 300)
    qtbot.wait(10)
    assert panel.name_label.text().endswith("… — gpu1")


def test_a_stale_panel_keeps_its_figures_and_says_since_when(qtbot):
    panel = GpuPanel("0@gpu1")
    qtbot.addWidget(panel)
    panel.update_sample(gpu(0, "gpu1", 20))
    panel.set_stale("disconnected since 15:04:12", "connection refused")
    assert panel.state_label.text() == "● disconnected since 15:04:12"
    assert panel.state_label.toolTip() == "connection refused"
    panel.update_sample(gpu(0, "gpu1", 20))  # the last snapshot, again
    assert panel.state_label.text() == "● disconnected since 15:04:12"
    assert panel.memory_text().startswith("20.0 GiB") and panel.gauge.stale
    assert panel.util_label[1].text() == "40 %" and "color" in panel.util_label[1].styleSheet()
    panel.set_stale(None)
    assert panel.state_label.text() == "● OK" and not panel.gauge.stale
    assert panel.util_label[1].styleSheet() == ""


def test_a_local_panel_has_no_host(qtbot):
    panel = GpuPanel("0")
    qtbot.addWidget(panel)
    panel.update_sample(gpu(0))
    assert panel.host == "" and "—" not in panel.name_label.text()
