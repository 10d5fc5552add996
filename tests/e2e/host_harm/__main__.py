"""``python -m tests.e2e.host_harm [PATTERN[:VARIANT]...]``: run patterns outside pytest.

A pattern with variants stands for all of them.  Prints each pair's summary
(the agent's step outcomes included) and the same account of differences the
test fails with; exit status 1 if any pattern differs.
"""

from __future__ import annotations

import sys

from tests.e2e.host_harm import harness, verdict


def main(argv: list[str]) -> int:
    try:
        patterns = harness.expand(argv) if argv else harness.pattern_names()
    except ValueError as exc:
        print(exc, file=sys.stderr)
        return 2
    failed = 0
    for pattern in patterns:
        try:
            pair = harness.run_pair(pattern)
        except harness.CannotRun as exc:
            print(f"== {pattern}: skipped ({exc})", flush=True)
            continue
        report = verdict.judge(pair)
        failed += bool(report)
        print(f"== {pattern}: {'DIFFERS' if report else 'same'}")
        print(report or f"{pair.baseline.summary()}\n{pair.agent.summary()}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
