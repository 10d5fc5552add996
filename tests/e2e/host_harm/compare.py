"""Readable differences between two runs: results leaf by leaf; tracebacks and
warnings printed to stderr (those before the runner records, at start-up or
exit) as multisets."""

from __future__ import annotations

import collections
import difflib
import json
import re
from typing import Any

_ADDRESS = re.compile(r"0x[0-9a-fA-F]{4,}")
_TMP = re.compile(r"/tmp/[^\s'\",:)\]]+")
#: torch's logging prefix (``E1123 23:23:51.850000 22027 torch/x.py:30] ``): it
#: carries a time and a pid, and logged tracebacks have it on every line.
_LOG_PREFIX = re.compile(r"^[DIWEF]\d{4} \d\d:\d\d:\d\d\.\d+ +\d+ [^\]]*\] ?")
#: A warning as ``warnings.showwarning`` prints it: ``path:line: Category: message``.
_WARNING_LINE = re.compile(r"^\S+:\d+: (\w*Warning): (.*)$")
_HEADERS = ("Traceback (most recent call last):", "Exception ignored in", "Exception in thread",
            "Fatal Python error", "Segmentation fault")


def _leaves(value: Any, path: str = "") -> dict[str, Any]:
    """``value`` flattened to {json path: scalar}."""
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for k, v in value.items():
            out.update(_leaves(v, f"{path}.{k}"))
        return out
    if isinstance(value, list):
        out = {}
        for i, v in enumerate(value):
            out.update(_leaves(v, f"{path}[{i}]"))
        return out
    return {path: value}


def _short(value: Any, width: int = 100) -> str:
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= width else text[:width] + "..."


def value_diff(baseline: Any, agent: Any, limit: int = 12) -> list[str]:
    """The leaves that differ: ``path: without -> with``."""
    a, b = _leaves(baseline), _leaves(agent)
    lines = []
    for path in list(dict.fromkeys([*a, *b])):
        if a.get(path, "<absent>") != b.get(path, "<absent>"):
            lines.append(f"{path or '.'}: {_short(a.get(path, '<absent>'))} -> "
                         f"{_short(b.get(path, '<absent>'))}")
    if len(lines) > limit:
        lines = lines[:limit] + [f"... ({len(lines) - limit} more)"]
    return lines


def _label(record: list[Any] | None) -> str:
    return _short(record[0]) if record else "none (the run ended before it)"


def result_diff(baseline: dict[str, Any], agent: dict[str, Any]) -> str:
    """What differs between two results: records by label, then the other fields."""
    out: list[str] = []
    base_records, agent_records = baseline.get("records", []), agent.get("records", [])
    for i in range(max(len(base_records), len(agent_records))):
        old = base_records[i] if i < len(base_records) else None
        new = agent_records[i] if i < len(agent_records) else None
        if old == new:
            continue
        if old is None or new is None or old[0] != new[0]:
            out.append(f"record #{i}: {_label(old)} without the agent, {_label(new)} with it")
            out.append("  (records out of step from here on)")
            break
        out.append(f"record #{i} {old[0]!r}:")
        out.extend("  " + line for line in value_diff(old[1], new[1]))
    for key in sorted(set(baseline) | set(agent)):
        if key != "records" and baseline.get(key) != agent.get(key):
            out.append(f"{key}:")
            old_lines = json.dumps(baseline.get(key), indent=1).splitlines()
            new_lines = json.dumps(agent.get(key), indent=1).splitlines()
            out.extend("  " + line for line in difflib.unified_diff(
                old_lines, new_lines, "without agent", "with agent", n=1, lineterm=""))
    return "\n".join(out)


def _normalise(line: str) -> str:
    return _ADDRESS.sub("0x?", _TMP.sub("<tmp>", line.strip()))


def tracebacks(stderr: str) -> collections.Counter:
    """Each traceback-like block of ``stderr`` as (header, final line), counted.

    The final line of a Python traceback is the first unindented line after
    its header: ``ValueError: ...``; paths and addresses are normalised.
    """
    found: collections.Counter = collections.Counter()
    lines = [_LOG_PREFIX.sub("", line) for line in stderr.splitlines()]
    i = 0
    while i < len(lines):
        header = next((h for h in _HEADERS if h in lines[i]), None)
        if header is None:
            i += 1
            continue
        last = lines[i]
        j = i + 1
        if header == "Traceback (most recent call last):":
            while j < len(lines) and (lines[j].startswith((" ", "\t")) or not lines[j].strip()):
                j += 1
            last = lines[j] if j < len(lines) else "<cut>"
            j += 1
        found[(header, _normalise(last))] += 1
        i = j
    return found


def new_tracebacks(baseline_stderr: str, agent_stderr: str) -> list[str]:
    """Tracebacks the agent run printed that the baseline did not (with counts)."""
    extra = tracebacks(agent_stderr) - tracebacks(baseline_stderr)
    return [f"{n} x {header} ... {last}" for (header, last), n in sorted(extra.items())]


def warning_lines(stderr: str) -> collections.Counter:
    """Warnings printed to stderr, as (category, message), counted."""
    found: collections.Counter = collections.Counter()
    for line in stderr.splitlines():
        match = _WARNING_LINE.match(_LOG_PREFIX.sub("", line))
        if match:
            found[(match.group(1), _normalise(match.group(2)))] += 1
    return found


def new_warnings(baseline_stderr: str, agent_stderr: str) -> list[str]:
    """Warnings the agent run printed to stderr that the baseline did not."""
    extra = warning_lines(agent_stderr) - warning_lines(baseline_stderr)
    return [f"{n} x {category}: {message}" for (category, message), n in sorted(extra.items())]
