"""Dead code in app/: names defined there that nothing uses.

Uses are counted in app/, tests/ and benchmarks/ (widgets expose small
inspection points that tests read, and benchmarks read a few timings), plus
``.ci/vulture_whitelist.py`` for names a framework calls.  Only definitions
under app/ are reported.  Exit status 1 when there are any.

    .venv/bin/python .ci/dead_code.py
"""

from __future__ import annotations

import sys
from pathlib import Path

from vulture import Vulture

ROOT = Path(__file__).resolve().parents[1]
MIN_CONFIDENCE = 60


def main() -> int:
    v = Vulture()
    v.scavenge([str(ROOT / p) for p in ("app", "tests", "benchmarks")]
               + [str(ROOT / ".ci" / "vulture_whitelist.py")])
    app = ROOT / "app"
    dead = [item for item in v.get_unused_code(min_confidence=MIN_CONFIDENCE)
            if Path(item.filename).resolve().is_relative_to(app)]
    for item in dead:
        print(item.get_report())
    return 1 if dead else 0


if __name__ == "__main__":
    sys.exit(main())
