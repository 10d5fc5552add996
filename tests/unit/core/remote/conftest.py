"""A demo server on a loopback port, for the remote parts to talk to."""

from __future__ import annotations

import pytest

from app.core.serve.access import own_user, parse_tokens
from app.core.serve.api import ServerApi
from app.core.serve.http import ServeHttp
from tests.unit.core.serve.conftest import demo_engine, serving  # noqa: F401 (a fixture)

TOKEN = "k" * 24


@pytest.fixture
def demo_server(demo_engine):
    grants = parse_tokens(f"{TOKEN} {own_user()[0]} read,control\n")
    with serving(ServeHttp(("127.0.0.1", 0), ServerApi(demo_engine), grants,
                           open_read=True)) as httpd:
        yield httpd
