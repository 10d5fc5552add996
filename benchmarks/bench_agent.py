"""The in-process agent's costs: training slowdown, round trips, start-up, discovery.

    python -m benchmarks.bench_agent [slowdown] [rtt] [startup] [discovery] [stephook]

(no argument: all five).  Figures are printed, nothing is asserted.

slowdown   a small CPU training loop (an MLP step of a few ms) run in a child,
           alternately without and with the agent (``main.py run``), a poller
           asking ``report`` at 4 Hz during the "with" runs; 5 pairs; prints the
           ratio of the medians.  Target <= 1.005.
rtt        ``ping`` and ``report`` round trips on one connection, median of 1000.
           Target <= 1 ms.
startup    ``vram_steward_agent.start()`` timed inside a child: after ``import
           torch`` (it scans the heap for models built before it and places their
           hooks on the calling thread), and before it (the launcher's case).
           Target <= 20 ms.
discovery  start()'s model scan and hook placement (``attach_existing``) on a
           heap with a million extra objects; seconds.
stephook   the optimizer step post-hook's cost per step (count + clock read), and
           with a sample forced on every step (on a GPU: the allocator read on the
           parameters' CUDA device; on a CPU the device check alone), against a
           small Adam step; microseconds.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from app.core.agents import connection as agent_connection  # noqa: E402
from app.core.agents import registry as agent_registry  # noqa: E402

BOOTSTRAP = ROOT / "app" / "agent" / "_bootstrap"

TRAIN = textwrap.dedent("""
    import json, os, sys, time
    import torch
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(512, 1024), torch.nn.ReLU(),
                                torch.nn.Linear(1024, 1024), torch.nn.ReLU(),
                                torch.nn.Linear(1024, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(64, 512), torch.randint(0, 10, (64,))
    loss_fn = torch.nn.CrossEntropyLoss()
    def step():
        opt.zero_grad(); loss_fn(model(x), y).backward(); opt.step()
    for _ in range(20):
        step()
    print(json.dumps({"pid": os.getpid(), "ready": True}), flush=True)
    sys.stdin.readline()  # wait for "go" (the poller is connected by then)
    t0 = time.perf_counter()
    for _ in range(int(sys.argv[1])):
        step()
    print(json.dumps({"seconds": time.perf_counter() - t0}), flush=True)
""")


def _env(runtime: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "VRAM_STEWARD_AGENT"}
    env["VRAM_STEWARD_RUNTIME_DIR"] = runtime
    return env


def _one_run(script: Path, runtime: str, steps: int, with_agent: bool) -> float:
    cmd = [sys.executable, str(script), str(steps)]
    if with_agent:
        cmd = [sys.executable, str(ROOT / "main.py"), "run", "--", *cmd]
    proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                            env=_env(runtime))
    first = json.loads(proc.stdout.readline())
    stop = threading.Event()
    polls = [0]
    poller = None
    if with_agent:
        entry = None
        deadline = time.monotonic() + 30
        while entry is None and time.monotonic() < deadline:
            entry = next((e for e in agent_registry.read_registry(runtime)
                          if e.pid == first["pid"]), None)
            time.sleep(0.05)
        if entry is None:
            raise SystemExit("the agent did not register")

        def poll() -> None:
            with agent_connection.AgentConnection(entry, 5.0) as conn:
                while not stop.is_set():
                    conn.call("report", {"models": True}, 5.0)
                    polls[0] += 1
                    stop.wait(0.25)

        poller = threading.Thread(target=poll, daemon=True)
        poller.start()
        time.sleep(0.3)
    proc.stdin.write("go\n")
    proc.stdin.flush()
    seconds = json.loads(proc.stdout.readline())["seconds"]
    stop.set()
    if poller:
        poller.join(5)
    proc.stdin.close()
    proc.wait(30)
    return seconds


def bench_slowdown(pairs: int = 5, steps: int = 1500) -> None:
    with tempfile.TemporaryDirectory(prefix="vsb-") as tmp:
        script = Path(tmp) / "train.py"
        script.write_text(TRAIN)
        without, with_ = [], []
        for i in range(pairs):
            order = [(False, without), (True, with_)] if i % 2 == 0 else \
                [(True, with_), (False, without)]
            for flag, bucket in order:
                bucket.append(_one_run(script, tmp, steps, flag))
        m0, m1 = statistics.median(without), statistics.median(with_)
        print(f"slowdown: {steps} steps, {m0 / steps * 1e3:.2f} ms/step without agent; "
              f"median {m0:.3f} s without, {m1:.3f} s with agent + 4 Hz report poller; "
              f"ratio {m1 / m0:.4f} (target <= 1.005)")
        print(f"          runs without: {[round(x, 3) for x in without]}")
        print(f"          runs with:    {[round(x, 3) for x in with_]}")


IDLE = textwrap.dedent("""
    import json, os, sys
    import torch
    model = torch.nn.Sequential(*[torch.nn.Linear(256, 256) for _ in range(8)])
    print(json.dumps({"pid": os.getpid()}), flush=True)
    sys.stdin.readline()
""")


def bench_rtt(n: int = 1000) -> None:
    with tempfile.TemporaryDirectory(prefix="vsb-") as tmp:
        script = Path(tmp) / "idle.py"
        script.write_text(IDLE)
        proc = subprocess.Popen([sys.executable, str(ROOT / "main.py"), "run", "--",
                                 sys.executable, str(script)], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, text=True, env=_env(tmp))
        pid = json.loads(proc.stdout.readline())["pid"]
        entry = None
        deadline = time.monotonic() + 30
        while entry is None and time.monotonic() < deadline:
            entry = next((e for e in agent_registry.read_registry(tmp) if e.pid == pid), None)
            time.sleep(0.05)
        try:
            with agent_connection.AgentConnection(entry, 5.0) as conn:
                conn.call("report", {"models": True}, 10.0)  # first: the model scan
                for method, params in (("ping", {}), ("report", {"models": True})):
                    times = []
                    for _ in range(n):
                        t0 = time.perf_counter()
                        conn.call(method, params, 5.0)
                        times.append(time.perf_counter() - t0)
                    times.sort()
                    print(f"rtt {method:<6}: median {statistics.median(times) * 1e3:.3f} ms, "
                          f"p99 {times[int(0.99 * n)] * 1e3:.3f} ms over {n} "
                          f"(target <= 1 ms)")
        finally:
            proc.stdin.close()
            proc.wait(30)


STARTUP = textwrap.dedent("""
    import json, sys, time
    sys.path.insert(0, sys.argv[1])
    before = sys.argv[2] == "before"
    if not before:
        import torch
    import vram_steward_agent
    t0 = time.perf_counter()
    vram_steward_agent.start()
    t1 = time.perf_counter()
    hooks_s = None
    if before:  # the launcher's case: torch comes later, the import hook sets up the agent
        import torch
        from _vram_steward_agent import runtime
        hooks_s = runtime.current().torch_setup_seconds
    print(json.dumps({"start_s": t1 - t0, "hooks_s": hooks_s}), flush=True)
""")


def bench_startup(runs: int = 7) -> None:
    """start() in a process that already imported torch (the one-liner after
    ``import torch``, ``%load_ext``): it scans the heap for models built
    before it and places their hooks on the calling thread.  Two figures:
    with the agent's bytecode cached, as it is once installed (a warm-up run
    writes the .pyc files), and with PYTHONDONTWRITEBYTECODE=1, where every
    start compiles the agent's modules from source.  Then the launcher's case:
    start() before torch is imported, and what the import hook adds."""
    with tempfile.TemporaryDirectory(prefix="vsb-") as tmp:
        script = Path(tmp) / "startup.py"
        script.write_text(STARTUP)
        _startup_before_torch(script, tmp, runs)
        for label, no_pyc in (("bytecode cached", False), ("no bytecode cache", True)):
            env = _env(tmp)
            env.pop("PYTHONDONTWRITEBYTECODE", None)
            if no_pyc:
                env["PYTHONDONTWRITEBYTECODE"] = "1"
            times = []
            for i in range(runs + 1):
                done = subprocess.run([sys.executable, str(script), str(BOOTSTRAP), "after"],
                                      capture_output=True, text=True, env=env, timeout=120)
                if done.returncode != 0:
                    print(f"startup: failed: {done.stderr.strip()[-500:]}")
                    return
                if i:  # the first run is a warm-up (writes the .pyc files)
                    times.append(json.loads(done.stdout.strip().splitlines()[-1])["start_s"])
            print(f"startup ({label}): vram_steward_agent.start() after import torch: median "
                  f"{statistics.median(times) * 1e3:.2f} ms (min {min(times) * 1e3:.2f}, "
                  f"max {max(times) * 1e3:.2f}) over {runs} (target <= 20 ms)")


def _startup_before_torch(script: Path, tmp: str, runs: int) -> None:
    starts, hooks = [], []
    for i in range(runs + 1):
        done = subprocess.run([sys.executable, str(script), str(BOOTSTRAP), "before"],
                              capture_output=True, text=True, env=_env(tmp), timeout=120)
        if done.returncode != 0:
            print(f"startup: failed: {done.stderr.strip()[-500:]}")
            return
        if i:
            data = json.loads(done.stdout.strip().splitlines()[-1])
            starts.append(data["start_s"])
            hooks.append(data["hooks_s"])
    print(f"startup (launcher, before import torch): start() median "
          f"{statistics.median(starts) * 1e3:.2f} ms, then torch's hooks set up on import "
          f"{statistics.median(hooks) * 1e3:.2f} ms, over {runs} (target <= 20 ms)")


DISCOVERY = textwrap.dedent("""
    import json, sys, time
    import torch
    from app.agent.models import ModelTracker
    heap = [[i] for i in range(1_000_000)]  # a million extra gc-tracked objects
    models = [torch.nn.Linear(64, 64) for _ in range(10)]
    import gc
    n = len(gc.get_objects())
    tracker = ModelTracker()
    tracker.use_torch(torch)
    t0 = time.perf_counter()
    tracker.attach_existing(torch)  # what start() does on the calling thread
    print(json.dumps({"scan_s": time.perf_counter() - t0, "objects": n,
                      "tracked": tracker.tracked}), flush=True)
