"""The streamable HTTP transport of ``mcp`` tools, with each reply's size bounded.

Imported when an ``mcp: {url: …}`` server first starts (it imports ``httpx2``, the HTTP
client the SDK takes). The SDK reads a reply whole into memory (a JSON one) or line by line
(an event stream), with no limit: a server answering a call with an endless body held the
runner's memory (200 MB of text: 1.2 GB). Here a reply is read up to
``MAX_HTTP_REPLY_BYTES`` and sent uncompressed (a compressed size says nothing of what it
inflates to), else the call it answers fails.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Mapping
from typing import TYPE_CHECKING

import httpx2

if TYPE_CHECKING:
    from mcp.client._transport import TransportStreams

__all__ = ["MAX_HTTP_REPLY_BYTES", "http_transport"]

#: The most one reply of an MCP server over HTTP may hold (a call's result, or what one
#: event stream carries): a 20 MiB file as base64, with room.
MAX_HTTP_REPLY_BYTES = 64 * 1024 * 1024


class ReplyRefused(httpx2.StreamError):
    """A reply past the cap, or compressed. (A ``StreamError``: the SDK turns it into the
    call's error, naming it, instead of leaving the call to its timeout.)"""


class CappedReply(httpx2.AsyncByteStream):
    """A reply's body, refused once it passes ``limit`` bytes, or when it is compressed."""

    def __init__(self, response: httpx2.Response, limit: int) -> None:
        self._stream = response.stream
        self._encoding = response.headers.get("content-encoding", "identity").strip().lower()
        self._limit = limit

    async def __aiter__(self) -> AsyncIterator[bytes]:
        if self._encoding != "identity":
            raise ReplyRefused(f"the server sent a reply compressed with {self._encoding!r}")
        assert isinstance(self._stream, httpx2.AsyncByteStream)
        total = 0
        async for chunk in self._stream:
            total += len(chunk)
            if total > self._limit:
                raise ReplyRefused(f"the server sent a reply larger than {self._limit:,} bytes")
            yield chunk

    async def aclose(self) -> None:
        assert isinstance(self._stream, httpx2.AsyncByteStream)
        await self._stream.aclose()


async def _cap(response: httpx2.Response) -> None:
    response.stream = CappedReply(response, MAX_HTTP_REPLY_BYTES)


@contextlib.asynccontextmanager
async def http_transport(url: str, headers: Mapping[str, str]) -> AsyncIterator[TransportStreams]:
    """The SDK's streamable HTTP transport, over a client sending ``headers`` that reads
    each reply through ``CappedReply``."""
    from mcp.client.streamable_http import streamable_http_client

    # The SDK's own defaults: 30 s to connect, 300 s to read (a stream may idle).
    timeout = httpx2.Timeout(30.0, read=300.0)
    sent = {**headers, "Accept-Encoding": "identity"}
    async with (
        httpx2.AsyncClient(headers=sent, timeout=timeout, event_hooks={"response": [_cap]}) as http,
        streamable_http_client(url, http_client=http) as streams,
    ):
        yield streams
