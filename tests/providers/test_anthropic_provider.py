"""The ``anthropic`` runtime against a real HTTP server on 127.0.0.1.

Request bodies are checked against the official SDK's request types; recorded messages
and SSE streams must parse into the right text, tool calls, thinking and usage.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

import pytest
from anthropic.types import Message as SDKMessage
from anthropic.types import RawMessageStreamEvent
from anthropic.types.message_create_params import (
    MessageCreateParamsNonStreaming,
    MessageCreateParamsStreaming,
)
from loopback import LoopbackServer, anthropic_sse, json_reply, load_sse, sse_reply, status_reply
from providers_support import fixture_json, fixture_text
from pydantic import TypeAdapter
from sdk_contract import assert_valid_request

from openprogram_yaml.providers.anthropic import (
    AnthropicRuntime,
    accepts_temperature,
    native_schema_model,
    parse_message,
)
from openprogram_yaml.runtimes.protocol import (
    Message,
    RuntimeDelta,
    RuntimeResult,
    ToolCall,
    ToolSpec,
)

KEY = "sk-ant-test-0123456789"
WEATHER = ToolSpec(
    "get_weather",
    "Current weather for a city.",
    {"type": "object", "properties": {"location": {"type": "string"}}, "required": ["location"]},
)
SUBMIT = ToolSpec("submit", "Submit the answer.", {"type": "object", "properties": {}}, strict=True)


def runtime_for(server: LoopbackServer, **options: Any) -> AnthropicRuntime:
    options.setdefault("api_key", KEY)
    return AnthropicRuntime(base_url=server.url, **options)


def run(coro: Any) -> Any:
    return asyncio.run(coro)


async def turn(runtime: AnthropicRuntime, prompt: Any, **kwargs: Any) -> RuntimeResult:
    try:
        return await runtime.run_turn(prompt, **kwargs)
    finally:
        await runtime.aclose()


# --- request contract ---------------------------------------------------------------------


def test_a_plain_turn_sends_a_valid_request_with_the_api_headers(server: LoopbackServer) -> None:
    server.add(json_reply(fixture_json("anthropic_message_text.json")))
    result = run(
        turn(
            runtime_for(server),
            "Hello",
            system_prompt="Be kind.",
            model_ref="anthropic:claude-sonnet-4-5",
        )
    )
    assert result.error is None
    request = server.requests[0]
    assert (request.method, request.path) == ("POST", "/v1/messages")
    assert request.headers["x-api-key"] == KEY
    assert request.headers["anthropic-version"] == "2023-06-01"
    assert "authorization" not in request.headers
    body = request.json
    assert_valid_request(MessageCreateParamsNonStreaming, body)
    assert body == {
        "model": "claude-sonnet-4-5",
        "max_tokens": 8192,
        "system": "Be kind.",
        "messages": [{"role": "user", "content": "Hello"}],
    }


def test_claude_3_models_get_a_max_tokens_they_accept() -> None:
    body = AnthropicRuntime(api_key=KEY).build_body(
        "claude-3-haiku-20240307", "hi", None, {}, False
    )
    assert body["max_tokens"] == 4096


def test_a_tool_conversation_is_a_valid_request(server: LoopbackServer) -> None:
    server.add(json_reply(fixture_json("anthropic_message_tool_use.json")))
    conversation = [
        Message("system", "Use tools when useful."),
        Message(
            "user",
            [
                {
                    "type": "text",
                    "text": "Weather in Paris? See the picture.",
                    "cache_control": {"type": "ephemeral"},
                },
                {"type": "image", "data": "iVBORw0KGgo=", "mime_type": "image/png"},
                {"type": "image", "url": "https://example.com/map.png"},
            ],
        ),
        Message(
            "assistant",
            [
                {"type": "thinking", "thinking": "Need weather.", "signature": "sig123"},
                {"type": "text", "text": "Checking."},
            ],
            tool_calls=[
                ToolCall("toolu_1", "get_weather", '{"location": "Paris"}'),
                ToolCall("toolu_2", "get_weather", '{"location": "Lyon"}'),
            ],
        ),
        Message("tool", "18C", tool_call_id="toolu_1"),
        Message("tool", "service down", tool_call_id="toolu_2", is_error=True),
        Message("user", "And tomorrow?"),
    ]
    result = run(
        turn(
            runtime_for(server),
            conversation,
            system_prompt="You are a weather bot.",
            model_ref="anthropic:claude-opus-4-1",
            tools=[WEATHER, SUBMIT],
            tool_choice="required",
            parallel_tool_calls=False,
            max_tokens=1000,
            temperature=0.3,
        )
    )
    assert result.error is None
    body = server.requests[0].json
    # SDK 2.x dropped sampling parameters with API version 2026-10-21; under the version we
    # send (2023-06-01) models before Opus 4.7 / generation 5 still take a temperature.
    assert body.pop("temperature") == 0.3
    assert_valid_request(MessageCreateParamsNonStreaming, body)
    assert body["system"] == "You are a weather bot.\n\nUse tools when useful."
    user, assistant, results = body["messages"]
    assert user["content"][0]["cache_control"] == {"type": "ephemeral"}
    assert user["content"][1]["source"] == {
        "type": "base64",
        "media_type": "image/png",
        "data": "iVBORw0KGgo=",
    }
    assert user["content"][2]["source"] == {"type": "url", "url": "https://example.com/map.png"}
    assert [b["type"] for b in assistant["content"]] == ["thinking", "text", "tool_use", "tool_use"]
    assert assistant["content"][2]["input"] == {"location": "Paris"}
    # Tool results and the next user text merge into one user turn, results first.
    assert results["role"] == "user"
    assert results["content"][0] == {
        "type": "tool_result",
        "tool_use_id": "toolu_1",
        "content": "18C",
    }
    assert results["content"][1]["is_error"] is True
    assert results["content"][2] == {"type": "text", "text": "And tomorrow?"}
    assert body["tools"][0] == {
        "name": "get_weather",
        "input_schema": WEATHER.parameters,
        "description": "Current weather for a city.",
    }
    assert body["tools"][1]["strict"] is True
    assert body["tool_choice"] == {"type": "any", "disable_parallel_tool_use": True}
    assert body["max_tokens"] == 1000


@pytest.mark.parametrize(
    ("choice", "parallel", "expected"),
    [
        ("auto", None, {"type": "auto"}),
        ("none", None, {"type": "none"}),
        (
            {"type": "function", "name": "get_weather"},
            None,
            {"type": "tool", "name": "get_weather"},
        ),
        (None, False, {"type": "auto", "disable_parallel_tool_use": True}),
        (None, None, None),
    ],
)
def test_tool_choice_mapping(choice: Any, parallel: Any, expected: Any) -> None:
    options: dict[str, Any] = {"tools": [WEATHER]}
    if choice is not None:
        options["tool_choice"] = choice
    if parallel is not None:
        options["parallel_tool_calls"] = parallel
    body = AnthropicRuntime(api_key=KEY).build_body("claude-sonnet-4-5", "hi", None, options, False)
    assert_valid_request(MessageCreateParamsNonStreaming, body)
    assert body.get("tool_choice") == expected


def test_structured_output_uses_output_config_on_supporting_models() -> None:
    runtime = AnthropicRuntime(api_key=KEY)
    assert runtime.capabilities("anthropic:claude-sonnet-4-5-20250929").native_json_schema
    assert runtime.capabilities("anthropic:claude-opus-4-6").native_json_schema
    assert runtime.capabilities("anthropic:claude-haiku-4-5").native_json_schema
    assert not runtime.capabilities("anthropic:claude-sonnet-4-20250514").native_json_schema
    assert not runtime.capabilities("anthropic:claude-opus-4-1").native_json_schema
    assert not runtime.capabilities("anthropic:claude-3-5-sonnet-20241022").native_json_schema
    # Without native support the engine forces its hidden submit tool.
    assert runtime.capabilities("anthropic:claude-3-5-sonnet-latest").forced_tool_choice
    assert AnthropicRuntime(native_json_schema=True).capabilities("gw:any").native_json_schema

    schema = {
        "type": "object",
        "properties": {"a": {"type": "integer"}},
        "required": ["a"],
        "additionalProperties": False,
    }
    body = runtime.build_body(
        "claude-sonnet-4-5",
        "hi",
        None,
        {"response_format": {"name": "out", "schema": schema, "strict": True}},
        False,
    )
    assert_valid_request(MessageCreateParamsNonStreaming, body)
    assert body["output_config"] == {"format": {"type": "json_schema", "schema": schema}}


def test_a_server_that_ignores_the_forced_submit_tool_is_named_in_the_error(
    server: LoopbackServer,
) -> None:
    # An Anthropic-compatible server answering in text although tool_choice forced a tool:
    # structured output on a model without native support cannot work there.
    from openprogram_yaml import LLMError, Runtime

    server.add(*[json_reply(fixture_json("anthropic_message_text.json"))] * 3)
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}

    async def go() -> LLMError:
        anthropic = runtime_for(server)
        rt = Runtime(model="anthropic:claude-3-5-haiku-latest", runtimes=anthropic)
        try:
            await rt.async_exec("hi", response_format=schema)
        except LLMError as exc:
            return exc
        finally:
            await anthropic.aclose()
        raise AssertionError("the run did not fail")

    message = str(run(go()))
    assert "ignores tool_choice" in message and "submit_result" in message
    assert "native_json_schema: true" in message and "fallback: prompt" in message
    assert len(server.requests) == 1  # failed at once, not repaired in vain
    assert server.requests[0].json["tool_choice"]["type"] == "tool"


def test_temperature_is_left_out_for_models_that_refuse_it() -> None:
    runtime = AnthropicRuntime(api_key=KEY)
    for model, sent in [
        ("claude-sonnet-4-6", True),
        ("claude-3-5-haiku-latest", True),
        ("claude-opus-4-7", False),
        ("claude-sonnet-5-5", False),
    ]:
        body = runtime.build_body(model, "hi", None, {"temperature": 0.2}, False)
        assert ("temperature" in body) is sent, model
        assert accepts_temperature(model) is sent


def test_native_schema_model_versions() -> None:
    assert native_schema_model("claude-opus-5")
    assert native_schema_model("claude-sonnet-4-6")
    assert not native_schema_model("claude-sonnet-4")
    assert not native_schema_model("gpt-4o")
    assert not native_schema_model(None)


def test_thinking_levels_become_a_budget_below_max_tokens() -> None:
    body = AnthropicRuntime(api_key=KEY).build_body(
        "claude-sonnet-4-5",
        "hi",
        None,
        {"thinking_level": "medium", "max_tokens": 1024, "temperature": 0.5},
        True,
    )
    assert_valid_request(MessageCreateParamsStreaming, body)
    assert body["thinking"] == {"type": "enabled", "budget_tokens": 8192}
    assert body["max_tokens"] > 8192
    assert "temperature" not in body


def test_streaming_requests_are_valid(server: LoopbackServer) -> None:
    server.add(sse_reply(load_sse(fixture_text("anthropic_stream_text.sse"))))
    run(
        turn(
            runtime_for(server),
            "hi",
            model_ref="anthropic:claude-sonnet-4-5",
            tools=[WEATHER],
            on_delta=lambda d: None,
        )
    )
    body = server.requests[0].json
    assert_valid_request(MessageCreateParamsStreaming, body)
    assert body["stream"] is True


def test_a_base_url_ending_in_v1_is_not_doubled(server: LoopbackServer) -> None:
    server.add(json_reply(fixture_json("anthropic_message_text.json")))
    run(
        turn(
            AnthropicRuntime(base_url=server.url + "/v1", api_key=KEY),
            "hi",
            model_ref="anthropic:claude-x",
        )
    )
    assert server.requests[0].path == "/v1/messages"


# --- recorded responses -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "name",
    [
        "anthropic_message_text.json",
        "anthropic_message_tool_use.json",
        "anthropic_message_refusal.json",
    ],
)
def test_fixtures_are_real_messages(name: str) -> None:
    SDKMessage.model_validate(fixture_json(name))


@pytest.mark.parametrize(
    "name",
    ["anthropic_stream_text.sse", "anthropic_stream_tool_use.sse", "anthropic_stream_error.sse"],
)
def test_stream_fixtures_are_real_events(name: str) -> None:
    adapter: TypeAdapter[Any] = TypeAdapter(RawMessageStreamEvent)
    for event in load_sse(fixture_text(name)):
        event_line, data_line = event.strip().split("\n")
        data = json.loads(data_line.removeprefix("data: "))
        assert event_line == f"event: {data['type']}"
        if data["type"] not in ("ping", "error"):
            adapter.validate_python(data)


def test_a_text_message_parses_with_cache_usage() -> None:
    result = parse_message(fixture_json("anthropic_message_text.json"), AnthropicRuntime())
    assert isinstance(result, RuntimeResult)
    assert result.content == "Hi! My name is Claude."
    assert result.finish_reason == "stop"
    assert result.usage is not None
    # input_tokens counts every input token; the cached part is broken out.
    assert (result.usage.input_tokens, result.usage.cache_read, result.usage.output_tokens) == (
        3895,
        1800,
        503,
    )


def test_a_tool_use_message_parses() -> None:
    result = parse_message(fixture_json("anthropic_message_tool_use.json"), AnthropicRuntime())
    assert isinstance(result, RuntimeResult)
    assert result.finish_reason == "tool_calls"
    assert result.content == "I'll check the current weather in San Francisco for you."
    assert result.thinking.startswith("The user wants the weather")
    (call,) = result.tool_calls
    assert (call.id, call.name) == ("toolu_01A09q90qw90lq917835lq9", "get_weather")
    assert json.loads(call.arguments) == {"location": "San Francisco, CA", "unit": "celsius"}
    assert result.usage is not None and result.usage.cache_create == 100
    assert result.metadata["thinking_blocks"][0]["signature"].startswith("EqQB")


def test_a_refusal_parses_with_its_explanation() -> None:
    result = parse_message(fixture_json("anthropic_message_refusal.json"), AnthropicRuntime())
    assert isinstance(result, RuntimeResult)
    assert result.finish_reason == "refusal"
    assert result.refusal == "This request could enable malware development."


def test_a_streamed_text_turn_assembles(server: LoopbackServer) -> None:
    server.add(sse_reply(load_sse(fixture_text("anthropic_stream_text.sse"))))
    deltas: list[RuntimeDelta] = []
    result = run(
        turn(
            runtime_for(server),
            "hi",
            model_ref="anthropic:claude-sonnet-4-5",
            on_delta=deltas.append,
        )
    )
    assert result.error is None
    assert [(d.type, d.content) for d in deltas] == [("text", "Hello"), ("text", "!")]
    assert result.content == "Hello!"
    assert result.finish_reason == "stop"
    assert result.usage is not None and (result.usage.input_tokens, result.usage.output_tokens) == (
        25,
        15,
    )
    assert result.metadata["response_id"] == "msg_1nZdL29xx5MUA1yADyHTEsnR8uuvGzszyY"


def test_a_streamed_tool_use_turn_with_thinking_assembles(server: LoopbackServer) -> None:
    server.add(sse_reply(load_sse(fixture_text("anthropic_stream_tool_use.sse"))))
    deltas: list[RuntimeDelta] = []
    result = run(
        turn(
            runtime_for(server),
            "weather?",
            model_ref="anthropic:claude-sonnet-4-5",
            tools=[WEATHER],
            on_delta=deltas.append,
        )
    )
    assert result.error is None
    assert result.finish_reason == "tool_calls"
    assert result.thinking == "I need the weather tool for San Francisco."
    assert result.content == "Okay, let's check the weather for San Francisco, CA:"
    (call,) = result.tool_calls
    assert (call.id, call.name, json.loads(call.arguments)) == (
        "toolu_01T1x1fJ34qAmk2tNTrN7Up6",
        "get_weather",
        {"location": "San Francisco, CA"},
    )
    assert [d.type for d in deltas] == [
        "thinking",
        "thinking",
        "text",
        "tool_call",
        "tool_call",
        "tool_call",
    ]
    assert deltas[3].metadata == {
        "index": 0,
        "id": "toolu_01T1x1fJ34qAmk2tNTrN7Up6",
        "name": "get_weather",
    }
    assert result.metadata["thinking_blocks"][0]["signature"].startswith("EqQB")
    assert result.usage is not None
    assert (result.usage.input_tokens, result.usage.cache_read, result.usage.output_tokens) == (
        600,
        128,
        89,
    )


def test_an_error_event_mid_stream_is_a_retryable_failure(server: LoopbackServer) -> None:
    server.add(sse_reply(load_sse(fixture_text("anthropic_stream_error.sse"))))
    deltas: list[RuntimeDelta] = []
    result = run(
        turn(
            runtime_for(server),
            "hi",
            model_ref="anthropic:claude-sonnet-4-5",
            on_delta=deltas.append,
        )
    )
    assert [d.content for d in deltas] == ["Partial"]
    assert result.failure is not None
    assert (result.failure.reason, result.failure.retryable) == ("server_error", True)
    assert "Overloaded" in result.failure.message


# --- end to end -----------------------------------------------------------------------------


def _text_stream(text: str) -> list[str]:
    return anthropic_sse(
        [
            {
                "type": "message_start",
                "message": {
                    "id": "msg_1",
                    "type": "message",
                    "role": "assistant",
                    "content": [],
                    "model": "claude-sonnet-4-5",
                    "stop_reason": None,
                    "stop_sequence": None,
                    "usage": {"input_tokens": 5, "output_tokens": 1},
                },
            },
            {
                "type": "content_block_start",
                "index": 0,
                "content_block": {"type": "text", "text": ""},
            },
            {
                "type": "content_block_delta",
                "index": 0,
                "delta": {"type": "text_delta", "text": text},
            },
            {"type": "content_block_stop", "index": 0},
            {
                "type": "message_delta",
                "delta": {"stop_reason": "end_turn"},
                "usage": {"output_tokens": 3},
            },
            {"type": "message_stop"},
        ]
    )


def test_stream_turn_yields_deltas(server: LoopbackServer) -> None:
    server.add(sse_reply(_text_stream("Bonjour")))

    async def collect() -> list[RuntimeDelta]:
        runtime = runtime_for(server)
        try:
            return [
                d async for d in runtime.stream_turn("hi", model_ref="anthropic:claude-sonnet-4-5")
            ]
        finally:
            await runtime.aclose()

    assert [(d.type, d.content) for d in run(collect())] == [("text", "Bonjour")]


def test_429_with_retry_after_then_streamed_success_through_runtime_exec(
    server: LoopbackServer,
) -> None:
    from openprogram_yaml.runtime.runtime import Runtime
    from openprogram_yaml.runtimes.rules import ProviderConfig
    from openprogram_yaml.runtimes.select import RuntimeSelector

    server.add(
        status_reply(
            429,
            {
                "type": "error",
                "error": {
                    "type": "rate_limit_error",
                    "message": "Number of request tokens has exceeded your per-minute rate limit",
                },
            },
            retry_after="4",
        ),
        sse_reply(_text_stream("Hello from Claude")),
    )
    slept: list[float] = []
    events: list[dict[str, Any]] = []

    async def fake_sleep(seconds: float) -> None:
        slept.append(seconds)

    selector = RuntimeSelector(
        providers={"anthropic": ProviderConfig("anthropic", base_url=server.url, api_key=KEY)}
    )
    with Runtime(
        model="anthropic:claude-sonnet-4-5",
        runtimes=selector,
        sleep=fake_sleep,
        on_stream=events.append,
    ) as rt:
        answer = rt.exec("Say hello")
    asyncio.run(selector.aclose())
    assert answer == "Hello from Claude"
    assert len(slept) == 1 and slept[0] >= 4.0
    assert server.requests[1].json["stream"] is True
    assert any("Hello from Claude" in json.dumps(e) for e in events)


def test_an_overloaded_529_is_retryable(server: LoopbackServer) -> None:
    server.add(
        status_reply(
            529, {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
        )
    )
    result = run(turn(runtime_for(server), "hi", model_ref="anthropic:claude-sonnet-4-5"))
    assert result.failure is not None
    assert (result.failure.reason, result.failure.retryable, result.failure.http_status) == (
        "server_error",
        True,
        529,
    )


def test_a_missing_key_fails_before_sending() -> None:
    result = run(turn(AnthropicRuntime(), "hi", model_ref="anthropic:claude-sonnet-4-5"))
    assert result.failure is not None
    assert (result.failure.reason, result.failure.retryable) == ("auth", False)
    assert "ANTHROPIC_API_KEY" in result.failure.message


def test_secrets_never_leak(server: LoopbackServer, caplog: pytest.LogCaptureFixture) -> None:
    secret = "sk-ant-api03-SECRET-0000111122223333"
    server.add(
        status_reply(
            401,
            {
                "type": "error",
                "error": {"type": "authentication_error", "message": f"invalid x-api-key {secret}"},
            },
        )
    )
    caplog.set_level(logging.DEBUG)
    runtime = AnthropicRuntime(base_url=server.url, api_key=secret)
    result = run(turn(runtime, "hi", model_ref="anthropic:claude-sonnet-4-5"))
    assert result.failure is not None and result.failure.reason == "auth"
    seen = " ".join([repr(runtime), repr(result), json.dumps(result.metadata), caplog.text])
    assert secret not in seen
    assert server.requests[0].headers["x-api-key"] == secret


def test_thinking_blocks_go_back_with_tool_results_through_runtime_exec(
    server: LoopbackServer,
) -> None:
    """With extended thinking and tools, the signed thinking block of the turn that called a
    tool must be sent back, first and unchanged, with the tool result."""
    from openprogram_yaml.runtime.runtime import Runtime
    from openprogram_yaml.runtimes.rules import ProviderConfig
    from openprogram_yaml.runtimes.select import RuntimeSelector

    thinking = {"type": "thinking", "thinking": "Need the weather.", "signature": "sig-abc123"}
    server.add(
        json_reply(
            {
                "id": "msg_1", "type": "message", "role": "assistant",
                "model": "claude-sonnet-4-5", "stop_reason": "tool_use", "stop_sequence": None,
                "content": [
                    thinking,
                    {"type": "tool_use", "id": "toolu_1", "name": "get_weather",
                     "input": {"location": "Paris"}},
                ],
                "usage": {"input_tokens": 20, "output_tokens": 9},
            }
        ),
        json_reply(
            {
                "id": "msg_2", "type": "message", "role": "assistant",
                "model": "claude-sonnet-4-5", "stop_reason": "end_turn", "stop_sequence": None,
                "content": [{"type": "text", "text": "Sunny in Paris."}],
                "usage": {"input_tokens": 40, "output_tokens": 5},
            }
        ),
    )  # fmt: skip
    weather = {
        "spec": {"name": WEATHER.name, "description": WEATHER.description,
                 "parameters": WEATHER.parameters},
        "execute": lambda location: f"sunny in {location}",
    }  # fmt: skip
    selector = RuntimeSelector(
        providers={"anthropic": ProviderConfig("anthropic", base_url=server.url, api_key=KEY)}
    )
    with Runtime(model="anthropic:claude-sonnet-4-5", runtimes=selector, tools=[weather]) as rt:
        assert rt.exec("Weather in Paris?") == "Sunny in Paris."
    asyncio.run(selector.aclose())
    follow_up = server.requests[1].json
    assistant = follow_up["messages"][1]
    assert assistant["role"] == "assistant"
    assert assistant["content"][0] == thinking
    assert assistant["content"][1]["type"] == "tool_use"
    assert follow_up["messages"][2]["content"][0]["type"] == "tool_result"
    assert_valid_request(MessageCreateParamsNonStreaming, follow_up)


# --- what the seed names reaches the provider, or is refused -------------------------------


def test_web_search_sends_the_server_tool_and_its_reply_reads_as_text(
    server: LoopbackServer,
) -> None:
    # A searched reply holds server_tool_use and web_search_tool_result blocks around the text.
    server.add(
        json_reply(
            {
                "id": "msg_1",
                "type": "message",
                "role": "assistant",
                "model": "claude-sonnet-4-5",
                "content": [
                    {
                        "type": "server_tool_use",
                        "id": "srvtoolu_1",
                        "name": "web_search",
                        "input": {"query": "weather Paris"},
                    },
                    {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_1", "content": []},
                    {"type": "text", "text": "Sunny in Paris."},
                ],
                "stop_reason": "end_turn",
                "usage": {"input_tokens": 10, "output_tokens": 5},
            }
        )
    )
    result = run(
        turn(
            runtime_for(server),
            "Weather in Paris?",
            model_ref="anthropic:claude-sonnet-4-5",
            web_search=True,
        )
    )
    assert (result.error, result.content, result.tool_calls) == (None, "Sunny in Paris.", [])
    body = server.requests[0].json
    assert_valid_request(MessageCreateParamsNonStreaming, body)
    assert body["tools"] == [{"type": "web_search_20250305", "name": "web_search"}]


@pytest.mark.parametrize("kind", ["audio", "video"])
def test_audio_and_video_are_refused_before_any_request(server: LoopbackServer, kind: str) -> None:
    block = {"type": kind, "data": "AAAA", "mime_type": f"{kind}/mp4"}
    prompt = [Message("user", [{"type": "text", "text": "Look"}, block])]
    result = run(turn(runtime_for(server), prompt, model_ref="anthropic:claude-sonnet-4-5"))
    assert result.error is not None and f"{kind} block cannot be sent" in result.error
    assert result.failure is not None and result.failure.reason == "invalid_request"
    assert server.requests == []


# --- files and images -------------------------------------------------------------------------

PDF_B64 = "JVBERi0xLjQ="


def test_a_pdf_is_a_document_and_a_tool_result_carries_its_image(server: LoopbackServer) -> None:
    server.add(json_reply(fixture_json("anthropic_message_text.json")))
    pdf = {"type": "file", "data": PDF_B64, "mime_type": "application/pdf", "filename": "q3.pdf"}
    prompt = [
        Message("user", [{"type": "text", "text": "Summarise"}, pdf]),
        Message("assistant", "", tool_calls=[ToolCall("toolu_1", "snap", "{}")]),
        Message(
            "tool",
            [
                {"type": "text", "text": "the screen"},
                {"type": "image", "data": "iVBORw0KGgo=", "mime_type": "image/png"},
                {"type": "audio", "data": "UklGRg==", "mime_type": "audio/wav"},
            ],
            tool_call_id="toolu_1",
        ),
    ]
    result = run(turn(runtime_for(server), prompt, model_ref="anthropic:claude-sonnet-4-5"))
    assert result.error is None
    body = server.requests[0].json
    assert_valid_request(MessageCreateParamsNonStreaming, body)
    user, _, results = body["messages"]
    assert user["content"][1] == {
        "type": "document",
        "source": {"type": "base64", "media_type": "application/pdf", "data": PDF_B64},
        "title": "q3.pdf",
    }
    content = results["content"][0]["content"]
    assert content[:2] == [
        {"type": "text", "text": "the screen"},
        {
            "type": "image",
            "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="},
        },
    ]
    # What the API cannot take from a tool is named to the model, not dropped.
    assert content[2]["type"] == "text"
    assert content[2]["text"].startswith("[not shown: an audio block cannot be sent")


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
    result = run(turn(runtime_for(server), prompt, model_ref="anthropic:claude-sonnet-4-5"))
    assert result.error is not None and f"{words} cannot be sent" in result.error
    assert result.failure is not None and result.failure.reason == "invalid_request"
    assert server.requests == []
