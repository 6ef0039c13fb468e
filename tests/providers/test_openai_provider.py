"""The ``openai`` runtime against a real HTTP server on 127.0.0.1.

Request bodies are checked against the official SDK's request types; recorded responses
and SSE streams must parse into the right text, tool calls and usage.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

import pytest
from loopback import (
    LoopbackServer,
    json_reply,
    load_sse,
    openai_sse,
    sse_reply,
    status_reply,
)
from openai.types.chat import ChatCompletion, ChatCompletionChunk
from openai.types.chat.completion_create_params import (
    CompletionCreateParamsNonStreaming,
    CompletionCreateParamsStreaming,
)
from providers_support import fixture_json, fixture_text
from sdk_contract import assert_valid_request

from openprogram_yaml.providers.openai import OpenAIRuntime, parse_completion
from openprogram_yaml.runtimes.protocol import (
    AgentRuntimeProtocol,
    Message,
    RuntimeDelta,
    RuntimeResult,
    ToolCall,
    ToolSpec,
)

KEY = "sk-test-0123456789abcdef"
WEATHER = ToolSpec(
    "get_weather",
    "Current weather for a city.",
    {"type": "object", "properties": {"location": {"type": "string"}}, "required": ["location"]},
)
ORDER = ToolSpec(
    "lookup_order",
    "Fetch an order.",
    {
        "type": "object",
        "properties": {"order_id": {"type": "string"}},
        "required": ["order_id"],
        "additionalProperties": False,
    },
    strict=True,
)
CONVERSATION = [
    Message("system", "Be brief."),
    Message(
        "user",
        [
            {"type": "text", "text": "What is in this picture, and the weather in Paris?"},
            {"type": "image", "data": "iVBORw0KGgo=", "mime_type": "image/png"},
            {"type": "image", "url": "https://example.com/cat.jpg"},
            {"type": "audio", "data": "UklGRg==", "mime_type": "audio/wav"},
        ],
    ),
    Message(
        "assistant",
        "",
        tool_calls=[
            ToolCall("call_1", "get_weather", '{"location": "Paris"}'),
            ToolCall("call_2", "lookup_order", '{"order_id": "A-17"}'),
        ],
    ),
    Message("tool", "18C and sunny", tool_call_id="call_1"),
    Message("tool", "order service down", tool_call_id="call_2", is_error=True),
]


def runtime_for(server: LoopbackServer, **options: Any) -> OpenAIRuntime:
    options.setdefault("api_key", KEY)
    return OpenAIRuntime(base_url=server.url + "/v1", **options)


def run(coro: Any) -> Any:
    return asyncio.run(coro)


async def turn(runtime: OpenAIRuntime, prompt: Any, **kwargs: Any) -> RuntimeResult:
    try:
        return await runtime.run_turn(prompt, **kwargs)
    finally:
        await runtime.aclose()


# --- request contract ---------------------------------------------------------------------


def test_a_plain_turn_sends_a_valid_minimal_request(server: LoopbackServer) -> None:
    server.add(json_reply(fixture_json("openai_chat_text.json")))
    result = run(
        turn(runtime_for(server), "Hello", system_prompt="Be kind.", model_ref="openai:gpt-4o")
    )

    assert result.error is None
    request = server.requests[0]
    assert (request.method, request.path) == ("POST", "/v1/chat/completions")
    assert request.headers["authorization"] == f"Bearer {KEY}"
    assert request.headers["content-type"] == "application/json"
    body = request.json
    assert_valid_request(CompletionCreateParamsNonStreaming, body)
    assert body == {
        "model": "gpt-4o",
        "messages": [
            {"role": "system", "content": "Be kind."},
            {"role": "user", "content": "Hello"},
        ],
    }


def test_a_full_conversation_with_tools_is_a_valid_request(server: LoopbackServer) -> None:
    server.add(json_reply(fixture_json("openai_chat_text.json")))
    result = run(
        turn(
            runtime_for(server),
            CONVERSATION,
            model_ref="openai:gpt-4o-mini",
            tools=[WEATHER, ORDER],
            tool_choice={"type": "function", "name": "get_weather"},
            parallel_tool_calls=False,
            max_tokens=300,
            temperature=0.2,
            thinking_level="low",
        )
    )
    assert result.error is None
    body = server.requests[0].json
    assert_valid_request(CompletionCreateParamsNonStreaming, body)
    user, assistant, ok, failed = body["messages"][1:]
    assert user["content"][1] == {
        "type": "image_url",
        "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="},
    }
    assert user["content"][2]["image_url"]["url"] == "https://example.com/cat.jpg"
    assert user["content"][3] == {
        "type": "input_audio",
        "input_audio": {"data": "UklGRg==", "format": "wav"},
    }
    assert assistant["tool_calls"][1] == {
        "id": "call_2",
        "type": "function",
        "function": {"name": "lookup_order", "arguments": '{"order_id": "A-17"}'},
    }
    assert ok == {"role": "tool", "tool_call_id": "call_1", "content": "18C and sunny"}
    assert failed["content"] == "Error: order service down"
    assert body["tools"][1]["function"]["strict"] is True
    assert "strict" not in body["tools"][0]["function"]
    assert body["tool_choice"] == {"type": "function", "function": {"name": "get_weather"}}
    assert body["parallel_tool_calls"] is False
    assert body["max_tokens"] == 300  # a compatible server: the field every server knows
    assert body["temperature"] == 0.2
    assert body["reasoning_effort"] == "low"


@pytest.mark.parametrize("choice", ["auto", "required", "none"])
def test_tool_choice_strings_pass_through(server: LoopbackServer, choice: str) -> None:
    server.add(json_reply(fixture_json("openai_chat_text.json")))
    run(
        turn(
            runtime_for(server),
            "hi",
            model_ref="openai:gpt-4o",
            tools=[WEATHER],
            tool_choice=choice,
        )
    )
    body = server.requests[0].json
    assert_valid_request(CompletionCreateParamsNonStreaming, body)
    assert body["tool_choice"] == choice


def test_unset_tool_options_are_not_sent(server: LoopbackServer) -> None:
    server.add(json_reply(fixture_json("openai_chat_text.json")))
    run(turn(runtime_for(server), "hi", model_ref="openai:gpt-4o", tools=[WEATHER]))
    body = server.requests[0].json
    assert "tool_choice" not in body
    assert "parallel_tool_calls" not in body


def test_structured_output_uses_json_schema_response_format(server: LoopbackServer) -> None:
    server.add(json_reply(fixture_json("openai_chat_text.json")))
    schema = {
        "type": "object",
        "properties": {"label": {"type": "string", "enum": ["bug", "question"]}},
        "required": ["label"],
        "additionalProperties": False,
    }
    runtime = runtime_for(server)
    assert runtime.capabilities("openai:gpt-4o").native_json_schema is True
    run(
        turn(
            runtime,
            "Label it",
            model_ref="openai:gpt-4o",
            response_format={"name": "ticket label", "schema": schema, "strict": True},
        )
    )
    body = server.requests[0].json
    assert_valid_request(CompletionCreateParamsNonStreaming, body)
    assert body["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "ticket_label", "schema": schema, "strict": True},
    }


def test_streaming_requests_ask_for_usage(server: LoopbackServer) -> None:
    server.add(sse_reply(load_sse(fixture_text("openai_stream_text.sse"))))
    run(
        turn(
            runtime_for(server),
            CONVERSATION,
            model_ref="openai:gpt-4o",
            tools=[WEATHER],
            on_delta=lambda d: None,
        )
    )
    body = server.requests[0].json
    assert_valid_request(CompletionCreateParamsStreaming, body)
    assert body["stream"] is True
    assert body["stream_options"] == {"include_usage": True}


def test_official_openai_uses_max_completion_tokens() -> None:
    runtime = OpenAIRuntime(api_key=KEY)
    body = runtime.build_body("gpt-4o", "hi", None, {"max_tokens": 50}, stream=False)
    assert_valid_request(CompletionCreateParamsNonStreaming, body)
    assert body["max_completion_tokens"] == 50 and "max_tokens" not in body


# --- recorded responses -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "name", ["openai_chat_text.json", "openai_chat_tool_calls.json", "openai_chat_refusal.json"]
)
def test_fixtures_are_real_chat_completions(name: str) -> None:
    ChatCompletion.model_validate(fixture_json(name))


@pytest.mark.parametrize("name", ["openai_stream_text.sse", "openai_stream_tool_calls.sse"])
def test_stream_fixtures_are_real_chunks(name: str) -> None:
    for event in load_sse(fixture_text(name)):
        data = event.removeprefix("data: ").strip()
        if data != "[DONE]":
            ChatCompletionChunk.model_validate_json(data)


def test_a_text_completion_parses() -> None:
    result = parse_completion(fixture_json("openai_chat_text.json"), OpenAIRuntime())
    assert isinstance(result, RuntimeResult)
    assert result.content == "Hello! How can I assist you today?"
    assert result.finish_reason == "stop"
    assert result.usage is not None and result.usage.to_dict()["total_tokens"] == 29
    assert result.metadata["model"] == "gpt-4o-2024-08-06"


def test_tool_calls_parse_with_cached_tokens() -> None:
    result = parse_completion(fixture_json("openai_chat_tool_calls.json"), OpenAIRuntime())
    assert isinstance(result, RuntimeResult)
    assert result.content == ""
    assert result.finish_reason == "tool_calls"
    assert [(c.id, c.name, json.loads(c.arguments)) for c in result.tool_calls] == [
        ("call_abc123", "get_current_weather", {"location": "Boston, MA"}),
        ("call_def456", "lookup_order", {"order_id": "A-17"}),
    ]
    assert result.usage is not None
    assert (result.usage.input_tokens, result.usage.output_tokens) == (1282, 38)
    assert result.usage.cache_read == 1024


def test_a_refusal_is_reported_as_such() -> None:
    result = parse_completion(fixture_json("openai_chat_refusal.json"), OpenAIRuntime())
    assert isinstance(result, RuntimeResult)
    assert result.finish_reason == "refusal"
    assert result.refusal == "I'm sorry, I cannot assist with that request."


def test_a_streamed_text_turn_assembles_and_reports_deltas(server: LoopbackServer) -> None:
    server.add(sse_reply(load_sse(fixture_text("openai_stream_text.sse"))))
    deltas: list[RuntimeDelta] = []
    result = run(
        turn(runtime_for(server), "hi", model_ref="openai:gpt-4o-mini", on_delta=deltas.append)
    )
    assert result.error is None
    assert [d.content for d in deltas if d.type == "text"] == ["Hello", " there", "!"]
    assert result.content == "Hello there!"
    assert result.finish_reason == "stop"
    assert result.usage is not None and (result.usage.input_tokens, result.usage.output_tokens) == (
        9,
        3,
    )


def test_streamed_parallel_tool_calls_assemble(server: LoopbackServer) -> None:
    server.add(sse_reply(load_sse(fixture_text("openai_stream_tool_calls.sse"))))
    deltas: list[RuntimeDelta] = []
    result = run(
        turn(
            runtime_for(server),
            "weather?",
            model_ref="openai:gpt-4o",
            tools=[WEATHER],
            on_delta=deltas.append,
        )
    )
    assert result.error is None
    assert result.finish_reason == "tool_calls"
    assert [(c.id, json.loads(c.arguments)) for c in result.tool_calls] == [
        ("call_DdmO9pD3xa9XTPNJ32zg2hcA", {"location": "Paris"}),
        ("call_4ZVw1MdJ3A8rWzbzOw3vUiPf", {"location": "Bogotá"}),
    ]
    tool_deltas = [d for d in deltas if d.type == "tool_call"]
    assert tool_deltas[0].metadata == {
        "index": 0,
        "id": "call_DdmO9pD3xa9XTPNJ32zg2hcA",
        "name": "get_weather",
    }
    assert (
        "".join(d.content for d in tool_deltas if d.metadata["index"] == 0)
        == '{"location": "Paris"}'
    )
    assert result.usage is not None and result.usage.cache_read == 64


# --- end to end -----------------------------------------------------------------------------


def test_stream_turn_yields_text_deltas(server: LoopbackServer) -> None:
    server.add(sse_reply(openai_sse([_chunk("Hi"), _chunk(" you", finish="stop")])))

    async def collect() -> list[RuntimeDelta]:
        runtime = runtime_for(server)
        assert isinstance(runtime, AgentRuntimeProtocol)
        try:
            return [d async for d in runtime.stream_turn("hi", model_ref="openai:gpt-4o")]
        finally:
            await runtime.aclose()

    assert [(d.type, d.content) for d in run(collect())] == [("text", "Hi"), ("text", " you")]


def test_stream_turn_ends_with_an_error_delta_instead_of_raising(server: LoopbackServer) -> None:
    server.add(status_reply(503, {"error": {"message": "upstream unavailable"}}, retry_after="2"))

    async def collect() -> list[RuntimeDelta]:
        runtime = runtime_for(server)
        try:
            return [d async for d in runtime.stream_turn("hi", model_ref="openai:gpt-4o")]
        finally:
            await runtime.aclose()

    (delta,) = run(collect())
    assert delta.type == "error"
    assert "upstream unavailable" in delta.content
    assert delta.metadata["retryable"] is True and delta.metadata["retry_after_s"] == 2.0


def test_429_with_retry_after_then_success_through_runtime_exec(server: LoopbackServer) -> None:
    from openprogram_yaml.runtime.runtime import Runtime
    from openprogram_yaml.runtimes.rules import ProviderConfig
    from openprogram_yaml.runtimes.select import RuntimeSelector

    server.add(
        status_reply(
            429, {"error": {"message": "Rate limit reached", "type": "requests"}}, retry_after="3"
        ),
        json_reply(fixture_json("openai_chat_text.json")),
    )
    slept: list[float] = []

    async def fake_sleep(seconds: float) -> None:
        slept.append(seconds)

    selector = RuntimeSelector(
        providers={"openai": ProviderConfig("openai", base_url=server.url + "/v1", api_key=KEY)}
    )
    with Runtime(model="openai:gpt-4o", runtimes=selector, sleep=fake_sleep) as rt:
        answer = rt.exec("Say hello")
    asyncio.run(selector.aclose())
    assert answer == "Hello! How can I assist you today?"
    assert len(server.requests) == 2
    assert len(slept) == 1 and slept[0] >= 3.0  # Retry-After is a lower bound


def test_a_429_is_a_retryable_failure_with_its_retry_after(server: LoopbackServer) -> None:
    server.add(
        status_reply(
            429, {"error": {"message": "Rate limit reached"}}, headers={"retry-after-ms": "1500"}
        )
    )
    result = run(turn(runtime_for(server), "hi", model_ref="openai:gpt-4o"))
    assert result.failure is not None
    assert (result.failure.reason, result.failure.retryable) == ("rate_limit", True)
    assert (result.failure.http_status, result.failure.retry_after_s) == (429, 1.5)
    assert result.error == result.failure.message


def test_a_dropped_stream_is_a_transient_connection_failure(server: LoopbackServer) -> None:
    server.add(sse_reply(openai_sse([_chunk("partial")], done=False), abort=True))
    seen: list[str] = []
    result = run(
        turn(
            runtime_for(server),
            "hi",
            model_ref="openai:gpt-4o",
            on_delta=lambda d: seen.append(d.content),
        )
    )
    assert seen == ["partial"]
    assert result.failure is not None
    assert (result.failure.reason, result.failure.retryable) == ("connection", True)


def test_an_error_inside_a_stream_is_classified(server: LoopbackServer) -> None:
    server.add(
        sse_reply(
            [
                "data: "
                + json.dumps({"error": {"message": "Rate limited upstream", "code": 429}})
                + "\n\n"
            ]
        )
    )
    result = run(turn(runtime_for(server), "hi", model_ref="openrouter:x", on_delta=lambda d: None))
    assert result.failure is not None
    assert (result.failure.reason, result.failure.retryable) == ("rate_limit", True)


def test_an_unreachable_server_is_a_connection_failure() -> None:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    runtime = OpenAIRuntime(base_url=f"http://127.0.0.1:{port}/v1")
    result = run(turn(runtime, "hi", model_ref="local:llama3"))
    assert result.failure is not None
    assert (result.failure.reason, result.failure.retryable) == ("connection", True)


def test_one_pooled_connection_serves_consecutive_turns(server: LoopbackServer) -> None:
    server.add(*(json_reply(fixture_json("openai_chat_text.json")) for _ in range(3)))

    async def three() -> None:
        runtime = runtime_for(server)
        for _ in range(3):
            assert (await runtime.run_turn("hi", model_ref="openai:gpt-4o")).error is None
        await runtime.aclose()

    run(three())
    assert len({r.client_port for r in server.requests}) == 1


def test_a_closed_runtime_fails_without_a_request(server: LoopbackServer) -> None:
    async def closed_turn() -> RuntimeResult:
        runtime = runtime_for(server)
        await runtime.aclose()
        return await runtime.run_turn("hi", model_ref="openai:gpt-4o")

    result = run(closed_turn())
    assert result.failure is not None and result.failure.reason == "closed"
    assert server.requests == []


# --- keys -----------------------------------------------------------------------------------


def test_a_local_server_needs_no_key(server: LoopbackServer) -> None:
    server.add(json_reply(fixture_json("openai_chat_text.json")))
    result = run(
        turn(OpenAIRuntime(base_url=server.url + "/v1"), "hi", model_ref="ollama:llama3.1:8b")
    )
    assert result.error is None
    assert "authorization" not in server.requests[0].headers
    assert server.requests[0].json["model"] == "llama3.1:8b"  # after the first ":" only


def test_a_remote_server_without_a_key_fails_before_sending() -> None:
    result = run(turn(OpenAIRuntime(), "hi", model_ref="openai:gpt-4o"))
    assert result.failure is not None
    assert (result.failure.reason, result.failure.retryable) == ("auth", False)
    assert "OPENAI_API_KEY" in result.failure.message


def test_the_key_comes_from_the_configured_env_var(
    server: LoopbackServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MY_GATEWAY_KEY", "gw-key-987654")
    server.add(json_reply(fixture_json("openai_chat_text.json")))
    run(
        turn(
            OpenAIRuntime(base_url=server.url + "/v1", api_key_env="MY_GATEWAY_KEY"),
            "hi",
            model_ref="x:y",
        )
    )
    assert server.requests[0].headers["authorization"] == "Bearer gw-key-987654"


def test_custom_headers_are_sent(server: LoopbackServer) -> None:
    server.add(json_reply(fixture_json("openai_chat_text.json")))
    runtime = runtime_for(
        server, headers={"HTTP-Referer": "https://example.com", "X-Title": "triage"}
    )
    run(turn(runtime, "hi", model_ref="openrouter:anthropic/claude-3.5-sonnet"))
    assert server.requests[0].headers["x-title"] == "triage"


def test_secrets_never_leak(server: LoopbackServer, caplog: pytest.LogCaptureFixture) -> None:
    secret, header_secret = "sk-live-SECRET-abcdef123456", "org-token-SECRET-987"
    echo = {"error": {"message": f"Incorrect API key provided: {secret}. Header {header_secret}"}}
    server.add(status_reply(401, echo))
    server.add(
        sse_reply(["data: " + json.dumps({"error": {"message": f"bad key {secret}"}}) + "\n\n"])
    )
    caplog.set_level(logging.DEBUG)
    runtime = OpenAIRuntime(
        base_url=server.url + "/v1", api_key=secret, headers={"X-Org-Token": header_secret}
    )

    async def two() -> tuple[RuntimeResult, list[RuntimeDelta]]:
        first = await runtime.run_turn("hi", model_ref="openai:gpt-4o")
        deltas = [d async for d in runtime.stream_turn("hi", model_ref="openai:gpt-4o")]
        await runtime.aclose()
        return first, deltas

    result, deltas = run(two())
    assert result.failure is not None and result.failure.reason == "auth"
    seen = " ".join(
        [
            repr(runtime),
            repr(runtime.config),
            repr(result),
            str(result.error),
            json.dumps(result.metadata),
            repr(deltas),
            caplog.text,
        ]
    )
    assert secret not in seen and header_secret not in seen
    assert "***" in str(result.error)


def _chunk(text: str, finish: str | None = None) -> dict[str, Any]:
    return {
        "id": "chatcmpl-x",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "gpt-4o",
        "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": finish}],
    }


def test_the_turn_budget_bounds_the_request_timeout() -> None:
    import httpx

    seen: list[dict[str, float | None]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.extensions["timeout"])
        return httpx.Response(200, json=fixture_json("openai_chat_text.json"))

    runtime = OpenAIRuntime(
        base_url="http://127.0.0.1:9/v1", timeout_s=60, transport=httpx.MockTransport(handler)
    )
    run(turn(runtime, "hi", model_ref="local:m", timeout_s=2.5))
    assert seen[0]["read"] == 2.5 and seen[0]["connect"] == 2.5


def test_a_read_timeout_is_a_retryable_timeout() -> None:
    import httpx

    def handler(request: httpx.Request) -> httpx.Response:
        raise httpx.ReadTimeout("timed out", request=request)

    runtime = OpenAIRuntime(
        base_url="http://127.0.0.1:9/v1", transport=httpx.MockTransport(handler)
    )
    result = run(turn(runtime, "hi", model_ref="local:m"))
    assert result.failure is not None
    assert (result.failure.reason, result.failure.retryable) == ("timeout", True)


def test_a_turn_may_bring_its_own_key(server: LoopbackServer) -> None:
    """``Runtime(api_key=...)`` passes a key per turn; it overrides the configured one."""
    server.add(json_reply(fixture_json("openai_chat_text.json")))
    runtime = runtime_for(server)
    result = run(turn(runtime, "hi", model_ref="o:m", api_key="sk-turn-key-42"))
    assert result.error is None
    assert server.requests[0].headers["authorization"] == "Bearer sk-turn-key-42"


# --- what the seed names reaches the provider, or is refused -------------------------------


def test_web_search_and_the_session_id_reach_the_request(server: LoopbackServer) -> None:
    server.add(json_reply(fixture_json("openai_chat_text.json")))
    result = run(
        turn(
            runtime_for(server),
            "News?",
            model_ref="openai:gpt-4o-search-preview",
            web_search=True,
            session_id="op-0123abcd",
        )
    )
    assert result.error is None
    body = server.requests[0].json
    assert_valid_request(CompletionCreateParamsNonStreaming, body)
    assert body["web_search_options"] == {}
    assert body["prompt_cache_key"] == "op-0123abcd"


@pytest.mark.parametrize(
    ("block", "words"),
    [
        ({"type": "video", "data": "AAAA", "mime_type": "video/mp4"}, "a video block"),
        ({"type": "audio", "data": "AAAA", "mime_type": "audio/ogg"}, "'audio/ogg' audio"),
    ],
)
def test_media_the_wire_format_cannot_carry_is_refused_before_any_request(
    server: LoopbackServer, block: dict[str, Any], words: str
) -> None:
    prompt = [Message("user", [{"type": "text", "text": "Listen"}, block])]
    result = run(turn(runtime_for(server), prompt, model_ref="openai:gpt-4o"))
    assert result.error is not None and result.error.startswith(f"openai: {words} cannot be sent")
    assert result.failure is not None
    assert (result.failure.reason, result.failure.retryable) == ("invalid_request", False)
    assert server.requests == []


# --- files and images -------------------------------------------------------------------------

PDF_B64 = "JVBERi0xLjQ="


def test_a_pdf_is_a_file_part_and_a_tool_image_follows_the_tool_messages(
    server: LoopbackServer,
) -> None:
    server.add(json_reply(fixture_json("openai_chat_text.json")))
    pdf = {"type": "file", "data": PDF_B64, "mime_type": "application/pdf", "filename": "q3.pdf"}
    prompt = [
        Message("user", [{"type": "text", "text": "Summarise"}, pdf]),
        Message("assistant", "", tool_calls=[ToolCall("call_1", "snap", "{}")]),
        Message(
            "tool",
            [
                {"type": "text", "text": "the screen"},
                {"type": "image", "data": "iVBORw0KGgo=", "mime_type": "image/png"},
            ],
            tool_call_id="call_1",
            name="snap",
        ),
    ]
    result = run(turn(runtime_for(server), prompt, model_ref="openai:gpt-4o"))
    assert result.error is None
    body = server.requests[0].json
    assert_valid_request(CompletionCreateParamsNonStreaming, body)
    user, _, tool, shown = body["messages"]
    assert user["content"][1] == {
        "type": "file",
        "file": {"filename": "q3.pdf", "file_data": f"data:application/pdf;base64,{PDF_B64}"},
    }
    # A tool message takes text only: the image follows it, as a user message.
    assert tool == {"role": "tool", "tool_call_id": "call_1", "content": "the screen"}
    assert shown == {
        "role": "user",
        "content": [
            {"type": "text", "text": "What tool 'snap' returned (call call_1):"},
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}},
        ],
    }


@pytest.mark.parametrize(
    ("block", "words"),
    [
        ({"type": "file", "data": "aGk=", "mime_type": "text/plain"}, "a text/plain file"),
        ({"type": "image"}, "an image block without data, url or path"),
        ({"type": "hologram", "data": "AAAA"}, "a 'hologram' block"),
    ],
)
def test_files_and_blocks_it_cannot_carry_are_refused_before_any_request(
    server: LoopbackServer, block: dict[str, Any], words: str
) -> None:
    prompt = [Message("user", [{"type": "text", "text": "Read"}, block])]
    result = run(turn(runtime_for(server), prompt, model_ref="openai:gpt-4o"))
    assert result.error is not None and result.error.startswith(f"openai: {words} cannot be sent")
    assert result.failure is not None and result.failure.reason == "invalid_request"
    assert server.requests == []
