"""Fallback models: when a model's exec fails for good, the next model gets the same exec.

The models a run may use come from ``model: [primary, fallback, …]`` or ``model`` plus
``fallback_models`` (on the agent, or on a method, which then names its own list); a
model given on the command line or in a request replaces the list. Which failures pass an
exec on is ``runtimes.failures.falls_back``: retries exhausted, an exhausted quota, a
rejected key, a timeout — not a request the provider refused for what it holds, a budget,
a schema the reply kept failing, or anything but a model call's own ``LLMError``.

Every model that failed is listed in the run's record (``fallbacks``) and in the trace of
the method it failed in, with why, and which model was tried next.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, TypeVar

from ..errors import LLMError
from ..json_types import JSONObject
from ..runtimes.failures import falls_back
from .events import emit

if TYPE_CHECKING:
    from ..compile.program import Agent, Method
    from ..runtime import Runtime

__all__ = ["fallback_lines", "models_for", "with_fallbacks"]

T = TypeVar("T")


def models_for(agent: Agent, method: Method, override: str | None = None) -> tuple[str, ...]:
    """The models a run of ``method`` tries, in order: ``override`` alone when given, else
    the method's model and its fallbacks, else the agent's (a method's ``fallback_models``
    without a ``model`` of its own follow the agent's model)."""
    if override:
        return (override,)
    options = method.options
    if options.model:
        return _unique((options.model, *options.fallback_models))
    if not agent.model:
        return ()
    fallbacks = options.fallback_models or agent.fallback_models
    return _unique((agent.model, *fallbacks))


def _unique(models: Sequence[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(models))


async def with_fallbacks(
    models: Sequence[str],
    attempt: Callable[[str], Awaitable[T]],
    *,
    runtime: Runtime,
    where: str,
    log: list[JSONObject],
    settled: list[BaseException],
) -> tuple[T, str]:
    """``attempt(model)`` for each of ``models`` in turn until one returns; its result and
    the model that gave it.

    Only an ``LLMError`` that ``falls_back`` passes the exec on, and only one raised by this
    exec's own model calls: an error that a nested method's chain already answered for (a
    method continued by ``choices``) is in ``settled`` and goes up as it is. Each failure is
    appended to ``log`` (the record's ``fallbacks``), the current trace span and the event
    stream (``{"type": "fallback", …}``).
    """
    last = len(models) - 1
    for index, model in enumerate(models):
        try:
            return await attempt(model), model
        except LLMError as exc:
            if index == last or not falls_back(exc) or any(exc is e for e in settled):
                settled.append(exc)
                raise
            entry: JSONObject = {
                "method": where,
                "model": model,
                "reason": str(exc.reason),
                "http_status": exc.http_status,
                "attempts": exc.attempts,
                "message": str(exc),
                "next": models[index + 1],
            }
            log.append(entry)
            span = None
            if runtime.trace is not None:  # only a traced run needs (and has loaded) it
                from ..runtime.trace import current_span

                span = current_span()
            if span is not None:
                fallbacks = span.data.setdefault("fallbacks", [])
                if isinstance(fallbacks, list):
                    fallbacks.append(entry)
            emit(runtime.on_stream, {"type": "fallback", **entry})
    raise AssertionError("with_fallbacks needs at least one model")


def fallback_lines(fallbacks: Sequence[JSONObject]) -> str:
    """The record's ``fallbacks`` for a person: one line each (the command line's stderr)."""
    lines = []
    for entry in fallbacks:
        why = [str(entry.get("reason"))]
        if entry.get("http_status") is not None:
            why.append(f"HTTP {entry['http_status']}")
        attempts = entry.get("attempts")
        if isinstance(attempts, int) and attempts > 1:
            why.append(f"{attempts} attempts")
        lines.append(
            f"fallback: {entry.get('model')} failed ({', '.join(why)}) in {entry.get('method')}; "
            f"trying {entry.get('next')}"
        )
    return "\n".join(lines)
