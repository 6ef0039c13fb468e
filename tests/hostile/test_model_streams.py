"""What a model server's event stream may hold that once broke or slowed a streamed turn.

Every server is a ``LoopbackServer`` on 127.0.0.1; the line splitter is also driven with
pieces cut at every place, against the standard's rule applied to the whole stream, and
the Messages assembler with generated events, against the plain rule of what a block holds.
"""

from __future__ import annotations

import asyncio
import json
import random
import re
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from loopback import LoopbackServer, Reply, anthropic_sse, json_reply, sse_reply

from openprogram_yaml.providers._http import SSEEvent
from openprogram_yaml.providers.anthropic import AnthropicRuntime
from openprogram_yaml.providers.http_client import iter_lines
from openprogram_yaml.providers.openai import OpenAIRuntime
from openprogram_yaml.runtimes.protocol import RuntimeDelta, RuntimeResult

# Characters ``str.splitlines`` breaks at that JSON leaves unescaped inside a string.
_SEPARATORS = ["\u2028", "\u2029", "\x85"]


@pytest.fixture
def server() -> Iterator[LoopbackServer]:
    with LoopbackServer() as srv:
        yield srv


def _openai_events(text: str) -> list[str]:
    chunks = [
        {"id": "c1", "model": "m", "choices": [{"index": 0, "delta": {"content": text}}]},
        {"id": "c1", "model": "m", "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
    ]
    events = [f"data: {json.dumps(chunk, ensure_ascii=False)}\n\n" for chunk in chunks]
    return [*events, "data: [DONE]\n\n"]


def _anthropic_events(text: str) -> list[str]:
    events: list[dict[str, Any]] = [
        {"type": "message_start", "message": {"id": "m1", "model": "m", "usage": {}}},
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text"}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": text}},
        {"type": "content_block_stop", "index": 0},
        {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {}},
        {"type": "message_stop"},
    ]
    return [
        event.replace("\\u2028", "\u2028").replace("\\u2029", "\u2029").replace("\\u0085", "\x85")
        for event in anthropic_sse(events)
    ]


async def _turn(
    runtime: OpenAIRuntime | AnthropicRuntime, deltas: list[RuntimeDelta]
) -> RuntimeResult:
    try:
        return await runtime.run_turn("hi", model_ref="m:x", on_delta=deltas.append)
    finally:
        await runtime.aclose()


@pytest.mark.parametrize("separator", _SEPARATORS)
def test_a_line_separator_inside_streamed_text_is_text_not_a_line_break(
    server: LoopbackServer, separator: str
) -> None:
    # Servers writing UTF-8 JSON (ensure_ascii off) send these characters as they are; the
    # stream once broke there and the turn failed as "a stream event is not JSON".
    text = f"one{separator}two"
    server.add(sse_reply(_openai_events(text)), sse_reply(_anthropic_events(text)))
    runtimes: list[OpenAIRuntime | AnthropicRuntime] = [
        OpenAIRuntime(base_url=server.url + "/v1", provider="m", api_key="k"),
        AnthropicRuntime(base_url=server.url, provider="m", api_key="k"),
    ]
    for runtime in runtimes:
        deltas: list[RuntimeDelta] = []
        result = asyncio.run(_turn(runtime, deltas))
        assert (result.error, result.content) == (None, text)
        assert "".join(delta.content for delta in deltas) == text


async def _pieces(data: bytes, cuts: list[int]) -> AsyncIterator[bytes]:
    start = 0
    for cut in [*cuts, len(data)]:
        yield data[start:cut]
        start = cut


def _lines(data: bytes, cuts: list[int]) -> list[str]:
    async def collect() -> list[str]:
        return [line async for line in iter_lines(_pieces(data, cuts))]

    return asyncio.run(collect())


def _expected(data: bytes) -> list[str]:
    # The standard's rule on the whole stream: a line ends at CRLF, CR or LF; an unended
    # last line still counts.
    lines = re.split(rb"\r\n|\r|\n", data)
    if lines[-1] == b"":
        lines.pop()
    return [line.decode("utf-8", "replace") for line in lines]


def test_lines_are_the_same_wherever_the_stream_is_cut() -> None:
    alphabet = [b"\r", b"\n", b"\r\n", b"a", b"data: x", "\u2028".encode(), b"\xe2\x82", b"\xff"]
    rng = random.Random(7)
    for _ in range(2000):
        data = b"".join(rng.choice(alphabet) for _ in range(rng.randrange(12)))
        cuts = sorted(rng.sample(range(len(data) + 1), rng.randrange(min(len(data) + 1, 5))))
        assert _lines(data, cuts) == _expected(data), (data, cuts)


