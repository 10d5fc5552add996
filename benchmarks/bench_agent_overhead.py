"""The agent's training slowdown, measured robustly on a small, shared machine.

    python -m benchmarks.bench_agent_overhead [--blocks 30] [--block-s 1.0]
                                              [--no-control] [--no-pin] [--seed 0]

``bench_agent slowdown`` times whole runs, one child at a time; on a shared
2-core machine its runs varied 13.7-18.3 s, far more than the 0.5 % it is
meant to resolve.  Here instead:

* Long-lived children, all ``torch.set_num_threads(1)``, all running the
  same small training step (an MLP step of a few ms), started afresh for
  each of ``--epochs`` epochs in a rotated creation order (an A/A run,
  ``--aa``, showed that one process can be ~2 % slower than another for
  reasons of its own; with fresh processes per epoch that becomes noise
  spread over the roles instead of a bias on one of them):
  ``agent``   loaded through the bootstrap (``PYTHONPATH=app/agent/_bootstrap``,
              ``VRAM_STEWARD_AGENT=1``, its own ``VRAM_STEWARD_RUNTIME_DIR``);
  ``plain``   the same bootstrap on PYTHONPATH with ``VRAM_STEWARD_AGENT=0``;
  ``control`` a second plain child (unless ``--no-control``): the ratio
              control / plain is the noise floor of comparing two processes.
* Many short blocks (``--blocks`` per child of ``--block-s`` each, split
  over the epochs), one child
  at a time while the others wait blocked on their stdin pipe, so they never
  compete for the CPU; the order within each round is rotated (every child
  goes first, middle, last equally often) so slow drifts cancel.
* While the agent child runs a block, a poller thread here asks its agent for
  ``report`` (models included) at 4 Hz over one ``AgentConnection`` - what the
  app does while its window shows the process.
* The children are pinned to one and the same CPU (unless ``--no-pin``): the
  agent's thread then competes with the training thread for that core, so
  whatever work it does is charged to training (an upper bound: on a real
  machine it would usually run on an idle core).  This process (the poller,
  i.e. the app's side) is then kept off that CPU: its work is not the agent's.
* Per block: the median step time (also the mean, and the process CPU time
  per step: all threads, so the agent thread's work counts, but time spent
  descheduled by other processes on a shared machine does not).  Per role:
  the median of its per-block figures.  Printed: ratio agent / plain (target
  <= 1.005) with a paired bootstrap 95 % interval (rounds resampled; it does
  not cover process-to-process variation: see the per-epoch figures and the
  control / plain noise floor), the median of the per-round ratios, the same
  for control / plain and agent / control, the agent thread's own CPU time
  (``pthread_getcpuclockid``) as a share of the block, and the number of
  ``report`` requests the agent child served (counted inside it) against the
  number the poller sent.

Diagnosis options: ``--poll-hz 0`` (agent loaded, never asked), ``--agent-env
VRAM_STEWARD_LAST_USED=0``, ``--aa`` (the "agent" child without the agent).

Figures are printed, nothing is asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import random
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
from app.core.agents import types as agent_types  # noqa: E402

BOOTSTRAP = ROOT / "app" / "agent" / "_bootstrap"
POLL_PERIOD_S = 0.25  # 4 Hz

CHILD = textwrap.dedent("""
    import json, os, statistics, sys, time
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
        opt.zero_grad()
        loss_fn(model(x), y).backward()
        opt.step()

    # Count the report requests the agent serves (agent side, not the poller's).
    served = [0]
    rt = sys.modules.get("_vram_steward_agent.runtime")
    agent = rt.current() if rt is not None else None
    if agent is not None and agent.server is not None:
        fn, on_worker = agent.server.handlers["report"]

        def counted(params, _fn=fn):
            served[0] += 1
            return _fn(params)

        agent.server.handlers["report"] = (counted, on_worker)

    # CPU time of the agent's own thread (Linux), to put a figure on its cost
    # that does not depend on timing noise.
    def agent_cpu():
        try:
            thread = agent.server.thread
            return time.clock_gettime(time.pthread_getcpuclockid(thread.ident))
        except Exception:
            return None

    for _ in range(100):  # warm-up
        step()
    cpu_start = agent_cpu() if agent is not None else None
    print(json.dumps({"pid": os.getpid(), "agent": agent is not None}), flush=True)
    for line in sys.stdin:
        cmd = line.split()
        if not cmd or cmd[0] == "quit":
            break
        if cmd[0] == "block":
            times, cpu = [], []
            a0 = agent_cpu() if agent is not None else None
            w0, c0 = time.perf_counter(), time.process_time()
            end = w0 + float(cmd[1])
            t0, p0 = w0, c0
            while True:
                step()
                t1, p1 = time.perf_counter(), time.process_time()
                times.append(t1 - t0)
                cpu.append(p1 - p0)  # all threads of this process: the agent's too
                t0, p0 = t1, p1
                if t1 >= end:
                    break
            n = len(times)
            a1 = agent_cpu() if a0 is not None else None
            print(json.dumps({"median": statistics.median(times), "mean": (t1 - w0) / n,
                              "agent_cpu": None if a1 is None else a1 - a0,
                              "cpu_median": statistics.median(cpu),
                              "cpu_mean": (p1 - c0) / n, "steps": n}), flush=True)
        elif cmd[0] == "count":
            now = agent_cpu() if agent is not None else None
            print(json.dumps({"served": served[0],
                              "agent_thread_cpu": None if now is None or cpu_start is None
                              else now - cpu_start}), flush=True)
