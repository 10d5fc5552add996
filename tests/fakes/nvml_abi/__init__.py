"""The ABI-level fake of ``libnvidia-ml.so.1``: build it, describe GPUs to it.

``fake_nvml.c`` is compiled with the system C compiler against NVIDIA's own
``nvml.h`` (from the ``nvidia-nvml-dev`` wheel) and loaded by the real
``pynvml`` bindings in a child process whose ``LD_LIBRARY_PATH`` points at the
build.  A wrong struct version, unit or call sequence on the Python side then
fails the way it would on a driver.

A :class:`FakeNvml` is the truth a test configures; :meth:`FakeNvml.env` gives
the environment for a child process that should see it.  Byte counts in
:func:`server` are deliberately not round numbers.

Processes that change their GPU memory while a reader watches write
allocation files into the fake's ``procdir`` (:func:`write_allocation`,
:func:`clear_allocation`); a reader started with ``FakeNvml.env(...,
live=True)`` sees every change on its next NVML call, without re-init.  This
module imports only the standard library, so processes that run under a bare
interpreter (the fake model servers) can use those two functions.
"""

from __future__ import annotations

import hashlib
import os
import random
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
SOURCE = HERE / "fake_nvml.c"

#: Build variants: preprocessor flags that leave out symbols a driver may lack.
VARIANTS: dict[str, tuple[str, ...]] = {
    "current": (),
    # r470-era: no memory v2, no *_v3 process lists, no nvmlDeviceGetTemperatureV.
    "old": ("-DFAKE_NVML_OLD_DRIVER",),
    # A driver past NVML 13 that dropped the deprecated nvmlDeviceGetTemperature.
    "no_deprecated": ("-DFAKE_NVML_NO_DEPRECATED",),
}

NOT_SUPPORTED = "NOT_SUPPORTED"
NO_PERMISSION = "NO_PERMISSION"
GPU_IS_LOST = "GPU_IS_LOST"
UNKNOWN = "UNKNOWN"
NO_ID = 0xFFFFFFFF


# ------------------------------------------------------------------ building

def nvml_header() -> Path | None:
    """NVIDIA's nvml.h from the nvidia-nvml-dev wheel, or None."""
    try:
        import nvidia  # namespace package of NVIDIA's wheels
    except ImportError:
        return None
    for root in getattr(nvidia, "__path__", []):
        for header in sorted(Path(root).glob("*/include/nvml.h")):
            return header
    return None


def compiler() -> str | None:
    for name in (os.environ.get("CC"), "cc", "gcc", "clang"):
        if name and shutil.which(name):
            return name
    return None


def unavailable_reason() -> str | None:
    """Why the fake cannot be built here, or None when it can."""
    if not sys.platform.startswith("linux"):
        return "the ABI fake of libnvidia-ml is built for Linux only"
    if compiler() is None:
        return "no C compiler (cc, gcc or clang) to build the ABI fake of libnvidia-ml"
    if nvml_header() is None:
        return "NVIDIA's nvml.h is missing (pip install nvidia-nvml-dev)"
    return None


def build(variant: str = "current") -> Path:
    """Directory holding ``libnvidia-ml.so.1`` of ``variant`` (built once per
    source, header and flags; reused across test runs)."""
    reason = unavailable_reason()
    if reason:
        raise RuntimeError(reason)
    flags = VARIANTS[variant]
    header = nvml_header()
    assert header is not None
    digest = hashlib.sha256(SOURCE.read_bytes() + header.read_bytes()
                            + " ".join(flags).encode()).hexdigest()[:16]
    out = Path(tempfile.gettempdir()) / f"vram-steward-fake-nvml-{os.getuid()}" / f"{variant}-{digest}"
    lib = out / "libnvidia-ml.so.1"
    if lib.exists():
        return out
    out.mkdir(parents=True, exist_ok=True)
    partial = out / f".libnvidia-ml.so.1.{os.getpid()}"
    cmd = [compiler(), "-shared", "-fPIC", "-O2", "-std=gnu11", "-Wall", "-Werror",
           "-Wno-unused-function", f"-I{header.parent}", *flags,
           str(SOURCE), "-o", str(partial)]
    result = subprocess.run(cmd, capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"building the NVML fake failed:\n{' '.join(cmd)}\n{result.stderr}")
    os.replace(partial, lib)  # atomic: parallel builders never see half a library
    return out


# ------------------------------------------------------------- configuration

@dataclass
class FakeProcess:
    pid: int
    gpu: int
    memory: int | None  # bytes; None: NVML_VALUE_NOT_AVAILABLE (WDDM, MIG without rights)
    lists: str = "compute"  # "compute", "graphics" or "compute,graphics"
    sm: int | None = None  # SM % sample; None: the driver has no sample
    sm_stamp: int = 0  # µs; set: the driver repeats this old sample on every call
    gi: int = NO_ID  # MIG GPU instance id
    ci: int = NO_ID


