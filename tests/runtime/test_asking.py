"""Asking the person (the seed's "Asking the user"): ask, confirm, form, can_ask, the
timeout and headless rules, tools declared confirm, and the built-in ask_user tool."""

from __future__ import annotations

import asyncio

import pytest
from runtime_support import Make

from openprogram_yaml import AskTimeout, OpenProgramError, UserDeclined
from openprogram_yaml.json_types import JSONValue
from openprogram_yaml.providers.test import FakeClock, Reply
from openprogram_yaml.runtime.asking import Question, ScriptedAsker, ask_user_tool
from openprogram_yaml.runtime.toolgate import ToolGate


class SilentAsker:
    """Someone is there but never answers: only the timeout ends the wait."""

    def can_ask(self) -> bool:
        return True

    async def answer(self, question: Question) -> JSONValue:
        await asyncio.Event().wait()
        raise AssertionError("unreachable")


def test_ask_returns_the_persons_answer(make: Make) -> None:
    asker = ScriptedAsker(["blue", "b", ["x", "z"], ["one", "two"]])
    rt, _ = make(asker=asker)
    assert rt.can_ask()
    assert rt.ask("Favourite colour?") == "blue"
    assert rt.ask("Pick", options=["a", "b"]) == "b"
    assert rt.ask("Pick some", options=["x", "y", "z"], multi=True) == ["x", "z"]
    assert rt.ask("Two things", questions=["first?", "second?"]) == ["one", "two"]
    assert [q.kind for q in asker.asked] == ["ask"] * 4
    assert asker.asked[1].options == ("a", "b")


def test_confirm_and_form(make: Make) -> None:
    rt, _ = make(asker=ScriptedAsker(["yes", False, {"name": "Ada", "age": 36, "x": 1}]))
    assert rt.confirm("Go on?") is True
    assert rt.confirm("Really?") is False
    assert rt.form("Who?", ["name", {"name": "age"}]) == {"name": "Ada", "age": 36}


def test_a_declined_question_raises_user_declined(make: Make) -> None:
    rt, _ = make(asker=ScriptedAsker([None, None]))
    with pytest.raises(UserDeclined):
        rt.ask("Name?")
    with pytest.raises(UserDeclined):
        rt.confirm("Sure?")
    assert issubclass(UserDeclined, OpenProgramError)


def test_headless_cannot_ask_and_answers_the_default_at_once(make: Make, clock: FakeClock) -> None:
    rt, _ = make()
    assert not rt.can_ask()
    assert rt.ask("Name?", default="anon") == "anon"
    assert rt.confirm("Sure?") is False
    assert rt.confirm("Sure?", default=True) is True
    with pytest.raises(AskTimeout):
        rt.ask("Name?")
    with pytest.raises(AskTimeout):
        rt.form("Who?", ["name"])
    assert clock.sleeps == []  # at once: nobody is there, nothing is waited for


def test_no_answer_in_time_returns_the_default_else_raises_ask_timeout(
    make: Make, clock: FakeClock
) -> None:
    rt, _ = make(asker=SilentAsker())
    assert rt.ask("Name?", timeout=30, default="anon") == "anon"
    with pytest.raises(AskTimeout) as caught:
        rt.ask("Name?", timeout=5)
    assert isinstance(caught.value, TimeoutError)
    assert clock.sleeps == [30, 5]


def _delete_tool(ran: list[str]) -> dict[str, object]:
    def delete(path: str) -> str:
        ran.append(path)
        return f"deleted {path}"

    return {
        "spec": {
            "name": "delete",
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
        },
        "execute": delete,
        "confirm": lambda args: f"Delete {args['path']}?",
    }


def test_a_confirmed_tool_runs_only_when_the_person_approves(make: Make) -> None:
    ran: list[str] = []
    asker = ScriptedAsker(["yes", "no"])
    gate = ToolGate()
    rt, model = make(
        [Reply.call("delete", {"path": "a.txt"}), Reply.call("delete", {"path": "b.txt"}), "ok"],
        asker=asker,
        tool_gate=gate,
        tools=[_delete_tool(ran)],
    )
    assert rt.exec("clean up") == "ok"
    assert ran == ["a.txt"]
    assert [q.prompt for q in asker.asked] == ["Delete a.txt?", "Delete b.txt?"]
    declined = model.requests[2].messages[-1]
    assert declined.is_error and "declined by the user" in declined.content
    assert [(c["name"], c["answer"], c["by"]) for c in gate.confirmations] == [
        ("delete", "approved", "user"),
        ("delete", "declined", "user"),
    ]


def test_with_nobody_to_ask_a_confirmed_tool_is_refused_never_run(make: Make) -> None:
    ran: list[str] = []
    gate = ToolGate()
    rt, model = make(
        [Reply.call("delete", {"path": "a.txt"}), "ok"], tool_gate=gate, tools=[_delete_tool(ran)]
    )
    rt.exec("clean up")
    assert ran == []
    assert gate.not_run == [{"name": "delete", "reason": "unconfirmed"}]
    assert "--yes" in model.requests[1].messages[-1].content


def test_approve_all_runs_confirmed_tools_without_asking(make: Make) -> None:
    ran: list[str] = []
    gate = ToolGate(approve_all=True)
    rt, _ = make(
        [Reply.call("delete", {"path": "a.txt"}), "ok"], tool_gate=gate, tools=[_delete_tool(ran)]
    )
    rt.exec("clean up")
    assert ran == ["a.txt"]
    assert gate.confirmations[0]["by"] == "--yes"


def test_ask_user_lets_the_model_ask_mid_turn(make: Make) -> None:
    asker = ScriptedAsker(["Oslo"])
    rt, model = make([Reply.call("ask_user", {"question": "Which city?"}), "Oslo it is"])
    rt.asking.asker = asker
    rt.register_tools(ask_user_tool(rt.asking))
    assert rt.exec("weather?") == "Oslo it is"
    assert model.requests[1].messages[-1].content == "Oslo"


def test_ask_user_with_nobody_there_tells_the_model(make: Make) -> None:
    rt, model = make([Reply.call("ask_user", {"question": "Which city?"}), "guessing"])
    rt.register_tools(ask_user_tool(rt.asking))
    rt.exec("weather?")
    assert "Nobody is there to answer" in model.requests[1].messages[-1].content
