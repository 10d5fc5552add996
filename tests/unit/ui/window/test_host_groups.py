"""Several hosts in the GPU area: grouped by host (this machine first, then the
hosts in their order, GPUs by index), a header per host saying its state and
its fullest GPU, a disconnected host greyed with its last figures (never 0),
a connecting host's header alone, a removed host gone, and this machine's
missing driver told in one line while the hosts' GPUs fill the window."""

from __future__ import annotations

import pytest
from PySide6.QtCore import QPoint

from app.core.monitor.hosts import CONNECTING, DISCONNECTED
from app.core.units import fmt_bytes
from app.ui.style.hosts import clock_text
from tests.unit.ui.window.host_snapshots import NO_DRIVER, World, gpu

REFUSED = "connection refused: check that `serve` runs there and listens on 8470"


def shown(window, qtbot, width: int, height: int) -> None:
    window.resize(width, height)
    window.show()
    qtbot.waitExposed(window)
    qtbot.wait(20)


def three_hosts(world: World, **gpu2):
    """This machine (2 GPUs), gpu1 (2 A100s), gpu2 (3 H100s, GPU 2 the fullest)."""
    local = [gpu(0, used_gib=5), gpu(1, used_gib=6)]
    one = world.host("gpu1", gpu(0, "gpu1", 20), gpu(1, "gpu1", 30))
    two = world.host("gpu2", *(gpu(i, "gpu2", u, name="NVIDIA H100 80GB HBM3")
                               for i, u in enumerate((10, 40, 72.8))), **gpu2)
    return world.snap(local, [one, two])


def y_in(area, widget) -> int:
    return widget.mapTo(area, QPoint(0, 0)).y()


@pytest.mark.parametrize("size", [(2560, 2600), (1366, 768)])
def test_gpus_are_grouped_by_host_in_order_under_headers(window, qtbot, size):
    shown(window, qtbot, *size)
    world = World()
    for _ in range(3):
        window.on_snapshot(three_hosts(world))
    qtbot.wait(20)
    area = window.gpu_area
    assert area.ordered() == ["0", "1", "0@gpu1", "1@gpu1", "0@gpu2", "1@gpu2", "2@gpu2"]
    assert area.groups == ["", "gpu1", "gpu2"]
    header = area.headers["gpu2"]
    # The fullest GPU is named in its header; the GPUs keep their index order.
    assert header.text_of(header.fullest_label) == "fullest: GPU 2 · 91 %"
    assert header.text_of(header.state_label) == "● connected"
    assert area.headers[""].text_of(area.headers[""].title_label) == "this machine"
    if area.arrangement == "all":
        headers = [y_in(area, area.headers[k]) for k in area.groups]
        panels = {d: y_in(area, p) for d, p in window.panels.items()}
        assert headers[0] < panels["0"] < headers[1] < panels["0@gpu1"] < headers[2]
        assert headers[2] < panels["0@gpu2"] < panels["2@gpu2"]
    else:
        strip = area.tiles_layout
        widgets = [strip.itemAt(i).widget() for i in range(strip.count())]
        names = [getattr(w, "display_id", getattr(w, "key", None)) for w in widgets if w]
        assert names == ["", "0", "1", "gpu1", "0@gpu1", "1@gpu1",
                         "gpu2", "0@gpu2", "1@gpu2", "2@gpu2"]
        assert all(area.strip_headers[k].isVisible() for k in area.groups)
        assert area.tiles["0@gpu1"].title == "GPU 0"


def test_a_disconnected_hosts_tiles_and_panels_are_greyed_with_their_last_figures(
        window, qtbot):
    shown(window, qtbot, 1366, 768)
    world = World()
    window.on_snapshot(three_hosts(world))
    since = world.epoch - 30
    for _ in range(2):
        window.on_snapshot(three_hosts(world, state=DISCONNECTED, since=since, reason=REFUSED))
    qtbot.wait(20)
    area = window.gpu_area
    stale = f"disconnected since {clock_text(since)}"
    tile = area.tiles["2@gpu2"]
    assert tile.stale_text == stale
    assert tile.memory_text == f"{fmt_bytes(int(72.8 * (1 << 30)))} / 80.0 GiB"  # not 0
    assert not area.tiles["0@gpu1"].stale_text  # the other host is live
    header = area.headers["gpu2"]
    assert header.stale and header.text_of(header.state_label) == f"● {stale}"
    assert header.text_of(header.reason_label) == REFUSED and header.reason_label.isVisibleTo(
        header)
    assert REFUSED in header.toolTip()
    area.select_gpu("2@gpu2")  # its panel shown (a hidden one is drawn when shown)
    panel = window.gpu_area._panel("2@gpu2")
    assert panel.isVisible()
    assert panel.state_label.text() == f"● {stale}"
    assert panel.state_label.toolTip() == REFUSED
    assert panel.memory_text().startswith(fmt_bytes(int(72.8 * (1 << 30))))
    assert panel.gauge.stale and panel.gauge.used_fraction == pytest.approx(0.91)
    # The header names its last fullest GPU, greyed with it.
    assert header.text_of(header.fullest_label) == "fullest: GPU 2 · 91 %"


