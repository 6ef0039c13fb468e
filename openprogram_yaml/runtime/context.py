"""What is running right now, for layers that record it (traces, recordings)."""

from __future__ import annotations

from contextvars import ContextVar

__all__ = ["current_method"]

#: "agent.method" of the method whose model calls are being made, when one is.
current_method: ContextVar[str | None] = ContextVar("openprogram_current_method", default=None)
