"""A server's engine on the demo source, ticking fast, stopped after the test."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

import pytest

from app.core.monitor.demo_source import demo_source
from app.core.serve.engine import ServeEngine
from app.core.serve.http import ServeHttp


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


@contextlib.contextmanager
def serving(httpd: ServeHttp) -> Iterator[ServeHttp]:
    """``httpd`` answering on its own thread for the block, then shut and closed."""
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05},
                              daemon=True)
    thread.start()
    try:
        yield httpd
    finally:
        httpd.shutdown()
        httpd.server_close()
