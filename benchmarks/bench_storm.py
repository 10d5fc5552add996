"""A storm of same-user requests against one agent: the host's forward rate.

    python -m benchmarks.bench_storm [--clients 8] [--seconds 10] [--pairs 3] [--json]

A host process under ``main.py run`` calls a small eval model in a loop (CPU,
one thread).  In each pair it counts its forwards for ``--seconds`` quietly
(the agent there, nobody asking), then again while ``--clients`` client
processes of the same user loop unload (to disk: a CPU model) / reload of that
model through ``app.core.agents.client`` as fast as the agent answers them.
Prints the forward rates, the ratio storm / quiet of the medians (target >=
0.5: the host keeps at least half its forward rate), and what the clients
got (unloaded, reloaded, busy, refused).  Figures are printed, never asserted.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from app.core.agents import client as agent_client  # noqa: E402
from app.core.agents import registry as agent_registry  # noqa: E402

HOST = textwrap.dedent("""
    import json, os, sys, time
    import torch
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(),
                                torch.nn.Linear(128, 64)).eval().requires_grad_(False)
    x = torch.randn(8, 64)
    print(json.dumps({"pid": os.getpid()}), flush=True)
    for line in sys.stdin:
        seconds = float(line)
        n, end = 0, time.perf_counter() + seconds
        with torch.no_grad():
            while time.perf_counter() < end:
                model(x)
                n += 1
        print(json.dumps({"rate": n / seconds}), flush=True)
""")

CLIENT = textwrap.dedent("""
    import collections, json, os, sys
    sys.path.insert(0, sys.argv[1])
    from app.core.agents import client, registry
    runtime, pid, model, stop = sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5]
    entry = next(e for e in registry.read_registry(runtime) if e.pid == pid)
    seen = collections.Counter()
    while not os.path.exists(stop):
        r = client.unload(entry, model, "disk", False, "manual", 60.0)
        seen["unloaded" if r.ok else (r.code or "error")] += 1
        r = client.reload(entry, model, 60.0)
        seen["reloaded" if r.ok else (r.code or "error")] += 1
    print(json.dumps(seen), flush=True)
""")


def _env(runtime: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "VRAM_STEWARD_AGENT"}
    env["VRAM_STEWARD_RUNTIME_DIR"] = runtime
    env["XDG_CACHE_HOME"] = os.path.join(runtime, "cache")
    env["XDG_STATE_HOME"] = os.path.join(runtime, "state")
    return env


def _model_id(runtime: str, pid: int) -> str:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        for entry in agent_registry.read_registry(runtime):
            if entry.pid == pid:
                try:
                    report = agent_client.query_report(entry, 5.0)
                except Exception:
                    break
                if report.models:
                    return report.models[0].id
        time.sleep(0.2)
    raise SystemExit("the host's agent did not list its model")


def run(clients: int, seconds: float, pairs: int) -> dict:
    runtime = tempfile.mkdtemp(prefix="vsb-storm-")
    tmp = Path(runtime)
    (tmp / "host.py").write_text(HOST)
    (tmp / "client.py").write_text(CLIENT)
    env = _env(runtime)
    host = subprocess.Popen([sys.executable, str(ROOT / "main.py"), "run", "--",
                             sys.executable, str(tmp / "host.py")],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
    pid = json.loads(host.stdout.readline())["pid"]
    model = _model_id(runtime, pid)

    def rate() -> float:
        host.stdin.write("%f\n" % seconds)
        host.stdin.flush()
        return json.loads(host.stdout.readline())["rate"]

    quiet, storm = [], []
    outcomes: collections.Counter = collections.Counter()
    try:
        rate()  # warm-up
        for k in range(pairs):
            quiet.append(rate())
            stop = tmp / ("stop-%d" % k)
            procs = [subprocess.Popen([sys.executable, str(tmp / "client.py"), str(ROOT),
                                       runtime, str(pid), model, str(stop)],
                                      stdout=subprocess.PIPE, text=True, env=env)
                     for _ in range(clients)]
            time.sleep(1.0)  # the clients are looping
            storm.append(rate())
            stop.write_text("stop")
            for p in procs:
                out, _ = p.communicate(timeout=120)
                outcomes.update(json.loads(out or "{}"))
            rate()  # the model back and settled before the next quiet run
    finally:
        host.stdin.close()
        host.wait(60)
    ratio = statistics.median(storm) / statistics.median(quiet)
    return {"clients": clients, "seconds": seconds, "pairs": pairs,
            "quiet_forwards_per_s": quiet, "storm_forwards_per_s": storm,
            "ratio": ratio, "client_outcomes": dict(outcomes)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    result = run(args.clients, args.seconds, args.pairs)
    if args.json:
        print(json.dumps(result))
        return 0
    print("storm: %d clients looping unload/reload, %d pairs of %.0f s"
          % (result["clients"], result["pairs"], result["seconds"]))
    print("  quiet: %s forwards/s" % ", ".join("%.0f" % r for r in result["quiet_forwards_per_s"]))
    print("  storm: %s forwards/s" % ", ".join("%.0f" % r for r in result["storm_forwards_per_s"]))
    print("  ratio storm/quiet (medians): %.2f  (target >= 0.5)" % result["ratio"])
    print("  the clients got: %s" % ", ".join("%s %d" % kv for kv in
                                              sorted(result["client_outcomes"].items())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
