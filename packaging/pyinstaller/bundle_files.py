"""What the bundle ships besides the frozen modules (shared by the spec and its tests).

The agent is injected into *other* Python interpreters by path (``agent-path``
prints ``<bundle>/app/agent/_bootstrap``), so ``app/agent`` must exist there as
plain ``.py`` source; the frozen copy inside the archive is for the app itself.
``app.ui.shell.application`` looks for ``resources/`` next to the ``app`` package.
"""

from __future__ import annotations

import glob
import os

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), os.pardir, os.pardir))

#: Globs, relative to the repository, of files shipped as they are.
DATA_GLOBS = ("app/agent/**/*.py", "resources/icons/*")


def data_files(root: str = ROOT) -> list[tuple[str, str]]:
    """(source file, destination folder inside the bundle) pairs, PyInstaller's ``datas``."""
    pairs = []
    for pattern in DATA_GLOBS:
        for path in sorted(glob.glob(os.path.join(root, pattern), recursive=True)):
            if os.path.isfile(path) and "__pycache__" not in path:
                pairs.append((path, os.path.dirname(os.path.relpath(path, root))))
    return pairs