""")


class Child:
    def __init__(self, name: str, script: Path, runtime: str, with_agent: bool,
                 cpu: int | None, extra_env: dict | None = None) -> None:
        self.name = name
        env = {k: v for k, v in os.environ.items()
               if not k.startswith("VRAM_STEWARD_") and k != "PYTHONPATH"}
        env["PYTHONPATH"] = os.pathsep.join(
            [str(BOOTSTRAP)] + ([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH")
                                else []))
        env["VRAM_STEWARD_AGENT"] = "1" if with_agent else "0"
        env["VRAM_STEWARD_RUNTIME_DIR"] = runtime
        env["XDG_STATE_HOME"] = os.path.join(runtime, "state")  # the agent's log
        for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
            env[var] = "1"
        env.update(extra_env or {})
        self.proc = subprocess.Popen([sys.executable, str(script)], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True, env=env, cwd=runtime)
        if cpu is not None and hasattr(os, "sched_setaffinity"):
            os.sched_setaffinity(self.proc.pid, {cpu})  # threads started later inherit it
        hello = self._read()
        self.pid = hello["pid"]
        if hello["agent"] != with_agent:
            raise SystemExit(f"{name}: agent loaded = {hello['agent']}, expected {with_agent}")
        self.blocks: list[dict] = []  # one per measured block, in round order

    def series(self, key: str) -> list[float]:
        return [b[key] for b in self.blocks]

    def _read(self) -> dict:
        line = self.proc.stdout.readline()
        if not line:
            raise SystemExit(f"{self.name}: child exited (rc={self.proc.poll()})")
        return json.loads(line)

    def block(self, seconds: float) -> dict:
        self.proc.stdin.write(f"block {seconds}\n")
        self.proc.stdin.flush()
        return self._read()

    def counts(self) -> dict:
        self.proc.stdin.write("count\n")
        self.proc.stdin.flush()
        return self._read()

    def close(self) -> None:
        try:
            self.proc.stdin.write("quit\n")
            self.proc.stdin.close()
        except OSError:
            pass
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()


class Role:
    """One role's measured blocks over all epochs (each epoch: fresh processes)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.blocks: list[dict] = []  # in round order, epochs concatenated
        self.epochs: list[int] = []

    def series(self, key: str) -> list[float]:
        return [b[key] for b in self.blocks]


