"""Structured output: envelope, modes, strict parsing, validation, repair and its budget."""

from __future__ import annotations

import json
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


@pytest.mark.parametrize(
    "text",
    [
        '{"label": "bug", "score": 3}',
        ' [1, 2.5, "x", null, true, {"a": {"b": []}}] ',
        '"\\u00e9t\\u00e9"',
        '\ufeff{"label": "bug"}',
        '{"a": 1, "a": 2}',
        '{"a": Infinity}',
        '{"a": 1e999, "b": 2.5e-3}',
        "[1, 2] [3]",
        '{"a": ',
    ],
)
def test_the_strict_parser_reads_as_json_loads_with_its_hooks(text: str) -> None:
    # Differential: the one decoder kept for every call against json.loads given the
    # same hooks on each call, as before.
    from openprogram_yaml.runtime import structured

    def loads() -> object:
        return json.loads(
            text,
            parse_constant=structured._reject_constant,
            parse_float=structured._finite_float,
            object_pairs_hook=structured._no_duplicate_keys,
        )

    try:
        expected: object = ("value", loads())
    except json.JSONDecodeError as exc:
        expected = ("error", f"$: {exc.msg} at line {exc.lineno} column {exc.colno}")
    except ValueError as exc:
        expected = ("error", f"$: {exc}")
    try:
        got: object = ("value", parse_json_strict(text))
    except StructuredOutputValidationError as exc:
        got = ("error", exc.issues[0])
    assert got == expected


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


# --- issue 14 §2: envelopes, the caller's format, failing closed, quiet diagnostics --------


def test_the_seeds_envelope_dict_is_accepted(make: Any) -> None:
    rt, model = make([Reply.json(GOOD)], caps=NATIVE)
    envelope = {"type": "json_schema", "schema": SCHEMA, "name": "label", "strict": True}
    assert rt.exec("x", response_format=envelope) == GOOD
    sent = model.requests[0].response_format
    assert sent is not None and sent["schema"] == SCHEMA and sent["name"] == "label"


def test_an_envelope_with_an_unknown_key_is_an_invalid_schema(make: Any) -> None:
    rt, model = make(["never"], caps=NATIVE)
    with pytest.raises(StructuredOutputSchemaError, match="unknown keys"):
        rt.exec("x", response_format={"type": "json_schema", "schema": SCHEMA, "nmae": "x"})
    assert model.requests == []


def test_json_schema_output_is_the_public_envelope_and_is_checked_when_built(make: Any) -> None:
    from openprogram_yaml import JsonSchemaOutput

    rt, _ = make([Reply.json(GOOD)], caps=NATIVE)
    fmt = JsonSchemaOutput(schema=SCHEMA, name="label", max_validation_retries=1)
    assert rt.exec("x", response_format=fmt) == GOOD
    assert normalize_response_format(fmt) is fmt
    with pytest.raises(StructuredOutputSchemaError):
        JsonSchemaOutput(schema=SCHEMA, fallback="sometimes")
    with pytest.raises(StructuredOutputSchemaError):
        JsonSchemaOutput(schema={"type": "objekt"})


def test_a_call_function_receives_the_callers_response_format() -> None:
    from openprogram_yaml import JsonSchemaOutput, Runtime

    seen: list[object] = []

    def my_llm(content: Any, model: str, response_format: Any) -> str:
        seen.append(response_format)
        return '{"label": "bug", "score": 3}'

    envelope = {"type": "json_schema", "schema": SCHEMA, "name": "label"}
    fmt = JsonSchemaOutput(schema=SCHEMA)
    with Runtime(call=my_llm) as rt:
        assert rt.exec("x", response_format=envelope) == GOOD
        assert rt.exec("x", response_format=fmt) == GOOD
    assert seen[0] is envelope and seen[1] is fmt


def test_call_receives_the_callers_response_format_in_a_subclass() -> None:
    from openprogram_yaml import Runtime

    seen: list[object] = []

    class Mine(Runtime):
        def _call(self, content: Any, model: str = "default", response_format: Any = None) -> str:
            seen.append(response_format)
            return '{"label": "bug", "score": 3}'

    with Mine() as rt:
        assert rt.exec("x", response_format=SCHEMA) == GOOD
    assert seen == [SCHEMA] and seen[0] is SCHEMA