""")


def bench_discovery() -> None:
    done = subprocess.run([sys.executable, "-c", DISCOVERY], capture_output=True, text=True,
                          cwd=ROOT, timeout=300)
    if done.returncode != 0:
        print(f"discovery: failed: {done.stderr.strip()[-500:]}")
        return
    data = json.loads(done.stdout.strip().splitlines()[-1])
    print(f"discovery: start()'s scan and hook placement over {data['objects']:,} gc-tracked "
          f"objects: {data['scan_s']:.3f} s ({data['tracked']} modules tracked)")


STEP_HOOK = textwrap.dedent("""
    import json, time
    import torch
    from app.agent import eligibility, step_memory
    device = "cuda" if torch.cuda.is_available() else "cpu"
    model = torch.nn.Linear(256, 256).to(device)
    opt = torch.optim.Adam(model.parameters())
    model(torch.randn(8, 256, device=device)).sum().backward()
    steps = eligibility.OptimizerSteps()
    steps.memory.torch = torch
    n = 20000

    def per_call(interval):
        step_memory.SAMPLE_INTERVAL_S = interval
        steps.memory._next_sample = 0.0
        t0 = time.perf_counter()
        for _ in range(n):
            steps.on_step(opt, (), {})
        return (time.perf_counter() - t0) / n

    per_call(1.0)  # warm-up
    hook, sampled = per_call(1.0), per_call(0.0)
    for _ in range(20):
        opt.step()
    if device == "cuda":
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(200):
        opt.step()
    if device == "cuda":
        torch.cuda.synchronize()
    print(json.dumps({"device": device, "hook_s": hook, "sampled_s": sampled,
                      "samples": len(steps.memory._samples),
                      "adam_step_s": (time.perf_counter() - t0) / 200}), flush=True)