def test_every_single_cut_of_a_crlf_stream_gives_the_same_lines() -> None:
    data = b"data: 1\r\n\r\ndata: \xe2\x80\xa8\r\r\n\n"
    for cut in range(len(data) + 1):
        assert _lines(data, [cut]) == ["data: 1", "", "data: \u2028", "", ""]


def test_a_long_line_in_small_pieces_costs_its_length_not_its_length_times_its_pieces() -> None:
    # 8 MiB in 4 KiB pieces: once some 15 s of copying, each piece joined to all before it.
    data = b"x" * (8 << 20) + b"\n"
    started = time.perf_counter()
    lines = _lines(data, list(range(4096, len(data), 4096)))
    assert time.perf_counter() - started < 3.0
    assert [len(line) for line in lines] == [8 << 20]


# --- a Messages stream of many small deltas ---------------------------------------------------


def _event(data: dict[str, Any]) -> SSEEvent:
    return SSEEvent(str(data["type"]), json.dumps(data))


def _assembled(events: list[dict[str, Any]]) -> RuntimeResult:
    assembler = AnthropicRuntime(provider="m", api_key="k").stream_assembler(lambda d: None)
    for data in events:
        assembler.feed(_event(data))
    return assembler.result()


def _delta(index: int, kind: str, text: str) -> dict[str, Any]:
    key = {"text_delta": "text", "thinking_delta": "thinking", "signature_delta": "signature"}
    return {"type": "content_block_delta", "index": index, "delta": {"type": kind, key[kind]: text}}


def test_many_small_text_deltas_cost_their_length_not_its_square() -> None:
    # 40,000 deltas of 90 characters (8 MB of stream): each once added to the text so far.
    events = [
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text"}},
        *[_delta(0, "text_delta", "x" * 90)] * 40_000,
    ]
    started = time.perf_counter()
    result = _assembled(events)
    assert time.perf_counter() - started < 2.0  # once some 5 s
    assert result.content == "x" * 3_600_000


def test_blocks_hold_what_their_deltas_said_in_order() -> None:
    # Against the plain rule: a block's text, thinking and signature are its deltas joined,
    # a block started again starts empty, a delta with no start opens a text block.
    rng = random.Random(11)
    for _ in range(300):
        events: list[dict[str, Any]] = []
        expected: dict[int, dict[str, Any]] = {}
        for _ in range(rng.randrange(12)):
            index = rng.randrange(3)
            if rng.random() < 0.2:
                kind = rng.choice(["text", "thinking"])
                block = {"type": kind, kind: rng.choice(["", "pre"])}
                events.append(
                    {"type": "content_block_start", "index": index, "content_block": block}
                )
                expected[index] = dict(block)
                continue
            kind = rng.choice(["text_delta", "thinking_delta", "signature_delta"])
            text = rng.choice(["a", "bc", "", "\u2028"])
            events.append(_delta(index, kind, text))
            key = kind.removesuffix("_delta")
            block = expected.setdefault(index, {"type": "text", "text": ""})
            block[key] = block.get(key, "") + text
        result = _assembled(events)
        blocks = [expected[i] for i in sorted(expected)]
        assert result.content == "".join(b.get("text", "") for b in blocks if b["type"] == "text")
        thinking = [b for b in blocks if b["type"] == "thinking"]
        assert result.thinking == "".join(b.get("thinking", "") for b in thinking)
        assert result.metadata["thinking_blocks"] == (thinking or None)


# --- a Chat Completions tool call whose name comes in pieces ------------------------------------


def _name_piece(name: str) -> SSEEvent:
    call = {"index": 0, "function": {"name": name}}
    chunk = {"id": "c", "choices": [{"index": 0, "delta": {"tool_calls": [call]}}]}
    return SSEEvent("message", json.dumps(chunk))


def _streamed_names(pieces: list[str]) -> list[str]:
    assembler = OpenAIRuntime(provider="m", api_key="k").stream_assembler(lambda d: None)
    for piece in pieces:
        assembler.feed(_name_piece(piece))
    return [call.name for call in assembler.result().tool_calls]


def test_a_name_in_pieces_is_joined() -> None:
    assert _streamed_names(["look", "up_", "order"]) == ["lookup_order"]


