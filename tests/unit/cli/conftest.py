"""What the CLI tests share: a private runtime folder for the agents they start
or plant, and a fake agent holding models."""

from __future__ import annotations

import subprocess
import tempfile

import pytest

from tests.fakes.fake_agent import FakeAgent


@pytest.fixture
def runtime(monkeypatch):
    """A private runtime dir of its own (never the user's), removed after."""
    path = tempfile.mkdtemp(prefix="vsrt-")
    monkeypatch.setenv("VRAM_STEWARD_RUNTIME_DIR", path)
    yield path
    subprocess.run(["rm", "-rf", path], check=False)


@pytest.fixture
def fake(runtime):
    """A fake agent with models, registered in :func:`runtime`."""
    agent = FakeAgent(sock_dir=runtime).with_models()
    agent.register(runtime)
    yield agent
    agent.close()
