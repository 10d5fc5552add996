"""OOM reports kept as JSON files in the state directory.

One file per report (``<id>.json``), written atomically (a private temporary
file, then a rename) with mode 0600 in a 0700 directory; the newest
``keep`` are kept.  A file that does not parse is skipped, never fatal.
Called on the sampler thread or a worker, never the GUI thread.
"""

from __future__ import annotations

import json
import logging
import os
import re

from app.core.diagnosis.types import OomReport
from app.core.paths import ensure_private_dir, oom_reports_dir

log = logging.getLogger(__name__)

KEEP = 100
_NAME = re.compile(r"^[0-9]{13}-[0-9]+-[0-9]+\.json$")


class ReportStore:
    def __init__(self, directory: str | None = None, keep: int = KEEP) -> None:
        """``directory`` None: the state directory's ``oom-reports`` (read when used)."""
        self._directory = directory
        self.keep = keep

    @property
    def directory(self) -> str:
        return self._directory or oom_reports_dir()

    def _path(self, report_id: str) -> str:
        return os.path.join(self.directory, f"{report_id}.json")

    def exists(self, report_id: str) -> bool:
        return os.path.exists(self._path(report_id))

    def save(self, report: OomReport) -> str:
        """Write ``report`` and drop the oldest beyond ``keep``; returns its path.
        Raises OSError when the directory cannot be written."""
        directory = ensure_private_dir(self.directory)
        final = self._path(report.id)
        tmp = os.path.join(directory, f".{report.id}.{os.getpid()}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                json.dump(report.to_json(), fh, indent=1)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, final)
        except BaseException:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise
        self.prune()
        return final

    def _names(self) -> list[str]:
        """Report file names, newest first (the id starts with epoch milliseconds)."""
        try:
            names = [n for n in os.listdir(self.directory) if _NAME.match(n)]
        except FileNotFoundError:
            return []
        return sorted(names, reverse=True)

    def prune(self) -> None:
        for name in self._names()[self.keep:]:
            try:
                os.unlink(os.path.join(self.directory, name))
            except OSError:
                log.warning("could not remove old OOM report %s", name)

    def load(self, report_id: str) -> OomReport | None:
        """The report, or None when it is missing or damaged."""
        try:
            with open(self._path(report_id), encoding="utf-8") as fh:
                data = json.load(fh)
        except (OSError, ValueError):
            return None
        return OomReport.from_json(data)

    def list(self, pid: int | None = None) -> list[OomReport]:
        """Every readable report (of ``pid``, if given), newest first."""
        out = []
        for name in self._names():
            report = self.load(name[:-len(".json")])
            if report is None:
                log.warning("skipping unreadable OOM report %s", name)
                continue
            if pid is None or report.pid == pid:
                out.append(report)
        out.sort(key=lambda r: r.time, reverse=True)
        return out