class Undeclared:
    """A runtime that says nothing of what it can do: no ``capabilities()``."""

    def __init__(self, replies: list[Any]) -> None:
        from openprogram_yaml.providers.test import ScriptedRuntime

        self.inner = ScriptedRuntime(replies)
        self.requests = self.inner.requests

    def supports(self, model_ref: str | None = None) -> bool:
        return True

    async def run_turn(self, prompt: Any, **kwargs: Any) -> Any:
        return await self.inner.run_turn(prompt, **kwargs)

    def stream_turn(self, prompt: Any, **kwargs: Any) -> Any:
        return self.inner.stream_turn(prompt, **kwargs)


def test_a_runtime_that_declares_no_capabilities_fails_closed() -> None:
    from openprogram_yaml import Runtime

    model = Undeclared(["plain"])
    with Runtime(model="x:y", runtimes=model) as rt:
        with pytest.raises(StructuredOutputUnsupportedError, match="declares no capabilities"):
            rt.exec("x", response_format=SCHEMA)
        assert rt.exec("x") == "plain"  # only structured output is refused
    assert len(model.requests) == 1 and "tools" not in model.requests[0].kwargs


def test_prompt_fallback_must_be_asked_for_and_then_works_without_capabilities() -> None:
    from openprogram_yaml import Runtime

    model = Undeclared([Reply.json(GOOD)])
    with Runtime(model="x:y", runtimes=model) as rt:
        assert rt.exec("x", response_format={"schema": SCHEMA, "fallback": "prompt"}) == GOOD
    request = model.requests[0]
    assert "JSON Schema" in (request.system_prompt or "") and "tools" not in request.kwargs


@pytest.mark.parametrize(
    "options",
    [
        {"tool_choice": "none"},
        {"tool_choice": {"type": "function", "name": "lookup"}},
        {"parallel_tool_calls": True},
    ],
)
def test_the_hidden_tool_path_refuses_settings_it_cannot_honour(
    make: Any, options: dict[str, Any]
) -> None:
    tool = {"spec": {"name": "lookup"}, "execute": lambda: "data"}
    rt, model = make(["never"], caps=TOOLS_ONLY)
    with pytest.raises(StructuredOutputUnsupportedError) as info:
        rt.exec("x", response_format=SCHEMA, tools=[tool], **options)
    assert info.value.code == "unsupported"
    assert model.requests == []


def test_the_hidden_tool_path_sends_parallel_tool_calls_false(make: Any) -> None:
    tool = {"spec": {"name": "lookup"}, "execute": lambda: "data"}
    rt, model = make([Reply.call("submit_result", GOOD)], caps=TOOLS_ONLY)
    assert rt.exec("x", response_format=SCHEMA, tools=[tool], tool_choice="auto") == GOOD
    assert model.requests[0].kwargs["parallel_tool_calls"] is False
    rt2, native = make([Reply.json(GOOD)], caps=NATIVE)
    assert rt2.exec("x", response_format=SCHEMA) == GOOD
    assert "parallel_tool_calls" not in native.requests[0].kwargs  # only where the tool is hidden


def test_running_out_of_max_iterations_without_a_submission(make: Any) -> None:
    tool = {"spec": {"name": "lookup"}, "execute": lambda: "data"}
    rt, model = make([Reply.call("lookup")] * 5, caps=TOOLS_ONLY)
    with pytest.raises(StructuredOutputValidationError) as info:
        rt.exec("x", response_format=SCHEMA, tools=[tool], max_iterations=2)
    assert info.value.code == "missing_submission"
    assert len(model.requests) == 2


LEAK = "SECRET-ANSWER-7f3a"


def _everything_said(info: pytest.ExceptionInfo[Any], events: list[Any], model: Any) -> str:
    repairs = [r.messages[-1].text() for r in model.requests[1:]]
    return "\n".join([str(info.value), *info.value.issues, json.dumps(events), *repairs])


