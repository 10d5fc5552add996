"""``python -m tests.e2e.host_harm [PATTERN...]``: run patterns outside pytest.

Prints each pair's summary (the agent's step outcomes included) and the same
account of differences the test fails with; exit status 1 if any pattern differs.
"""

from __future__ import annotations

import sys

from tests.e2e.host_harm import harness, verdict


def main(argv: list[str]) -> int:
    failed = 0
    for pattern in argv or harness.pattern_names():
        pair = harness.run_pair(pattern)
        report = verdict.judge(pair)
        failed += bool(report)
        print(f"== {pattern}: {'DIFFERS' if report else 'same'}")
        print(report or f"{pair.baseline.summary()}\n{pair.agent.summary()}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
