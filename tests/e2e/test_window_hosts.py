"""End to end: the window with several hosts, built as the application builds
it (``History``, a ``Sampler`` with a ``Fleet``, ``ControllerAdapter`` around
``HostControllers``, ``MainWindow``), offscreen, in this process; checked by
reading its widgets.

Three hosts and one that cannot be reached:

* this machine: one GPU of the fake ``pynvml`` (``tests.fakes.fake_pynvml``,
  read by the real ``NvmlSource`` on the sampler thread), one process on it;
* ``a`` on 127.0.0.2: ``serve`` over plain HTTP on the ABI fake of
  libnvidia-ml, two A100s, one process;
* ``b`` on 127.0.0.3: ``serve`` over HTTPS with a self-signed certificate and
  a token, three H100s, one process and a real agent on its GPU 0;
* ``ssh://root@127.0.0.1:PORT``: a real sshd whose host key is not known.

Asserted: the GPU area groups the three hosts' tiles under their headers and
the process table names each row's host; a free cache and an unload sent from
the window reach ``b``'s agent, and the server's refusal comes back with its
reason; ``a`` killed: only its tiles, panels and rows go stale (last figures
kept), the others keep updating, and ``a`` restarted on its port is live again;
``b`` frozen (SIGSTOP): stale within seconds (the heartbeat), live again when
thawed; the ssh host's header says to run ``ssh`` once in a terminal.  All the
while the GUI thread keeps processing events: a QTimer keeps firing and no
batch of events takes long.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from app.core.control.records import CacheAction, ModelAction
from app.core.control.requests import Unload
from app.core.monitor.hosts import host_view, snapshot_of
from app.core.remote.host_config import HostConfig, host_key
from app.core.remote.link import HEARTBEAT_S
from app.core.remote.ssh_transport import SSH_OPTIONS_ENV
from app.core.serve.access import own_user
from app.core.units import fmt_bytes
from app.ui.style.hosts import clock_text
from tests.e2e import remote_world as rw
from tests.e2e import sshd as ssh_world
from tests.e2e.fleet_world import Server, self_signed
from tests.e2e.remote_world import Agent, Host, token_file
from tests.fakes import fake_pynvml
from tests.fakes.nvml_abi import FakeGpu, FakeNvml, FakeProcess
from tests.fakes.processes import wait_for

pytestmark = pytest.mark.skipif(rw.unavailable_reason() is not None,
                                reason=rw.unavailable_reason() or "")

G = 1 << 30
TOKEN = "w-mine-" + "3" * 24
PERIOD_S = 0.25
#: The longest a batch of GUI events may take, and the longest the window's
#: QTimer may go without firing while the test pumps events.
LONGEST_BATCH_S = 1.5
LONGEST_GAP_S = 1.5


def a100(n: int) -> FakeGpu:
    return FakeGpu("NVIDIA A100-SXM4-40GB", f"GPU-a1000000-0000-4000-8000-00000000000{n}",
                   40 * G + 2048 * n, (11 + 9 * n) * G + 4_321, util_gpu=55 - 30 * n)


def h100(n: int) -> FakeGpu:
    return FakeGpu("NVIDIA H100 80GB HBM3", f"GPU-b1000000-0000-4000-8000-00000000000{n}",
                   80 * G - 2048 * n, (7 + 21 * n) * G + 8_765, util_gpu=20 * n)


LOCAL_TOTAL, LOCAL_USED = 48 * G - 1024, 9 * G + 333


class Gui:
    """The GUI thread as the test drives it: events processed in short
    batches; how long the longest batch took, and the longest gap between two
    beats of a QTimer while the test waited (pumping)."""

    def __init__(self, app: Any) -> None:
        from PySide6.QtCore import QTimer

        self.app = app
        self.beats = 0
        self.longest_batch = 0.0
        self.longest_gap = 0.0
        self._last: float | None = None  # the last beat while waiting; None: not waiting
        self.timer = QTimer()
        self.timer.setInterval(50)
        self.timer.timeout.connect(self._beat)
        self.timer.start()

    def _beat(self) -> None:
        now = time.monotonic()
        self.beats += 1
        if self._last is not None:
            self.longest_gap = max(self.longest_gap, now - self._last)
        self._last = now

    def pump(self) -> None:
        started = time.monotonic()
        self.app.processEvents()
        self.longest_batch = max(self.longest_batch, time.monotonic() - started)

    def until(self, what: str, probe: Callable[[], Any], timeout: float = 30.0,
              why: Callable[[], object] | None = None) -> Any:
        """``probe()``'s first truthy answer, events processed meanwhile; fails
        naming ``what`` (and ``why()``: what was seen) after ``timeout``."""
        deadline = time.monotonic() + timeout
        self._last = time.monotonic()
        try:
            while True:
                self.pump()
                answer = probe()
                if answer:
                    return answer
                if time.monotonic() > deadline:
                    seen = f": {why()}" if why is not None else ""
                    raise AssertionError(f"timed out after {timeout:.0f} s waiting for "
                                         f"{what}{seen}")
                time.sleep(0.02)
        finally:
            self._last = None

    def check(self) -> None:
        """The GUI thread kept processing events."""
        assert self.longest_batch < LONGEST_BATCH_S, \
            f"a batch of GUI events took {self.longest_batch:.2f} s"
        assert self.longest_gap < LONGEST_GAP_S, \
            f"the GUI's timer went {self.longest_gap:.2f} s without firing"


@dataclass
class World:
    gui: Gui
    window: Any  # MainWindow
    a: Server
    b: Server
    a_key: str
    b_key: str
    ssh_key: str | None
    ssh_port: int | None
    no_ssh: str | None  # why there is no ssh host
    agent: Agent
    local_pid: int
    a_pid: int
    b_pid: int
    local_gpu: fake_pynvml.FakeGpu

    # -- what the window shows --------------------------------------------------------
    @property
    def area(self) -> Any:
        return self.window.gpu_area

    def host_dids(self, key: str) -> list[str]:
        """The GPU ids the area shows for ``key`` ("" this machine)."""
        return [d for d in self.area.ordered() if self.area.samples[d].host == key]

    def rows(self) -> dict[tuple[str, int], dict[str, str]]:
        """(host key, pid) -> every cell's text of that process's row."""
        from app.ui.window.process_rows import COLUMNS, HOST_ROLE, KEY_ROLE

        model = self.window.table.source_model
        rows = {}
        for r in range(model.rowCount()):
            key = model.index(r, 0).data(KEY_ROLE)
            if not isinstance(key[1], tuple):
                continue  # the unattributed row
            host = model.index(r, 0).data(HOST_ROLE)
            rows[(host, key[1][0])] = {name: model.index(r, c).data()
                                       for c, name in enumerate(COLUMNS)}
        return rows

    def row(self, key: str, pid: int) -> dict[str, str] | None:
        return self.rows().get((key, pid))

    def stale_texts(self, key: str) -> set[str | None]:
        """What the host's tiles, panels and header say of its state."""
        header = self.area.headers[key]
        texts = {self.area.tiles[d].stale_text for d in self.host_dids(key)}
        texts |= {p.stale_text for d, p in self.window.panels.items()
                  if self.area.samples[d].host == key}
        texts.add(header.text_of(header.state_label).removeprefix("● "))
        return texts

    def is_stale(self, key: str) -> bool:
        texts = self.stale_texts(key)
        text = next(iter(texts)) if len(texts) == 1 else None
        return text is not None and text.startswith("disconnected since ")

    def is_live(self, key: str) -> bool:
        tiles = {self.area.tiles[d].stale_text for d in self.host_dids(key)}
        header = self.area.headers.get(key)
        state = header.text_of(header.state_label) if header is not None else ""
        return tiles == {None} and state == "● connected" and all(
            p.stale_text is None for d, p in self.window.panels.items()
            if self.area.samples[d].host == key)

    def uptime(self, key: str, pid: int) -> str | None:
        row = self.row(key, pid)
        return None if row is None else row["Uptime"]

    def keeps_updating(self, *hosts: tuple[str, int], timeout: float = 10.0) -> None:
        """Each (host, pid)'s row shows a later uptime than now, and its host's
        tiles stay live (this machine: "")."""
        before = {h: self.uptime(*h) for h in hosts}
        self.gui.until(f"{hosts} to keep updating", lambda: all(
            self.uptime(*h) not in (None, before[h]) for h in hosts), timeout,
            why=lambda: {h: (before[h], self.uptime(*h)) for h in hosts})
        for key, _pid in hosts:
            if key:
                assert self.is_live(key), self.stale_texts(key)
            else:
                assert {self.area.tiles[d].stale_text for d in self.host_dids("")} == {None}

    def host_snapshot(self, key: str) -> Any:
        return snapshot_of(self.window.latest, key) if self.window.latest is not None else None

    def finished(self, action: CacheAction | ModelAction, timeout: float = 60.0) -> None:
        self.gui.until(f"{action} to finish", lambda: action.done_at is not None, timeout)

    def measured(self, action: CacheAction | ModelAction, timeout: float = 30.0) -> None:
        """``action`` measured against NVML: the window has shown its last text
        of it (a later measurement would replace the status bar's next one)."""
        self.gui.until(f"{action} to be measured", lambda: action.measured, timeout)

    def hosts_status(self) -> str:
        """The status bar's "hosts: N of M connected"."""
        return self.window.source_label.text().rpartition("·")[2].strip()

    def summary(self) -> str:
        return self.window.top_bar.summary_label.toolTip()

    def shot(self, name: str) -> None:
        """The window as a PNG in VRAM_STEWARD_SHOTS, when set (to look at)."""
        folder = os.environ.get("VRAM_STEWARD_SHOTS")
        if folder:
            self.window.refresh(force=True)
            self.gui.pump()
            self.window.grab().save(os.path.join(folder, f"window-hosts-{name}.png"))


