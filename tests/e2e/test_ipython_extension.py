"""``%load_ext vram_steward_agent`` in a real IPython shell (what a Jupyter kernel runs)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

pytest.importorskip("IPython")

ROOT = Path(__file__).resolve().parents[2]
BOOTSTRAP = ROOT / "app" / "agent" / "_bootstrap"

SESSION = r"""
import sys, json, os
import torch
earlier = torch.nn.Linear(8, 4).eval()  # built in a cell before the extension was loaded
sys.path.insert(0, {bootstrap!r})
get_ipython().run_line_magic("load_ext", "vram_steward_agent")
model = torch.nn.Linear(64, 32).eval()  # built and used in one cell
with torch.no_grad():
    model(torch.ones(1, 64))
    earlier(torch.ones(1, 8))
import time
entries = os.path.join({runtime!r}, "agents")
deadline = time.time() + 30
while time.time() < deadline and not os.listdir(entries):
    time.sleep(0.1)
print("ENTRY " + json.dumps(sorted(os.listdir(entries))), flush=True)
sys.path.insert(0, {root!r})
from app.core.agents.client import query_report
from app.core.agents.registry import read_registry
[entry] = read_registry({runtime!r})
from app.core.agents.client import unload
for _ in range(50):
    report = query_report(entry, 10.0)
    if len(report.models) == 2:
        break
    time.sleep(0.1)
big = next(m for m in report.models if m.params == 64 * 32 + 32)
result = unload(entry, big.id, to=None)  # eval, requires_grad left True: no force needed
with torch.no_grad():
    same = torch.equal(model(torch.ones(1, 64)), model(torch.ones(1, 64)))
print("REPORT " + json.dumps({{"pid": report.pid, "me": os.getpid(),
      "params": sorted(m.params for m in report.models),
      "used": [m.last_used is not None for m in report.models],
      "unloaded": [result.ok, result.event.state if result.event else None, result.error],
      "same": same}}), flush=True)
get_ipython().run_line_magic("unload_ext", "vram_steward_agent")
print("AFTER " + json.dumps(sorted(os.listdir(entries))), flush=True)
"""


def test_load_ext_starts_the_agent_in_an_ipython_shell():
    runtime = tempfile.mkdtemp(prefix="vs-ipy-", dir="/tmp")
    os.chmod(runtime, 0o700)
    script = Path(runtime) / "session.ipy"
    script.write_text(SESSION.format(bootstrap=str(BOOTSTRAP), runtime=runtime, root=str(ROOT)))
    env = dict(os.environ, VRAM_STEWARD_RUNTIME_DIR=runtime, IPYTHONDIR=str(Path(runtime) / "ipy"))
    env.pop("VRAM_STEWARD_AGENT", None)
    done = subprocess.run([sys.executable, "-m", "IPython", "--quick", "--no-banner",
                           "--colors=NoColor", str(script)],
                          capture_output=True, text=True, timeout=180, env=env, cwd=runtime)
    lines = {ln.split(" ", 1)[0]: ln.split(" ", 1)[1] for ln in done.stdout.splitlines()
             if ln.split(" ", 1)[0] in ("ENTRY", "REPORT", "AFTER")}
    assert "REPORT" in lines, done.stdout + done.stderr
    report = json.loads(lines["REPORT"])
    assert report["pid"] == report["me"]  # the agent runs inside the kernel process
    assert report["params"] == [8 * 4 + 4, 64 * 32 + 32]
    # both calls were seen: the one in the cell that built the model, and the
    # one of a model built before %load_ext (its hooks were placed by start())
    assert report["used"] == [True, True]
    assert report["unloaded"] == [True, "offloaded", None] and report["same"] is True
    assert json.loads(lines["ENTRY"]) == [f"{report['me']}.json"]
    assert json.loads(lines["AFTER"]) == []  # %unload_ext removes the registration
