"""Runs the real collector for a few ticks in a child process that loads the
NVML fake, and prints one JSON object: the snapshots (``status --json``
shape) and the fake's call counts per tick.

    python -m tests.fakes.nvml_abi.probe --ticks 3 [--interval 0.05]

The parent sets LD_LIBRARY_PATH and FAKE_NVML_CONFIG (FakeNvml.env).
``calls`` holds, per tick, how many times each NVML entry point ran during
it.  ``--then CONFIG`` changes what the GPUs report after the first tick.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import sys
import time

from app.core.monitor.collector import Collector
from app.core.monitor.nvml_source import NvmlSource
from app.core.monitor.report import snapshot_to_json
from tests.fakes.nvml_abi import read_counts


def fake_library() -> ctypes.CDLL:
    """The already-loaded fake (same soname, so the same handle as pynvml's)."""
    return ctypes.CDLL("libnvidia-ml.so.1")


def counts(lib: ctypes.CDLL) -> dict[str, int]:
    buf = ctypes.create_string_buffer(1 << 16)
    lib.fakeNvmlCounts(buf, len(buf))
    return read_counts(buf.value.decode())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--ticks", type=int, default=2)
    parser.add_argument("--interval", type=float, default=0.05)
    parser.add_argument("--then", metavar="CONFIG",
                        help="after the first tick, the GPUs change to this config")
    args = parser.parse_args(argv)

    collector = Collector(NvmlSource(), pressure_policy=False)
    collector.open()
    lib = fake_library()
    snapshots, per_tick = [], []
    for tick in range(args.ticks):
        lib.fakeNvmlResetCounts()
        snapshots.append(snapshot_to_json(collector.collect()))
        per_tick.append({k: v for k, v in counts(lib).items() if v})
        if tick == 0 and args.then:
            os.environ["FAKE_NVML_CONFIG"] = args.then  # putenv: the library reads it
            assert lib.fakeNvmlReload() == 0
        if tick + 1 < args.ticks:
            time.sleep(args.interval)
    collector.close()
    json.dump({"snapshots": snapshots, "calls": per_tick}, sys.stdout)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
