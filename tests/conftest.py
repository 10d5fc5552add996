"""Shared test setup: Qt runs offscreen (CI has no display); every CLI output
the suite produces is read for the word None (``tests.cli_output``)."""

import os

import pytest

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")


@pytest.fixture
def children():
    """Real child processes (tests.fakes.child_processes), all gone after the test."""
    from tests.fakes.child_processes import Children

    kids = Children()
    yield kids
    kids.close()


@pytest.fixture(autouse=True)
def _cli_never_says_none(monkeypatch):
    """A test whose CLI output says None fails (at teardown, naming the command):
    unknown is "n/a", and a missing value is left out."""
    from tests.cli_output import CliOutputs

    outputs = CliOutputs()
    outputs.install(monkeypatch)
    yield outputs
    problems = outputs.problems()
    if problems:
        pytest.fail("CLI output says None:\n" + "\n".join(problems), pytrace=False)
