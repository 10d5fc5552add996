"""What the installed hook costs a Python that never imports torch.

``agent install`` into a fresh virtualenv, then ``python -c pass`` there with
the hook's ``.pth`` in place and set aside (renamed), interleaved run by run so
both see the same machine; also the threads such a process has.  Target: at
most 2 ms more, and no thread.  ``--json`` prints one JSON object instead.

    python -m benchmarks.bench_hook [--runs 60] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from app.core import agent_install

BASE_PYTHON = getattr(sys, "_base_executable", sys.executable)


def _start_s(python: str, env: dict[str, str]) -> float:
    t0 = time.perf_counter()
    subprocess.run([python, "-c", "pass"], check=True, env=env)
    return time.perf_counter() - t0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=60)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        env_dir = Path(tmp) / "env"
        subprocess.run([BASE_PYTHON, "-m", "venv", "--without-pip", str(env_dir)], check=True)
        python = agent_install.env_python(str(env_dir))
        variables = {k: v for k, v in os.environ.items()
                     if k not in ("PYTHONPATH", "VRAM_STEWARD_AGENT")}
        env = agent_install.probe(python)
        agent_install.install(env, keep_record=False)
        pth = Path(env.site) / agent_install.PTH_NAME
        off = pth.with_suffix(".off")
        for _ in range(5):  # warm the page cache and the bytecode of both paths
            _start_s(python, variables)
        with_hook, without = [], []
        for _ in range(args.runs):
            with_hook.append(_start_s(python, variables))
            pth.rename(off)
            without.append(_start_s(python, variables))
            off.rename(pth)
        threads = subprocess.run([python, "-c", "import threading, sys; print(threading."
                                  "active_count(), 'vram_steward_agent' in sys.modules)"],
                                 capture_output=True, text=True, env=variables, check=True)
        agent_install.uninstall(env, keep_record=False)
    figures = {"runs": args.runs, "with_hook_ms": statistics.median(with_hook) * 1000,
               "without_ms": statistics.median(without) * 1000,
               "threads_with_hook": int(threads.stdout.split()[0]),
               "agent_loaded": threads.stdout.split()[1] == "True"}
    figures["added_ms"] = figures["with_hook_ms"] - figures["without_ms"]
    if args.json:
        print(json.dumps(figures))
    else:
        print(f"python -c pass, median of {args.runs} interleaved runs: "
              f"{figures['without_ms']:.2f} ms without the hook, {figures['with_hook_ms']:.2f} ms "
              f"with it: {figures['added_ms']:+.2f} ms (target <= 2 ms); threads with the hook: "
              f"{figures['threads_with_hook']}, agent loaded: {figures['agent_loaded']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
