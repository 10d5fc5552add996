"""Whose an offload file is, and which leftovers an agent may remove."""

from __future__ import annotations

import os
import subprocess
import sys

from app.agent.storage import leftovers
from app.agent.storage.leftovers import Identity

ME = leftovers.current()
BOOTED = 1_000_000.0


def _dead_pid() -> int:
    return int(subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                              capture_output=True, text=True).stdout)


def test_a_name_carries_the_identity_it_was_made_with():
    name = leftovers.identity() + "-m3-2.bin"
    assert leftovers.parse(name) == ME
    assert ME.pid == os.getpid() and ME.start == leftovers.start_ticks(os.getpid())
    assert leftovers.parse("1234-m1-0.bin") is None  # a name of another shape
    assert leftovers.parse("notes.txt") is None


def test_only_this_hosts_provably_dead_processes_leave_leftovers():
    dead = _dead_pid()
    same = ME._replace
    assert leftovers.is_leftover(same(pid=dead), ME, BOOTED + 5, BOOTED)
    assert leftovers.is_leftover(same(start=ME.start + 1), ME, BOOTED + 5, BOOTED)  # reused pid
    assert not leftovers.is_leftover(ME, ME, BOOTED + 5, BOOTED)  # alive
    assert not leftovers.is_leftover(same(pid=1, start=leftovers.start_ticks(1) or 0), ME,
                                     BOOTED + 5, BOOTED)
    other_host = Identity("0badc0de", "f" * 32, ME.pidns, dead, 99)
    assert not leftovers.is_leftover(other_host, ME, 0.0, BOOTED)  # never another host's
    assert not leftovers.is_leftover(same(pidns=ME.pidns + 1, pid=dead), ME, 0.0, BOOTED)
    earlier_boot = same(boot="e" * 32, pid=dead)
    assert leftovers.is_leftover(earlier_boot, ME, BOOTED - 60, BOOTED)  # written before boot
    assert not leftovers.is_leftover(earlier_boot, ME, BOOTED + 60, BOOTED)


def test_sweep_removes_only_leftovers_of_a_private_folder(tmp_path):
    folder = tmp_path / "offload"
    folder.mkdir(mode=0o700)
    dead = _dead_pid()
    gone = ME._replace(pid=dead).prefix() + "-m1-0.bin"
    live = ME.prefix() + "-m1-0.bin"
    for name in (gone, live, "other.bin"):
        (folder / name).write_bytes(b"x")
    assert leftovers.sweep(str(folder)) == 1
    assert sorted(os.listdir(folder)) == sorted([live, "other.bin"])
    os.chmod(folder, 0o777)  # not private: never touched
    (folder / gone).write_bytes(b"x")
    assert leftovers.sweep(str(folder)) == 0 and (folder / gone).exists()


def test_without_proc_a_file_of_this_host_goes_when_its_pid_is_not_running():
    """macOS has no boot id or start time to read: the pid alone decides, and
    a running pid (reused or not) keeps its file."""
    me = Identity(ME.host, "0", 0, os.getpid(), 0)
    dead = _dead_pid()
    assert leftovers.is_leftover(me._replace(pid=dead), me, 0.0, None)
    assert not leftovers.is_leftover(me._replace(pid=1), me, 0.0, None)
    assert not leftovers.is_leftover(me, me, 0.0, None)
    assert not leftovers.is_leftover(me._replace(host="0badc0de", pid=dead), me, 0.0, None)
