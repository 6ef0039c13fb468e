"""choices: options, constrained picks, the text fallback, re-pick, DecisionError, results."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from openprogram_yaml.errors import DecisionError
from openprogram_yaml.providers.test import Reply
from openprogram_yaml.runtime import SessionTrace
from openprogram_yaml.runtime.choices import find_last_pick
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
    return f"drafted ({tone})"


CHOICES = {
    "answer": {"description": "We can answer it", "method": draft_answer},
    "escalate": {"description": "A human must look", "value": "escalated"},
    "refund": {"description": "Refund the order", "schema": REFUND},
}


def test_value_option(make: Any) -> None:
    rt, _ = make([Reply.json({"decision": "escalate"})], caps=NATIVE)
    assert rt.exec("t", choices=CHOICES) == "escalated"


def test_method_option_returns_the_method_result(make: Any) -> None:
    rt, _ = make([Reply.json({"decision": "answer", "tone": "formal"})], caps=NATIVE)
    assert rt.exec("t", choices=CHOICES) == "drafted (formal)"


def test_async_method_option(make: Any) -> None:
    async def route(queue: str) -> str:
        await asyncio.sleep(0)
        return f"routed to {queue}"

    rt, _ = make([Reply.json({"decision": "route", "queue": "billing"})], caps=NATIVE)
    assert rt.exec("t", choices={"route": {"method": route}}) == "routed to billing"


def test_schema_option_returns_decision_and_fields(make: Any) -> None:
    rt, _ = make([Reply.json({"decision": "refund", "amount": 12.5})], caps=NATIVE)
    assert rt.exec("t", choices=CHOICES) == {"decision": "refund", "amount": 12.5}


def test_native_pick_is_constrained_by_a_schema(make: Any) -> None:
    rt, model = make([Reply.json({"decision": "escalate"})], caps=NATIVE)
    rt.exec("t", choices=CHOICES)
    fmt = model.requests[0].response_format
    assert fmt is not None
    branches = fmt["schema"]["anyOf"]
    assert [b["properties"]["decision"]["const"] for b in branches] == [
        "answer",
        "escalate",
        "refund",
    ]
    assert branches[2]["required"] == ["decision", "amount"]


def test_tool_mode_forces_a_choose_tool(make: Any) -> None:
    rt, model = make([Reply.call("choose_refund", {"amount": 5})], caps=TOOLS)
    assert rt.exec("t", choices=CHOICES) == {"decision": "refund", "amount": 5}
    req = model.requests[0]
    assert req.tool_names == ["choose_answer", "choose_escalate", "choose_refund"]
    assert req.tool_choice == "required"
    assert req.tools[2].parameters == REFUND


def test_text_mode_takes_the_last_json_pick(make: Any) -> None:
    reply = 'Maybe {"decision": "escalate"}... no, final: {"decision": "refund", "amount": 3}'
    rt, model = make([reply], caps=TEXT)
    assert rt.exec("t", choices=CHOICES) == {"decision": "refund", "amount": 3}
    menu = model.requests[0].system_prompt or ""
    assert "- escalate: A human must look" in menu
    assert '"decision"' in menu


def test_a_list_of_names(make: Any) -> None:
    rt, _ = make(['{"decision": "yes"}'], caps=TEXT)
    assert rt.exec("t", choices=["yes", "no"]) == "yes"


@pytest.mark.parametrize(
    ("pick", "kind"),
    [
        ("no pick here", "no_pick"),
        ('{"decision": "delete"}', "unknown_option"),
        ('{"decision": "refund"}', "missing_args"),
        ('{"decision": "refund", "amount": "lots"}', "wrong_type"),
        ('{"decision": "refund", "amount": 1, "currency": "GBP"}', "not_in_enum"),
    ],
)
def test_a_choice_is_repicked_once_then_decision_error(make: Any, pick: str, kind: str) -> None:
    rt, model = make([pick, pick, pick], caps=TEXT)
    with pytest.raises(DecisionError) as info:
        rt.exec("t", choices=CHOICES)
    assert isinstance(info.value, ValueError)
    assert info.value.kind == kind
    assert len(model.requests) == 2  # the pick and one re-pick
    assert "Pick again" in model.requests[1].messages[-1].text()


def test_a_repick_can_succeed(make: Any) -> None:
    rt, model = make(['{"decision": "delete"}', '{"decision": "escalate"}'], caps=TEXT)
    assert rt.exec("t", choices=CHOICES) == "escalated"
    assert "unknown option" in model.requests[1].messages[-1].text()


def test_tool_mode_repick_is_a_tool_error(make: Any) -> None:
    rt, model = make([Reply.call("choose_refund", {}), Reply.call("choose_escalate")], caps=TOOLS)
    assert rt.exec("t", choices=CHOICES) == "escalated"
    feedback = model.requests[1].messages[-1]
    assert feedback.role == "tool" and feedback.is_error


def test_the_pick_is_recorded_in_the_trace(make: Any) -> None:
    trace = SessionTrace()
    rt, _ = make(
        ['{"decision": "delete"}', '{"decision": "refund", "amount": 2}'], caps=TEXT, trace=trace
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
    rt, _ = make([], caps=NATIVE)
    with pytest.raises(TypeError):
        rt.exec("t", choices=CHOICES, response_format={"type": "object"})


def test_find_last_pick() -> None:
    assert find_last_pick('a {"decision": "x"} b {"decision": "y", "n": {"k": 1}} c') == {
        "decision": "y",
        "n": {"k": 1},
    }
    assert find_last_pick("nothing") is None
