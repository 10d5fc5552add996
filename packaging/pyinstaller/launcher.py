"""The bundle's entry point: ``app.cli.main`` with a clean environment for child processes.

PyInstaller points LD_LIBRARY_PATH, QT_PLUGIN_PATH and QML2_IMPORT_PATH at the
bundle.  The running app no longer needs them (the dynamic loader read
LD_LIBRARY_PATH when the process started; Qt finds its plugins next to its own
libraries), but every program started from it would inherit them:
``vram-steward run -- python train.py`` would load the bundle's libstdc++ and
OpenSSL instead of the system's, and a Qt program would load plugins built for
another Qt.
"""

import os
import sys


def restore_environment() -> None:
    """Undo the bundle's changes to variables that child processes would inherit."""
    bundle = getattr(sys, "_MEIPASS", None)
    if bundle is None:
        return
    # The bootloader keeps the user's own value, if there was one, in LD_LIBRARY_PATH_ORIG.
    original = os.environ.pop("LD_LIBRARY_PATH_ORIG", None)
    if original is not None:
        os.environ["LD_LIBRARY_PATH"] = original
    for name in ("LD_LIBRARY_PATH", "QT_PLUGIN_PATH", "QML2_IMPORT_PATH"):
        if os.environ.get(name, "").startswith(bundle):
            del os.environ[name]


if __name__ == "__main__":
    restore_environment()

    from app.cli import main

    sys.exit(main())
