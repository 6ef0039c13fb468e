"""Structured output: envelope, modes, strict parsing, validation, repair and its budget."""

from __future__ import annotations

from typing import Any

import pytest

from openprogram_yaml.errors import (
    LLMError,
    StructuredOutputGenerationError,
    StructuredOutputSchemaError,
    StructuredOutputUnsupportedError,
    StructuredOutputValidationError,
)
from openprogram_yaml.providers.test import Reply
from openprogram_yaml.runtime import normalize_response_format, parse_json_strict
from openprogram_yaml.runtimes.protocol import Capabilities

SCHEMA = {
    "type": "object",
    "properties": {"label": {"enum": ["bug", "question"]}, "score": {"type": "integer"}},
    "required": ["label", "score"],
    "additionalProperties": False,
}
NATIVE = Capabilities(native_json_schema=True)
TOOLS_ONLY = Capabilities(native_json_schema=False, tools=True, forced_tool_choice=True)
NOTHING = Capabilities(native_json_schema=False, tools=False, forced_tool_choice=False)
GOOD = {"label": "bug", "score": 3}


def test_native_mode_sends_the_schema_and_returns_the_value(make: Any) -> None:
    rt, model = make([Reply.json(GOOD)], caps=NATIVE)
    assert rt.exec("label it", response_format=SCHEMA) == GOOD
    sent = model.requests[0].response_format
    assert sent is not None
    assert sent["schema"] == SCHEMA
    assert sent["name"] == "response"
    assert "tools" not in model.requests[0].kwargs


def test_envelope_fields_are_used(make: Any) -> None:
    rt, model = make([Reply.json(GOOD)], caps=NATIVE)
    envelope = {"schema": SCHEMA, "name": "label", "description": "A label", "strict": False}
    assert rt.exec("x", response_format=envelope) == GOOD
    assert model.requests[0].response_format == {
        "name": "label",
        "schema": SCHEMA,
        "strict": False,
        "description": "A label",
    }


@pytest.mark.parametrize(
    "bad",
    [
        {"schema": SCHEMA, "fallback": "sometimes"},
        {"schema": SCHEMA, "max_validation_retries": 3},
        {"schema": SCHEMA, "name": "has space"},
        {"type": "objekt"},
        "not a schema",
    ],
)
def test_invalid_schema_or_envelope_is_rejected_before_any_request(make: Any, bad: Any) -> None:
    rt, model = make(["never"], caps=NATIVE)
    with pytest.raises(StructuredOutputSchemaError) as info:
        rt.exec("x", response_format=bad)
    assert info.value.code == "invalid_schema"
    assert info.value.issues
    assert model.requests == []


@pytest.mark.parametrize(
    "text",
    [
        '```json\n{"label": "bug", "score": 3}\n```',
        '{"label": "bug", "score": 3} thanks!',
        '{"label": "bug", "score": NaN}',
        '{"label": "bug", "label": "question", "score": 3}',
        "",
    ],
)
def test_strict_parsing_rejects_loose_json(text: str) -> None:
    with pytest.raises(StructuredOutputValidationError) as info:
        parse_json_strict(text)
    assert info.value.code == "invalid_json"


def test_a_repair_succeeds_on_the_second_reply(make: Any) -> None:
    events: list[dict[str, Any]] = []
    rt, model = make(
        [Reply.json({"label": "feature", "score": 3}), Reply.json(GOOD)],
        caps=NATIVE,
        on_stream=events.append,
    )
    assert rt.exec("x", response_format=SCHEMA) == GOOD
    assert len(model.requests) == 2
    repair = model.requests[1].messages
    assert repair[-2].role == "assistant"
    assert repair[-1].role == "user"
    assert "$.label" in repair[-1].text()  # the issue is fed back
    retries = [e for e in events if e["type"] == "structured_output_retry"]
    assert retries and retries[0]["code"] == "validation_failed"


def test_invalid_json_is_repaired(make: Any) -> None:
    rt, model = make([Reply.text("Sure! here it is"), Reply.json(GOOD)], caps=NATIVE)
    assert rt.exec("x", response_format=SCHEMA) == GOOD
    assert "not valid JSON" in model.requests[1].messages[-1].text() or "Expecting" in (
        model.requests[1].messages[-1].text()
    )


