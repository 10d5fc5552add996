"""Fixtures of the agent-client tests: a fake agent listening in the short runtime dir."""

from __future__ import annotations

import pytest

from tests.fakes.fake_agent import FakeAgent


@pytest.fixture
def agent(runtime):
    fake = FakeAgent(sock_dir=runtime)
    yield fake
    fake.close()
