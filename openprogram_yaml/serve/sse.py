"""Server-sent events (``text/event-stream``) over an aiohttp ``StreamResponse``.

Each event is ``event: <type>`` and ``data: <one line of JSON>``, then a blank line; a
data-only event (no ``event:`` line, as Chat Completions streams send) is of the default
type ``message``; a comment line (``: keep-alive``) keeps idle streams open through
proxies. A client that went away makes ``send`` return False: the caller stops writing, and
whatever produced the events (a run) goes on.
"""

from __future__ import annotations

from aiohttp import web

__all__ = ["EventStream", "wants_events"]


def wants_events(request: web.BaseRequest) -> bool:
    """Whether the client asked for server-sent events (``Accept: text/event-stream``)."""
    return "text/event-stream" in request.headers.get("Accept", "").lower()


class EventStream:
    """One open ``text/event-stream`` reply."""

    def __init__(self, response: web.StreamResponse) -> None:
        self.response = response
        #: False once a write failed (the client disconnected).
        self.open = True

    @classmethod
    async def start(cls, request: web.BaseRequest, status: int = 200) -> EventStream:
        response = web.StreamResponse(
            status=status,
            headers={
                "Content-Type": "text/event-stream; charset=utf-8",
                "Cache-Control": "no-cache",
                "X-Accel-Buffering": "no",  # nginx: pass each event on at once
            },
        )
        await response.prepare(request)
        return cls(response)

    async def send(self, event: str, data: str) -> bool:
        """Send one event; ``data`` is JSON text. False when the client has gone."""
        return await self._write(f"event: {event}\n{_data_lines(data)}\n")

    async def send_data(self, data: str) -> bool:
        """Send one data-only event (a client's ``message``); False when the client has gone."""
        return await self._write(f"{_data_lines(data)}\n")

    async def comment(self, text: str = "keep-alive") -> bool:
        """A line clients ignore, to keep an idle stream open; False when the client has gone."""
        return await self._write(f": {text}\n\n")

    async def _write(self, text: str) -> bool:
        if not self.open:
            return False
        try:
            await self.response.write(text.encode("utf-8"))
        except (ConnectionError, RuntimeError):  # reset, or the transport already closed
            self.open = False
        return self.open

    async def end(self) -> web.StreamResponse:
        """Finish the reply (the handler returns what this returns)."""
        if self.open:
            try:
                await self.response.write_eof()
            except (ConnectionError, RuntimeError):
                self.open = False
        return self.response


def _data_lines(data: str) -> str:
    """``data`` as ``data:`` lines (a line break in it would end the field)."""
    return "".join(f"data: {line}\n" for line in data.split("\n"))