def test_a_connecting_host_without_a_snapshot_has_its_header_alone(window, qtbot):
    shown(window, qtbot, 1366, 768)
    world = World()
    new = world.host("gpu3", state=CONNECTING, since=world.epoch)
    window.on_snapshot(world.snap([gpu(0)], [new]))
    area = window.gpu_area
    assert list(area.tiles) == ["0"]
    assert area.groups == ["", "gpu3"]
    header = area.headers["gpu3"]
    assert header.text_of(header.state_label) == "● connecting…"
    assert header.isVisible() and header.text_of(header.fullest_label) == ""


def test_only_connecting_hosts_and_no_driver_show_their_headers(window, qtbot):
    shown(window, qtbot, 1366, 768)
    world = World()
    new = world.host("gpu3", state=CONNECTING, since=world.epoch)
    window.on_snapshot(world.snap([], [new], error=NO_DRIVER))
    assert window.stack.currentWidget() is window.monitor_page
    assert window.gpu_area.headers["gpu3"].isVisible()
    assert not window.gpu_area.empty_label.isVisible()


def test_no_driver_with_hosts_shows_the_hosts_and_the_local_problem_in_one_line(
        window, qtbot):
    shown(window, qtbot, 1366, 768)
    world = World()
    one = world.host("gpu1", gpu(0, "gpu1"), gpu(1, "gpu1"))
    window.on_snapshot(world.snap([], [one], error=NO_DRIVER))
    assert window.stack.currentWidget() is window.monitor_page
    bar = window.local_problem
    assert bar.isVisible() and bar.reason == NO_DRIVER
    assert bar.title_label.text() == "This machine: no NVIDIA driver"
    # It takes its own room: above the GPU area, covering nothing.
    assert bar.geometry().bottom() < window.splitter.geometry().top()
    assert sorted(window.gpu_area.tiles) == ["0@gpu1", "1@gpu1"]
    assert window.gpu_area.groups == ["gpu1"]  # no empty group for this machine
    assert window.top_bar.summary().startswith("1 host  ·  2 GPUs")
    assert "hosts: 1 of 1 connected" in window.source_label.text()
    with qtbot.waitSignal(window.retry_requested):
        bar.retry_button.click()
    with qtbot.waitSignal(window.demo_requested):
        bar.demo_button.click()
    # The hosts gone: the whole no-driver page again.
    window.on_snapshot(world.snap([], [], error=NO_DRIVER))
    assert window.stack.currentWidget() is window.no_driver_view


def test_two_hosts_gpu_0_are_kept_apart(window, qtbot):
    shown(window, qtbot, 2560, 1600)
    world = World()
    one = world.host("gpu1", gpu(0, "gpu1", 20))
    two = world.host("gpu2", gpu(0, "gpu2", 50, name="NVIDIA H100 80GB HBM3"))
    for _ in range(2):
        window.on_snapshot(world.snap([], [one, two], error=NO_DRIVER))
    qtbot.wait(20)
    a, b = window.panels["0@gpu1"], window.panels["0@gpu2"]
    assert a.title_label.text() == b.title_label.text() == "GPU 0"
    assert a.name_label.text().endswith(" — gpu1") and b.name_label.text().endswith(" — gpu2")
    assert a.memory_text().startswith("20.0 GiB") and b.memory_text().startswith("50.0 GiB")
    assert window.gpu_area.tiles["0@gpu2"].memory_text.startswith("50.0 GiB")


def test_a_removed_host_loses_its_tiles_panels_and_header(window, qtbot):
    shown(window, qtbot, 1366, 768)
    world = World()
    window.on_snapshot(three_hosts(world))
    qtbot.wait(20)
    local = [gpu(0), gpu(1)]
    one = world.host("gpu1", gpu(0, "gpu1"), gpu(1, "gpu1"))
    window.on_snapshot(world.snap(local, [one]))
    qtbot.wait(20)
    area = window.gpu_area
    assert area.ordered() == ["0", "1", "0@gpu1", "1@gpu1"]
    assert not any(d.endswith("@gpu2") for d in window.panels)
    assert "gpu2" not in area.headers and "gpu2" not in area.strip_headers
    # No hosts at all: no headers (one machine looks as it always did).
    window.on_snapshot(world.snap(local, []))
    assert area.groups == [] and not area.headers
    assert window.top_bar.summary().startswith("2 GPUs")


def test_the_hosts_button_asks_for_the_hosts_dialog(window, qtbot):
    assert window.cli_hosts == ()
    assert window.hosts_button.text() == "Hosts…"
    with qtbot.waitSignal(window.hosts_requested):
        window.hosts_button.click()


def test_a_long_summary_is_shortened_never_widening_the_window(window, qtbot):
    shown(window, qtbot, 900, 700)
    world = World()
    keys = [f"gpu-node-{i:02d}.cluster.example.org" for i in range(12)]
    hosts = [world.host(key, gpu(0, key)) for key in keys]
    window.on_snapshot(world.snap([gpu(0)], hosts))
    qtbot.wait(20)
    assert window.width() == 900
    label = window.summary_label
    assert window.top_bar.summary().startswith("13 hosts")
    assert label.toolTip() == window.top_bar.summary()
    assert label.text().endswith("…")
