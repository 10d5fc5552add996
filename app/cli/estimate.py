"""``estimate``: the memory a run needs before it runs, against what the GPUs
have free now, and what would make it fit.

The estimate needs neither NVML nor a GPU (one step under fake tensors, or
the LLM formula); the GPUs are read as ``status`` reads them: this machine's
NVML with its agents and model servers, the demo at its moment (``--demo``),
or a server's latest snapshot (``--host``).  The figures go to stdout; a bad
request (a missing model, a bad value, a missing package) to stderr with
status 1; no GPU figures or no such GPU with status 2.  No Qt on this path.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import TYPE_CHECKING, Any

from app import APP_NAME
from app.cli.common import EXIT_FAILED, EXIT_NO_SOURCE, EXIT_OK, print_json

if TYPE_CHECKING:
    from app.core.estimate.types import Estimate, GpuFit, StepRequest
    from app.core.monitor.samples import Snapshot

INSTALL = 'pip install "vram-steward[estimate]"'


def _fail(text: str, code: int) -> int:
    print(f"{APP_NAME}: {text}", file=sys.stderr)
    return code


def _request(args: argparse.Namespace) -> StepRequest:
    from app.core.estimate.types import StepRequest

    return StepRequest(args.model, batch=args.batch, seq=args.seq, image=args.image,
                       context=args.context, dtype=args.dtype, autocast=args.autocast,
                       train=args.train, optimizer=args.optimizer,
                       checkpointing=args.checkpointing, lora_rank=args.lora)


def _estimate(request: StepRequest) -> Estimate:
    """The estimate; a missing package is an :class:`EstimateError` naming the extra."""
    from app.core.estimate.run import estimate
    from app.core.estimate.types import EstimateError

    try:
        return estimate(request)
    except ImportError as exc:
        name = exc.name or "a package the estimate needs"
        raise EstimateError(f"{name} is not installed: {INSTALL}") from None


def _snapshot(args: argparse.Namespace) -> Snapshot:
    """The GPUs as ``status`` reads them (its source, so its test seams hold)."""
    if args.host:
        from app.cli.remote import connect

        client = connect(args)
        try:
            return client.snapshot()
        finally:
            client.close()
    if args.demo:
        from app.core.agents.demo_moment import demo_moment

        return demo_moment(args.seed, args.demo_size).snapshot
    from app.cli import status
    from app.cli.doctor import _agent_reports, _reports_only
    from app.core.monitor.collector import Collector

    collector = Collector(status.make_source(False), agents=_reports_only(_agent_reports()),
                          pressure_policy=False, doctor=False,
                          servers=status.scanned_servers())
    try:
        return collector.collect()  # a source that fails gives a snapshot saying why
    finally:
        collector.close()


def _source_of(args: argparse.Namespace, snapshot: Snapshot) -> str:
    return args.host or ("demo" if args.demo else snapshot.source)


def _quiet_libraries() -> None:
    """transformers' and diffusers' warnings about a config are not this command's
    words (read when they first log; a variable the user set wins)."""
    for name in ("TRANSFORMERS_VERBOSITY", "DIFFUSERS_VERBOSITY"):
        os.environ.setdefault(name, "error")


def cmd_estimate(args: argparse.Namespace) -> int:
    from app.core.estimate.fit import fit_gpus, largest_batch_on, memoized
    from app.core.estimate.rooms import gpu_rooms
    from app.core.estimate.types import EstimateError

    _quiet_libraries()
    try:
        est = _estimate(_request(args))
    except EstimateError as exc:
        return _fail(str(exc), EXIT_FAILED)
    snapshot = _snapshot(args)
    rooms = gpu_rooms(snapshot)
    if args.gpu is not None:
        rooms = tuple(r for r in rooms if r.gpu == args.gpu)
        if not rooms and snapshot.gpus:
            known = ", ".join(r.gpu for r in gpu_rooms(snapshot)) or "none"
            return _fail(f"no GPU {args.gpu} here (GPUs: {known})", EXIT_NO_SOURCE)
    ask = memoized(_estimate, est)
    try:
        fits = fit_gpus(est, rooms, reestimate=ask)
        batches = {f.gpu: largest_batch_on(est, f, reestimate=ask) for f in fits} \
            if args.max_batch else {}
    except EstimateError as exc:
        return _fail(str(exc), EXIT_FAILED)
    chosen = _chosen(fits)
    if args.json:
        print_json(_json(est, fits, chosen, batches, args, snapshot))
    else:
        print(_text(est, fits, chosen, batches, _source_of(args, snapshot)))
    if not snapshot.gpus:
        return _fail(f"no GPU figures: {snapshot.error or 'no GPUs'}", EXIT_NO_SOURCE)
    return EXIT_OK


def _chosen(fits: tuple[GpuFit, ...]) -> GpuFit | None:
    """The GPU the top figures are for: the one asked for, else the one with most free."""
    if len(fits) == 1:
        return fits[0]
    known = [f for f in fits if f.free_bytes is not None]
    return max(known, key=lambda f: f.free_bytes or 0) if known else None


def _needs(est: Estimate, chosen: GpuFit | None) -> tuple[int, int]:
    """(needs, context bytes) on the chosen GPU, or on an unknown GPU model."""
    if chosen is not None:
        return chosen.needs_bytes, chosen.context_bytes
    from app.core.estimate.context import fresh_process_bytes

    context = fresh_process_bytes(None)
    return est.reserved_bytes + context, context


def _json(est: Estimate, fits: tuple[GpuFit, ...], chosen: GpuFit | None,
          batches: dict[str, int | None], args: argparse.Namespace,
          snapshot: Snapshot) -> dict[str, Any]:
    needs, context = _needs(est, chosen)
    gpus = []
    for f in fits:
        row = f.to_json()
        if args.max_batch:
            row["max_batch"] = batches.get(f.gpu)
        gpus.append(row)
    out: dict[str, Any] = {
        "model": est.request.model, "model_name": est.model_name, "method": est.method,
        "exact": est.exact, "params": est.params,
        "peak_bytes": est.peak_bytes, "reserved_bytes": est.reserved_bytes,
        "needs_bytes": needs, "context_bytes": context,
        "gpu": chosen.gpu if chosen is not None else None,
        "breakdown": dict(est.breakdown), "scales_with_batch": list(est.scales_with_batch),
        "limits": list(est.limits), "source": _source_of(args, snapshot),
        "error": None if snapshot.gpus else (snapshot.error or "no GPUs"),
        "gpus": gpus, "estimate": est.to_json()}
    if args.max_batch:
        out["max_batch"] = batches.get(chosen.gpu) if chosen is not None else None
    return out


def _text(est: Estimate, fits: tuple[GpuFit, ...], chosen: GpuFit | None,
          batches: dict[str, int | None], source: str) -> str:
    from app.cli.estimate_text import estimate_text

    return estimate_text(est, fits, chosen, batches, source, _needs(est, chosen))


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, not {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected 1 or more, not {value}")
    return value


def register(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    from app.cli.estimate_oom import add_oom_option
    from app.cli.remote import add_remote_options
    from app.core.estimate.types import DTYPES, OPTIMIZERS

    p = sub.add_parser("estimate", parents=[common],
                       help="will it fit? the memory a run needs against the GPUs' free memory")
    p.add_argument("--model", default=None, metavar="PATH_OR_MODULE:FN",
                   help="a Hugging Face model folder or config.json, a diffusers component "
                        "folder, a GGUF file, or package.module:function returning "
                        "(module, example_batch)")
    p.add_argument("--batch", type=_positive, default=1, help="samples per step (default 1)")
    size = p.add_mutually_exclusive_group()
    size.add_argument("--seq", type=_positive, default=None, metavar="N",
                      help="tokens per sample (text models)")
    size.add_argument("--image", type=_positive, default=None, metavar="PX",
                      help="image side in pixels (vision models, UNets)")
    p.add_argument("--context", type=_positive, default=None, metavar="N",
                   help="an LLM's context length: its KV cache by formula")
    p.add_argument("--dtype", choices=DTYPES, default="float32", help="the weights' dtype")
    p.add_argument("--autocast", choices=("bfloat16", "float16"), default=None,
                   help="mixed precision over float32 weights")
    p.add_argument("--train", action="store_true",
                   help="a training step: forward, backward, optimizer step")
    p.add_argument("--optimizer", choices=OPTIMIZERS, default="adamw",
                   help="with --train (default adamw)")
    p.add_argument("--checkpointing", action="store_true",
                   help="with --train: gradient checkpointing")
    p.add_argument("--lora", type=_positive, default=None, metavar="R",
                   help="with --train: LoRA of rank R instead of every weight")
    p.add_argument("--gpu", default=None, metavar="N",
                   help="only this GPU (its id as status shows it: 0, 0/mig1, 0@host)")
    p.add_argument("--max-batch", action="store_true",
                   help="the largest batch that fits on the GPU (each GPU without --gpu)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    add_oom_option(p)
    p.set_defaults(func=_checked, estimate_parser=p)
    add_remote_options(p)


def _checked(args: argparse.Namespace) -> int:
    if args.oom is not None:
        from app.cli.estimate_oom import run_oom

        return run_oom(args)
    if args.model is None:
        args.estimate_parser.error("the following arguments are required: --model "
                                   "(or --oom REPORT_ID)")
    if not args.train and (args.checkpointing or args.lora is not None
                           or args.optimizer != "adamw"):
        return _fail("--optimizer, --checkpointing and --lora belong to a training step: "
                     "add --train", EXIT_FAILED)
    return cmd_estimate(args)
