"""What a run is doing, told to the MCP client that called it (``notifications/progress``).

A client that sends a progress token with ``tools/call`` (the SDK's ``progress_callback``)
hears of each step of the run: a method starting (the first, or one a pick continues with),
a tool called or failing, a retry of a model call, a repair of structured output, a pick.
The model's text is not sent piece by piece: it is the result. Messages are redacted.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping
from typing import Any

from mcp.server.session import ServerSession

from ..json_types import JSONObject
from ..redaction import redact

__all__ = ["RunProgress", "progress_message", "wants_progress"]


def wants_progress(meta: Mapping[str, Any] | None) -> bool:
    """Whether the request carries a progress token."""
    return meta is not None and any(k in meta for k in ("progress_token", "progressToken"))


def progress_message(event: JSONObject) -> str | None:
    """One line for a run event (``run.events``), or None for events not told."""
    kind = event.get("type")
    if kind == "method":
        return f"running {event.get('agent')}.{event.get('method')}"
    if kind == "tool_use":
        return f"calling tool {event.get('name')}"
    if kind == "tool_result" and event.get("is_error"):
        return f"tool {event.get('name')} failed"
    if kind == "retry":
        return (
            f"model call failed ({event.get('reason')}); attempt {event.get('attempt')} "
            f"of {event.get('max_retries')} follows"
        )
    if kind == "structured_output_retry":
        return "the answer did not match the response schema; the model repairs it"
    if kind == "pick":
        return f"picked {event.get('choice')}"
    return None


class RunProgress:
    """Sends a run's progress messages to its caller, in order, off the run's path: the run
    only queues them (an observer must be quick), a task of this call sends them."""

    def __init__(self, session: ServerSession, secrets: frozenset[str]) -> None:
        self._session = session
        self._secrets = secrets
        self._loop = asyncio.get_running_loop()
        self._queue: asyncio.Queue[str | None] = asyncio.Queue()
        self._sender = asyncio.create_task(self._send())

    def observe(self, event: JSONObject) -> None:
        """The run's observer (``on_event``); may be called from a tool's worker thread."""
        message = progress_message(event)
        if message is not None:
            self._loop.call_soon_threadsafe(self._queue.put_nowait, message)

    async def _send(self) -> None:
        sent = 0
        while (message := await self._queue.get()) is not None:
            sent += 1
            with contextlib.suppress(Exception):  # a client gone is no reason to fail the run
                await self._session.report_progress(sent, None, redact(message, self._secrets))

    async def aclose(self) -> None:
        """Send what is queued, then stop."""
        self._loop.call_soon_threadsafe(self._queue.put_nowait, None)
        await asyncio.gather(self._sender, return_exceptions=True)
