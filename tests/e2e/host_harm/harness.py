"""Runs one pattern twice in real child processes: plainly and under the agent.

``run_pair(pattern)`` starts both runs at once (each with its own temp dirs,
agent runtime dir, XDG and Hugging Face caches; at most a torch.compile cache
is shared), drives the runner's line protocol (``runner.py``) and returns
what each run produced.  In the agent run the
child is ``main.py run -- python runner.py ...``, an ``AgentSide`` polls the
agent's report at 4 Hz for the whole run and performs each step's
unload / reload; the baseline run answers every step at once.

A run that outlives its deadline is killed with everything it started.
"""

from __future__ import annotations

import ast
import json
import os
import queue
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.e2e.host_harm.agent_side import AgentSide, StepOutcome

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
RUNNER = HERE / "runner.py"
PATTERNS_DIR = HERE / "patterns"
NOT_PATTERNS = {"zoo"}
RUN_TIMEOUT_S = 240.0
STDERR_KEPT = 200_000

#: Variables of the test process that must not leak into a child.
DROPPED_ENV = ("VRAM_STEWARD_AGENT", "VRAM_STEWARD_IDLE_UNLOAD", "VRAM_STEWARD_LAST_USED",
               "VRAM_STEWARD_RUNTIME_DIR", "PYTHONSTARTUP", "PYTHONWARNINGS",
               "PYTORCH_CUDA_ALLOC_CONF", "CUDA_VISIBLE_DEVICES")


def pattern_names() -> list[str]:
    return sorted(p.stem for p in PATTERNS_DIR.glob("*.py")
                  if p.stem not in NOT_PATTERNS and not p.stem.startswith("_"))


def pattern_requirements(name: str) -> tuple[str, ...]:
    """The pattern's ``REQUIRES`` (modules it needs beyond torch), read without importing it."""
    tree = ast.parse((PATTERNS_DIR / f"{name}.py").read_text())
    for node in tree.body:
        if (isinstance(node, ast.Assign) and len(node.targets) == 1
                and getattr(node.targets[0], "id", None) == "REQUIRES"):
            return tuple(ast.literal_eval(node.value))
    return ()


@dataclass
class RunResult:
    """Everything one run of a pattern produced."""

    mode: str  # "baseline" or "agent"
    result: dict[str, Any] | None = None  # the runner's @@RESULT
    returncode: int | None = None
    stderr: str = ""
    steps: list[StepOutcome] = field(default_factory=list)
    polls_ok: int = 0
    polls_failed: int = 0  # before the result (after it, the process is exiting)
    poll_errors: list[str] = field(default_factory=list)
    timed_out: bool = False
    problems: list[str] = field(default_factory=list)  # protocol violations seen by the harness
    agent_log: str = ""
    wall_s: float = 0.0

    def summary(self) -> str:
        lines = [f"{self.mode}: rc={self.returncode} timed_out={self.timed_out} "
                 f"wall={self.wall_s:.1f}s polls ok/failed={self.polls_ok}/{self.polls_failed}"]
        lines += [f"  harness: {p}" for p in self.problems]
        if self.mode == "agent":
            for step in self.steps:
                done = ", ".join(f"{m.name} ({m.model_id}) {m.status}"
                                 + (f": {m.reason}" if m.reason else "")
                                 + (f", reload {m.reload}" if m.reload else "")
                                 for m in step.models) or "nothing to do"
                lines.append(f"  step {step.label!r}: {step.error or done}")
        return "\n".join(lines)


def child_env(base: Path, inductor_cache: str | None = None) -> dict[str, str]:
    """The environment of a run, isolated under ``base`` (but for the torch.compile
    cache when ``inductor_cache`` is given: compiled kernels depend on the graph only)."""
    env = {k: v for k, v in os.environ.items() if k not in DROPPED_ENV}
    for sub in ("runtime", "cache", "state", "work", "inductor"):
        (base / sub).mkdir(mode=0o700, exist_ok=True)
    env.update({
        "VRAM_STEWARD_RUNTIME_DIR": str(base / "runtime"),
        "XDG_CACHE_HOME": str(base / "cache"),
        "XDG_STATE_HOME": str(base / "state"),
        "HF_HOME": str(base / "cache" / "huggingface"),
        "TORCHINDUCTOR_CACHE_DIR": inductor_cache or str(base / "inductor"),
        "PYTHONHASHSEED": "0",
        "OMP_NUM_THREADS": "1",
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "HF_HUB_DISABLE_TELEMETRY": "1",
        "TOKENIZERS_PARALLELISM": "false",
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONUNBUFFERED": "1",
    })
    return env


def _descendants(pid: int) -> list[int]:
    try:
        import psutil
        return [p.pid for p in psutil.Process(pid).children(recursive=True)]
    except Exception:
        return []


