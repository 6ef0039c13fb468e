"""choices: the pick format, the menu, option containers, validation, re-pick, results."""

from __future__ import annotations

import asyncio
import time
from typing import Any, Literal

import pytest

from openprogram_yaml.errors import DecisionError, UsageError
from openprogram_yaml.providers.test import Reply
from openprogram_yaml.runtime import SessionTrace
from openprogram_yaml.runtime.choices import Choice, normalize_choices
from openprogram_yaml.runtime.pick_text import find_pick
from openprogram_yaml.runtimes.protocol import Capabilities

NATIVE = Capabilities(native_json_schema=True)
TOOLS = Capabilities(native_json_schema=False, tools=True, forced_tool_choice=True)
TEXT = Capabilities(native_json_schema=False, tools=False, forced_tool_choice=False)

REFUND = {
    "type": "object",
    "properties": {"amount": {"type": "number"}, "currency": {"enum": ["EUR", "USD"]}},
    "required": ["amount"],
}


def draft_answer(tone: str = "friendly") -> str:
    """Draft an answer to the customer."""
    return f"drafted ({tone})"


CHOICES: dict[str, object] = {
    "answer": draft_answer,
    "escalate": ("escalated", "A human must look"),
    "refund": ("Refund the order", REFUND),
}


# --- the pick format -------------------------------------------------------------------


def test_the_pick_is_call_and_args(make: Any) -> None:
    rt, _ = make(['{"call": "refund", "args": {"amount": 12.5}}'], caps=TEXT)
    assert rt.exec("t", choices=CHOICES) == {"decision": "refund", "amount": 12.5}


@pytest.mark.parametrize("key", ["call", "action", "function", "tool"])
def test_call_has_the_aliases_action_function_and_tool(make: Any, key: str) -> None:
    rt, _ = make([f'{{"{key}": "answer", "args": {{"tone": "formal"}}}}'], caps=TEXT)
    assert rt.exec("t", choices=CHOICES) == "drafted (formal)"


def test_args_may_be_absent_for_an_option_without_fields(make: Any) -> None:
    rt, _ = make(['Done. {"call": "escalate"}'], caps=TEXT)
    assert rt.exec("t", choices=CHOICES) == "escalated"


def test_the_first_pick_wins_not_the_last(make: Any) -> None:
    reply = 'I pick {"call": "escalate"}. Or maybe {"call": "refund", "args": {"amount": 3}}'
    rt, _ = make([reply], caps=TEXT)
    assert rt.exec("t", choices=CHOICES) == "escalated"


def test_a_fenced_pick_wins_over_a_bare_one_before_it(make: Any) -> None:
    reply = (
        'You could write {"call": "escalate"}, but:\n'
        '```json\n{"call": "refund", "args": {"amount": 3}}\n```\n'
        '```\n{"call": "answer"}\n```'
    )
    rt, _ = make([reply], caps=TEXT)
    assert rt.exec("t", choices=CHOICES) == {"decision": "refund", "amount": 3}


def test_find_pick() -> None:
    assert find_pick('prose {"x": 1} then {"tool": "a", "args": {"k": {"n": 1}}}') == {
        "tool": "a",
        "args": {"k": {"n": 1}},
    }
    # A fenced block without a pick is skipped; a bare fence counts like a json one.
    fenced = '```json\n{"x": 1}\n```\ntext\n```\n{"action": "b"}\n```\n{"call": "c"}'
    assert find_pick(fenced) == {"action": "b"}
    assert find_pick('{"decision": "old format"}') is None
    assert find_pick("nothing") is None


