"""A misbehaving model server gets a clear, bounded failure (issue 12, section 7).

Every server here is real and listens on 127.0.0.1: the scripted ``LoopbackServer``, and a
``SilentServer`` that accepts connections and never says a word. Retry sleeps go to a
``FakeClock``; the only real waits are read timeouts of a fraction of a second.
"""

from __future__ import annotations

import asyncio
import gc
import gzip
import io
import json
import logging
import re
import socket
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from loopback import (
    LoopbackServer,
    Reply,
    anthropic_sse,
    chat_completion,
    json_reply,
    openai_sse,
    sse_reply,
    status_reply,
)

from openprogram_yaml.errors import LLMError
from openprogram_yaml.providers.anthropic import AnthropicRuntime
from openprogram_yaml.providers.openai import OpenAIRuntime
from openprogram_yaml.providers.test import FakeClock, ScriptedRuntime
from openprogram_yaml.runner.cli import main
from openprogram_yaml.runtime import Runtime
from openprogram_yaml.runtime.trace import SessionTrace


class SilentServer:
    """Accepts TCP connections on 127.0.0.1 and never answers (nor closes them).

    Leaving stops the accept thread before the listening socket is closed. Closed under a
    thread blocked in ``accept()``, the socket stayed open inside that call, and a signal
    (a child process ending) made the kernel restart the call on the descriptor's number,
    which a later test's ``LoopbackServer`` owned by then: the thread took that server's
    next connection and dropped it (a client saw EOF before writing its request body).
    """

    def __init__(self) -> None:
        self._socket = socket.socket()
        self._socket.bind(("127.0.0.1", 0))
        self._socket.listen(16)
        self._held: list[socket.socket] = []
        self._stopping = False
        self._thread = threading.Thread(target=self._accept, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._socket.getsockname()[1]}"

    def _accept(self) -> None:
        while True:
            connection, _ = self._socket.accept()
            self._held.append(connection)
            if self._stopping:
                return

    def __enter__(self) -> SilentServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        # One more connection wakes the thread's accept(); it then sees it is to stop.
        self._stopping = True
        socket.create_connection(self._socket.getsockname()).close()
        self._thread.join()
        self._socket.close()
        for connection in self._held:
            connection.close()


@pytest.fixture
def server() -> Iterator[LoopbackServer]:
    with LoopbackServer() as srv:
        yield srv


def _runtime(model: Any, clock: FakeClock, **kwargs: Any) -> Runtime:
    kwargs.setdefault("max_retries", 6)
    return Runtime(
        model="m:model",
        runtimes=model,
        clock=clock.now,
        sleep=clock.sleep,
        random=lambda: 0.5,
        **kwargs,
    )


def _openai(url: str, **options: Any) -> OpenAIRuntime:
    return OpenAIRuntime(base_url=url + "/v1", provider="m", **options)


def _anthropic(url: str, **options: Any) -> AnthropicRuntime:
    return AnthropicRuntime(base_url=url, provider="m", **options)


# --- a server that never answers ---------------------------------------------------------


def test_the_default_read_timeout_is_finite() -> None:
    assert _openai("http://127.0.0.1:9").settings.read_timeout_s == 120.0
    assert _anthropic("http://127.0.0.1:9").settings.read_timeout_s == 120.0


def test_a_silent_server_fails_the_attempt_after_the_read_timeout() -> None:
    with SilentServer() as silent:
        clock = FakeClock()
        rt = _runtime(_openai(silent.url, timeout_s=0.2), clock, max_retries=2)
        with pytest.raises(LLMError) as info:
            rt.exec("hi")
        rt.close()
    error = info.value
    assert error.reason == "timeout"
    assert error.attempts == 2
    assert "the server sent nothing for 0.2 s (read timeout)" in str(error)


def test_a_silent_server_leaves_no_thread_accepting_on_its_closed_socket() -> None:
    with SilentServer() as silent:
        socket.create_connection(silent._socket.getsockname()).close()
    # Left running, the thread could accept on whatever socket next gets that descriptor.
    assert not silent._thread.is_alive()


