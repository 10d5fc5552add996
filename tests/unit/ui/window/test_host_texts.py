"""What a host group's header and the window's summary say of hosts."""

from __future__ import annotations

import dataclasses

from app.core.monitor.hosts import CONNECTED, CONNECTING, DISCONNECTED, HostView
from app.core.monitor.samples import DeviceState
from app.ui.style.hosts import clock_text
from app.ui.window.host_texts import (
    fullest_text,
    group_state,
    group_title,
    hosts_count_text,
    hosts_status_text,
    short_reason,
)
from app.ui.window.texts import display_order, summary_texts
from tests.unit.ui.window.host_snapshots import World, gpu


def view(key="gpu1", state=CONNECTED, **kw) -> HostView:
    return HostView(key, f"ssh://{key}", state, **kw)


def test_a_groups_title_names_the_host_and_its_own_name_when_it_differs():
    assert group_title("gpu1", view(name="dgx-07")) == ("gpu1", "dgx-07")
    assert group_title("gpu1", view(name="gpu1")) == ("gpu1", "")
    assert group_title("", None) == ("this machine", "")


def test_state_and_reason():
    assert group_state(None) == ""
    assert group_state(view()) == "connected"
    assert group_state(view(state=CONNECTING)) == "connecting…"
    down = view(state=DISCONNECTED, since=1_700_000_000.0,
                reason="host key unknown —\n  run `ssh gpu1` once")
    assert group_state(down) == f"disconnected since {clock_text(1_700_000_000.0)}"
    assert short_reason(down) == "host key unknown — run `ssh gpu1` once"
    assert short_reason(view(reason="old")) == ""  # connected: no reason shown


def test_the_fullest_gpu_by_share_not_bytes_and_unknown_is_no_text():
    gpus = [gpu(0, "gpu1", 60, 80), gpu(1, "gpu1", 20, 24), gpu(2, "gpu1", 10, 80)]
    assert fullest_text(gpus) == "fullest: GPU 1 · 83 %"  # 20 of 24 GiB beats 60 of 80
    lost = dataclasses.replace(gpus[1], state=DeviceState.LOST)
    assert fullest_text([gpus[0], lost]) == "fullest: GPU 0 · 75 %"
    assert fullest_text([dataclasses.replace(gpus[0], memory_used=None)]) == ""
    assert fullest_text([]) == ""


def test_gpus_order_by_host_group_then_index():
    ids = ["1@b", "0@a", "10", "2", "0/1@a", "0@b", "0@zz"]
    assert sorted(ids, key=lambda d: display_order(d, ["b", "a"])) == [
        "2", "10", "0@b", "1@b", "0@a", "0/1@a", "0@zz"]
    assert display_order("3") == (0, 3, "")


def test_the_summary_counts_every_host_and_only_live_memory():
    world = World()
    up = world.host("gpu1", gpu(0, "gpu1", 20), gpu(1, "gpu1", 30, pids=(5, 6)))
    down = world.host("gpu2", gpu(0, "gpu2", 70), state=DISCONNECTED, since=world.epoch)
    snap = world.snap([gpu(0, used_gib=10, pids=(7,))], [up, down])
    summary, count = summary_texts(snap)
    assert summary == ("3 hosts (1 not connected)  ·  4 GPUs  ·  3 processes  ·  "
                       "60.0 GiB of 240.0 GiB in use")
    assert count == "3 on 4 GPUs"
    assert hosts_count_text(0, [up]) == "1 host"
    assert hosts_status_text(snap) == "hosts: 1 of 2 connected"
    assert hosts_status_text(world.snap([gpu(0)])) == ""
