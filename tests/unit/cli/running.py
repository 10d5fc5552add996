"""The CLI run in this process, as the tests read it."""

from __future__ import annotations

from app import cli


def run_cli(capsys, *argv: str) -> tuple[int, str, str]:
    """(exit status, stdout, stderr) of ``vram-steward ARGV``."""
    rc = cli.main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err
