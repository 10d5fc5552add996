"""``estimate --oom REPORT_ID``: the batch that would have fitted where an OOM happened.

The report is a stored one (the report store), the demo's at its moment
(``--demo``), or, with ``-``, an ``OomReport``'s JSON read from stdin (how the
window hands over a report it holds, whatever host it came from).  The run is
rebuilt from the model the report keeps (``OomReport.model``) and estimated
again at smaller batches (``app.core.estimate.postmortem``).  The proposal
goes to stdout; "n/a" with its reason when the model is not known (status
0: an answer); no such report, or an estimate that fails, to stderr with
status 1.  No Qt on this path.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING, Any

from app import APP_NAME
from app.cli.common import EXIT_FAILED, EXIT_OK, print_json

if TYPE_CHECKING:
    from app.core.diagnosis.types import OomReport

INSTALL = 'pip install "vram-steward[estimate]"'


def add_oom_option(parser: argparse.ArgumentParser) -> None:
    """``--oom REPORT_ID`` on the ``estimate`` parser."""
    parser.add_argument("--oom", default=None, metavar="REPORT_ID",
                        help="the batch that would have fitted where this OOM report's run "
                             "failed ('-': the report's JSON on stdin)")


def _fail(text: str) -> int:
    print(f"{APP_NAME}: {text}", file=sys.stderr)
    return EXIT_FAILED


def load_report(args: argparse.Namespace) -> OomReport | None:
    """The report ``args.oom`` names (see the module's docstring), or None."""
    from app.core.diagnosis.types import OomReport

    if args.oom == "-":
        try:
            return OomReport.from_json(json.loads(sys.stdin.read()))
        except ValueError:
            return None
    if getattr(args, "demo", False):
        from app.core.agents.demo_moment import demo_moment

        moment = demo_moment(getattr(args, "seed", 7), getattr(args, "demo_size", None))
        # The demo's clock starts when the command does: its ids' times move, "pid-seq" stays.
        tail = args.oom.split("-", 1)[-1]
        return next((r for r in moment.doctor.reports
                     if r.id == args.oom or r.id.split("-", 1)[-1] == tail), None)
    from app.core.diagnosis.report_store import ReportStore

    return ReportStore().load(args.oom)


def run_oom(args: argparse.Namespace) -> int:
    """Print the proposal for ``args.oom`` (``args.json``: as JSON)."""
    from app.core.estimate.postmortem import batch_that_fits, oom_model, why_unknown
    from app.core.estimate.types import EstimateError

    if getattr(args, "host", None):
        return _fail("--oom reads this machine's OOM reports; for a remote host's, give its "
                     "report's JSON on stdin (--oom -), as `doctor --oom --host URL --json` "
                     "prints it")
    report = load_report(args)
    if report is None:
        return _fail(f"no OOM report {args.oom!r}")
    model = oom_model(report)
    try:
        proposal = batch_that_fits(report, model)
    except ImportError as exc:
        return _fail(f"{exc.name or 'a package the estimate needs'} is not installed: {INSTALL}")
    except EstimateError as exc:
        return _fail(f"the run of {report.id} could not be estimated: {exc}")
    reason = why_unknown(report, model) if proposal is None else None
    if proposal is None and reason is None:
        reason = "the run could not be rebuilt from the report"
    if args.json:
        data: dict[str, Any] = {
            "report": report.id, "pid": report.pid,
            "model": None if model is None else {"name": model.name, "class": model.class_name},
            "proposal": proposal.to_json() if proposal is not None else None,
            "reason": reason}
        print_json(data)
        return EXIT_OK
    name = f" ({model.name}, {model.class_name})" if model is not None else ""
    print(f"OOM {report.id}: {report.command or f'pid {report.pid}'}{name}")
    print("Batch that would have fitted: "
          + (proposal.text if proposal is not None else f"n/a — {reason}"))
    return EXIT_OK