def test_the_read_timeout_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENPROGRAM_READ_TIMEOUT_S", "0.2")
    with SilentServer() as silent:
        runtime = _anthropic(silent.url)
        assert runtime.settings.read_timeout_s == 0.2
        result = asyncio.run(runtime.run_turn("hi", model_ref="m:claude", on_delta=print))
    assert result.failure is not None
    assert (result.failure.reason, result.failure.retryable) == ("timeout", True)
    assert "sent nothing for 0.2 s" in result.failure.message


def test_a_bad_read_timeout_in_the_environment_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENPROGRAM_READ_TIMEOUT_S", "soon")
    with pytest.raises(ValueError, match="OPENPROGRAM_READ_TIMEOUT_S must be a number > 0"):
        _openai("http://127.0.0.1:9")


# --- redirects ------------------------------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True])
def test_a_redirect_is_a_final_error_naming_its_location(
    server: LoopbackServer, stream: bool
) -> None:
    location = "https://elsewhere.example/v1/chat/completions"
    server.add(Reply(307, b"", {"location": location}))
    clock = FakeClock()
    events: list[dict[str, Any]] = []
    rt = _runtime(_openai(server.url), clock, on_stream=events.append if stream else None)
    with pytest.raises(LLMError) as info:
        rt.exec("hi")
    rt.close()
    assert len(server.requests) == 1
    assert clock.sleeps == []
    assert info.value.retryable is False
    assert info.value.http_status == 307
    assert f"HTTP 307 redirect to {location}" in str(info.value)


# --- malformed replies ----------------------------------------------------------------------

_OPENAI_MALFORMED = [
    ({"choices": "none"}, "choices is not a list"),
    ({"choices": ["x"]}, "choices[0] is not an object"),
    ({"choices": [{"message": "hi"}]}, "choices[0].message is not an object"),
    ({"choices": [{"message": {"content": 5}}]}, "choices[0].message.content is not a string"),
    (
        {"choices": [{"message": {"content": "", "tool_calls": {"id": 1}}}]},
        "choices[0].message.tool_calls is not a list",
    ),
    (
        {"choices": [{"message": {"tool_calls": [{"function": "f"}]}}]},
        "choices[0].message.tool_calls[0].function is not an object",
    ),
    (
        {"choices": [{"message": {"content": "ok"}}], "usage": {"prompt_tokens": "many"}},
        "usage.prompt_tokens is not a number",
    ),
    (["not", "an", "object"], "the reply is not a JSON object"),
]


@pytest.mark.parametrize(("body", "problem"), _OPENAI_MALFORMED)
def test_a_malformed_chat_completion_says_what_is_malformed(
    server: LoopbackServer, body: Any, problem: str
) -> None:
    server.add(json_reply(body))
    clock = FakeClock()
    rt = _runtime(_openai(server.url), clock)
    with pytest.raises(LLMError) as info:
        rt.exec("hi")
    rt.close()
    message = str(info.value)
    assert f"m: malformed reply: {problem}" in message
    assert "Error:" not in message and "object has no attribute" not in message
    assert info.value.retryable is False and len(server.requests) == 1


@pytest.mark.parametrize(
    "body",
    [
        b"<html>captive portal</html>",
        b"[" * 100_000 + b"]" * 100_000,  # a RecursionError escaped the runtime
        b'{"id": ' + b"7" * 5_000 + b"}",
    ],
)
def test_a_body_that_is_not_json_is_malformed_and_final(
    server: LoopbackServer, body: bytes
) -> None:
    server.add(Reply(200, body, {"content-type": "text/html"}))
    rt = _runtime(_openai(server.url), FakeClock())
    with pytest.raises(LLMError, match="malformed reply: the body is not JSON"):
        rt.exec("hi")
    rt.close()
    assert len(server.requests) == 1


_ANTHROPIC_MALFORMED = [
    ({"content": "hi"}, "content is not a list"),
    ({"content": ["hi"]}, "content[0] is not an object"),
    ({"content": [{"type": "text", "text": 5}]}, "content[0].text is not a string"),
    (
        {"content": [{"type": "tool_use", "id": "t", "name": "f", "input": "x"}]},
        "content[0].input is not an object",
    ),
    ({"content": [], "usage": {"input_tokens": [1]}}, "usage.input_tokens is not a number"),
]