@dataclass
class FakeMig:
    gpu: int
    slot: int
    gi: int
    total: int
    used: int
    reserved: int = 0
    ci: int = 0
    name: str = "NVIDIA A100-SXM4-80GB MIG 3g.40gb"
    uuid: str = ""


@dataclass
class FakeGpu:
    name: str
    uuid: str
    total: int  # bytes
    used: int  # bytes, without driver-reserved memory (what memory v2 reports)
    reserved: int = 0  # bytes; v1 folds it into "used"
    util_gpu: int | None = None  # percent; None: not supported
    util_mem: int | None = None
    temp: int | None = None  # °C
    power_mw: int | None = None
    power_limit_mw: int | None = None
    fan: int | None = None
    max_mig: int = 0  # 0: not MIG-capable
    mig_mode: bool = False

    @property
    def free(self) -> int:
        return self.total - self.used - self.reserved


@dataclass
class FakeError:
    fn: str  # "all", "memory", "temperature", "processes", "init", ...
    code: str | int
    gpu: int | None = None
    mig: int | None = None
    after: int = 0  # calls that succeed first (GPU_IS_LOST mid-run)


@dataclass
class FakeNvml:
    gpus: list[FakeGpu] = field(default_factory=list)
    processes: list[FakeProcess] = field(default_factory=list)
    migs: list[FakeMig] = field(default_factory=list)
    errors: list[FakeError] = field(default_factory=list)
    latency_us: float = 0.0
    driver_version: str = "580.95.05"
    #: Directory of per-process allocation files (:func:`write_allocation`);
    #: their bytes are added to their GPU's ``used``.
    procdir: str | None = None

    def text(self) -> str:
        lines = [f"driver_version {self.driver_version}", f"latency_us {self.latency_us}"]
        if self.procdir is not None:
            lines.append(f"procdir {self.procdir}")
        for g in self.gpus:
            parts = [f'name="{g.name}"', f"uuid={g.uuid}", f"total={g.total}", f"used={g.used}",
                     f"reserved={g.reserved}", f"max_mig={g.max_mig}", f"mig_mode={int(g.mig_mode)}"]
            for key in ("util_gpu", "util_mem", "temp", "power_mw", "power_limit_mw", "fan"):
                value = getattr(g, key)
                if value is not None:
                    parts.append(f"{key}={value}")
            lines.append("gpu " + " ".join(parts))
        for m in self.migs:
            lines.append(f'mig gpu={m.gpu} slot={m.slot} gi={m.gi} ci={m.ci} name="{m.name}" '
                         f"uuid={m.uuid or f'MIG-{m.gpu}-{m.slot}'} total={m.total} used={m.used} "
                         f"reserved={m.reserved}")
        for p in self.processes:
            mem = "na" if p.memory is None else str(p.memory)
            parts = [f"gpu={p.gpu}", f"pid={p.pid}", f"mem={mem}", f"lists={p.lists}",
                     f"gi={p.gi}", f"ci={p.ci}"]
            if p.sm is not None:
                parts.append(f"sm={p.sm}")
            if p.sm_stamp:
                parts.append(f"sm_stamp={p.sm_stamp}")
            lines.append("proc " + " ".join(parts))
        for e in self.errors:
            parts = [f"fn={e.fn}", f"code={e.code}", f"after={e.after}"]
            if e.gpu is not None:
                parts.append(f"gpu={e.gpu}")
            if e.mig is not None:
                parts.append(f"mig={e.mig}")
            lines.append("error " + " ".join(parts))
        return "\n".join(lines) + "\n"

    def write(self, path: Path) -> Path:
        path.write_text(self.text())
        return path

    def env(self, lib_dir: Path, config: Path, counts: Path | None = None,
            base: dict[str, str] | None = None, live: bool = False) -> dict[str, str]:
        """Environment of a child process that loads the fake through pynvml.

        ``live``: the library re-reads the config and the procdir whenever
        they change (FAKE_NVML_LIVE=1), so the child follows a test that
        rewrites them; otherwise it reads them once, at nvmlInit."""
        env = dict(os.environ if base is None else base)
        env["LD_LIBRARY_PATH"] = os.pathsep.join(
            [str(lib_dir)] + [p for p in env.get("LD_LIBRARY_PATH", "").split(os.pathsep) if p])
        env["FAKE_NVML_CONFIG"] = str(config)
        if counts is not None:
            env["FAKE_NVML_COUNTS"] = str(counts)
        if live:
            env["FAKE_NVML_LIVE"] = "1"
        else:
            env.pop("FAKE_NVML_LIVE", None)
        return env


# --------------------------------------------------------- allocation files