def test_a_name_in_thousands_of_pieces_is_kept_up_to_4096_characters_in_linear_time() -> None:
    # 40,000 pieces of 90 characters (7 MB of stream): each once added to the name so far,
    # which every delta reports (16 s). No tool has such a name: the model is told so.
    started = time.perf_counter()
    names = _streamed_names(["x" * 90] * 40_000)
    assert time.perf_counter() - started < 2.0
    assert names == ["x" * 4096]


# --- no event stream where one was asked for ----------------------------------------------------


def _streamed(
    runtime: OpenAIRuntime | AnthropicRuntime,
) -> tuple[RuntimeResult, list[RuntimeDelta]]:
    deltas: list[RuntimeDelta] = []
    return asyncio.run(_turn(runtime, deltas)), deltas


def test_a_whole_reply_to_a_streamed_request_is_read_and_streamed_as_one_piece(
    server: LoopbackServer,
) -> None:
    # A server that does not stream sends its reply whole: it once failed as "the stream
    # ended before the turn was complete", retried six times to the same end.
    completion = {"choices": [{"index": 0, "message": {"role": "assistant", "content": "whole"}}]}
    message = {"type": "message", "content": [{"type": "text", "text": "whole"}]}
    server.add(json_reply(completion), json_reply(message))
    for runtime in (
        OpenAIRuntime(base_url=server.url + "/v1", provider="m", api_key="k"),
        AnthropicRuntime(base_url=server.url, provider="m", api_key="k"),
    ):
        result, deltas = _streamed(runtime)
        assert (result.error, result.content) == (None, "whole")
        assert [(d.type, d.content) for d in deltas] == [("text", "whole")]


def test_an_error_sent_with_200_to_a_streamed_request_is_that_error(
    server: LoopbackServer,
) -> None:
    server.add(
        json_reply({"error": {"message": "no such model", "type": "invalid_request_error"}}),
        json_reply({"type": "error", "error": {"type": "overloaded_error", "message": "busy"}}),
    )
    openai, deltas = _streamed(
        OpenAIRuntime(base_url=server.url + "/v1", provider="m", api_key="k")
    )
    assert openai.failure is not None
    assert (openai.failure.reason, openai.failure.retryable) == ("invalid_request", False)
    assert "no such model" in openai.failure.message
    anthropic, _ = _streamed(AnthropicRuntime(base_url=server.url, provider="m", api_key="k"))
    assert anthropic.failure is not None
    assert (anthropic.failure.reason, anthropic.failure.retryable) == ("server_error", True)
    assert "busy" in anthropic.failure.message and deltas == []


def test_an_html_page_for_a_stream_is_final_and_names_it(server: LoopbackServer) -> None:
    # A captive portal or a proxy's login page: the next attempt gets the same page.
    page = b"<html><body>Sign in to the network</body></html>"
    server.add(Reply(200, page, {"content-type": "text/html; charset=utf-8"}))
    runtime = OpenAIRuntime(base_url=server.url + "/v1", provider="m", api_key="k")
    result, _ = _streamed(runtime)
    assert result.failure is not None
    assert (result.failure.reason, result.failure.retryable) == ("server_error", False)
    assert "a stream was asked for and the server sent an HTML page" in result.failure.message


# --- an error in the stream whose code is no status ----------------------------------------------


@pytest.mark.parametrize(
    ("code", "reason", "retryable", "shown"),
    [
        (-32603, "server_error", True, "m: -32603: broke"),  # a JSON-RPC code: was "HTTP -32603"
        (True, "server_error", True, "m: overloaded_error: broke"),  # a flag: was "HTTP True"
        (10**400, "server_error", True, "m: " + "1" + "0" * 99 + ": broke"),
        (429, "rate_limit", True, "m: HTTP 429 rate_limit: broke"),
    ],
    ids=["json-rpc", "flag", "huge", "status"],
)
def test_an_error_code_is_a_status_only_where_one_could_be(
    server: LoopbackServer, code: int, reason: str, retryable: bool, shown: str
) -> None:
    error = {"code": code, "type": "overloaded_error", "message": "broke"}
    server.add(sse_reply([f"data: {json.dumps({'error': error})}\n\n"]))
    result, _ = _streamed(OpenAIRuntime(base_url=server.url + "/v1", provider="m", api_key="k"))
    assert result.failure is not None
    assert (result.failure.reason, result.failure.retryable) == (reason, retryable)
    assert result.failure.message == shown
