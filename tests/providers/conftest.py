"""Fixtures for provider tests: a loopback server (the recorded API fixtures are read by
``providers_support``)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from loopback import LoopbackServer


@pytest.fixture
def server() -> Iterator[LoopbackServer]:
    with LoopbackServer() as srv:
        yield srv