def write_allocation(procdir: str | os.PathLike[str], pid: int, gpu: int, nbytes: int,
                     sm: int | None = None, lists: str | None = None) -> None:
    """Process ``pid`` now holds ``nbytes`` on GPU ``gpu`` (SM ``sm`` % when
    given).  Atomic: a temporary ``.name`` file, then a rename, so a reader
    never sees half a file."""
    line = f"gpu={int(gpu)} mem={int(nbytes)}"
    if sm is not None:
        line += f" sm={int(sm)}"
    if lists is not None:
        line += f" lists={lists}"
    final = os.path.join(os.fspath(procdir), str(int(pid)))
    partial = os.path.join(os.fspath(procdir), f".{int(pid)}.{os.getpid()}.{random.getrandbits(32):08x}")
    with open(partial, "w") as f:
        f.write(line + "\n")
    os.replace(partial, final)


def clear_allocation(procdir: str | os.PathLike[str], pid: int) -> None:
    """Process ``pid`` holds no GPU memory any more (nothing to do when it held none)."""
    try:
        os.unlink(os.path.join(os.fspath(procdir), str(int(pid))))
    except FileNotFoundError:
        pass


def read_counts(text: str) -> dict[str, int]:
    """``name count`` lines (the fake's counter dump) as a dict."""
    counts: dict[str, int] = {}
    for line in text.splitlines():
        name, _, value = line.partition(" ")
        if name:
            counts[name] = int(value)
    return counts


# ----------------------------------------------------------------- scenarios

def _odd_bytes(rng: random.Random, low_mib: int, high_mib: int) -> int:
    """A byte count that is not a multiple of anything round."""
    return rng.randint(low_mib, high_mib) * 1024 * 1024 + rng.randint(1, 1024 * 1024 - 1)


def server(pids_per_gpu: list[list[int]], seed: int = 1, graphics_every: int = 5,
           both_every: int = 7) -> FakeNvml:
    """A multi-GPU server: one entry of ``pids_per_gpu`` per GPU, each pid a
    real process.  Every ``graphics_every``-th process is on the graphics list
    only, every ``both_every``-th on both lists (one allocation, two lists)."""
    rng = random.Random(seed)
    fake = FakeNvml()
    serial = 0
    for index, pids in enumerate(pids_per_gpu):
        total = 85_899_345_920 - rng.randint(1, 4095) * 4096  # an 80 GB card, not exact
        reserved = _odd_bytes(rng, 300, 600)
        procs = []
        for pid in pids:
            serial += 1
            lists = ("compute,graphics" if serial % both_every == 0
                     else "graphics" if serial % graphics_every == 0 else "compute")
            procs.append(FakeProcess(pid=pid, gpu=index, memory=_odd_bytes(rng, 80, 900),
                                     lists=lists, sm=rng.randint(0, 100)))
        attributed = sum(p.memory or 0 for p in procs)
        used = attributed + _odd_bytes(rng, 1, 700)  # some memory no listed process holds
        fake.gpus.append(FakeGpu(
            name="NVIDIA H100 80GB HBM3", uuid=f"GPU-{seed:04x}{index:04x}-1b2c-4d5e-8f90-a1b2c3d4e5f6",
            total=total, used=used, reserved=reserved, util_gpu=rng.randint(1, 99),
            util_mem=rng.randint(1, 99), temp=rng.randint(30, 85),
            power_mw=rng.randint(60_000, 690_000), power_limit_mw=700_000, fan=rng.randint(0, 100)))
        fake.processes.extend(procs)
    return fake


class Helpers:
    """Real idle processes whose pids the fake reports (psutil sees them)."""

    def __init__(self, count: int) -> None:
        self.count = count
        self._procs: list[subprocess.Popen[bytes]] = []

    def __enter__(self) -> list[int]:
        for _ in range(self.count):
            self._procs.append(subprocess.Popen(["sleep", "3600"], stdin=subprocess.DEVNULL))
        return [p.pid for p in self._procs]

    def __exit__(self, *exc: object) -> None:
        for p in self._procs:
            p.kill()
        for p in self._procs:
            p.wait()


def chunks(items: list[int], size: int) -> Iterator[list[int]]:
    for start in range(0, len(items), size):
        yield items[start:start + size]


def expected_processes(fake: FakeNvml, gpu: int, gi: int | None = None) -> dict[int, dict]:
    """Per pid, what a correct reader shows for one device: lists merged by
    pid, memory the larger of the two figures (one allocation reported twice)."""
    out: dict[int, dict] = {}
    for p in fake.processes:
        if p.gpu != gpu or (gi is not None and p.gi != gi):
            continue
        kinds = set(p.lists.split(","))
        entry = out.setdefault(p.pid, {"gpu_memory": None, "kinds": set(), "sm": p.sm})
        if p.memory is not None and (entry["gpu_memory"] is None or p.memory > entry["gpu_memory"]):
            entry["gpu_memory"] = p.memory
        entry["kinds"] |= kinds
    return out


def kind_of(kinds: Iterable[str]) -> str:
    kinds = set(kinds)
    return "compute+graphics" if kinds == {"compute", "graphics"} else next(iter(kinds))
