"""A real HTTP server on 127.0.0.1 that answers from a script and records every request.

Import it as ``loopback`` (``tests/`` is on ``sys.path`` through its conftest). It speaks
whatever the script says, so one server serves Chat Completions (``/v1/chat/completions``),
Anthropic Messages (``/v1/messages``) or anything else::

    from loopback import LoopbackServer, json_reply, openai_sse, sse_reply, status_reply

    with LoopbackServer() as server:
        server.add(status_reply(429, {"error": {"message": "slow down"}}, retry_after="2"))
        server.add(json_reply({"choices": [...]}))
        server.add(sse_reply(openai_sse([chunk1, chunk2])))      # text/event-stream
        runtime = OpenAIRuntime(base_url=server.url + "/v1")
        ...
        assert server.requests[0].json["model"] == "gpt-4o"
        assert server.requests[0].headers["authorization"] == "Bearer sk-test"

Replies are served in order, whatever the path; a request with no reply left gets a 500.
A reply may also be a function of the ``Request`` (``server.add(lambda req: json_reply(…))``).
SSE replies are sent with chunked encoding, one chunk per event, and may stop abruptly
(``abort=True``) to imitate a dropped connection. The server uses HTTP/1.1 keep-alive, and
``Request.client_port`` shows whether a client reused its connection;
``connections_ended`` counts the connections that ended (``wait_connections_ended`` waits
for a count, e.g. for a client to close its pool).
"""

from __future__ import annotations

import json
import sys
import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = [
    "Gated",
    "LoopbackServer",
    "Reply",
    "Request",
    "anthropic_sse",
    "chat_completion",
    "json_reply",
    "openai_sse",
    "sse_reply",
    "status_reply",
]


@dataclass(frozen=True)
class Request:
    """One request the server received. ``headers`` keys are lower-case."""

    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    client_port: int

    @property
    def json(self) -> Any:
        return json.loads(self.body) if self.body else None


@dataclass
class Reply:
    """What to answer: a status, headers and a body, or SSE ``events`` (raw event texts)."""

    status: int = 200
    body: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)
    events: list[str] | None = None
    abort: bool = False


Script = Reply | Callable[[Request], Reply]


def json_reply(body: Any, status: int = 200, headers: Mapping[str, str] | None = None) -> Reply:
    """A JSON body."""
    return Reply(
        status,
        json.dumps(body).encode(),
        {"content-type": "application/json", **(headers or {})},
    )


def status_reply(
    status: int,
    body: Any = None,
    *,
    retry_after: str | None = None,
    headers: Mapping[str, str] | None = None,
) -> Reply:
    """An error status with an optional JSON body and ``Retry-After`` header."""
    extra = dict(headers or {})
    if retry_after is not None:
        extra["retry-after"] = retry_after
    return json_reply(body if body is not None else {}, status, extra)


def sse_reply(events: Iterable[str], *, abort: bool = False, status: int = 200) -> Reply:
    """A ``text/event-stream`` of raw event texts (each ends with a blank line)."""
    return Reply(
        status, b"", {"content-type": "text/event-stream"}, events=list(events), abort=abort
    )


class Gated(list[str]):
    """SSE events of which the first ``head`` are sent at once, the rest once ``gate`` is
    set: the test acts (sees the first piece, types) while the reply is still open. Use as
    ``Reply(..., events=Gated(events, 1, gate))``."""

    def __init__(self, events: list[str], head: int, gate: threading.Event) -> None:
        super().__init__(events)
        self.head = head
        self.gate = gate

    def __iter__(self) -> Iterator[str]:
        events = list(super().__iter__())
        yield from events[: self.head]
        assert self.gate.wait(60), "the test never opened the gate"
        yield from events[self.head :]


def openai_sse(chunks: Iterable[Mapping[str, Any]], *, done: bool = True) -> list[str]:
    """Chat Completions chunks as SSE events, ending with ``data: [DONE]``."""
    events = [f"data: {json.dumps(chunk)}\n\n" for chunk in chunks]
    return events + (["data: [DONE]\n\n"] if done else [])


