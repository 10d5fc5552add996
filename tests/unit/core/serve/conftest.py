"""A server's engine on the demo source, ticking fast, stopped after the test."""

from __future__ import annotations

import pytest

from app.core.monitor.demo_source import demo_source
from app.core.serve.engine import ServeEngine


@pytest.fixture
def demo_engine():
    from app.core.agents.demo import DemoAgents

    source = demo_source(None, 7)
    source.open(elapsed=400.0)
    engine = ServeEngine(source, DemoAgents(source), period_s=0.05)
    engine.start()
    engine.wait_newer(0, 10.0)
    yield engine
    engine.stop()
