"""``serve`` on a real GPU: its snapshot and its Prometheus figures agree with
nvidia-smi and with the PyTorch process's own ``torch.cuda`` figures, and an
action through ``--host`` reaches the process's agent."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request

import pytest

from tests.gpu.agent_children import CUDA_CHILD, ROOT, entry_for, read_line, start
from tests.gpu.test_nvidia_smi_agreement import smi_apps, smi_gpus, within_mib


def metrics(url: str) -> dict[tuple[str, frozenset], float]:
    from prometheus_client.parser import text_string_to_metric_families

    text = urllib.request.urlopen(url + "/metrics", timeout=10).read().decode()
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def one(samples, name: str, **labels: str) -> float | None:
    want = set(labels.items())
    found = [v for (n, ls), v in samples.items() if n == name and want <= ls]
    return found[0] if len(found) == 1 else None


@pytest.fixture
def serve(tmp_path, runtime):
    state = tmp_path / "serve-state"
    state.mkdir(mode=0o700)
    env = {**os.environ, "VRAM_STEWARD_RUNTIME_DIR": runtime,
           "VRAM_STEWARD_STATE_DIR": str(state)}
    proc = subprocess.Popen([sys.executable, str(ROOT / "main.py"), "serve", "--listen",
                             "127.0.0.1:0", "--no-history", "--no-auto-unload"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env, cwd=ROOT)
    first = proc.stdout.readline()
    assert first.startswith("listening on "), proc.stderr.read()
    yield first.split()[-1], state / "serve-tokens", env
    proc.terminate()
    assert proc.wait(20) == 0


def test_serve_agrees_with_nvidia_smi_and_the_process_own_figures(tmp_path, runtime, serve):
    url, tokens, env = serve
    proc, stop, _ = start(tmp_path, runtime, CUDA_CHILD)
    try:
        own = read_line(proc)
        pid = str(own["pid"])
        entry_for(runtime, own["pid"])
        deadline = time.monotonic() + 60
        while True:
            samples = metrics(url)
            if one(samples, "vram_steward_torch_reserved_bytes", pid=pid) is not None:
                break
            assert time.monotonic() < deadline, "the server never saw the agent"
            time.sleep(0.5)
        assert one(samples, "vram_steward_torch_allocated_bytes", pid=pid) == own["allocated"]
        assert one(samples, "vram_steward_torch_reserved_bytes", pid=pid) == own["reserved"]
        gpus = smi_gpus()
        for uuid, g in gpus.items():
            assert within_mib(one(samples, "vram_steward_gpu_memory_total_bytes", uuid=uuid),
                              g["total"])
        apps = smi_apps()
        uuid = next(u for (u, p) in apps if p == own["pid"])
        served = one(samples, "vram_steward_process_gpu_memory_bytes", pid=pid, uuid=uuid)
        assert within_mib(served, apps[(uuid, own["pid"])])
        status = subprocess.run([sys.executable, "main.py", "status", "--json", "--host", url],
                                capture_output=True, text=True, env=env, cwd=ROOT, timeout=60)
        assert status.returncode == 0, status.stderr
        data = json.loads(status.stdout)
        for gpu in data["gpus"]:
            assert within_mib(gpu["memory_total"], gpus[gpu["uuid"]]["total"])
        report = data["agents"][pid]
        assert report["devices"][0]["reserved"] == own["reserved"]
        freed = subprocess.run([sys.executable, "main.py", "free-cache", "--pid", pid, "--json",
                                "--host", url, "--token-file", str(tokens)],
                               capture_output=True, text=True, env=env, cwd=ROOT, timeout=60)
        assert freed.returncode == 0, freed.stderr + freed.stdout
        result = json.loads(freed.stdout)[0]
        assert result["ok"] and result["reserved_before"] == own["reserved"]
        assert result["reserved_after"] < own["reserved"]
    finally:
        stop.write_text("stop")
        after = read_line(proc)
        proc.wait(timeout=60)
    assert after["reserved"] < own["reserved"]  # the cache really went, in the process itself
