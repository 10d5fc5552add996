"""What counts as harm: every way an agent run may differ from its baseline.

Same result JSON (records, steps, warnings, error), same exit code, no
traceback or printed warning only the agent run has, an agent that really
answered, and each step's outcome as the pattern expected (a refusal with a
reason).  The baseline itself must run cleanly, or the pattern tests nothing.
"""

from __future__ import annotations

from tests.e2e.host_harm import compare
from tests.e2e.host_harm.harness import Pair, RunResult

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


def _baseline_problems(base: RunResult) -> list[str]:
    """The pattern must work without the agent, or it tests nothing."""
    if base.timed_out or base.returncode != 0 or base.result is None or base.problems:
        return ["the pattern does not run cleanly without the agent"]
    if base.result["error"] is not None:
        return [f"the pattern fails without the agent: {base.result['error']}"]
    return []


def _agent_problems(base: RunResult, agent: RunResult) -> list[str]:
    """Every way the agent run differs from the baseline or from the steps' expectations."""
    if agent.timed_out:
        return ["the agent run hung and was killed"]
    problems = [f"harness: {p}" for p in agent.problems]
    if agent.result is None:
        problems.append("the agent run printed no result")
    elif agent.result != base.result:
        error = agent.result.get("error")
        if error and not base.result.get("error"):
            problems.append(f"the pattern raised only with the agent: {error['type']}: "
                            f"{error['message'][:500]}")
        problems.append("results differ (path: without the agent -> with it):\n"
                        + compare.result_diff(base.result, agent.result))
    if agent.returncode != base.returncode:
        problems.append(f"exit code {agent.returncode} with the agent, {base.returncode} without")
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
    problems = _baseline_problems(pair.baseline)
    if problems:
        return "\n".join(problems) + "\n" + _context(pair.baseline)
    problems = _agent_problems(pair.baseline, pair.agent)
    if problems:
        return "\n\n".join(problems) + "\n\n" + _context(pair.agent)
    return ""
