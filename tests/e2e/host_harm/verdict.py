"""What counts as harm: every way an agent run may differ from its baseline.

Same records, steps, warnings and error, the same end (exit status, as a
shell says it; whether the pattern returned), no file left in the offload
folder that the baseline did not leave, no traceback or printed warning only
the agent run has, an agent that really answered, and each step's outcome as
the pattern expected (a refusal with a reason).  The baseline itself must run
cleanly and end as the pattern declares, or the pattern tests nothing.
"""

from __future__ import annotations

from typing import Any

from tests.e2e.host_harm import compare
from tests.e2e.host_harm.harness import Pair, RunResult, describe_status

MIN_POLLS = 2


def _tail(text: str, lines: int) -> str:
    return "\n".join(text.splitlines()[-lines:])


def _context(run: RunResult) -> str:
    """What to show about a run when it fails."""
    parts = [run.summary()]
    if run.poll_errors:
        parts.append("poll errors: " + "; ".join(run.poll_errors[:3]))
    if run.stderr.strip():
        parts.append("stderr (tail):\n" + _tail(run.stderr, 40))
    if run.agent_log.strip():
        parts.append("agent.log (tail):\n" + _tail(run.agent_log, 20))
    return "\n".join(parts)


def _step_problems(run: RunResult) -> list[str]:
    """Steps whose outcome does not match what the pattern expected the agent to do."""
    problems = []
    for step in run.steps:
        where = f"step {step.label!r} (expect {step.expect})"
        if step.error:
            problems.append(f"{where}: {step.error}")
        for m in step.models:
            models = f" (the agent listed: {m.listed})"
            if m.status in ("missing", "error"):
                problems.append(f"{where}: {m.name}: {m.status}: {m.reason}{models}")
            elif m.status == "refused" and not (m.reason or "").strip():
                problems.append(f"{where}: {m.name}: refused without a reason")
            elif step.expect != "any" and m.status != step.expect:
                why = f": {m.reason}" if m.reason else ""
                problems.append(f"{where}: {m.name} ({m.model_id}) was {m.status}{why}{models}")
            if m.status == "unloaded" and step.reload and m.reload != "ok":
                problems.append(f"{where}: {m.name}: reload failed: {m.reload}")
    return problems


def _baseline_problems(base: RunResult, expected_status: int) -> list[str]:
    """The pattern must work without the agent, and end as it declares, or it tests nothing."""
    if base.timed_out or base.problems:
        return ["the pattern does not run cleanly without the agent"]
    if base.status != expected_status:
        return [f"the pattern ends with exit {describe_status(base.status)} without the agent, "
                f"not {describe_status(expected_status)} as it declares"]
    if base.result is not None and base.result["error"] is not None:
        return [f"the pattern fails without the agent: {base.result['error']}"]
    return []


def _result_problems(expected: dict[str, Any], seen: dict[str, Any]) -> list[str]:
    """How what the pattern showed differs (``RunResult.observed``: baseline, agent run)."""
    if seen == expected:
        return []
    problems = []
    error = seen["error"]
    if error and not expected["error"]:
        problems.append(f"the pattern raised only with the agent: {error['type']}: "
                        f"{error['message'][:500]}")
    if seen["returned"] != expected["returned"]:
        if expected["returned"]:
            problems.append("the pattern never returned with the agent: the process ended "
                            + _where(seen))
        else:
            problems.append("the pattern returned with the agent, and without it the "
                            "process ended " + _where(expected))
        # only a run that returned has an error and warnings to compare
        expected, seen = _shown(expected), _shown(seen)
    if seen != expected:
        problems.append("results differ (path: without the agent -> with it):\n"
                        + compare.result_diff(expected, seen))
    return problems


def _where(observed: dict[str, Any]) -> str:
    """Where a run that never returned ended: its records and last step."""
    steps = observed["steps"]
    return (f"after {len(observed['records'])} record(s)"
            + (f", at or after step {steps[-1]!r}" if steps else ""))


def _shown(observed: dict[str, Any]) -> dict[str, Any]:
    return {"records": observed["records"], "steps": observed["steps"]}


def _end_problems(base: RunResult, agent: RunResult) -> list[str]:
    """How the process ended: its exit status and what it left on disk."""
    problems = []
    if agent.status != base.status:
        problems.append(f"exit {describe_status(agent.status)} with the agent, "
                        f"{describe_status(base.status)} without")
    if agent.leftovers != base.leftovers:
        problems.append(f"{len(agent.leftovers)} file(s) left in the offload folder after the "
                        f"process ended ({len(base.leftovers)} without the agent): "
                        + ", ".join(agent.leftovers[:8])
                        + (" ..." if len(agent.leftovers) > 8 else ""))
    return problems


def _agent_problems(base: RunResult, agent: RunResult) -> list[str]:
    """Every way the agent run differs from the baseline or from the steps' expectations."""
    if agent.timed_out:
        return ["the agent run hung and was killed"]
    problems = [f"harness: {p}" for p in agent.problems]
    problems.extend(_result_problems(base.observed(), agent.observed()))
    problems.extend(_end_problems(base, agent))
    extra = compare.new_tracebacks(base.stderr, agent.stderr)
    if extra:
        problems.append("tracebacks only with the agent:\n" + "\n".join(extra))
    extra = compare.new_warnings(base.stderr, agent.stderr)
    if extra:
        problems.append("warnings printed only with the agent:\n" + "\n".join(extra))
    if agent.polls_ok < MIN_POLLS:
        problems.append(f"the agent never really attached ({agent.polls_ok} reports)")
    problems.extend(_step_problems(agent))
    return problems


def judge(pair: Pair) -> str:
    """An account of everything wrong with ``pair``; empty when nothing is."""
    problems = _baseline_problems(pair.baseline, pair.expected_status)
    if problems:
        return "\n".join(problems) + "\n" + _context(pair.baseline)
    problems = _agent_problems(pair.baseline, pair.agent)
    if problems:
        return "\n\n".join(problems) + "\n\n" + _context(pair.agent)
    return ""
