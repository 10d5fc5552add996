"""A stand-in app for the single-instance tests, run as a real process.

``python single_instance_driver.py [--barrier] ARG...`` claims the instance at
``$VRAM_STEWARD_INSTANCE`` with ``ARG...`` as its argv.  It prints one line per
event, flushed: ``ready`` (with --barrier: set up, now waiting for a line on
stdin before claiming), then either ``second ok`` / ``second failed <error>``
(exit 0), or ``listening`` and, once another launch asks, ``raised <argv as
JSON>`` (exit 0).  Exit 3 if nobody asks within 30 s.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from PySide6.QtCore import QCoreApplication, QTimer

from app.ui.shell.single_instance import SingleInstance


def main(args: list[str]) -> int:
    barrier = args[:1] == ["--barrier"]
    argv = args[1:] if barrier else args
    app = QCoreApplication(sys.argv[:1])
    instance = SingleInstance()
    if barrier:
        print("ready", flush=True)
        sys.stdin.readline()
    if not instance.claim(argv=argv):
        reply = instance.reply
        print("second ok" if reply and reply.ok else f"second failed {reply}", flush=True)
        return 0
    if not instance.is_listening():
        print("unguarded", flush=True)
        return 2

    def on_raise(raised: list[str]) -> None:
        print("raised", json.dumps(raised), flush=True)
        app.quit()

    instance.raise_requested.connect(on_raise)
    QTimer.singleShot(30_000, lambda: app.exit(3))
    print("listening", flush=True)
    code = app.exec()
    instance.close()
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
