"""OOM reports kept as JSON files in the state directory.

One file per report (``<id>.json``), written atomically (a private temporary
file, then a rename) with mode 0600 in a 0700 directory; the newest
``keep`` are kept.  A file that does not parse is skipped, never fatal.
The directory and the state directory it lies in must be private (ours,
0700, no symlink): in any other, nothing is read or written (``save``
raises UnsafeDir), and the temporary file is created with ``O_EXCL |
O_NOFOLLOW``, so it is never a planted file or link.
Called on the sampler thread or a worker, never the GUI thread.
"""

from __future__ import annotations

import json
import logging
import os
import re

from app.agent.paths import dir_problem, replace_private_file
from app.core.diagnosis.types import OomReport
from app.core.paths import ensure_private_dir, ensure_state_subdir, oom_reports_dir, state_dir

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

    def _private(self) -> bool:
        """Whether the directory (and the state directory holding it) is private."""
        folders = [self.directory] if self._directory else [state_dir(), self.directory]
        return all(dir_problem(folder) is None for folder in folders)

    def exists(self, report_id: str) -> bool:
        return self._private() and os.path.exists(self._path(report_id))

    def save(self, report: OomReport) -> str:
        """Write ``report`` and drop the oldest beyond ``keep``; returns its path.
        Raises OSError when the directory cannot be written, UnsafeDir when it
        (or the state directory) is not private."""
        if self._directory:  # made (0700) and checked before a byte is written
            ensure_private_dir(self._directory)
        else:
            ensure_state_subdir(os.path.basename(oom_reports_dir()))
        final = self._path(report.id)
        replace_private_file(final, json.dumps(report.to_json(), indent=1).encode("utf-8"),
                             sync=True)
        self.prune()
        return final

    def _names(self) -> list[str]:
        """Report file names, newest first (the id starts with epoch milliseconds);
        none in a directory that is not private."""
        if not self._private():
            return []
        try:
            names = [n for n in os.listdir(self.directory) if _NAME.match(n)]
        except OSError:
            return []
        return sorted(names, reverse=True)

    def prune(self) -> None:
        for name in self._names()[self.keep:]:
            try:
                os.unlink(os.path.join(self.directory, name))
            except OSError:
                log.warning("could not remove old OOM report %s", name)

    def load(self, report_id: str) -> OomReport | None:
        """The report, or None when it is missing or damaged (or its directory
        is not private)."""
        if not self._private():
            return None
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