def _sleeper() -> subprocess.Popen:
    proc = subprocess.Popen(["sleep", "600"], stdin=subprocess.DEVNULL)
    threading.Thread(target=proc.wait, daemon=True).start()  # reaped when it ends
    return proc


def _sshd() -> tuple[ssh_world.Sshd | None, str | None]:
    """A real sshd, or why there is none (its host is then left out)."""
    why = ssh_world.unavailable_reason()
    return (None, why) if why is not None else (ssh_world.Sshd(), None)


@pytest.fixture(scope="module")
def world(qapp) -> Iterator[World]:
    from app.core.control.controller import AppController
    from app.core.control.hosts import HostControllers
    from app.core.monitor.history import History, HistoryConfig
    from app.core.monitor.nvml_source import NvmlSource
    from app.core.remote.fleet import Fleet
    from app.ui.settings.values import UiSettings
    from app.ui.shell.controller import ControllerAdapter
    from app.ui.shell.sampler import Sampler
    from app.ui.window.main_window import MainWindow

    folder = tempfile.mkdtemp(prefix="vst-window-")
    os.chmod(folder, 0o700)
    made = self_signed(folder, "127.0.0.3")
    if isinstance(made, str):
        pytest.skip(made)
    cert, key = made
    sleepers = [_sleeper() for _ in range(3)]
    local_pid, a_pid, b_pid = (p.pid for p in sleepers)
    patch = pytest.MonkeyPatch()
    patch.setenv("VRAM_STEWARD_STATE_DIR", rw.private_dir(folder, "state"))
    host_a = Host(FakeNvml(gpus=[a100(0), a100(1)],
                           processes=[FakeProcess(a_pid, 1, 6 * G + 1_234)]))
    host_b = Host(FakeNvml(gpus=[h100(0), h100(1), h100(2)],
                           processes=[FakeProcess(b_pid, 2, 4 * G + 5_678)]))
    sshd, no_sshd = _sshd()
    parts: list[Any] = []
    sampler = controller = window = gui = agent = None
    try:
        agent = Agent(host_b, "agent")
        # the agent's process on b's GPU 0, as the driver would list it
        host_b.fake.processes.append(FakeProcess(agent.pid, 0, 2 * G + 777))
        host_b.fake.write(host_b.config)
        a = Server(host_a, "127.0.0.2:0")
        parts.append(a)
        b = Server(host_b, "127.0.0.3:0", "--tls-cert", cert, "--tls-key", key, "--token-file",
                   token_file(folder, [f"{TOKEN} {own_user()[0]} read,control"]))
        parts.append(b)
        configs = [HostConfig(a.url),
                   HostConfig(b.url, token_file(folder, [TOKEN], "b-token"), cert)]
        ssh_key = ssh_port = None
        if sshd is not None:
            patch.setenv(SSH_OPTIONS_ENV, f"-F {sshd.stranger_config()}")
            ssh = HostConfig(f"ssh://root@127.0.0.1:{sshd.port}",
                             remote_command=host_a.remote_command())
            configs.append(ssh)
            ssh_key, ssh_port = host_key(ssh.address), sshd.port
        local_gpu = fake_pynvml.FakeGpu("NVIDIA RTX 6000 Ada Generation", total=LOCAL_TOTAL,
                                        used=LOCAL_USED).add_process(local_pid, 3 * G + 99)
        local = fake_pynvml.FakeNvml([local_gpu])

        # as app.ui.shell.application.run_gui builds the window
        history = History(HistoryConfig(period_s=PERIOD_S))
        fleet = Fleet(configs)
        sampler = Sampler(lambda: NvmlSource(nvml=local), PERIOD_S, fleet=fleet)
        controller = ControllerAdapter(HostControllers(AppController(lambda: sampler.agents),
                                                       fleet.directory))
        window = MainWindow(history, settings=UiSettings(), controller=controller)
        sampler.snapshot_ready.connect(window.on_snapshot)
        sampler.notices_changed.connect(window.show_folder_notices)
        window.set_policy(lambda: sampler.policy)
        window.resize(1366, 768)
        window.show()
        gui = Gui(qapp)
        sampler.start()
        a_key, b_key = fleet.keys()[:2]
        yield World(gui, window, a, b, a_key, b_key, ssh_key, ssh_port, no_sshd, agent,
                    local_pid, a_pid, b_pid, local_gpu)
    finally:
        if controller is not None:
            controller.wait(2.0)
            controller.core.close()
        if sampler is not None:
            sampler.stop()  # closes the fleet
        if window is not None:
            window.close()
            window.deleteLater()
        if gui is not None:
            gui.timer.stop()
            gui.pump()
        if agent is not None:
            agent.stop()
        for part in parts:
            part.close()
        if sshd is not None:
            sshd.stop()
        patch.undo()
        for proc in sleepers:
            proc.kill()
        for host in (host_a, host_b):
            host.close()
        shutil.rmtree(folder, ignore_errors=True)