class Poller:
    """Asks ``report`` (models included) at 4 Hz while ``active`` is set."""

    def __init__(self, entry: agent_types.AgentEntry, period_s: float) -> None:
        self.period_s = period_s
        self.conn = agent_connection.AgentConnection(entry, 5.0)
        self.active = threading.Event()
        self.stop = threading.Event()
        self.sent = 0
        self.errors = 0
        self.models = None
        self.rtt: list[float] = []
        self.thread = threading.Thread(target=self._run, name="poller", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stop.is_set():
            if self.period_s <= 0 or not self.active.wait(0.05):
                continue
            t0 = time.perf_counter()
            try:
                rep = self.conn.call("report", {"models": True}, 5.0)
                self.models = len(rep.get("models") or [])
                self.rtt.append(time.perf_counter() - t0)
            except (agent_connection.AgentUnavailable, agent_connection.AgentError):
                self.errors += 1
            self.sent += 1
            self.stop.wait(max(0.0, self.period_s - (time.perf_counter() - t0)))

    def close(self) -> None:
        self.stop.set()
        self.active.clear()
        self.thread.join(10)
        self.conn.close()


def _wait_entry(runtime: str, pid: int) -> agent_types.AgentEntry:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        for entry in agent_registry.read_registry(runtime):
            if entry.pid == pid:
                return entry
        time.sleep(0.05)
    raise SystemExit("the agent child did not register")


def paired_bootstrap(num: list[float], den: list[float], rng: random.Random,
                     reps: int = 5000) -> tuple[float, float, float, float]:
    """95 % percentile intervals, rounds resampled with replacement (block i of
    both children stays paired: they ran seconds apart), of (1) the ratio of
    the medians and (2) the median of the per-round ratios."""
    n = len(num)
    ratios = [a / b for a, b in zip(num, den)]
    of_medians, of_ratios = [], []
    for _ in range(reps):
        idx = [rng.randrange(n) for _ in range(n)]
        of_medians.append(statistics.median([num[i] for i in idx])
                          / statistics.median([den[i] for i in idx]))
        of_ratios.append(statistics.median([ratios[i] for i in idx]))
    of_medians.sort()
    of_ratios.sort()
    lo, hi = int(0.025 * reps), int(0.975 * reps) - 1
    return of_medians[lo], of_medians[hi], of_ratios[lo], of_ratios[hi]


def _summary(num: Child, den: Child, key: str, rng: random.Random) -> str:
    a, b = num.series(key), den.series(key)
    ratio = statistics.median(a) / statistics.median(b)
    paired = statistics.median([x / y for x, y in zip(a, b)])
    lo, hi, plo, phi = paired_bootstrap(a, b, rng)
    return (f"ratio of medians {ratio:.4f} [95% CI {lo:.4f}, {hi:.4f}]; "
            f"median per-round ratio {paired:.4f} [{plo:.4f}, {phi:.4f}]")


METRICS = (
    ("median", "wall, per-block median step (primary)"),
    ("mean", "wall, per-block mean step (counts rare slow steps)"),
    ("cpu_mean", "process CPU per step, all threads (ignores time descheduled)"),
)


def _loadavg() -> str:
    try:
        return " ".join("%.2f" % x for x in os.getloadavg())
    except OSError:
        return "n/a"


def main(argv: list[str]) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--blocks", type=int, default=60, help="measured blocks per child")
    ap.add_argument("--block-s", type=float, default=0.5, help="seconds per block")
    ap.add_argument("--epochs", type=int, default=4,
                    help="fresh sets of child processes (blocks are split between them)")
    ap.add_argument("--warmup", type=int, default=2, help="discarded rounds per epoch")
    ap.add_argument("--no-control", action="store_true", help="skip the plain/plain control")
    ap.add_argument("--no-pin", action="store_true", help="do not pin the children to a CPU")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--poll-hz", type=float, default=1 / POLL_PERIOD_S,
                    help="report requests per second during the agent's blocks (0: none)")
    ap.add_argument("--aa", action="store_true",
                    help="diagnosis: the 'agent' child runs WITHOUT the agent (no poller): "
                         "an A/A test of the setup itself (creation order, placement)")
    ap.add_argument("--agent-env", action="append", default=[], metavar="NAME=VALUE",
                    help="extra environment for the agent child (diagnosis), repeatable")
    args = ap.parse_args(argv)
    if not (BOOTSTRAP / "vram_steward_agent.py").exists():
        raise SystemExit("the agent's bootstrap (app/agent/_bootstrap) is not there")
    rng = random.Random(args.seed)
    cpu = None
    if not args.no_pin and hasattr(os, "sched_getaffinity"):
        cpus = os.sched_getaffinity(0)
        cpu = max(cpus)
        if len(cpus) > 1:
            # this process (the poller: the app's side) keeps off the children's
            # CPU: its own work is not the agent's in-process cost
            os.sched_setaffinity(0, cpus - {cpu})
    names = ["agent", "plain"] + ([] if args.no_control else ["control"])
    roles = {name: Role(name) for name in names}
    agent, plain = roles["agent"], roles["plain"]
    served, agent_cpu_s = 0, 0.0
    polls = {"sent": 0, "errors": 0, "rtt": [], "models": None}
    per_epoch = [args.blocks // args.epochs + (1 if e < args.blocks % args.epochs else 0)
                 for e in range(args.epochs)]
    t_start = time.perf_counter()
    for epoch, rounds in enumerate(per_epoch):
        with tempfile.TemporaryDirectory(prefix="vsb-") as tmp:
            script = Path(tmp) / "train.py"
            script.write_text(CHILD)
            extra = dict(kv.split("=", 1) for kv in args.agent_env)
            # fresh processes every epoch, created in a rotated order: which
            # process runs faster for reasons of its own (creation order, memory
            # placement) changes from epoch to epoch instead of biasing one role
            order = names[epoch % len(names):] + names[:epoch % len(names)]
            children: dict[str, Child] = {}
            poller = None
            try:
                for name in order:
                    children[name] = Child(name, script, tmp,
                                           name == "agent" and not args.aa, cpu,
                                           extra if name == "agent" else None)
                if not args.aa:
                    poller = Poller(_wait_entry(tmp, children["agent"].pid),
                                    1 / args.poll_hz if args.poll_hz > 0 else 0.0)
                run = [children[name] for name in names]
                for r in range(args.warmup + rounds):
                    k = r % len(run)
                    for child in run[k:] + run[:k]:  # rotate who goes first
                        if child.name == "agent" and poller is not None:
                            poller.active.set()
                            time.sleep(0.05)  # the poller is polling when the block starts
                        res = child.block(args.block_s)
                        if poller is not None:
                            poller.active.clear()
                        if r >= args.warmup:
                            roles[child.name].blocks.append(res)
                            roles[child.name].epochs.append(epoch)
                counts = children["agent"].counts()
                served += counts["served"]
                agent_cpu_s += counts.get("agent_thread_cpu") or 0.0
            finally:
                if poller is not None:
                    poller.close()
                    polls["sent"] += poller.sent
                    polls["errors"] += poller.errors
                    polls["rtt"] += poller.rtt
                    polls["models"] = poller.models
                for child in children.values():
                    child.close()
    wall = time.perf_counter() - t_start
    counts = {"served": served, "agent_thread_cpu": agent_cpu_s if not args.aa else None}

    print(f"agent overhead: {args.blocks} rounds x {len(names)} children x "
          f"{args.block_s:.1f} s blocks in {args.epochs} epochs of fresh processes "
          f"(+{args.warmup} warm-up rounds each), "
          f"{'pinned to CPU %d (poller off it)' % cpu if cpu is not None else 'unpinned'}, "
          f"1 torch thread each, {wall:.0f} s wall, load average {_loadavg()}")
    for child in roles.values():
        ms = [m * 1e3 for m in child.series("median")]
        print(f"  {child.name:<8} per-block median step: median {statistics.median(ms):.3f} ms,"
              f" min {min(ms):.3f}, max {max(ms):.3f} (max/min {max(ms) / min(ms):.3f}); "
              f"{statistics.median(child.series('steps')):.0f} steps/block")
    pairs = [(agent, plain, "agent / plain", "target <= 1.005")]
    if not args.no_control:
        control = roles["control"]
        pairs += [(control, plain, "control / plain", "noise floor: two plain processes"),
                  (agent, control, "agent / control", "")]
    for key, what in METRICS:
        print(f"  {what}:")
        for num, den, label, note in pairs:
            print(f"    {label:<16} {_summary(num, den, key, rng)}"
                  + (f"  ({note})" if note else ""))
    for key in ("median", "cpu_mean"):
        parts = []
        for num, den, label, _note in pairs[:2]:
            per = []
            for e in range(args.epochs):
                a = [b[key] for b, ep in zip(num.blocks, num.epochs) if ep == e]
                c = [b[key] for b, ep in zip(den.blocks, den.epochs) if ep == e]
                if a and c:
                    per.append("%.4f" % statistics.median([x / y for x, y in zip(a, c)]))
            parts.append(f"{label} {' '.join(per)}")
        print(f"  per epoch (fresh processes), median per-round ratio of {key}: "
              + "; ".join(parts))
    if not args.aa:
        rtt = sorted(polls["rtt"])
        print(f"  poller: {polls['sent']} report requests (models included) at "
              f"{args.poll_hz:g} Hz during the agent's blocks, {polls['errors']} errors, "
              f"median round trip "
              f"{statistics.median(rtt) * 1e3 if rtt else float('nan'):.2f} ms, "
              f"{polls['models']} model(s) in the last report")
    print(f"  agent child served {counts['served']} report requests")
    shares = [b["agent_cpu"] / (b["mean"] * b["steps"]) for b in agent.blocks
              if b.get("agent_cpu") is not None]
    cpu_s = counts.get("agent_thread_cpu")
    if shares and cpu_s is not None:
        print(f"  agent thread CPU time during the agent child's blocks: median "
              f"{statistics.median(shares) * 100:.3f} % of the block (max "
              f"{max(shares) * 100:.3f} %); whole run {cpu_s * 1e3:.1f} ms, "
              f"{cpu_s / max(1, counts['served']) * 1e3:.3f} ms per report served "
              f"(ticks included)")


if __name__ == "__main__":
    main(sys.argv[1:])
