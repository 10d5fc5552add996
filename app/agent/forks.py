"""Work a forked child does before anything else runs in it.

Only the forking thread exists in the child: a lock another thread held at
fork time stays held forever, and a move another thread was making never
ends.  Each module registers how it recovers; none of that may raise there.
"""

from __future__ import annotations

import os
from collections.abc import Callable


def in_child(fn: Callable[[], None]) -> None:
    """Run ``fn`` in every child forked from now on; its errors are dropped."""

    def run() -> None:
        try:
            fn()
        except BaseException:
            pass

    try:
        os.register_at_fork(after_in_child=run)
    except Exception:  # pragma: no cover - platforms without fork
        pass