def test_the_menu_shows_signature_description_fields_and_a_call_example(make: Any) -> None:
    rt, model = make(['{"call": "escalate"}'], caps=TEXT)
    rt.exec("t", choices=CHOICES)
    menu = model.requests[0].system_prompt or ""
    assert 'close your reply with exactly one JSON pick of the next step: {"call": "<option>"' in (
        menu
    )
    assert (
        '- answer(tone: str = "friendly")\n'
        "    Draft an answer to the customer.\n"
        "    tone (str, optional)\n"
        '    Call: {"call": "answer", "args": {"tone": "friendly"}}'
    ) in menu
    assert (
        '- escalate()\n    A human must look\n    Call: {"call": "escalate", "args": {}}'
    ) in menu
    assert (
        "- refund(amount: float, currency: str)\n"
        "    Refund the order\n"
        "    amount (float, required)\n"
        '    currency (str, optional); one of: "EUR", "USD"\n'
        '    Call: {"call": "refund", "args": {"amount": 0, "currency": "EUR"}}'
    ) in menu


def test_native_pick_is_constrained_by_a_schema_of_the_pick(make: Any) -> None:
    rt, model = make([Reply.json({"call": "refund", "args": {"amount": 1}})], caps=NATIVE)
    assert rt.exec("t", choices=CHOICES) == {"decision": "refund", "amount": 1}
    fmt = model.requests[0].response_format
    assert fmt is not None
    branches = fmt["schema"]["anyOf"]
    assert [b["properties"]["call"]["const"] for b in branches] == ["answer", "escalate", "refund"]
    assert branches[2]["properties"]["args"] == REFUND
    assert branches[2]["required"] == ["call", "args"]


def test_tool_mode_forces_a_choose_tool(make: Any) -> None:
    rt, model = make([Reply.call("choose_refund", {"amount": 5})], caps=TOOLS)
    assert rt.exec("t", choices=CHOICES) == {"decision": "refund", "amount": 5}
    req = model.requests[0]
    assert req.tool_names == ["choose_answer", "choose_escalate", "choose_refund"]
    assert req.tool_choice == "required"
    assert req.tools[2].parameters == REFUND


def test_tool_mode_also_takes_a_text_pick(make: Any) -> None:
    rt, _ = make(['{"call": "escalate"}'], caps=TOOLS)
    assert rt.exec("t", choices=CHOICES) == "escalated"


# --- option containers -----------------------------------------------------------------


def test_a_string_in_the_dict_form_is_a_value_not_a_description(make: Any) -> None:
    rt, _ = make(['{"call": "no"}'], caps=TEXT)
    assert rt.exec("t", choices={"yes": "approved", "no": "declined"}) == "declined"


class Ticket:
    pass


@pytest.mark.parametrize("value", [3, {"queue": "billing"}, None, [1, 2]])
def test_any_other_object_in_the_dict_form_is_a_value(make: Any, value: object) -> None:
    rt, _ = make(['{"call": "pick"}'], caps=TEXT)
    assert rt.exec("t", choices={"pick": value, "other": 0}) == value


def test_an_instance_is_returned_unchanged(make: Any) -> None:
    ticket = Ticket()
    rt, _ = make(['{"call": "it", "args": {"ignored": 1}}'], caps=TEXT)
    assert rt.exec("t", choices={"it": ticket}) is ticket


def test_a_value_with_a_description(make: Any) -> None:
    rt, model = make(['{"call": "later"}'], caps=TEXT)
    assert rt.exec("t", choices={"later": (7, "Ask again in a week")}) == 7
    assert "- later()\n    Ask again in a week\n" in (model.requests[0].system_prompt or "")


def test_a_description_and_a_schema_is_a_schema_option(make: Any) -> None:
    rt, _ = make(['{"call": "refund", "args": {"amount": 2, "why": "twice"}}'], caps=TEXT)
    choices = {"refund": ("Refund the order", {"amount": float, "why": "The reason"})}
    assert rt.exec("t", choices=choices) == {"decision": "refund", "amount": 2, "why": "twice"}


def test_a_list_of_functions(make: Any) -> None:
    def close(reason: str) -> str:
        return f"closed: {reason}"

    rt, model = make(['{"call": "close", "args": {"reason": "done"}}'], caps=TEXT)
    assert rt.exec("t", choices=[draft_answer, (close, "Close the ticket")]) == "closed: done"
    assert "- close(reason: str)\n    Close the ticket\n" in (model.requests[0].system_prompt or "")


