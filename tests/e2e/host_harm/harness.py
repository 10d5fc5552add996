"""Runs one pattern twice in real child processes: plainly and under the agent.

``run_pair(pattern)`` starts both runs at once (each with its own temp dirs,
agent runtime dir, XDG and Hugging Face caches; at most a torch.compile cache
is shared), drives the runner's line protocol (``runner.py``) and returns
what each run produced: its records, its result, how the process ended, and
the files it left in its offload folder.  In the agent run the
child is ``main.py run -- python runner.py ...``, an ``AgentSide`` polls the
agent's report at 4 Hz for the whole run and performs each step's
unload / reload; the baseline run answers every step at once.

A pattern may declare, as literals the harness reads without importing it:

    REQUIRES = ("transformers",)     modules it needs beyond torch (else skipped)
    VARIANTS = {"SIGTERM": 143}      runs of it, each with the exit status it must
                                     end with (as a shell says: 128 + N for signal N);
                                     ``ctx.variant`` tells the pattern which one
    CACHE_TMPFS_MIB = 20             each run's cache folder (XDG_CACHE_HOME, where
                                     disk unloads go) is a tmpfs of this size: root only

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
#: Where the agent puts disk unloads, under the run's XDG_CACHE_HOME.
OFFLOAD_DIR = ("vram-steward", "offload")

#: Variables of the test process that must not leak into a child.
DROPPED_ENV = ("VRAM_STEWARD_AGENT", "VRAM_STEWARD_IDLE_UNLOAD", "VRAM_STEWARD_LAST_USED",
               "VRAM_STEWARD_RUNTIME_DIR", "PYTHONSTARTUP", "PYTHONWARNINGS",
               "PYTORCH_CUDA_ALLOC_CONF", "CUDA_VISIBLE_DEVICES")


class CannotRun(Exception):
    """This machine cannot give the pattern what it declares it needs (the message says why)."""


def _declared(pattern: str, name: str, default: Any) -> Any:
    """The literal a pattern file assigns to ``name``, read without importing it."""
    tree = ast.parse((PATTERNS_DIR / f"{base_name(pattern)}.py").read_text())
    for node in tree.body:
        if (isinstance(node, ast.Assign) and len(node.targets) == 1
                and getattr(node.targets[0], "id", None) == name):
            return ast.literal_eval(node.value)
    return default


def base_name(pattern: str) -> str:
    """``process_end:SIGTERM`` -> ``process_end`` (the file)."""
    return pattern.partition(":")[0]


def pattern_names() -> list[str]:
    """Every pattern run, ``name`` or ``name:variant`` for a pattern with ``VARIANTS``."""
    names = []
    for path in sorted(PATTERNS_DIR.glob("*.py")):
        if path.stem in NOT_PATTERNS or path.stem.startswith("_"):
            continue
        variants = _declared(path.stem, "VARIANTS", None)
        names += [f"{path.stem}:{v}" for v in variants] if variants else [path.stem]
    return names


def expand(names: list[str]) -> list[str]:
    """Names as a user gives them: a pattern with variants stands for all of them."""
    every = pattern_names()
    out = []
    for name in names:
        matches = [n for n in every if n == name or (":" not in name and base_name(n) == name)]
        if not matches:
            raise ValueError(f"no pattern {name!r} (there are: {', '.join(every)})")
        out += matches
    return out


def pattern_requirements(name: str) -> tuple[str, ...]:
    """The pattern's ``REQUIRES`` (modules it needs beyond torch)."""
    return tuple(_declared(name, "REQUIRES", ()))


def expected_status(name: str) -> int:
    """The exit status the run must end with (0 unless its variant says otherwise)."""
    variant = name.partition(":")[2]
    return int(_declared(name, "VARIANTS", {}).get(variant, 0)) if variant else 0


def cache_tmpfs_mib(name: str) -> int | None:
    """The size of the tmpfs the pattern wants as its cache folder, if any."""
    value = _declared(name, "CACHE_TMPFS_MIB", None)
    return int(value) if value is not None else None


def shell_status(returncode: int | None) -> int | None:
    """An exit status as a shell says it (128 + N for signal N).  ``main.py run``
    reports its command's end that way, so both runs are compared in these terms."""
    return 128 - returncode if returncode is not None and returncode < 0 else returncode


def describe_status(status: int | None) -> str:
    """``143 (SIGTERM)``: the status and, above 128, the signal it stands for."""
    if status is None or status <= 128:
        return str(status)
    try:
        return f"{status} ({signal.Signals(status - 128).name})"
    except ValueError:
        return str(status)


