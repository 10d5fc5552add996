"""PyTorch processes holding VRAM without an agent: found from /proc, their
environment named, and the command that invites the agent there offered."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import psutil
import pytest

from app.core.diagnosis.agentless import AgentlessEnv, environment_of
from app.core.diagnosis.doctor import Doctor
from app.core.monitor.samples import GpuSample, HostStatus, ProcessSample, Snapshot

MiB = 1024**2
linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc")


def fake_proc(root, pid: int, *, environ: dict[str, str], argv0: str, exe: str,
              maps: str = "7f00-7f01 r-xp 0 0:0 0 /env/lib/libtorch_cpu.so\n") -> None:
    d = root / str(pid)
    d.mkdir(parents=True)
    (d / "environ").write_bytes(b"\0".join(f"{k}={v}".encode() for k, v in environ.items()))
    (d / "cmdline").write_bytes(argv0.encode() + b"\0train.py\0")
    (d / "maps").write_text(maps)
    (d / "exe").symlink_to(exe)
    (d / "cwd").symlink_to(root)


def test_the_environment_comes_from_virtual_env_argv0_or_the_interpreter(tmp_path):
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "pyvenv.cfg").write_text("home = /usr/bin\n")
    conda = tmp_path / "conda"
    (conda / "conda-meta").mkdir(parents=True)
    root = tmp_path / "proc"
    fake_proc(root, 1, environ={"VIRTUAL_ENV": "/home/ana/sd"}, argv0="python", exe="/usr/bin/py")
    fake_proc(root, 2, environ={}, argv0=str(venv / "bin" / "python"), exe="/usr/bin/python3")
    fake_proc(root, 3, environ={}, argv0="python", exe=str(conda / "bin" / "python3.11"))
    fake_proc(root, 4, environ={}, argv0="python3", exe="/usr/bin/python3.11")
    assert environment_of(1, str(root)) == AgentlessEnv("/home/ana/sd", None, "venv")
    assert environment_of(2, str(root)) == AgentlessEnv(str(venv), None, "venv")
    assert environment_of(3, str(root)) == AgentlessEnv(str(conda), None, "conda")
    user = environment_of(4, str(root))
    assert user == AgentlessEnv(None, "/usr/bin/python3.11", "user")
    assert user.command == "vram-steward agent install --user --python /usr/bin/python3.11"
    assert AgentlessEnv("/srv/my env", None, "venv").command == \
        "vram-steward agent install --env '/srv/my env'"
    assert environment_of(99, str(root)) is None  # unreadable: unknown, never a guess


def snapshot(rows, agents=None, t: float = 1000.0) -> Snapshot:
    return Snapshot(t, t, "nvml", "580", (GpuSample(0, "GPU", "GPU-0", 24 << 30, 8 << 30, None,
                                                     processes=tuple(rows)),),
                    agents=agents or {})


@linux_only
def test_the_doctor_names_a_real_torch_process_without_an_agent(tmp_path):
    child = subprocess.Popen([sys.executable, "-c", "import torch, sys, time; print('ready', "
                              "flush=True); time.sleep(60)"], stdout=subprocess.PIPE, text=True,
                             env={k: v for k, v in os.environ.items()
                                  if k not in ("VIRTUAL_ENV", "CONDA_PREFIX")})
    plain = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        assert child.stdout.readline().strip() == "ready"
        rows = [ProcessSample(p.pid, 3 * 1024 * MiB if p is child else 512 * MiB,
                              name="python", user="me", command=f"python {n}",
                              create_time=psutil.Process(p.pid).create_time(),
                              host_status=HostStatus.OK)
                for p, n in ((child, "train.py"), (plain, "other.py"))]
        out = Doctor().observe(snapshot(rows))
        found = [d for d in out.diagnoses if d.kind == "no_agent"]
        assert len(found) == 1  # the process that never imported torch is not one
        (d,) = found
        assert d.pid == child.pid and d.title == f"train.py ({child.pid}) holds 3.0 GiB without an agent"
        prefix = sys.prefix if sys.prefix != sys.base_prefix else None
        (fix,) = d.fixes
        assert fix.action == "install_agent" and fix.command
        if prefix is not None:  # this test runs in a virtualenv: named by argv[0]
            assert fix.command == f"vram-steward agent install --env {prefix}"
        assert "next start" in fix.text
        with_agent = Doctor().observe(snapshot(rows, agents={child.pid: object()}))
        assert not [x for x in with_agent.diagnoses if x.kind == "no_agent"]
    finally:
        for p in (child, plain):
            p.kill()
            p.wait()


def test_several_processes_of_one_environment_are_one_finding(tmp_path, monkeypatch):
    env = AgentlessEnv("/home/ana/sd", None, "venv")
    monkeypatch.setattr("app.core.diagnosis.agentless.AgentlessFinder.torch_env",
                        lambda self, pid, ct: env if pid in (10, 11, 12) else None)
    rows = [ProcessSample(pid, 4 * 1024 * MiB + pid, name="python", command=f"python w{pid}.py",
                          create_time=time.time(), host_status=HostStatus.OK)
            for pid in (10, 11, 12, 13)]
    rows.append(ProcessSample(14, 1024 * MiB, host_status=HostStatus.SIMULATED))
    (d,) = [x for x in Doctor().observe(snapshot(rows)).diagnoses if x.kind == "no_agent"]
    assert d.title.startswith("3 processes hold 12.0 GiB without an agent")
    assert d.pid is None and d.gpu == "0" and d.figures["processes"] == 3
    assert d.fixes[0].command == "vram-steward agent install --env /home/ana/sd"
