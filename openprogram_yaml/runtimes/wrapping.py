"""Runtimes built on other runtimes: streaming from ``run_turn``, and a runtime placed in
front of another one.

The recording wrapper (``recording.record``) and the capture that ``render`` uses both stand
in front of a real runtime; what they share (which provider, which models, which
capabilities, streaming) is ``WrappedRuntime``'s.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from ..errors import ErrorReason
from .protocol import (
    AgentRuntimeProtocol,
    Capabilities,
    RuntimeDelta,
    RuntimeResult,
    capabilities_of,
)

__all__ = ["WrappedRuntime", "stream_via_run_turn"]


async def stream_via_run_turn(
    run_turn: Callable[..., Awaitable[RuntimeResult]],
    prompt: Any,
    kwargs: dict[str, Any],
) -> AsyncIterator[RuntimeDelta]:
    """Yield a turn's deltas as ``run_turn(on_delta=…)`` produces them.

    A failed turn ends with one ``error`` delta (its ``metadata`` holds the classified
    failure); nothing is raised. Leaving the loop early cancels the turn.
    """
    queue: asyncio.Queue[RuntimeDelta | None] = asyncio.Queue()
    kwargs = dict(kwargs)
    kwargs["on_delta"] = queue.put_nowait
    task = asyncio.ensure_future(run_turn(prompt, **kwargs))
    task.add_done_callback(lambda _: queue.put_nowait(None))
    try:
        while True:
            delta = await queue.get()
            if delta is None:
                break
            yield delta
        result = task.result()
        if result.error is not None:
            failure = result.failure
            yield RuntimeDelta(
                type="error",
                content=result.error,
                metadata={
                    "reason": failure.reason if failure else ErrorReason.UNKNOWN.value,
                    "retryable": failure.retryable if failure else False,
                    "http_status": failure.http_status if failure else None,
                    "retry_after_s": failure.retry_after_s if failure else None,
                },
            )
    finally:
        if not task.done():
            # Awaited, not only cancelled: a task still pending when its loop closes is
            # reported as "destroyed but it is pending".
            # (``wait`` rather than ``await task``: a cancellation of the caller still ends it.)
            task.cancel()
            await asyncio.wait([task])


class WrappedRuntime:
    """A runtime in front of ``inner``: its provider, the models it supports and its
    capabilities are the inner runtime's; subclasses say what ``run_turn`` does, and
    ``stream_turn`` streams whatever ``run_turn`` reports."""

    #: What the subclass does with a turn (the protocol's ``run_turn``).
    run_turn: Callable[..., Awaitable[RuntimeResult]]

    def __init__(self, inner: AgentRuntimeProtocol) -> None:
        self.inner = inner

    @property
    def provider(self) -> str | None:
        return getattr(self.inner, "provider", None)

    @property
    def offline(self) -> bool:
        """Whether the inner runtime is offline (tool gating, ``runtime.toolgate``)."""
        return bool(getattr(self.inner, "offline", False))

    @property
    def runtime_id(self) -> str:
        return str(getattr(self.inner, "runtime_id", type(self.inner).__name__))

    def supports(self, model_ref: str | None = None) -> bool:
        return bool(self.inner.supports(model_ref))

    def capabilities(self, model_ref: str | None = None) -> Capabilities:
        # Modes (native structured output, tool-mode choices) follow the real runtime's.
        return capabilities_of(self.inner, model_ref)

    def stream_turn(self, prompt: Any, **kwargs: Any) -> AsyncIterator[RuntimeDelta]:
        return stream_via_run_turn(self.run_turn, prompt, kwargs)