@pytest.mark.parametrize(("body", "problem"), _ANTHROPIC_MALFORMED)
def test_a_malformed_message_says_what_is_malformed(
    server: LoopbackServer, body: Any, problem: str
) -> None:
    server.add(json_reply(body))
    rt = _runtime(_anthropic(server.url), FakeClock())
    with pytest.raises(LLMError) as info:
        rt.exec("hi")
    rt.close()
    assert f"m: malformed reply: {problem}" in str(info.value)
    assert info.value.retryable is False and len(server.requests) == 1


def _chunk(**delta: Any) -> dict[str, Any]:
    return {"id": "c1", "model": "m", "choices": [{"index": 0, "delta": delta}]}


_OPENAI_STREAM_MALFORMED = [
    ([{"choices": "x"}], "choices is not a list"),
    ([{"choices": [{"index": 0, "delta": "Hel"}]}], "choices[0].delta is not an object"),
    ([_chunk(content=["Hel"])], "choices[0].delta.content is not a string"),
    ([_chunk(tool_calls=[{"index": "first"}])], "choices[0].delta.tool_calls[0].index is not"),
]


@pytest.mark.parametrize(("chunks", "problem"), _OPENAI_STREAM_MALFORMED)
def test_a_malformed_stream_chunk_says_what_is_malformed(
    server: LoopbackServer, chunks: list[dict[str, Any]], problem: str
) -> None:
    server.add(sse_reply(openai_sse(chunks)))
    rt = _runtime(_openai(server.url), FakeClock(), on_stream=lambda event: None)
    with pytest.raises(LLMError) as info:
        rt.exec("hi")
    rt.close()
    assert f"m: malformed reply: {problem}" in str(info.value)
    assert info.value.retryable is False and len(server.requests) == 1


_ANTHROPIC_STREAM_MALFORMED = [
    (
        [{"type": "content_block_delta", "index": 0, "delta": "Hel"}],
        "content_block_delta.delta is not an object",
    ),
    (
        [{"type": "content_block_delta", "index": "a", "delta": {"type": "text_delta"}}],
        "content_block_delta.index is not an integer",
    ),
    (
        [{"type": "message_start", "message": "m"}],
        "message_start.message is not an object",
    ),
    (
        [{"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": 1}}],
        "content_block_delta.delta.text is not a string",
    ),
]


@pytest.mark.parametrize(("events", "problem"), _ANTHROPIC_STREAM_MALFORMED)
def test_a_malformed_stream_event_says_what_is_malformed(
    server: LoopbackServer, events: list[dict[str, Any]], problem: str
) -> None:
    server.add(sse_reply(anthropic_sse(events)))
    rt = _runtime(_anthropic(server.url), FakeClock(), on_stream=lambda event: None)
    with pytest.raises(LLMError) as info:
        rt.exec("hi")
    rt.close()
    assert f"m: malformed reply: {problem}" in str(info.value)
    assert info.value.retryable is False and len(server.requests) == 1


# --- replies too large ---------------------------------------------------------------------


def test_a_reply_larger_than_the_cap_is_refused(server: LoopbackServer) -> None:
    server.add(json_reply(chat_completion("x" * 3000)))
    rt = _runtime(_openai(server.url, max_reply_bytes=2000), FakeClock())
    with pytest.raises(LLMError) as info:
        rt.exec("hi")
    rt.close()
    assert "m: the reply is larger than 2000 bytes (max_reply_bytes)" in str(info.value)
    assert info.value.retryable is False and len(server.requests) == 1


def test_a_reply_without_a_length_is_cut_at_the_cap(server: LoopbackServer) -> None:
    # A stream has no content-length: the cap counts the bytes as they come.
    events = openai_sse([_chunk(content="x" * 500) for _ in range(10)])
    server.add(sse_reply(events))
    rt = _runtime(_openai(server.url, max_reply_bytes=2000), FakeClock(), on_stream=print)
    with pytest.raises(LLMError, match=r"larger than 2000 bytes \(max_reply_bytes\)"):
        rt.exec("hi")
    rt.close()