@pytest.mark.parametrize(
    "answer",
    [
        {"label": LEAK, "score": 3},  # enum
        {"label": "bug", "score": LEAK},  # type
        {"label": "bug", "score": 3, LEAK: 1},  # additionalProperties
    ],
)
def test_diagnostics_never_quote_the_models_answer(make: Any, answer: dict[str, Any]) -> None:
    events: list[dict[str, Any]] = []
    rt, model = make([Reply.json(answer)] * 3, caps=NATIVE, on_stream=events.append)
    with pytest.raises(StructuredOutputValidationError) as info:
        rt.exec("x", response_format=SCHEMA)
    said = _everything_said(info, [e for e in events if e["type"] != "text"], model)
    assert LEAK not in said
    assert "$" in info.value.issues[0]  # the issue still says where, by path and rule


def test_submit_tool_repairs_and_broken_json_never_quote_the_answer(make: Any) -> None:
    events: list[dict[str, Any]] = []
    bad = Reply.call("submit_result", {"label": LEAK, "score": 3})
    rt, model = make([bad, bad, bad], caps=TOOLS_ONLY, on_stream=events.append)
    with pytest.raises(StructuredOutputValidationError) as info:
        rt.exec("x", response_format=SCHEMA)
    assert LEAK not in _everything_said(info, events, model)
    broken = f'{{"{LEAK}": 1, "{LEAK}": 2}}'
    rt2, model2 = make([broken, f"{LEAK} {{", Reply.refuse(LEAK)], caps=NATIVE)
    with pytest.raises(StructuredOutputGenerationError) as info2:
        rt2.exec("x", response_format=SCHEMA)
    assert LEAK not in _everything_said(info2, [], model2)


@pytest.mark.parametrize(
    ("schema", "problem"),
    [
        ({"$ref": "https://schemas.example.com/label.json"}, "not local"),
        ({"type": "object", "properties": {"a": {"$ref": "other.json#/x"}}}, "not local"),
        ({"$ref": "#/$defs/missing"}, "names nothing"),
        ({"$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"allOf": [{"$ref": "#/$defs/a"}]}},
          "$ref": "#/$defs/a"}, "refers back to itself"),
        ({"anyOf": [{"$ref": "#"}, {"type": "string"}]}, "refers back to itself"),
    ],
)  # fmt: skip
def test_remote_refs_and_reference_cycles_are_refused_before_any_request(
    make: Any, schema: dict[str, Any], problem: str
) -> None:
    rt, model = make([Reply.json(GOOD)] * 3, caps=NATIVE)
    with pytest.raises(StructuredOutputSchemaError) as info:
        rt.exec("x", response_format=schema)
    assert any(problem in issue for issue in info.value.issues), info.value.issues
    assert model.requests == []


def test_a_recursive_schema_through_properties_is_fine(make: Any) -> None:
    tree = {
        "$defs": {
            "node": {
                "type": "object",
                "properties": {"children": {"type": "array", "items": {"$ref": "#/$defs/node"}}},
            }
        },
        "$ref": "#/$defs/node",
    }
    value = {"children": [{"children": []}]}
    rt, _ = make([Reply.json(value)], caps=NATIVE)
    assert rt.exec("x", response_format=tree) == value


def test_a_reply_nested_past_the_decoders_depth_is_invalid_json_and_repaired(make: Any) -> None:
    with pytest.raises(StructuredOutputValidationError) as info:
        parse_json_strict("[" * 100_000)
    assert info.value.code == "invalid_json"
    rt, model = make([Reply.text("[" * 100_000), Reply.json(GOOD)], caps=NATIVE)
    assert rt.exec("x", response_format=SCHEMA) == GOOD
    assert len(model.requests) == 2


