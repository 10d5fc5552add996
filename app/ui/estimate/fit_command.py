"""What the "Will it fit?" dialog asks, as the ``estimate`` command line it runs.

Qt-free: the form fills a :class:`FitChoice`, the GPU list gives a
:class:`GpuTarget`, and :func:`command_line` joins them into the argv of a child
``python -m app estimate --json …`` (the estimate imports torch and builds the
model: never in the window's own process).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from app.core.monitor.hosts import each_host, split_id
from app.core.monitor.samples import GpuSample, Snapshot
from app.core.units import fmt_bytes


@dataclass(frozen=True, slots=True)
class FitChoice:
    """The form's inputs; None: not given (the command's default)."""

    model: str
    batch: int = 1
    seq: int | None = None
    image: int | None = None
    context: int | None = None
    dtype: str = "float32"
    autocast: str | None = None
    train: bool = False
    optimizer: str = "adamw"
    checkpointing: bool = False
    lora_rank: int | None = None
    max_batch: bool = False


@dataclass(frozen=True, slots=True)
class GpuTarget:
    """The GPU to fit on: a window-wide id ("0", "0@gpu1") and, for a remote
    host's, how to reach its server (the options ``--host`` takes)."""

    display_id: str
    label: str = ""
    host_url: str | None = None
    token_file: str | None = None
    tls_ca: str | None = None
    remote_command: str | None = None
    demo: bool = False  # the window shows the simulated machine

    @property
    def host(self) -> str:
        return split_id(self.display_id)[0]

    @property
    def local_id(self) -> str:
        """The host's own id of the GPU, as ``--gpu`` takes it."""
        return split_id(self.display_id)[1]


def estimate_args(choice: FitChoice) -> list[str]:
    """The model and step options, in the command's order."""
    args = ["--model", choice.model, "--batch", str(choice.batch)]
    for flag, value in (("--seq", choice.seq), ("--image", choice.image),
                        ("--context", choice.context)):
        if value is not None:
            args += [flag, str(value)]
    args += ["--dtype", choice.dtype]
    if choice.autocast:
        args += ["--autocast", choice.autocast]
    if choice.train:
        args += ["--train", "--optimizer", choice.optimizer]
        if choice.checkpointing:
            args.append("--checkpointing")
        if choice.lora_rank:
            args += ["--lora", str(choice.lora_rank)]
    if choice.max_batch:
        args.append("--max-batch")
    return args


def target_args(target: GpuTarget | None) -> list[str]:
    """``--gpu`` and, for a remote host's GPU, ``--host`` with its options; the
    demo's GPUs with ``--demo``."""
    if target is None:
        return []
    args = ["--gpu", target.local_id]
    if target.host_url:
        args += ["--host", target.host_url]
        for flag, value in (("--token-file", target.token_file), ("--tls-ca", target.tls_ca),
                            ("--remote-command", target.remote_command)):
            if value:
                args += [flag, value]
    elif target.demo:
        args.append("--demo")
    return args


def command_line(choice: FitChoice, target: GpuTarget | None,
                 python: str | None = None) -> list[str]:
    """The child's argv: this interpreter running the app's ``estimate --json``."""
    return [python or sys.executable, "-m", "app", "estimate", "--json",
            *estimate_args(choice), *target_args(target)]


def gpu_label(gpu: GpuSample) -> str:
    """"GPU 0 · H100 80GB HBM3 · 61.2 GiB free" ("GPU 0 on gpu1 · …" a remote host's)."""
    host, local = split_id(gpu.display_id)
    free = gpu.memory_free
    if free is None and gpu.memory_total is not None and gpu.memory_used is not None:
        free = max(0, gpu.memory_total - gpu.memory_used)
    where = f" on {host}" if host else ""
    name = gpu.name.removeprefix("NVIDIA ")
    return f"GPU {local}{where} · {name} · {fmt_bytes(free)} free"


def gpu_targets(snapshot: Snapshot | None, configs: Sequence[Any] = ()) -> list[GpuTarget]:
    """Every GPU of ``snapshot``: this machine's, then each remote host's, with the
    options that reach its server (``configs``: the watched hosts' ``HostConfig``)."""
    by_url = {c.url: c for c in configs}
    out: list[GpuTarget] = []
    for view, own in each_host(snapshot):
        config = by_url.get(view.url) if view is not None else None
        for gpu in own.gpus:
            if view is None:
                out.append(GpuTarget(gpu.display_id, gpu_label(gpu), demo=own.source == "demo"))
                continue
            out.append(GpuTarget(
                gpu.display_id, gpu_label(gpu), host_url=view.url,
                token_file=getattr(config, "token_file", None),
                tls_ca=getattr(config, "ca_file", None),
                remote_command=getattr(config, "remote_command", None)))
    return out


__all__ = ["FitChoice", "GpuTarget", "command_line", "estimate_args", "gpu_label",
           "gpu_targets", "target_args"]