def test_validation_retries_are_bounded(make: Any) -> None:
    bad = Reply.json({"label": "bug"})
    rt, model = make([bad, bad, bad, bad], caps=NATIVE)
    with pytest.raises(StructuredOutputValidationError) as info:
        rt.exec("x", response_format=SCHEMA)
    assert len(model.requests) == 3  # the first reply and two repairs (the default)
    assert info.value.code == "validation_failed"
    assert any("score" in issue for issue in info.value.issues)


def test_zero_validation_retries(make: Any) -> None:
    rt, model = make([Reply.json({}), Reply.json(GOOD)], caps=NATIVE)
    with pytest.raises(StructuredOutputValidationError):
        rt.exec("x", response_format={"schema": SCHEMA, "max_validation_retries": 0})
    assert len(model.requests) == 1


def test_repairs_exhausted_when_the_shared_budget_is_spent(make: Any) -> None:
    # max_retries=2 leaves one recovery for the whole exec: one repair, then the error,
    # although max_validation_retries alone would allow two.
    bad = Reply.json({"label": "bug"})
    rt, model = make([bad, bad, Reply.json(GOOD)], caps=NATIVE, max_retries=2)
    with pytest.raises(StructuredOutputValidationError):
        rt.exec("x", response_format=SCHEMA)
    assert len(model.requests) == 2


def test_a_repair_spends_what_transport_retries_could_use(make: Any) -> None:
    # max_retries=2: the repair takes the only recovery, so the repair turn's failure is final.
    rt, model = make([Reply.json({}), Reply.fail(), Reply.json(GOOD)], caps=NATIVE, max_retries=2)
    with pytest.raises(LLMError):
        rt.exec("x", response_format=SCHEMA)
    assert len(model.requests) == 2


def test_recovered_transport_failures_do_not_use_up_repairs(make: Any) -> None:
    # Two recoveries: without the refund, fail + repair + fail would need three.
    script = [Reply.fail(), Reply.json({}), Reply.fail(), Reply.json(GOOD)]
    rt, model = make(script, caps=NATIVE, max_retries=3)
    assert rt.exec("x", response_format=SCHEMA) == GOOD
    assert len(model.requests) == 4


def test_unsupported_is_raised_before_any_request(make: Any) -> None:
    rt, model = make(["never"], caps=NOTHING)
    with pytest.raises(StructuredOutputUnsupportedError) as info:
        rt.exec("x", response_format=SCHEMA)
    assert info.value.code == "unsupported"
    assert model.requests == []


def test_fallback_none_without_native_is_unsupported(make: Any) -> None:
    rt, model = make(["never"], caps=TOOLS_ONLY)
    with pytest.raises(StructuredOutputUnsupportedError):
        rt.exec("x", response_format={"schema": SCHEMA, "fallback": "none"})
    assert model.requests == []


def test_hidden_submit_tool_is_forced_and_unwrapped(make: Any) -> None:
    rt, model = make([Reply.call("submit_result", GOOD)], caps=TOOLS_ONLY)
    assert rt.exec("x", response_format=SCHEMA) == GOOD
    req = model.requests[0]
    assert req.tool_names == ["submit_result"]
    assert req.tool_choice == {"type": "function", "name": "submit_result"}
    assert req.tools[0].parameters == SCHEMA
    assert "response_format" not in req.kwargs


def test_non_object_schema_is_wrapped_for_the_submit_tool(make: Any) -> None:
    schema = {"type": "array", "items": {"type": "integer"}}
    rt, model = make([Reply.call("submit_result", {"value": [1, 2]})], caps=TOOLS_ONLY)
    assert rt.exec("x", response_format=schema) == [1, 2]
    assert model.requests[0].tools[0].parameters["properties"]["value"] == schema