@dataclass
class RunResult:
    """Everything one run of a pattern produced."""

    mode: str  # "baseline" or "agent"
    records: list[Any] = field(default_factory=list)  # the runner's @@RECORDs, in order
    result: dict[str, Any] | None = None  # the runner's @@RESULT (None: the process ended first)
    returncode: int | None = None
    leftovers: list[str] = field(default_factory=list)  # the offload folder once it ended
    stderr: str = ""
    steps: list[StepOutcome] = field(default_factory=list)
    polls_ok: int = 0
    polls_failed: int = 0  # before the result (after it, the process is exiting)
    poll_errors: list[str] = field(default_factory=list)
    timed_out: bool = False
    problems: list[str] = field(default_factory=list)  # protocol violations seen by the harness
    agent_log: str = ""
    wall_s: float = 0.0

    @property
    def status(self) -> int | None:
        return shell_status(self.returncode)

    def observed(self) -> dict[str, Any]:
        """What the pattern showed, as the two runs compare it: its records, the
        steps it reached, whether it returned, and then its error and warnings."""
        result = self.result or {}
        return {"records": self.records, "steps": [s.label for s in self.steps],
                "returned": self.result is not None, "error": result.get("error"),
                "warnings": result.get("warnings")}

    def summary(self) -> str:
        lines = [f"{self.mode}: exit {describe_status(self.status)} (returncode "
                 f"{self.returncode}) timed_out={self.timed_out} "
                 f"wall={self.wall_s:.1f}s polls ok/failed={self.polls_ok}/{self.polls_failed}"]
        if self.result is None:
            lines.append("  the process ended before the pattern returned")
        if self.leftovers:
            lines.append(f"  left in its offload folder: {len(self.leftovers)} file(s)")
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
                inductor_cache: str | None = None, python: str | None = None) -> RunResult:
    """One run of ``pattern``; never raises for anything the child does
    (``CannotRun`` when the cache tmpfs it declares cannot be mounted).
    ``python``: the agent run's interpreter, an environment the agent was
    installed into (``agent install``), started as is instead of under ``run``."""
    base = Path(tempfile.mkdtemp(prefix="vshh", dir="/tmp"))  # short: AF_UNIX path limit
    mib = cache_tmpfs_mib(pattern)
    mounted = False
    try:
        env = child_env(base, inductor_cache)
        if mib is not None:
            mount_tmpfs(base / "cache", mib)
            mounted = True
        return _run_child(pattern, with_agent, base, env, timeout_s, python)
    finally:
        if mounted:
            unmount(base / "cache")
        shutil.rmtree(base, ignore_errors=True)


def _run_child(pattern: str, with_agent: bool, base: Path, env: dict[str, str],
               timeout_s: float, python: str | None = None) -> RunResult:
    """The child of one run, driven to its end; what it left is read before ``base`` goes."""
    out = RunResult("agent" if with_agent else "baseline")
    argv = [sys.executable, str(RUNNER), pattern, str(base / "work")]
    if with_agent and python is not None:
        argv = [python, *argv[1:]]  # the environment's own hook loads the agent
    elif with_agent:
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
        out.leftovers = offload_files(base / "cache")
        out.wall_s = time.monotonic() - started
    return out


def offload_files(cache: Path) -> list[str]:
    """``name (N bytes)`` for each file in the offload folder under ``cache``."""
    folder = cache.joinpath(*OFFLOAD_DIR)
    try:
        files = sorted(p for p in folder.rglob("*") if not p.is_dir())
    except OSError:
        return []
    out = []
    for path in files:
        try:
            size = f"{path.lstat().st_size} bytes"
        except OSError:
            size = "gone"
        out.append(f"{path.relative_to(folder)} ({size})")
    return out


def mount_tmpfs(path: Path, mib: int) -> None:
    """A fresh tmpfs of ``mib`` MiB on ``path`` (mode 0700, ours); ``CannotRun`` if not."""
    require_root(mib)
    tool = shutil.which("mount")
    if tool is None:
        raise CannotRun("no mount command to mount a tmpfs as its cache folder")
    done = subprocess.run([tool, "-t", "tmpfs", "-o", f"size={mib}m,mode=0700", "tmpfs",
                           str(path)], capture_output=True, text=True)
    if done.returncode != 0:
        said = (done.stderr or done.stdout).strip() or f"exit status {done.returncode}"
        raise CannotRun(f"cannot mount a {mib} MiB tmpfs as its cache folder: {said}")


def require_root(mib: int) -> None:
    """Only root mounts a tmpfs: ``CannotRun`` for anyone else."""
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        raise CannotRun(f"needs root to mount a {mib} MiB tmpfs as its cache folder")


def unmount(path: Path) -> None:
    """Unmount ``path``; lazily when something still holds it (a stray that outlived
    its run): the temp dir must never be left with a mount below it."""
    tool = shutil.which("umount") or "umount"
    if subprocess.run([tool, str(path)], capture_output=True).returncode != 0:
        subprocess.run([tool, "-l", str(path)], capture_output=True)


_TAGS = ("@@PID", "@@RECORD", "@@STEP", "@@RESULT")


def _drive(child: _Child, side: AgentSide | None, out: RunResult, deadline: float) -> None:
    """Read the runner's protocol lines until stdout closes or the deadline passes."""
    while True:
        try:
            line = child.lines.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            out.timed_out = True
            return
        if line is None:  # the process ended: what the poller sees now is its exit
            if side is not None:
                side.finished()
            return
        tag = line.split(" ", 1)[0]
        try:
            payload = json.loads(line[len(tag):]) if tag in _TAGS else None
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
        elif tag == "@@RECORD":
            out.records.append(payload)
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
    expected_status: int = 0  # how both runs must end (the pattern's VARIANTS)


def run_pair(pattern: str, timeout_s: float = RUN_TIMEOUT_S,
             inductor_cache: str | None = None, python: str | None = None) -> Pair:
    """Both runs of ``pattern``, concurrently (``CannotRun``: neither ran);
    ``python``: see :func:`run_pattern`."""
    mib = cache_tmpfs_mib(pattern)
    if mib is not None:
        require_root(mib)
    with ThreadPoolExecutor(max_workers=2) as pool:
        baseline = pool.submit(run_pattern, pattern, False, timeout_s, inductor_cache)
        agent = pool.submit(run_pattern, pattern, True, timeout_s, inductor_cache, python)
        return Pair(baseline.result(), agent.result(), expected_status(pattern))
