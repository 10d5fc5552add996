from __future__ import annotations

import glob
import os
import signal
import subprocess
import time

from .conftest import (
    PYTHON,
    Client,
    agent_env,
    read_entries,
    registry_dir,
    short_tmpdir,
    wait_entry,
    wait_line,
)


def test_training_child_report_matches_its_own_numbers(training_child):
    entry = training_child["entry"]
    assert [e["pid"] for e in read_entries(registry_dir(training_child["runtime"]))] == [entry["pid"]]
    assert entry["transport"] == "unix" and entry["token"] is None
    assert entry["torch"] and entry["cwd"] == training_child["runtime"]
    import psutil
    assert entry["create_time"] == psutil.Process(entry["pid"]).create_time()
    c = Client(entry["address"])
    rep = c.call("report")["result"]
    [m] = rep["models"]
    exp = training_child["expect"]
    assert (m["params"], m["param_bytes"], m["buffer_bytes"]) == (
        exp["params"], exp["param_bytes"], exp["buffer_bytes"])
    assert m["dtype"] == "float32" and m["device"] == "cpu" and m["training"] is True
    assert rep["torch_status"] == "loaded" and rep["cuda_initialized"] is False
    time.sleep(0.2)
    fc = c.call("free_cache")["result"]
    assert fc["freed"] == 0 and fc["reserved_before"] is None and "not initialised" in fc["note"]
    g = c.call("gc")["result"]
    assert g["collected"] >= 0 and g["seconds"] >= 0
    assert c.call("report")["result"]["models"][0]["last_used"] is not None
    c.close()
    assert training_child["proc"].poll() is None  # still training


def test_normal_exit_removes_entry_and_socket():
    rt = short_tmpdir()
    proc = subprocess.Popen([PYTHON, "-c", "import sys; sys.stdin.readline()"], env=agent_env(rt),
                            stdin=subprocess.PIPE, text=True)
    entry = wait_entry(rt, proc.pid)
    assert os.path.exists(entry["address"])
    proc.communicate("\n", timeout=30)
    assert proc.returncode == 0
    assert read_entries(registry_dir(rt)) == []
    assert not os.path.exists(entry["address"])


NO_TORCH = r'''
import sys, time, os, multiprocessing as mp
import app
print("APP " + app.MARKER, flush=True)

def work(q):
    import vram_steward_agent
    q.put(vram_steward_agent.is_running())

if __name__ == "__main__":
    import vram_steward_agent
    print("RUNNING %s" % vram_steward_agent.is_running(), flush=True)
    ctx = mp.get_context("spawn")
    q = ctx.Queue(); p = ctx.Process(target=work, args=(q,)); p.start()
    print("SPAWNCHILD %s" % q.get(timeout=60), flush=True)
    print("ENTRIES %d" % len(os.listdir(os.path.join(os.environ["VRAM_STEWARD_RUNTIME_DIR"], "agents"))), flush=True)
    p.join()
    sys.stdin.readline()
    print("TORCH %s" % ("torch" in sys.modules), flush=True)
'''


def test_no_torch_child_user_app_package_and_chained_sitecustomize(tmp_path):
    rt = short_tmpdir()
    work = tmp_path / "proj"
    (work / "app").mkdir(parents=True)
    (work / "app" / "__init__.py").write_text("MARKER = 'user-app'\n")
    usersite = tmp_path / "usersite"
    usersite.mkdir()
    (usersite / "sitecustomize.py").write_text("import os\nos.environ['USER_SITE_RAN'] = '1'\nprint('USERSITE', flush=True)\n")
    (work / "main.py").write_text(NO_TORCH)
    proc = subprocess.Popen([PYTHON, "main.py"], cwd=str(work), stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=agent_env(rt, PYTHONPATH=str(usersite)))
    assert proc.stdout.readline().strip() == "USERSITE"
    assert wait_line(proc, "APP ") == "user-app"
    assert wait_line(proc, "RUNNING ") == "True"
    assert wait_line(proc, "SPAWNCHILD ") == "False"  # spawn children start no agent
    assert wait_line(proc, "ENTRIES ") == "1"
    entry = wait_entry(rt, proc.pid)
    c = Client(entry["address"])
    rep = c.call("report")["result"]
    c.close()
    assert rep["torch"] is None and rep["torch_status"] == "torch not loaded"
    assert rep["models"] == [] and rep["cuda_initialized"] is False
    out, err = proc.communicate("\n", timeout=30)
    assert "TORCH False" in out, err
    assert proc.returncode == 0


DATALOADER = r'''
import os, sys, time, torch
from torch.utils.data import DataLoader, Dataset
class D(Dataset):
    def __len__(self): return 40
    def __getitem__(self, i):
        time.sleep(0.02); return torch.tensor([float(i)])
if __name__ == "__main__":
    rt = os.environ["VRAM_STEWARD_RUNTIME_DIR"]
    dl = DataLoader(D(), batch_size=2, num_workers=2, multiprocessing_context="fork")
    for i, b in enumerate(dl):
        if i == 5:
            print("ENTRIES %d" % len(os.listdir(os.path.join(rt, "agents"))), flush=True)
            print("SOCKETS %d" % len(os.listdir(os.path.join(rt, "s"))), flush=True)
            sys.stdin.readline()
    print("DONE", flush=True)
'''


def test_dataloader_fork_workers_make_no_agents():
    rt = short_tmpdir()
    proc = subprocess.Popen([PYTHON, "-c", DATALOADER], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=agent_env(rt))
    assert wait_line(proc, "ENTRIES ") == "1"
    assert wait_line(proc, "SOCKETS ") == "1"
    entry = wait_entry(rt, proc.pid)
    c = Client(entry["address"])  # workers closed their copies; the parent still serves
    assert c.call("ping")["result"] == {"pong": True}
    c.close()
    out, err = proc.communicate("\n", timeout=60)
    assert "DONE" in out, err
    assert read_entries(registry_dir(rt)) == []


def test_sigkill_leaves_the_entry():
    rt = short_tmpdir()
    proc = subprocess.Popen([PYTHON, "-c", "import time; time.sleep(60)"], env=agent_env(rt))
    entry = wait_entry(rt, proc.pid)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(10)
    assert [e["pid"] for e in read_entries(registry_dir(rt))] == [entry["pid"]]  # the app prunes


def test_disabled_by_env():
    rt = short_tmpdir()
    r = subprocess.run([PYTHON, "-c", "import vram_steward_agent as v; print(v.start())"],
                       env=agent_env(rt, VRAM_STEWARD_AGENT="0"), capture_output=True,
                       text=True, timeout=30)
    assert r.stdout.strip() == "False"
    assert not glob.glob(os.path.join(rt, "agents", "*.json"))