class _Child:
    """One child process: its stdout as a queue of lines, its stderr collected."""

    def __init__(self, argv: list[str], env: dict[str, str], cwd: Path) -> None:
        self.proc = subprocess.Popen(argv, env=env, cwd=str(cwd), stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True, encoding="utf-8", errors="replace",
                                     process_group=0)
        self.lines: queue.Queue[str | None] = queue.Queue()
        self._stderr: list[str] = []
        self._readers = [threading.Thread(target=self._read_stdout, daemon=True),
                         threading.Thread(target=self._read_stderr, daemon=True)]
        for t in self._readers:
            t.start()
        self.runner_pid: int | None = None

    def _read_stdout(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line.rstrip("\n"))
        self.lines.put(None)

    def _read_stderr(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self._stderr.append(line)

    def answer(self, text: str) -> bool:
        try:
            assert self.proc.stdin is not None
            self.proc.stdin.write(text + "\n")
            self.proc.stdin.flush()
            return True
        except (BrokenPipeError, OSError, ValueError):
            return False

    def _groups(self) -> set[int]:
        return {self.proc.pid} | ({self.runner_pid} if self.runner_pid else set())

    def kill_all(self) -> None:
        """SIGKILL the child, the runner's process group and every descendant."""
        pids = _descendants(self.proc.pid)
        self.kill_leftovers()
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass

    def kill_leftovers(self) -> None:
        """SIGKILL what is left in the child's process groups (a pattern's strays)."""
        for group in self._groups():
            try:
                os.killpg(group, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass

    def finish(self, timeout_s: float) -> int | None:
        """Wait for the child's exit, then reap what it left behind; None on timeout."""
        try:
            self.proc.wait(timeout=max(0.1, timeout_s))
        except subprocess.TimeoutExpired:
            return None
        self.kill_leftovers()
        for t in self._readers:
            t.join(timeout=10)
        for pipe in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            try:
                if pipe is not None:
                    pipe.close()
            except OSError:
                pass
        return self.proc.returncode

    @property
    def stderr(self) -> str:
        text = "".join(self._stderr)
        return text if len(text) <= STDERR_KEPT else "...\n" + text[-STDERR_KEPT:]


def run_pattern(pattern: str, with_agent: bool, timeout_s: float = RUN_TIMEOUT_S,
                inductor_cache: str | None = None) -> RunResult:
    """One run of ``pattern``; never raises for anything the child does."""
    out = RunResult("agent" if with_agent else "baseline")
    base = Path(tempfile.mkdtemp(prefix="vshh", dir="/tmp"))  # short: AF_UNIX path limit
    env = child_env(base, inductor_cache)
    argv = [sys.executable, str(RUNNER), pattern, str(base / "work")]
    if with_agent:
        argv = [sys.executable, str(ROOT / "main.py"), "run", "--", *argv]
    side = AgentSide(env["VRAM_STEWARD_RUNTIME_DIR"]) if with_agent else None
    started = time.monotonic()
    deadline = started + timeout_s
    child = _Child(argv, env, base / "work")
    try:
        _drive(child, side, out, deadline)
        if out.timed_out:
            child.kill_all()
        out.returncode = child.finish(deadline - time.monotonic() if not out.timed_out else 30)
        if out.returncode is None:
            out.timed_out = True
            child.kill_all()
            out.returncode = child.finish(30)
    finally:
        if side is not None:
            side.stop()
            out.polls_ok, out.polls_failed = side.polls_ok, side.polls_failed
            out.poll_errors = list(side.poll_errors)
        if child.proc.poll() is None:
            child.kill_all()
            child.finish(30)
        out.stderr = child.stderr
        out.agent_log = _agent_log(base)
        out.wall_s = time.monotonic() - started
        shutil.rmtree(base, ignore_errors=True)
    return out


def _drive(child: _Child, side: AgentSide | None, out: RunResult, deadline: float) -> None:
    """Read the runner's protocol lines until stdout closes or the deadline passes."""
    while True:
        try:
            line = child.lines.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            out.timed_out = True
            return
        if line is None:
            return
        tag = line.split(" ", 1)[0]
        try:
            payload = json.loads(line[len(tag):]) if tag in ("@@PID", "@@STEP", "@@RESULT") \
                else None
        except ValueError:
            out.problems.append(f"malformed {tag} line: {line[:200]!r}")
            continue
        if tag == "@@PID":
            if child.runner_pid is not None:
                out.problems.append("a second @@PID")
                continue
            child.runner_pid = int(payload)
            if side is not None:
                side.start(child.runner_pid)
        elif tag == "@@STEP":
            if side is None:
                outcome = StepOutcome(payload["label"], payload["expect"], payload["reload"])
            else:
                outcome = side.act(payload["label"], payload["unload"], payload["reload"],
                                   payload["expect"], deadline, payload.get("force", False))
            out.steps.append(outcome)
            if not child.answer("@@GO " + json.dumps(outcome.to_json())):
                out.problems.append(f"could not answer step {payload['label']!r}")
        elif tag == "@@RESULT":
            if out.result is not None:
                out.problems.append("a second @@RESULT")
            out.result = payload
            if side is not None:
                side.finished()
        else:
            out.problems.append(f"unexpected stdout line: {line[:200]!r}")


def _agent_log(base: Path) -> str:
    path = base / "state" / "vram-steward" / "agent.log"
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    return text[-20_000:]


@dataclass
class Pair:
    baseline: RunResult
    agent: RunResult


def run_pair(pattern: str, timeout_s: float = RUN_TIMEOUT_S,
             inductor_cache: str | None = None) -> Pair:
    """Both runs of ``pattern``, concurrently."""
    with ThreadPoolExecutor(max_workers=2) as pool:
        baseline = pool.submit(run_pattern, pattern, False, timeout_s, inductor_cache)
        agent = pool.submit(run_pattern, pattern, True, timeout_s, inductor_cache)
        return Pair(baseline.result(), agent.result())