def anthropic_sse(events: Iterable[Mapping[str, Any]]) -> list[str]:
    """Messages stream events as SSE, each named by its ``type``."""
    return [f"event: {event['type']}\ndata: {json.dumps(event)}\n\n" for event in events]


def load_sse(text: str) -> list[str]:
    """Raw SSE text (e.g. a recorded fixture) split into events."""
    return [part + "\n\n" for part in text.replace("\r\n", "\n").split("\n\n") if part.strip()]


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:  # keep test output clean
        pass

    def _serve(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        request = Request(
            self.command,
            self.path,
            {k.lower(): v for k, v in self.headers.items()},
            self.rfile.read(length) if length else b"",
            self.client_address[1],
        )
        reply = self.server.owner._next(request)
        self.send_response(reply.status)
        for name, value in reply.headers.items():
            self.send_header(name, value)
        if reply.events is None:
            self.send_header("content-length", str(len(reply.body)))
            self.end_headers()
            self.wfile.write(reply.body)
            return
        self.send_header("transfer-encoding", "chunked")
        self.send_header("cache-control", "no-cache")
        self.end_headers()
        for event in reply.events:
            data = event.encode()
            self.wfile.write(b"%X\r\n%s\r\n" % (len(data), data))
            self.wfile.flush()
        if reply.abort:
            self.close_connection = True
            return
        self.wfile.write(b"0\r\n\r\n")

    do_GET = do_POST = do_PUT = do_DELETE = _serve


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    owner: LoopbackServer

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client hanging up (closed pool, aborted stream) is normal here, not a failure.
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)

    def shutdown_request(self, request: Any) -> None:
        # Called on the connection's thread once it is done: the client closed it (or the
        # server did, after an aborted stream).
        super().shutdown_request(request)
        self.owner._connection_ended()


class LoopbackServer:
    """A scripted HTTP server on 127.0.0.1 with an ephemeral port (a context manager)."""

    def __init__(self, replies: Iterable[Script] = ()) -> None:
        self._script: deque[Script] = deque(replies)
        self._lock = threading.Lock()
        self._ended = threading.Condition(self._lock)
        self.requests: list[Request] = []
        #: Connections that ended so far.
        self.connections_ended = 0
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        """``http://127.0.0.1:PORT`` (no trailing slash)."""
        assert self._server is not None, "server not started"
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def add(self, *replies: Script) -> LoopbackServer:
        """Queue replies, served in order."""
        with self._lock:
            self._script.extend(replies)
        return self

    @property
    def pending(self) -> int:
        """Replies not yet served."""
        return len(self._script)

    def _next(self, request: Request) -> Reply:
        with self._lock:
            self.requests.append(request)
            script = self._script.popleft() if self._script else None
        if script is None:
            return json_reply({"error": {"message": "loopback: no scripted reply left"}}, 500)
        return script(request) if callable(script) else script

    def _connection_ended(self) -> None:
        with self._ended:
            self.connections_ended += 1
            self._ended.notify_all()

    def wait_connections_ended(self, count: int, timeout_s: float = 10.0) -> bool:
        """Wait until ``count`` connections have ended (False if not within ``timeout_s``)."""
        with self._ended:
            return self._ended.wait_for(lambda: self.connections_ended >= count, timeout_s)

    def start(self) -> LoopbackServer:
        self._server = _Server(("127.0.0.1", 0), _Handler)
        self._server.owner = self
        # A short poll interval keeps shutdown() quick; it is the server's select() timeout.
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> LoopbackServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def chat_completion(
    content: str | None = None, *, tool_calls: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    """A Chat Completions response body: text, or tool calls (31 prompt and 9 completion
    tokens of usage)."""
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if tool_calls:
        message["tool_calls"] = tool_calls
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1_700_000_000,
        "model": "llama3",
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": "tool_calls" if tool_calls else "stop",
            }
        ],
        "usage": {"prompt_tokens": 31, "completion_tokens": 9, "total_tokens": 40},
    }
