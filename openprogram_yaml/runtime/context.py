"""What is running right now, for layers that record it (traces, recordings)."""

from __future__ import annotations

from contextvars import ContextVar

__all__ = ["current_method", "current_test"]

#: "agent.method" of the method whose model calls are being made, when one is.
current_method: ContextVar[str | None] = ContextVar("openprogram_current_method", default=None)

#: The id ("agent: name") of the prompt test being run by ``openprogram-run test``, when one
#: is: recordings name it, so that a replay can tell a test never recorded from a prompt
#: that changed.
current_test: ContextVar[str | None] = ContextVar("openprogram_current_test", default=None)
