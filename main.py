"""Start VRAM Steward: ``python main.py`` (GUI), ``python main.py status --json`` (CLI)."""

import sys

from app.cli import main

if __name__ == "__main__":
    sys.exit(main())