def test_the_window_shows_this_machine_and_both_hosts(world):
    w, area = world, world.area
    keys = [world.a_key, world.b_key] + ([world.ssh_key] if world.ssh_key else [])
    w.gui.until("both hosts' GPUs in the window", lambda: len(area.tiles) == 6
                and w.is_live(w.a_key) and w.is_live(w.b_key), 60,
                why=lambda: (sorted(area.tiles), area.groups))
    assert world.a_key.startswith("127.0.0.2:") and world.b_key.startswith("127.0.0.3:")
    assert area.groups == ["", *keys]  # this machine first, then the hosts in order
    assert area.ordered() == ["0", f"0@{w.a_key}", f"1@{w.a_key}",
                              f"0@{w.b_key}", f"1@{w.b_key}", f"2@{w.b_key}"]
    tiles = area.tiles
    assert (tiles["0"].name, tiles["0"].memory_text) == (
        "RTX 6000 Ada Generation", f"{fmt_bytes(LOCAL_USED)} / {fmt_bytes(LOCAL_TOTAL)}")
    for n in range(2):
        tile = tiles[f"{n}@{w.a_key}"]
        assert (tile.title, tile.name, tile.memory_text) == (
            f"GPU {n}", "A100-SXM4-40GB", f"{fmt_bytes(a100(n).used)} / "
                                          f"{fmt_bytes(a100(n).total)}")
    for n in range(3):
        tile = tiles[f"{n}@{w.b_key}"]
        assert (tile.title, tile.name, tile.memory_text) == (
            f"GPU {n}", "H100 80GB HBM3", f"{fmt_bytes(h100(n).used)} / "
                                          f"{fmt_bytes(h100(n).total)}")
    for key in (w.a_key, w.b_key):
        header = area.headers[key]
        assert header.text_of(header.title_label) == key
        assert header.text_of(header.state_label) == "● connected"
    assert area.headers[""].text_of(area.headers[""].title_label) == "this machine"
    # every host's process in the table, under its host, its GPU as its host numbers it
    table = w.window.table
    assert table.host_column_shown and not table.isColumnHidden(0)
    w.gui.until("every host's rows", lambda: all(w.row(*h) for h in (
        ("", w.local_pid), (w.a_key, w.a_pid), (w.b_key, w.b_pid), (w.b_key, w.agent.pid))), 30,
        why=lambda: sorted(w.rows()))
    shown = {(r["Host"], r["GPU"], r["PID"], r["VRAM"]) for r in w.rows().values()}
    assert {("this machine", "0", str(w.local_pid), fmt_bytes(3 * G + 99)),
            (w.a_key, "1", str(w.a_pid), fmt_bytes(6 * G + 1_234)),
            (w.b_key, "2", str(w.b_pid), fmt_bytes(4 * G + 5_678)),
            (w.b_key, "0", str(w.agent.pid), fmt_bytes(2 * G + 777))} <= shown
    w.keeps_updating(("", w.local_pid), (w.a_key, w.a_pid), (w.b_key, w.b_pid))
    assert w.hosts_status() == f"hosts: 2 of {len(keys)} connected"
    in_use = LOCAL_USED + sum(g.used for g in (a100(0), a100(1), h100(0), h100(1), h100(2)))
    assert f"6 GPUs  ·  4 processes  ·  {fmt_bytes(in_use)} of " in w.summary(), w.summary()
    w.shot("three")
    w.gui.check()