def test_a_small_compressed_reply_that_inflates_past_the_cap_is_refused(
    server: LoopbackServer,
) -> None:
    # Its Content-Length is far under the cap; what it inflates to is counted, not trusted.
    body = gzip.compress(json.dumps(chat_completion("x" * 100_000)).encode())
    assert len(body) < 2000
    headers = {"content-type": "application/json", "content-encoding": "gzip"}
    server.add(Reply(200, body, headers))
    rt = _runtime(_openai(server.url, max_reply_bytes=2000), FakeClock())
    with pytest.raises(LLMError, match=r"larger than 2000 bytes \(max_reply_bytes\)"):
        rt.exec("hi")
    rt.close()


def test_a_compressed_reply_within_the_cap_is_read(server: LoopbackServer) -> None:
    body = gzip.compress(json.dumps(chat_completion("pong")).encode())
    server.add(Reply(200, body, {"content-type": "application/json", "content-encoding": "gzip"}))
    rt = _runtime(_openai(server.url), FakeClock())
    assert rt.exec("hi") == "pong"
    rt.close()


def test_the_default_cap_is_ten_megabytes(server: LoopbackServer) -> None:
    assert _openai(server.url).settings.max_reply_bytes == 10 * 1024 * 1024
    server.add(json_reply(chat_completion("x" * (10 * 1024 * 1024))))
    rt = _runtime(_openai(server.url), FakeClock())
    with pytest.raises(LLMError, match="larger than 10485760 bytes"):
        rt.exec("hi")
    rt.close()


def test_the_trace_keeps_a_long_reply_once(server: LoopbackServer) -> None:
    text = "y" * 200_000
    server.add(json_reply(chat_completion(text)))
    trace = SessionTrace()
    rt = _runtime(_openai(server.url), FakeClock(), trace=trace)
    # The nesting a CLI run records: run > method > exec, each returning the same reply.
    with trace.span("run", "agent.method") as run:
        with trace.span("method", "agent.method") as method:
            method.output = rt.exec("hi")
        run.output = method.output
    rt.close()
    written = trace.to_jsonl()
    assert written.count(text) == 1
    # Read back, every level has its output again.
    read = SessionTrace.read_jsonl(io.StringIO(written))
    assert [n.output for n in read.nodes] == [text, text, text]


# --- only errors known to be transient are retried -----------------------------------------


def test_a_local_deterministic_error_is_not_retried() -> None:
    clock = FakeClock()
    rt = Runtime(model="test", clock=clock.now, sleep=clock.sleep)
    schema = {
        "type": "object",
        "properties": {"a": {"type": "string", "pattern": "(["}},
        "required": ["a"],
    }
    with pytest.raises(LLMError) as info:
        rt.exec("hi", response_format=schema)
    assert info.value.attempts == 1
    assert info.value.retryable is False
    assert clock.sleeps == []


@pytest.mark.parametrize(
    "exc", [re.error("unterminated character set"), KeyError("choices"), ValueError("odd")]
)
def test_an_exception_of_no_known_transient_kind_is_not_retried(exc: Exception) -> None:
    clock = FakeClock()
    model = ScriptedRuntime([exc, "ok"])
    rt = _runtime(model, clock)
    with pytest.raises(LLMError) as info:
        rt.exec("hi")
    assert len(model.requests) == 1 and clock.sleeps == []
    assert info.value.reason == "unknown" and info.value.retryable is False


@pytest.mark.parametrize(
    "exc", [TimeoutError(), ConnectionResetError("reset by peer"), OSError("HTTP 503")]
)
def test_transient_exceptions_are_still_retried(exc: Exception) -> None:
    clock = FakeClock()
    model = ScriptedRuntime([exc, "ok"])
    assert _runtime(model, clock).exec("hi") == "ok"
    assert len(model.requests) == 2


# --- streaming across retries ----------------------------------------------------------------


def _cut_stream() -> Reply:
    first = 'data: {"choices":[{"index":0,"delta":{"content":"Hel"}}]}\n\n'
    cut = 'data: {"choices":[{"index":0,"delta":{"cont'
    return sse_reply([first, cut], abort=True)


