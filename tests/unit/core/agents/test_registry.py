"""The agents' registry: live entries listed, stale ones pruned (only our own
files, and a socket only inside the runtime dir)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
import pytest

from app.core.agents import registry
from app.core.agents.registry import read_registry

pytestmark = pytest.mark.skipif(not hasattr(socket, "AF_UNIX"), reason="needs AF_UNIX")


def test_runtime_dir_follows_env(monkeypatch, tmp_path):
    monkeypatch.setenv("VRAM_STEWARD_RUNTIME_DIR", str(tmp_path))
    assert registry.runtime_dir() == str(tmp_path)
    monkeypatch.delenv("VRAM_STEWARD_RUNTIME_DIR")
    if os.name != "nt":
        assert registry.runtime_dir() == os.path.join(
            tempfile.gettempdir(), f"vram-steward-{os.getuid()}")



def test_registry_lists_live_agents_and_skips_malformed_files(agent, runtime):
    path = agent.register(runtime)
    folder = os.path.dirname(path)
    for name, text in [("bad.json", "{not json"), ("list.json", "[1, 2]"),
                       ("nopid.json", json.dumps({"address": "x", "transport": "unix"})),
                       ("huge.json", "{" + " " * 100_000 + "}"), ("notes.txt", "hello")]:
        with open(os.path.join(folder, name), "w") as fh:
            fh.write(text)
    os.mkdir(os.path.join(folder, "dir.json"))
    entries = read_registry(runtime)
    assert [e.pid for e in entries] == [agent.pid]
    assert entries[0].path == path
    # malformed files are left alone (an agent may be writing one)
    assert os.path.exists(os.path.join(folder, "bad.json"))


def test_missing_registry_is_empty(tmp_path):
    assert read_registry(str(tmp_path / "nowhere")) == []


def dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def write_entry(runtime: str, data: dict, name: str, mode: int = 0o600) -> str:
    """An entry as the agent writes it: 0600 in a 0700 ``agents`` dir."""
    folder = os.path.join(runtime, "agents")
    os.makedirs(folder, mode=0o700, exist_ok=True)
    path = os.path.join(folder, name)
    with os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode), "w") as fh:
        json.dump(data, fh)
    os.chmod(path, mode)
    return path


def test_dead_pid_entry_and_its_socket_are_pruned(runtime):
    pid = dead_pid()
    sock_path = os.path.join(runtime, "agents", f"{pid}.sock")
    os.makedirs(os.path.dirname(sock_path), mode=0o700, exist_ok=True)
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(sock_path)
    s.close()
    path = write_entry(runtime, {"pid": pid, "create_time": time.time() - 5,
                                 "address": sock_path, "transport": "unix"}, f"{pid}.json")
    assert read_registry(runtime) == []
    assert not os.path.exists(path)
    assert not os.path.exists(sock_path)


def test_socket_outside_the_runtime_dir_is_never_deleted(runtime, tmp_path):
    pid = dead_pid()
    outside = tmp_path / "elsewhere.sock"
    outside.write_text("not ours to delete")
    path = write_entry(runtime, {"pid": pid, "create_time": 1.0, "address": str(outside),
                                 "transport": "unix"}, f"{pid}.json")
    assert read_registry(runtime) == []
    assert not os.path.exists(path)
    assert outside.exists()


def test_pid_reuse_is_detected_by_create_time(runtime):
    me = os.getpid()
    real = psutil.Process(me).create_time()
    reused = write_entry(runtime, {"pid": me, "create_time": real - 3600, "address": "/x.sock",
                                   "transport": "unix"}, "reused.json")
    close = write_entry(runtime, {"pid": me, "create_time": real + 0.5, "address": "/y.sock",
                                  "transport": "unix"}, "close.json")
    entries = read_registry(runtime)
    assert [e.path for e in entries] == [close]
    assert not os.path.exists(reused)


def test_prune_false_keeps_files(runtime):
    path = write_entry(runtime, {"pid": dead_pid(), "create_time": 1.0, "address": "/x.sock",
                                 "transport": "unix"}, "dead.json")
    assert read_registry(runtime, prune=False) == []
    assert os.path.exists(path)


@pytest.mark.skipif(not hasattr(os, "getuid") or os.getuid() != 0, reason="needs root to chown")
def test_files_owned_by_someone_else_are_never_deleted(runtime):
    path = write_entry(runtime, {"pid": dead_pid(), "create_time": 1.0, "address": "/x.sock",
                                 "transport": "unix"}, "theirs.json")
    os.chown(path, 65534, 65534)
    assert read_registry(runtime) == []
    assert os.path.exists(path)


def test_ownership_check_refuses_other_owners(runtime, monkeypatch):
    """Without root: pretend to be another uid, so the file is 'someone else's'."""
    if not hasattr(os, "getuid"):
        pytest.skip("POSIX only")
    path = write_entry(runtime, {"pid": dead_pid(), "create_time": 1.0, "address": "/x.sock",
                                 "transport": "unix"}, "theirs.json")
    real_uid = os.getuid()
    monkeypatch.setattr(registry.os, "getuid", lambda: real_uid + 12345)
    assert read_registry(runtime) == []
    assert os.path.exists(path)