def test_an_ssh_host_with_an_unknown_key_says_what_to_run_and_hangs_nothing(world):
    if world.ssh_key is None:
        pytest.skip(world.no_ssh or "no sshd")
    area, key = world.area, world.ssh_key
    header = world.gui.until("the ssh host's reason", lambda: (
        h := area.headers.get(key)) and h.text_of(h.reason_label) and h, 30,
        why=lambda: area.groups)
    reason = header.text_of(header.reason_label)
    assert "Host key verification failed" in reason, reason
    assert f"`ssh -p {world.ssh_port} root@127.0.0.1` once in a terminal" in reason, reason
    assert header.text_of(header.state_label).startswith("● disconnected since "), \
        header.text_of(header.state_label)
    assert not world.host_dids(key)  # never connected: a header, no GPUs
    # the others are not held up by it
    world.keeps_updating(("", world.local_pid), (world.a_key, world.a_pid),
                         (world.b_key, world.b_pid))
    world.gui.check()


def test_the_window_acts_on_the_agent_of_its_host_and_shows_the_servers_refusal(world):
    w, b, pid = world, world.b_key, world.agent.pid
    w.gui.until("b's agent and its model in the window", lambda: (
        s := w.host_snapshot(b)) is not None and pid in s.agents and s.agents[pid].models, 60)
    row = w.row(b, pid)
    assert row is not None and row["PyTorch"], row  # the agent's row says so
    freed = w.window.free_cache(pid, b)
    assert isinstance(freed, CacheAction) and freed.host == b
    w.finished(freed)
    assert freed.results[pid].ok, freed.results
    label = w.window.action_label
    w.measured(freed)
    w.gui.until("the free's outcome in the status bar", lambda: label.text().startswith(
        f"{b}: ") and "freed" in label.text(), 10, why=label.text)

    unloaded = w.window.submit(Unload(pid, "m1", to="disk", host=b))
    assert isinstance(unloaded, ModelAction) and unloaded.host == b
    w.finished(unloaded)
    assert unloaded.result is not None and unloaded.result.ok, unloaded.result
    w.gui.until("the model offloaded in b's snapshot", lambda: [
        m.state for m in w.host_snapshot(b).agents[pid].models] == ["offloaded"], 30)
    w.measured(unloaded)
    w.gui.until("the unload's outcome in the status bar", lambda: label.text().startswith(
        f"{b}: ") and "unloaded m1 to disk" in label.text(), 10, why=label.text)
    assert w.window.controller.last_model_actions(pid, b)["m1"] is unloaded
    assert w.window.controller.last_model_actions(pid, w.a_key) == {}

    # b's pid is no process of a's: refused by the window's controller, nothing sent
    assert w.window.free_cache(pid, w.a_key) is None

    # The process ends between the window's sample and the click: the window
    # still shows its agent (no event processed since), the server refuses.
    w.agent.stop()
    wait_for(f"process {pid} to be gone", lambda: not os.path.exists(f"/proc/{pid}"), 10, 0.02)
    assert pid in snapshot_of(w.window.latest, b).agents
    gone = w.window.free_cache(pid, b)
    assert isinstance(gone, CacheAction) and gone.host == b
    w.finished(gone)
    assert not gone.results[pid].ok
    assert f"no process {pid} on this host" in (gone.results[pid].error or ""), gone.results
    w.gui.until("the refusal in the status bar", lambda: label.text().startswith(f"{b}: ")
                and f"no process {pid} on this host" in label.text(), 10, why=label.text)
    w.gui.check()