def test_submit_tool_repair_reports_the_issues_as_a_tool_error(make: Any) -> None:
    rt, model = make(
        [Reply.call("submit_result", {"label": "bug"}), Reply.call("submit_result", GOOD)],
        caps=TOOLS_ONLY,
    )
    assert rt.exec("x", response_format=SCHEMA) == GOOD
    reply = model.requests[1].messages[-1]
    assert reply.role == "tool" and reply.is_error
    assert "score" in reply.text()


def test_missing_submission(make: Any) -> None:
    rt, _ = make(["plain text", "again text", "and again"], caps=TOOLS_ONLY)
    with pytest.raises(StructuredOutputValidationError) as info:
        rt.exec("x", response_format=SCHEMA)
    assert info.value.code == "missing_submission"


def test_mixed_submission(make: Any) -> None:
    tool = {"spec": {"name": "lookup"}, "execute": lambda: "data"}
    mixed = Reply.calls(("lookup", {}, None), ("submit_result", GOOD, None))
    rt, _ = make([mixed, mixed, mixed], caps=TOOLS_ONLY)
    with pytest.raises(StructuredOutputValidationError) as info:
        rt.exec("x", response_format=SCHEMA, tools=[tool])
    assert info.value.code == "mixed_submission"


def test_submit_tool_after_user_tools(make: Any) -> None:
    ran: list[str] = []
    tool = {"spec": {"name": "lookup"}, "execute": lambda: ran.append("x") or "data"}
    rt, model = make([Reply.call("lookup"), Reply.call("submit_result", GOOD)], caps=TOOLS_ONLY)
    assert rt.exec("x", response_format=SCHEMA, tools=[tool]) == GOOD
    assert ran == ["x"]
    assert "tool_choice" not in model.requests[0].kwargs  # not forced while tools are in play
    assert set(model.requests[0].tool_names) == {"lookup", "submit_result"}


def test_prompt_fallback_instructs_the_model(make: Any) -> None:
    rt, model = make([Reply.json(GOOD)], caps=NOTHING)
    assert rt.exec("x", response_format={"schema": SCHEMA, "fallback": "prompt"}) == GOOD
    system = model.requests[0].system_prompt or ""
    assert "JSON Schema" in system and '"score"' in system


def test_refusal_raises_a_generation_error(make: Any) -> None:
    rt, model = make([Reply.refuse("no"), Reply.json(GOOD)], caps=NATIVE)
    with pytest.raises(StructuredOutputGenerationError) as info:
        rt.exec("x", response_format=SCHEMA)
    assert info.value.code == "refusal"
    assert len(model.requests) == 1


def test_cut_off_reply_is_regenerated_then_incomplete(make: Any) -> None:
    rt, _ = make([Reply.cut('{"label": "bu'), Reply.json(GOOD)], caps=NATIVE)
    assert rt.exec("x", response_format=SCHEMA) == GOOD
    rt2, _ = make([Reply.cut("{"), Reply.cut("{"), Reply.cut("{")], caps=NATIVE)
    with pytest.raises(StructuredOutputGenerationError) as info:
        rt2.exec("x", response_format=SCHEMA)
    assert info.value.code == "incomplete"


def test_issues_are_bounded(make: Any) -> None:
    schema = {
        "type": "object",
        "properties": {f"p{i}": {"type": "integer"} for i in range(40)},
        "required": [f"p{i}" for i in range(40)],
    }
    rt, _ = make([Reply.json({})], caps=NATIVE)
    with pytest.raises(StructuredOutputValidationError) as info:
        rt.exec("x", response_format={"schema": schema, "max_validation_retries": 0})
    assert 0 < len(info.value.issues) <= 20


def test_local_refs_validate() -> None:
    schema = {
        "$defs": {"n": {"type": "integer", "minimum": 1}},
        "type": "object",
        "properties": {"n": {"$ref": "#/$defs/n"}},
    }
    fmt = normalize_response_format(schema)
    assert fmt.validator is not None
    assert fmt.validator.errors({"n": 0})
    assert not fmt.validator.errors({"n": 2})


def test_normalisation_is_cached_per_schema_object() -> None:
    assert normalize_response_format(SCHEMA) is normalize_response_format(SCHEMA)