def test_a_number_past_the_int_digit_limit_is_invalid_json_and_repaired(make: Any) -> None:
    # int() refuses more than 4,300 digits with a plain ValueError, which left the exec
    # as it was instead of a repair (a model's or a hostile server's reply).
    huge = "9" * 5_000
    with pytest.raises(StructuredOutputValidationError) as info:
        parse_json_strict(f'{{"label": "bug", "score": {huge}}}')
    assert info.value.code == "invalid_json"
    assert huge not in str(info.value.issues)
    rt, model = make(
        [Reply.text(f'{{"label": "bug", "score": {huge}}}'), Reply.json(GOOD)], caps=NATIVE
    )
    assert rt.exec("x", response_format=SCHEMA) == GOOD
    assert len(model.requests) == 2
    add = {"type": "object", "properties": {"n": {"type": "integer"}}}
    tool = {"spec": {"name": "add", "description": "d", "parameters": add}, "execute": int}
    rt, model = make([Reply.call("add", f'{{"n": {huge}}}'), "done"], caps=NATIVE)
    assert rt.exec("x", tools=[tool]) == "done"
    assert model.requests[1].messages[-1].is_error


@pytest.mark.parametrize("number", ["1e999", "-1e999", "1E400"])
def test_a_number_too_large_for_a_float_is_invalid_json_and_repaired(
    make: Any, number: str
) -> None:
    # float() reads it as infinity: Infinity by another name, which JSON has no value for
    # (an answer holding one was returned, and written on as "Infinity").
    with pytest.raises(StructuredOutputValidationError) as info:
        parse_json_strict(f'{{"label": "bug", "score": {number}}}')
    assert info.value.issues == ["$: a number is too large for a float"]
    schema = {"type": "object", "properties": {"score": {"type": "number"}}}
    rt, model = make(
        [Reply.text(f'{{"score": {number}}}'), Reply.json({"score": 1e308})], caps=NATIVE
    )
    assert rt.exec("x", response_format=schema) == {"score": 1e308}
    assert len(model.requests) == 2


def test_a_fresh_copy_of_the_same_envelope_gives_the_same_output() -> None:
    # A compiled method passes dict(its envelope) on every call: made once, not per call.
    schema = {"type": "object", "properties": {"label": {"type": "string"}}}
    envelope = {"schema": schema, "name": "label", "strict": True}
    first = normalize_response_format(dict(envelope))
    assert normalize_response_format(dict(envelope)) is first
    assert normalize_response_format({**envelope, "strict": False}) is not first
    # An equal but not identical option is still checked: strict=1 is no boolean.
    with pytest.raises(StructuredOutputSchemaError, match="strict must be true or false"):
        normalize_response_format({**envelope, "strict": 1})
    # A schema that is equal but another object gets its own output.
    assert normalize_response_format({**envelope, "schema": dict(schema)}) is not first


def test_a_response_format_changed_in_place_between_calls_is_read_again() -> None:
    # The outputs made were kept by the identity of the envelope (and of its schema): a
    # caller that changed either in place between execs got the output of before the change.
    envelope: dict[str, Any] = {"schema": {"type": "object"}, "name": "first"}
    assert normalize_response_format(envelope).name == "first"
    envelope["name"] = "second"
    assert normalize_response_format(envelope).name == "second"

    schema: dict[str, Any] = {"type": "object", "properties": {"a": {"type": "string"}}}
    made = normalize_response_format({"schema": schema, "name": "x"})
    assert normalize_response_format({"schema": schema, "name": "x"}) is made  # still kept
    schema["properties"]["b"] = {"type": "integer"}
    again = normalize_response_format({"schema": schema, "name": "x"})
    assert again is not made and "b" in again.schema["properties"]

    bare: dict[str, Any] = {"type": "string"}
    assert normalize_response_format(bare).schema == {"type": "string"}
    bare["maxLength"] = 3
    assert normalize_response_format(bare).schema == {"type": "string", "maxLength": 3}


@pytest.mark.parametrize("name", ["out\n", "", "a b"])
def test_a_response_format_name_no_provider_takes_is_refused(name: str) -> None:
    # "out\n" passed a ^...$ check ($ matches before a last line break).
    fmt = {"type": "json_schema", "json_schema": {"name": name, "schema": {"type": "object"}}}
    with pytest.raises(StructuredOutputSchemaError, match=r"response_format\.name must match"):
        normalize_response_format(fmt)