def test_a_killed_host_goes_stale_alone_and_comes_back_on_its_port(world):
    w, a = world, world.a_key
    w.gui.until("a live", lambda: w.is_live(a), 30)
    w.area.select_gpu(f"0@{a}")  # its panel made and shown (in the overview too)
    w.gui.until("a's panel", lambda: f"0@{a}" in w.window.panels, 10)
    memory = {d: w.area.tiles[d].memory_text for d in w.host_dids(a)}
    killed_at = time.time()
    w.a.kill()
    w.gui.until("a's tiles, panel and header stale", lambda: w.is_stale(a), 20,
                why=lambda: w.stale_texts(a))
    (text,) = w.stale_texts(a)
    view = host_view(w.window.latest, a)
    assert killed_at - 1 <= view.since <= time.time()
    assert text == f"disconnected since {clock_text(view.since)}"
    # its last figures stay, greyed, never 0 and never dropped
    assert {d: w.area.tiles[d].memory_text for d in w.host_dids(a)} == memory
    panel = w.window.panels[f"0@{a}"]
    assert panel.stale_text == text
    row = w.gui.until("a's rows stale", lambda: (r := w.row(a, w.a_pid)) and r["Host"] != a
                      and r, 10, why=lambda: w.row(a, w.a_pid))
    assert row["Host"] == f"{a} · {text}" and row["VRAM"] == fmt_bytes(6 * G + 1_234)
    assert w.hosts_status().startswith("hosts: 1 of "), w.hosts_status()
    # the memory in use: of the hosts whose figures are current only
    in_use = LOCAL_USED + sum(g.used for g in (h100(0), h100(1), h100(2)))
    w.gui.until("the summary without a's memory", lambda: f"{fmt_bytes(in_use)} of "
                f"{fmt_bytes(LOCAL_TOTAL + sum(h100(n).total for n in range(3)))} in use"
                in w.summary(), 5, why=w.summary)
    w.shot("one-disconnected")
    uptime = row["Uptime"]
    # b and this machine keep updating, untouched
    w.keeps_updating(("", w.local_pid), (w.b_key, w.b_pid))
    assert w.uptime(a, w.a_pid) == uptime  # a's row is the last known
    assert w.row(w.b_key, w.b_pid)["Host"] == w.b_key
    w.a.restart()
    w.gui.until("a live again", lambda: w.is_live(a), 45, why=lambda: w.stale_texts(a))
    w.keeps_updating(("", w.local_pid), (a, w.a_pid), (w.b_key, w.b_pid))
    assert w.row(a, w.a_pid)["Host"] == a
    w.gui.check()