@pytest.mark.parametrize(
    ("reply", "result"),
    [
        ('{"call": "yes"}', "yes"),
        ('{"call": "no"}', "no"),
        ('{"call": "later", "args": {"days": 3}}', {"decision": "later", "days": 3}),
    ],
)
def test_list_string_shapes(make: Any, reply: str, result: object) -> None:
    choices = ["yes", ("no", "Decline"), ("later", "Ask again", {"days": int})]
    rt, _ = make([reply], caps=TEXT)
    assert rt.exec("t", choices=choices) == result


def test_an_async_function_option(make: Any) -> None:
    async def route(queue: str) -> str:
        await asyncio.sleep(0)
        return f"routed to {queue}"

    rt, _ = make(['{"call": "route", "args": {"queue": "billing"}}'], caps=TEXT)
    assert rt.exec("t", choices={"route": route}) == "routed to billing"


def test_a_choice_object_is_taken_as_is(make: Any) -> None:
    rt, _ = make(['{"call": "go"}'], caps=TEXT)
    assert rt.exec("t", choices=[Choice("go", "Go on", value=1)]) == 1


@pytest.mark.parametrize("bad", [[1], [("a", 2)], "abc", 5, [lambda: 1]])
def test_a_container_of_other_shapes_is_refused(bad: object) -> None:
    with pytest.raises((TypeError, ValueError)):
        normalize_choices(bad)


@pytest.mark.parametrize("name", ["go\n", "", "a b", "x" * 57])
def test_a_choice_name_no_model_can_call_is_refused(name: str) -> None:
    # "go\n" passed a ^...$ check ($ matches before a last line break) and went to the
    # provider as a tool name, which refused the request.
    with pytest.raises(ValueError, match="choice names must match"):
        normalize_choices({name: ("d", None)})


# --- the schema mini-language ----------------------------------------------------------


def _fields(schema: object) -> dict[str, Any]:
    option = normalize_choices({"x": ("d", schema)}).options["x"]
    assert option.schema is not None
    return option.schema


def test_the_mini_language_types_descriptions_lists_and_nesting() -> None:
    schema = _fields(
        {
            "name": str,
            "count": int,
            "ratio": float,
            "ok": bool,
            "tags": [str],
            "meta": dict,
            "note": "A short note",
            "address": {"city": str, "zip": "Postal code"},
            "items": [{"sku": str, "qty": int}],
            "priority": {"type": str, "description": "How urgent", "options": ["low", "high"]},
        }
    )
    props = schema["properties"]
    assert props["name"] == {"type": "string"}
    assert props["count"] == {"type": "integer"}
    assert props["ratio"] == {"type": "number"}
    assert props["ok"] == {"type": "boolean"}
    assert props["tags"] == {"type": "array", "items": {"type": "string"}}
    assert props["meta"] == {"type": "object"}
    assert props["note"] == {"type": "string", "description": "A short note"}
    assert props["address"]["properties"]["zip"] == {"type": "string", "description": "Postal code"}
    assert props["address"]["required"] == ["city", "zip"]
    assert props["items"]["items"]["properties"]["qty"] == {"type": "integer"}
    assert props["priority"] == {
        "type": "string",
        "description": "How urgent",
        "enum": ["low", "high"],
    }
    assert schema["required"] == list(props)


@pytest.mark.parametrize("items", [[], [str, int]])
def test_a_list_field_needs_exactly_one_item_template(items: list[object]) -> None:
    with pytest.raises(TypeError, match="exactly one item template"):
        _fields({"tags": items})


def test_json_schema_is_also_accepted() -> None:
    assert _fields(REFUND) == REFUND


# --- validation ------------------------------------------------------------------------


def _kind(make: Any, choices: object, reply: str) -> str:
    rt, _ = make([reply, reply], caps=TEXT)
    with pytest.raises(DecisionError) as info:
        rt.exec("t", choices=choices)
    return info.value.kind


