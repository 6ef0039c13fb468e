"""The offline test doubles: the `test` model, the scripted model and the fake clock."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from openprogram_yaml.providers.test import (
    FakeClock,
    Reply,
    ScriptedRuntime,
    TestRuntime,
    generate_value,
)
from openprogram_yaml.runtime import Runtime
from openprogram_yaml.runtime.validation import SchemaValidator
from openprogram_yaml.runtimes.protocol import (
    AgentRuntimeProtocol,
    Capabilities,
    Message,
    RuntimeDelta,
    ToolSpec,
    TurnFailure,
)

SCHEMAS: list[dict[str, Any]] = [
    {"type": "string", "minLength": 10, "maxLength": 12},
    {"type": "string", "format": "email"},
    {"type": "string", "pattern": "^[0-9]+$"},
    {"type": "integer", "minimum": 5, "maximum": 9, "multipleOf": 3},
    {"type": "number", "exclusiveMinimum": 1.5, "exclusiveMaximum": 2},
    {"type": "integer", "exclusiveMinimum": 0},
    {"type": "boolean"},
    {"type": "null"},
    {"type": ["null", "integer"], "minimum": 2},
    {"enum": ["b", "c"]},
    {"const": {"k": 1}},
    {"type": "array", "items": {"type": "integer"}, "minItems": 3, "uniqueItems": True},
    {"type": "array", "maxItems": 0},
    {"type": "array", "prefixItems": [{"type": "string"}, {"type": "integer"}]},
    {
        "type": "object",
        "properties": {
            "label": {"enum": ["bug", "question"]},
            "nested": {
                "type": "object",
                "properties": {"deep": {"type": "array", "items": {"$ref": "#/$defs/item"}}},
                "required": ["deep"],
            },
        },
        "required": ["label", "nested"],
        "additionalProperties": False,
        "$defs": {
            "item": {
                "type": "object",
                "properties": {"id": {"type": "integer"}},
                "required": ["id"],
            }
        },
    },
    {"anyOf": [{"type": "integer", "minimum": 3}, {"type": "string"}]},
    {"oneOf": [{"type": "object", "properties": {"a": {"const": 1}}, "required": ["a"]}]},
    {
        "allOf": [
            {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]},
            {"properties": {"b": {"type": "integer"}}, "required": ["b"]},
        ]
    },
    {
        "$defs": {"node": {"type": "object", "properties": {"next": {"$ref": "#/$defs/node"}}}},
        "$ref": "#/$defs/node",
    },
]


@pytest.mark.parametrize("schema", SCHEMAS, ids=[json.dumps(s)[:40] for s in SCHEMAS])
def test_generated_values_are_valid(schema: dict[str, Any]) -> None:
    value = generate_value(schema)
    assert SchemaValidator(schema).errors(value) == []
    assert generate_value(schema) == value  # deterministic


def test_test_runtime_is_a_runtime() -> None:
    rt = TestRuntime()
    assert isinstance(rt, AgentRuntimeProtocol)
    assert rt.supports("test") and rt.supports("test:big") and not rt.supports("openai:gpt")
    assert rt.capabilities("test").native_json_schema


def test_test_model_calls_each_tool_once_then_answers_with_the_results() -> None:
    seen: list[dict[str, Any]] = []

    def lookup(order_id: str, count: int) -> str:
        seen.append({"order_id": order_id, "count": count})
        return f"order {order_id} shipped"

    tool = {
        "spec": {
            "name": "lookup",
            "parameters": {
                "type": "object",
                "properties": {
                    "order_id": {"type": "string"},
                    "count": {"type": "integer", "minimum": 1},
                },
                "required": ["order_id", "count"],
            },
        },
        "execute": lookup,
    }
    other = {"spec": {"name": "ping"}, "execute": lambda: "pong"}
    rt = Runtime(model="test", runtimes=TestRuntime())
    answer = rt.exec("where is my order?", tools=[tool, other])
    assert seen == [{"order_id": "test", "count": 1}]
    assert "order test shipped" in answer and "pong" in answer


def test_test_model_structured_output_and_choices() -> None:
    rt = Runtime(model="test", runtimes=TestRuntime())
    schema = {
        "type": "object",
        "properties": {"n": {"type": "integer", "minimum": 4}},
        "required": ["n"],
    }
    assert rt.exec("x", response_format=schema) == {"n": 4}
    refund = {
        "type": "object",
        "properties": {"amount": {"type": "number"}},
        "required": ["amount"],
    }
    assert rt.exec("x", choices={"refund": ("Refund it", refund), "no": 0}) == {
        "decision": "refund",
        "amount": 0.0,
    }


def test_test_model_writes_a_pick_in_the_pick_format() -> None:
    from openprogram_yaml.runtime.choices import ChoiceTerminal, normalize_choices

    model = TestRuntime()
    choices = normalize_choices({"refund": ("Refund it", {"amount": float}), "no": 0})
    terminal = ChoiceTerminal(choices, model.capabilities("test"))
    reply = asyncio.run(model.run_turn("x", response_format=terminal.response_format))
    assert json.loads(reply.content) == {"call": "refund", "args": {"amount": 0.0}}


def test_test_model_honours_a_forced_tool_and_none() -> None:
    async def main() -> None:
        tools = [ToolSpec("a"), ToolSpec("b")]
        forced = await TestRuntime().run_turn(
            "x", tools=tools, tool_choice={"type": "function", "name": "b"}
        )
        assert [c.name for c in forced.tool_calls] == ["b"]
        none = await TestRuntime().run_turn("x", tools=tools, tool_choice="none")
        assert none.tool_calls == [] and none.content

    asyncio.run(main())


def test_test_model_streams() -> None:
    deltas: list[RuntimeDelta] = []

    async def main() -> None:
        result = await TestRuntime().run_turn("a fairly long question here", on_delta=deltas.append)
        assert "".join(d.content for d in deltas if d.type == "text") == result.content
        streamed = [d async for d in TestRuntime().stream_turn("q")]
        assert "".join(d.content for d in streamed) == "test reply to: q"

    asyncio.run(main())


def test_scripted_runtime_records_requests_and_replays_in_order() -> None:
    clock = FakeClock()
    model = ScriptedRuntime(
        ["one", Reply.json({"a": 1}).after(2.0), TurnFailure("rate_limit", "slow down", True, 429)],
        capabilities=Capabilities(native_json_schema=True, parallel_tool_calls=False),
        sleep=clock.sleep,
    )

    async def main() -> None:
        first = await model.run_turn([Message("user", "hi")], system_prompt="sys", tools=[])
        assert first.content == "one"
        second = await model.run_turn("again", response_format={"schema": {}})
        assert json.loads(second.content) == {"a": 1}
        third = await model.run_turn("more")
        assert third.failure is not None and third.failure.http_status == 429
        exhausted = await model.run_turn("too many")
        assert exhausted.failure is not None and not exhausted.failure.retryable

    asyncio.run(main())
    assert clock.sleeps == [2.0]
    assert model.requests[0].system_prompt == "sys"
    assert model.requests[0].last_text == "hi"
    assert model.requests[1].response_format == {"schema": {}}
    assert model.capabilities().parallel_tool_calls is False
    assert model.remaining == 0


def test_scripted_callable_items_see_the_request() -> None:
    model = ScriptedRuntime([lambda req: f"echo {req.last_text}"])
    assert Runtime(runtimes=model).exec("ping") == "echo ping"


def test_scripted_tool_calls_get_ids() -> None:
    async def main() -> None:
        result = await ScriptedRuntime([Reply.call("t", {"x": 1})]).run_turn("q")
        assert result.tool_calls[0].id and result.tool_calls[0].arguments == '{"x": 1}'
        assert result.finish_reason == "tool_calls"

    asyncio.run(main())