def test_a_frozen_host_goes_stale_within_seconds_and_comes_back(world):
    w, b = world, world.b_key
    w.gui.until("b live", lambda: w.is_live(b), 30)
    w.area.select_gpu(f"1@{b}")
    w.gui.until("b's panel", lambda: f"1@{b}" in w.window.panels, 10)
    memory = {d: w.area.tiles[d].memory_text for d in w.host_dids(b)}
    w.b.freeze()
    frozen_at = time.monotonic()
    try:
        w.gui.until("b's tiles, panel and header stale", lambda: w.is_stale(b),
                    HEARTBEAT_S + 15, why=lambda: w.stale_texts(b))
        took = time.monotonic() - frozen_at
        assert took < HEARTBEAT_S + 5, f"{took:.1f} s to show a frozen host as stale"
        assert {d: w.area.tiles[d].memory_text for d in w.host_dids(b)} == memory
        w.gui.until("b's rows stale", lambda: w.row(b, w.b_pid)["Host"].startswith(
            f"{b} · disconnected since "), 10, why=lambda: w.row(b, w.b_pid))
        w.keeps_updating(("", w.local_pid), (w.a_key, w.a_pid))
    finally:
        w.b.thaw()
    w.gui.until("b live again", lambda: w.is_live(b), 45, why=lambda: w.stale_texts(b))
    w.keeps_updating(("", w.local_pid), (w.a_key, w.a_pid), (b, w.b_pid))
    assert w.row(b, w.b_pid)["Host"] == b
    w.gui.check()


def test_this_machines_figures_move_while_the_hosts_are_watched(world):
    w = world
    w.local_gpu.used = LOCAL_USED + 5 * G  # read by the sampler thread on its next tick
    w.gui.until("this machine's tile to follow", lambda: w.area.tiles["0"].memory_text == (
        f"{fmt_bytes(LOCAL_USED + 5 * G)} / {fmt_bytes(LOCAL_TOTAL)}"), 10,
        why=lambda: w.area.tiles["0"].memory_text)
    assert w.is_live(w.a_key) and w.is_live(w.b_key)
    w.gui.check()