def test_a_bool_is_not_an_int_and_an_int_is_a_float(make: Any) -> None:
    choices = {"set": ("Set them", {"n": int, "x": float})}
    assert _kind(make, choices, '{"call": "set", "args": {"n": true, "x": 1}}') == "wrong_type"
    rt, _ = make(['{"call": "set", "args": {"n": 2, "x": 1}}'], caps=TEXT)
    assert rt.exec("t", choices=choices) == {"decision": "set", "n": 2, "x": 1}


def test_enums_and_nesting_are_checked(make: Any) -> None:
    choices = {"ship": ("Ship it", {"to": {"city": str}, "speed": {"options": ["slow", "fast"]}})}
    nested = '{"call": "ship", "args": {"to": {"city": 5}, "speed": "slow"}}'
    assert _kind(make, choices, nested) == "wrong_type"
    enum = '{"call": "ship", "args": {"to": {"city": "Oslo"}, "speed": "warp"}}'
    assert _kind(make, choices, enum) == "not_in_enum"


def test_function_options_drop_unknown_fields_and_require_parameters(make: Any) -> None:
    def close(reason: str, notify: bool = False) -> str:
        return f"{reason} {notify}"

    rt, _ = make(['{"call": "close", "args": {"reason": "done", "extra": 1}}'], caps=TEXT)
    assert rt.exec("t", choices=[close]) == "done False"
    assert _kind(make, [close], '{"call": "close", "args": {"notify": true}}') == "missing_args"


def test_a_function_with_kwargs_gets_every_field(make: Any) -> None:
    def log(**fields: object) -> object:
        return fields

    rt, _ = make(['{"call": "log", "args": {"a": 1}}'], caps=TEXT)
    assert rt.exec("t", choices=[log]) == {"a": 1}


def test_literal_parameters_are_enums(make: Any) -> None:
    def move(to: Literal["up", "down"]) -> str:
        return to

    assert _kind(make, [move], '{"call": "move", "args": {"to": "left"}}') == "not_in_enum"


def test_schema_options_require_every_declared_field_and_drop_the_rest(make: Any) -> None:
    choices = {"refund": ("Refund", {"amount": float, "why": str})}
    reply = '{"call": "refund", "args": {"amount": 1, "why": "x", "extra": true}}'
    rt, _ = make([reply], caps=TEXT)
    assert rt.exec("t", choices=choices) == {"decision": "refund", "amount": 1, "why": "x"}
    assert _kind(make, choices, '{"call": "refund", "args": {"amount": 1}}') == "missing_args"


@pytest.mark.parametrize(
    ("pick", "kind"),
    [
        ("no pick here", "no_pick"),
        ('{"decision": "escalate"}', "no_pick"),
        ('{"call": "delete"}', "unknown_call"),
        ('{"call": "refund", "args": {}}', "missing_args"),
        ('{"call": "refund", "args": {"amount": "lots"}}', "wrong_type"),
        ('{"call": "refund", "args": {"amount": 1, "currency": "GBP"}}', "not_in_enum"),
        ('{"call": "refund", "args": [1]}', "bad_args"),
    ],
)
def test_a_choice_is_repicked_once_then_decision_error(make: Any, pick: str, kind: str) -> None:
    rt, model = make([pick, pick, pick], caps=TEXT)
    with pytest.raises(DecisionError) as info:
        rt.exec("t", choices=CHOICES)
    assert isinstance(info.value, ValueError)
    assert info.value.kind == kind
    assert info.value.reply == pick[:200]
    assert len(model.requests) == 2  # the pick and one re-pick


def test_a_repick_gets_the_reply_the_reason_and_the_menu_again(make: Any) -> None:
    rt, model = make(['{"call": "delete"}', '{"call": "escalate"}'], caps=TEXT)
    assert rt.exec("t", choices=CHOICES) == "escalated"
    previous, feedback = model.requests[1].messages[-2:]
    assert previous.role == "assistant" and previous.text() == '{"call": "delete"}'
    text = feedback.text()
    assert "unknown option 'delete'" in text and "Pick again" in text
    assert '    Call: {"call": "escalate", "args": {}}' in text


