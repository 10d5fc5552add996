"""``python -m app.cli``: the same entry point as ``python -m app``."""

import sys

from app.cli import main

sys.exit(main())
