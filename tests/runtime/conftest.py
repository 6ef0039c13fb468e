"""Fixtures for the runtime tests: a fake clock and a Runtime wired to a scripted model."""

from __future__ import annotations

from typing import Any

import pytest
from runtime_support import Make

from openprogram_yaml.providers.test import FakeClock, ScriptedRuntime
from openprogram_yaml.runtime import Runtime
from openprogram_yaml.runtimes.protocol import Capabilities


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def make(clock: FakeClock) -> Make:
    """``make(replies, caps=..., **runtime_kwargs)`` -> (Runtime, ScriptedRuntime).

    Jitter is off (random() == 0.5) unless a test passes ``random=``.
    """

    def _make(
        replies: Any = (), *, caps: Capabilities | None = None, **kwargs: Any
    ) -> tuple[Runtime, ScriptedRuntime]:
        model = ScriptedRuntime(replies, capabilities=caps, sleep=clock.sleep)
        kwargs.setdefault("random", lambda: 0.5)
        kwargs.setdefault("max_retries", 6)
        runtime = Runtime(
            model="scripted:model", runtimes=model, clock=clock.now, sleep=clock.sleep, **kwargs
        )
        return runtime, model

    return _make
