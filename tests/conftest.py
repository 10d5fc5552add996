"""Shared test setup: Qt runs offscreen (CI has no display)."""

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
