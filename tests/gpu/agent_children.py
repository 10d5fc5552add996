"""Real child processes started under the agent (``main.py run``) for the GPU
tests: start one with a script, read its JSON lines, find its registry entry."""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import textwrap
from pathlib import Path

from tests.fakes.processes import agent_entry

ROOT = Path(__file__).resolve().parents[2]

#: A model, 64 MiB live and 512 MiB cached on cuda:0: prints its pid and its own
#: allocated / reserved figures, then those figures again once the stop file exists.
CUDA_CHILD = textwrap.dedent("""
    import json, os, sys, time
    import torch

    dev = torch.device("cuda:0")
    model = torch.nn.Linear(1024, 1024).to(dev)
    keep = torch.empty(64 * 1024 * 1024, dtype=torch.uint8, device=dev)  # 64 MiB live
    junk = torch.empty(512 * 1024 * 1024, dtype=torch.uint8, device=dev)  # 512 MiB ...
    del junk  # ... now cached
    torch.cuda.synchronize()
    print(json.dumps({"pid": os.getpid(), "allocated": torch.cuda.memory_allocated(0),
                      "reserved": torch.cuda.memory_reserved(0)}), flush=True)
    stop = sys.argv[1]
    while not os.path.exists(stop):
        time.sleep(0.05)
    print(json.dumps({"allocated": torch.cuda.memory_allocated(0),
                      "reserved": torch.cuda.memory_reserved(0)}), flush=True)
""")


def start(tmp_path: Path, runtime: str, script: str):
    """The child runs ``script`` with a stop-file path as argv[1]; its own
    runtime and state dirs, and no allocator configuration from the caller's
    environment.  Returns (process, stop file, script path)."""
    path = tmp_path / "child.py"
    path.write_text(script)
    stop = tmp_path / "stop"
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF")}
    env.update(VRAM_STEWARD_RUNTIME_DIR=runtime, VRAM_STEWARD_STATE_DIR=str(tmp_path / "state"))
    proc = subprocess.Popen([sys.executable, str(ROOT / "main.py"), "run", "--", sys.executable,
                             str(path), str(stop)], stdout=subprocess.PIPE, env=env,
                            stdin=subprocess.DEVNULL)
    return proc, stop, path


def read_line(proc, timeout: float = 120.0) -> dict:
    ready, _, _ = select.select([proc.stdout], [], [], timeout)
    assert ready, "child printed nothing"
    line = proc.stdout.readline()
    assert line, f"child exited (rc={proc.poll()})"
    return json.loads(line)


entry_for = agent_entry  # the GPU tests' name for it
