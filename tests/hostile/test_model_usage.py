"""Token counts a model server reports are read only when they can be counts.

A count is added up (a run's usage, a batch's ``--tpm``, costs): 10**300 tokens made a
batch under ``--tpm`` wait for ever before its next call, 10**400 failed the turn with an
``OverflowError``, and negative counts were shown as tokens spent. Servers are
``LoopbackServer``s on 127.0.0.1.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
from loopback import LoopbackServer, Reply, anthropic_sse, openai_sse, sse_reply

from openprogram_yaml.providers.anthropic import AnthropicRuntime
from openprogram_yaml.providers.openai import OpenAIRuntime
from openprogram_yaml.runtimes.protocol import RuntimeResult

_BAD = ["-1", "-1000000", "1000000001", "1" + "0" * 300, "1" + "0" * 400, "1e300", "-0.5e3"]
_GOOD = [("0", 0), ("1000000000", 10**9), ("12.0", 12)]


@pytest.fixture
def server() -> Iterator[LoopbackServer]:
    with LoopbackServer() as srv:
        yield srv


def _json(text: str) -> Reply:
    return Reply(200, text.encode(), {"content-type": "application/json"})


def _openai_reply(count: str) -> Reply:
    text = (
        '{"choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}, '
        '"finish_reason": "stop"}], "usage": {"prompt_tokens": COUNT, "completion_tokens": 1}}'
    )
    return _json(text.replace("COUNT", count))


def _anthropic_reply(count: str) -> Reply:
    text = (
        '{"id": "m", "type": "message", "role": "assistant", "model": "m", "stop_reason": '
        '"end_turn", "content": [{"type": "text", "text": "ok"}], '
        '"usage": {"input_tokens": COUNT, "output_tokens": 1}}'
    )
    return _json(text.replace("COUNT", count))


def _openai_stream(count: str) -> Reply:
    chunk = {"id": "c", "model": "m", "choices": [{"index": 0, "delta": {"content": "ok"}}]}
    end = {"id": "c", "model": "m", "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}
    events = openai_sse([chunk, end], done=False)
    usage = '{"id": "c", "model": "m", "choices": [], "usage": {"prompt_tokens": COUNT}}'
    usage = usage.replace("COUNT", count)
    return sse_reply([*events, f"data: {usage}\n\n", "data: [DONE]\n\n"])


def _anthropic_stream(count: str) -> Reply:
    head = anthropic_sse(
        [
            {"type": "message_start", "message": {"id": "m", "model": "m", "usage": {}}},
            {"type": "content_block_start", "index": 0, "content_block": {"type": "text"}},
            {
                "type": "content_block_delta",
                "index": 0,
                "delta": {"type": "text_delta", "text": "ok"},
            },
            {"type": "content_block_stop", "index": 0},
        ]
    )
    delta = (
        '{"type": "message_delta", "delta": {"stop_reason": "end_turn"}, '
        '"usage": {"input_tokens": COUNT, "output_tokens": 1}}'
    ).replace("COUNT", count)
    stop = anthropic_sse([{"type": "message_stop"}])
    return sse_reply([*head, f"event: message_delta\ndata: {delta}\n\n", *stop])


_SHAPES = {
    "openai": (_openai_reply, "usage.prompt_tokens"),
    "openai-stream": (_openai_stream, "usage.prompt_tokens"),
    "anthropic": (_anthropic_reply, "usage.input_tokens"),
    "anthropic-stream": (_anthropic_stream, "message_delta.usage.input_tokens"),
}


def _turn(server: LoopbackServer, shape: str, count: str) -> RuntimeResult:
    reply, _ = _SHAPES[shape]
    server.add(reply(count))
    runtime: OpenAIRuntime | AnthropicRuntime
    if shape.startswith("openai"):
        runtime = OpenAIRuntime(base_url=server.url + "/v1", provider="m", api_key="k")
    else:
        runtime = AnthropicRuntime(base_url=server.url, provider="m", api_key="k")

    async def go() -> RuntimeResult:
        on_delta = (lambda delta: None) if shape.endswith("stream") else None
        try:
            return await runtime.run_turn("hi", model_ref="m:x", on_delta=on_delta)
        finally:
            await runtime.aclose()

    return asyncio.run(go())


@pytest.mark.parametrize("shape", sorted(_SHAPES))
@pytest.mark.parametrize("count", _BAD)
def test_a_count_no_call_could_have_is_a_malformed_reply(
    server: LoopbackServer, shape: str, count: str
) -> None:
    result = _turn(server, shape, count)
    assert result.failure is not None, result.usage
    assert (result.failure.reason, result.failure.retryable) == ("server_error", False)
    path = _SHAPES[shape][1]
    assert f"m: malformed reply: {path} is not a count of tokens" in result.failure.message


@pytest.mark.parametrize("shape", sorted(_SHAPES))
@pytest.mark.parametrize(("count", "tokens"), _GOOD)
def test_counts_from_none_to_a_billion_are_read(
    server: LoopbackServer, shape: str, count: str, tokens: int
) -> None:
    result = _turn(server, shape, count)
    assert (result.error, result.content) == (None, "ok")
    assert result.usage is not None and result.usage.input_tokens == tokens