# -- only private folders and files of ours are read ----------------------------------


def test_a_registry_file_others_can_reach_or_a_link_is_never_read(agent, runtime, tmp_path):
    good = agent.register(runtime)
    data = json.loads(Path(good).read_text())
    os.unlink(good)
    open_to_all = write_entry(runtime, data, "open.json", mode=0o644)
    elsewhere = tmp_path / "entry.json"
    elsewhere.write_text(json.dumps(data))
    os.chmod(elsewhere, 0o600)
    os.symlink(elsewhere, os.path.join(runtime, "agents", "link.json"))
    assert read_registry(runtime) == []
    assert registry.load_entry(open_to_all) is None
    os.chmod(open_to_all, 0o600)
    assert [e.pid for e in read_registry(runtime)] == [agent.pid]


def test_a_registry_dir_others_can_reach_is_never_read_and_said_once(agent, runtime):
    agent.register(runtime)
    folder = os.path.join(runtime, "agents")
    os.chmod(folder, 0o755)
    scan = registry.scan_registry(runtime)
    assert scan.entries == []
    assert scan.notices == [f"vram-steward: {folder} is open to group/others (mode 755): "
                            "its agents are ignored"]
    os.chmod(runtime, 0o777)
    assert registry.scan_registry(runtime).notices == [
        f"vram-steward: {runtime} is open to group/others (mode 777): its agents are ignored"]


def test_agents_in_the_default_dir_and_in_a_fallback_are_all_read(agent, monkeypatch):
    """Agents that started before and after someone took the default name."""
    from app.agent import paths as agent_paths

    base = os.path.realpath(tempfile.mkdtemp(prefix="vstg", dir="/tmp"))
    os.chmod(base, 0o1777)
    monkeypatch.setattr(tempfile, "tempdir", base)
    monkeypatch.delenv("VRAM_STEWARD_RUNTIME_DIR", raising=False)
    try:
        primary = os.path.join(base, f"vram-steward-{os.getuid()}")
        os.mkdir(primary, 0o700)
        agent.register(primary)
        fallback = tempfile.mkdtemp(prefix=f"vram-steward-{os.getuid()}-", dir=base)
        data = agent.entry_json()
        data["pid"] = os.getppid()  # another live process of ours
        data["create_time"] = psutil.Process(os.getppid()).create_time()
        write_entry(fallback, data, "other.json")
        assert agent_paths.runtime_candidates().dirs == [primary, fallback]
        assert [e.pid for e in read_registry()] == sorted([agent.pid, os.getppid()])
    finally:
        subprocess.run(["rm", "-rf", base], check=False)


def _users_tree(base: Path, name: str, dir_uid: int, file_uid: int, pid: int) -> Path:
    runtime = base / name
    (runtime / "agents").mkdir(parents=True)
    entry = runtime / "agents" / f"{pid}.json"
    entry.write_text(json.dumps({"pid": pid, "create_time": psutil.Process(pid).create_time(),
                                 "address": str(runtime / "s.sock"), "transport": "unix"}))
    os.chmod(entry, 0o600)
    for path in (runtime, runtime / "agents"):
        os.chmod(path, 0o700)
        os.chown(path, dir_uid, dir_uid)
    os.chown(entry, file_uid, file_uid)
    return entry


@pytest.mark.skipif(not hasattr(os, "getuid") or os.getuid() != 0,
                    reason="reading other users' registries is root's (the system service)")
def test_root_reads_every_users_registry_but_only_where_name_and_owner_agree(monkeypatch,
                                                                            tmp_path):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.delenv("VRAM_STEWARD_RUNTIME_DIR", raising=False)
    pid = os.getpid()
    good = _users_tree(tmp_path, "vram-steward-4242", 4242, 4242, pid)
    _users_tree(tmp_path, "vram-steward-5151-x1", 4242, 4242, pid)  # named for 5151: planted
    _users_tree(tmp_path, "vram-steward-6363", 6363, 7373, pid)  # a file of someone else
    scan = registry.scan_registry(all_users=True, prune=True)
    assert [(e.path, e.uid) for e in scan.entries] == [(str(good), 4242)]
    assert registry.scan_registry(all_users=False).entries == []  # only root's own otherwise


def test_other_users_registries_are_not_read_by_anyone_but_root(monkeypatch, tmp_path):
    monkeypatch.setattr(os, "getuid", lambda: 1000)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    (tmp_path / "vram-steward-1001" / "agents").mkdir(parents=True)
    assert registry.other_users_registries() == []