""")


def bench_step_hook() -> None:
    done = subprocess.run([sys.executable, "-c", STEP_HOOK], capture_output=True, text=True,
                          cwd=ROOT, timeout=300)
    if done.returncode != 0:
        print(f"stephook: failed: {done.stderr.strip()[-500:]}")
        return
    d = json.loads(done.stdout.strip().splitlines()[-1])
    print(f"stephook ({d['device']}): per step {d['hook_s'] * 1e6:.2f} us between samples, "
          f"{d['sampled_s'] * 1e6:.2f} us with a sample ({d['samples']} kept); a small Adam "
          f"step (256x256 Linear) takes {d['adam_step_s'] * 1e6:.0f} us, so the hook is "
          f"{d['hook_s'] / d['adam_step_s'] * 100:.3f} % of it (samples: at most 1 per second)")


def main(argv: list[str]) -> None:
    if not (BOOTSTRAP / "vram_steward_agent.py").exists():
        raise SystemExit("the agent's bootstrap (app/agent/_bootstrap) is not there")
    wanted = argv or ["rtt", "startup", "discovery", "stephook", "slowdown"]
    for name in wanted:
        {"slowdown": bench_slowdown, "rtt": bench_rtt, "startup": bench_startup,
         "discovery": bench_discovery, "stephook": bench_step_hook}[name]()


if __name__ == "__main__":
    main(sys.argv[1:])