def test_tool_mode_repick_is_a_tool_error(make: Any) -> None:
    rt, model = make([Reply.call("choose_refund", {}), Reply.call("choose_escalate")], caps=TOOLS)
    assert rt.exec("t", choices=CHOICES) == "escalated"
    feedback = model.requests[1].messages[-1]
    assert feedback.role == "tool" and feedback.is_error


def test_the_pick_is_recorded_in_the_trace(make: Any) -> None:
    trace = SessionTrace()
    rt, _ = make(
        ['{"call": "delete"}', '{"call": "refund", "args": {"amount": 2}}'], caps=TEXT, trace=trace
    )
    rt.exec("t", choices=CHOICES)
    node = trace.nodes[0]
    assert node.data["pick"] == {
        "decision": "refund",
        "fields": {"amount": 2},
        "repicks": 1,
        "mode": "text",
    }


def test_choices_after_tool_use(make: Any) -> None:
    tool = {"spec": {"name": "lookup"}, "execute": lambda: "order 7"}
    rt, model = make([Reply.call("lookup"), Reply.call("choose_escalate")], caps=TOOLS)
    assert rt.exec("t", tools=[tool], choices=CHOICES) == "escalated"
    assert "tool_choice" not in model.requests[0].kwargs


def test_choices_and_response_format_do_not_mix(make: Any) -> None:
    rt, model = make([], caps=NATIVE)
    with pytest.raises(UsageError, match="give that option a schema"):
        rt.exec("t", choices=CHOICES, response_format={"type": "object"})
    assert model.requests == []


# --- a hostile reply ---------------------------------------------------------------------


def test_a_deeply_nested_reply_is_no_pick_not_a_crash() -> None:
    deep = '{"x": ' + "[" * 100_000
    assert find_pick(deep) is None
    assert find_pick(deep + ' then {"call": "escalate"}') == {"call": "escalate"}
    assert find_pick("```json\n" + deep + '\n```\n{"call": "answer"}') == {"call": "answer"}


def test_a_reply_of_many_unclosed_objects_is_searched_in_linear_time() -> None:
    # Every "{" here decodes to the far end before failing: searched naively, 250 KB took
    # 2.3 s of CPU and the 10 MiB a reply may hold would take hours. The search has a budget.
    hostile = '{"a":[1,1,' * 25_000 + ' {"call": "x"}'
    started = time.process_time()
    assert find_pick(hostile) is None
    assert time.process_time() - started < 1.0
    # An ordinary reply with text and an example object before the pick is untouched.
    assert find_pick('{"note": 1} ' * 1000 + '{"call": "answer"}') == {"call": "answer"}


def test_many_fenced_blocks_of_unclosed_objects_share_one_budget() -> None:
    # Each block alone is under a per-block budget; 1 MiB of them took 5 s when every block
    # had its own. The fenced blocks and the bare text share the search's budget.
    block = "```json\n" + '{"a":' * 600 + "\n```\n"
    started = time.process_time()
    assert find_pick(block * ((1 << 20) // len(block))) is None
    assert time.process_time() - started < 1.0
    # A few broken fenced examples before the pick are well within it.
    broken = '```json\n{"call": "x", "args": {\n```\n'
    assert find_pick(broken * 3 + '```json\n{"call": "answer"}\n```') == {"call": "answer"}


def test_deeply_nested_pick_arguments_are_bad_args(make: Any) -> None:
    deep = "[" * 100_000
    rt, model = make([Reply.call("choose_refund", deep)] * 2, caps=TOOLS)
    with pytest.raises(DecisionError) as info:
        rt.exec("t", choices=CHOICES)
    assert info.value.kind == "bad_args"
    assert len(model.requests) == 2