def test_a_retry_event_separates_the_attempts_of_a_stream(server: LoopbackServer) -> None:
    server.add(_cut_stream(), _cut_stream())
    server.add(sse_reply(openai_sse([_chunk(content="Hel"), _chunk(content="lo")])))
    events: list[dict[str, Any]] = []
    clock = FakeClock()
    rt = _runtime(_openai(server.url), clock, on_stream=events.append)
    assert rt.exec("hi") == "Hello"
    rt.close()
    kinds = [(e["type"], e.get("text")) for e in events]
    assert kinds == [
        ("text", "Hel"),
        ("retry", None),
        ("text", "Hel"),
        ("retry", None),
        ("text", "Hel"),
        ("text", "lo"),
    ]
    retry = events[1]
    # As ``on_retry``'s RetryInfo: the attempt that failed, before the backoff sleep.
    assert (retry["attempt"], retry["max_retries"]) == (1, 6)
    assert retry["reason"] == "connection"
    assert retry["delay_s"] == clock.sleeps[0]


def test_no_task_is_left_pending_on_any_path(
    server: LoopbackServer, caplog: pytest.LogCaptureFixture
) -> None:
    server.add(_cut_stream(), sse_reply(openai_sse([_chunk(content="Hello")])))
    server.add(sse_reply(openai_sse([_chunk(content="a"), _chunk(content="b")])))
    runtime = _openai(server.url)

    async def stop_early() -> None:
        async for delta in runtime.stream_turn("hi", model_ref="m:x"):
            assert delta.type == "text"
            break  # the consumer walks away mid-turn

    async def cut_then_whole() -> list[str]:
        return [d.type async for d in runtime.stream_turn("hi", model_ref="m:x")]

    with caplog.at_level(logging.ERROR, logger="asyncio"):
        assert asyncio.run(cut_then_whole()) == ["text", "error"]
        rt = _runtime(runtime, FakeClock(), on_stream=lambda event: None)
        assert rt.exec("hi") == "Hello"
        rt.close()
        asyncio.run(stop_early())
        gc.collect()
    assert not [r for r in caplog.records if "destroyed" in r.getMessage()]


# --- the command line ------------------------------------------------------------------------

AGENT = """\
version: 1
name: bot
model: local:llama3
runtimes:
  - {match: "local:*", runtime: openai, options: {base_url: "%s"}}
methods:
  say:
    prompt: "Say hello"
"""


@pytest.fixture
def no_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENPROGRAM_RETRY_BACKOFF_BASE", "0")


@pytest.mark.usefixtures("no_backoff")
def test_the_cli_prints_one_line_per_retry(server: LoopbackServer, write: Any, capsys: Any) -> None:
    server.add(status_reply(500, {"error": {"message": "boom"}}))
    server.add(status_reply(503, {"error": {"message": "busy"}}))
    server.add(json_reply(chat_completion("hello")))
    path = write("agent.yaml", AGENT % (server.url + "/v1"))
    code = main([str(path)])
    captured = capsys.readouterr()
    assert code == 0
    assert captured.out == "hello\n"
    assert captured.err.splitlines() == [
        "HTTP 500 – retrying in 0.0 s (2/6)",
        "HTTP 503 – retrying in 0.0 s (3/6)",
    ]


@pytest.mark.usefixtures("no_backoff")
def test_quiet_keeps_retries_off_stderr(server: LoopbackServer, write: Any, capsys: Any) -> None:
    server.add(status_reply(500, {"error": {"message": "boom"}}))
    server.add(json_reply(chat_completion("hello")))
    path = write("agent.yaml", AGENT % (server.url + "/v1"))
    code = main([str(path), "--quiet"])
    captured = capsys.readouterr()
    assert (code, captured.out, captured.err) == (0, "hello\n", "")


@pytest.mark.usefixtures("no_backoff")
def test_a_retry_line_names_a_failure_without_a_status(
    server: LoopbackServer, write: Any, capsys: Any
) -> None:
    server.add(_cut_stream_json(), json_reply(chat_completion("hello")))
    path = write("agent.yaml", AGENT % (server.url + "/v1"))
    assert main([str(path)]) == 0
    assert capsys.readouterr().err == "connection – retrying in 0.0 s (2/6)\n"


def _cut_stream_json() -> Reply:
    # Chunked, and the connection ends before the last chunk: a body cut short.
    body = json.dumps(chat_completion("hello"))
    return Reply(200, b"", {"content-type": "application/json"}, events=[body[:20]], abort=True)
