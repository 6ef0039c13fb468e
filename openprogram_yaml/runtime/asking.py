"""Asking the person: ``Runtime.ask`` / ``confirm`` / ``form`` and the front ends behind them.

A front end is an ``Asker``: it says whether anyone is there (``can_ask``) and puts one
``Question`` to them, returning the answer or raising ``UserDeclined``. The runner hands the
``Runtime`` one: a terminal, ``serve``'s pending questions, a test's scripted answers, or
none (headless: nobody to ask). ``Asking`` applies the seed's rules around it, the same for
every front end: a timeout returns ``default`` when one is given, else raises ``AskTimeout``;
headless, that happens at once. The clock's ``sleep`` is injected, so tests never wait.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol

from openprogram_yaml.errors import AskTimeout, UserDeclined
from openprogram_yaml.json_types import JSONObject, JSONValue
from openprogram_yaml.runtime.toolsets import Tool
from openprogram_yaml.runtimes.protocol import ToolSpec

__all__ = [
    "DEFAULT_ASK_TIMEOUT_S",
    "Asker",
    "Asking",
    "Question",
    "ScriptedAsker",
    "ask_user_tool",
    "check_answer",
]

#: The seed's default wait for an answer, in seconds.
DEFAULT_ASK_TIMEOUT_S = 300.0

QuestionKind = Literal["ask", "confirm", "form"]


@dataclass(frozen=True, slots=True)
class Question:
    """One card put to the person: a question, a yes/no, several questions, or a form."""

    kind: QuestionKind
    prompt: str
    #: For ``ask``: the answers to pick from (empty: free text).
    options: tuple[str, ...] = ()
    #: For ``ask`` with options: several may be picked (the answer is a list).
    multi: bool = False
    #: For ``ask`` with several questions in one card: their prompts (the answer is a list).
    questions: tuple[str, ...] = ()
    #: For ``form``: the field names, in order (the answer is an object of them).
    fields: tuple[str, ...] = ()

    def to_json(self) -> JSONObject:
        out: JSONObject = {"kind": self.kind, "prompt": self.prompt}
        if self.options:
            out["options"] = list(self.options)
            out["multi"] = self.multi
        if self.questions:
            out["questions"] = list(self.questions)
        if self.fields:
            out["fields"] = list(self.fields)
        return out


class Asker(Protocol):
    """A front end that can put a question to the person."""

    def can_ask(self) -> bool:
        """Whether anyone is there to answer."""
        ...

    async def answer(self, question: Question) -> JSONValue:
        """The person's answer (checked with ``check_answer``); ``UserDeclined`` if declined.
        May wait for ever: ``Asking`` bounds the wait."""
        ...


def check_answer(question: Question, value: object) -> tuple[JSONValue, str | None]:
    """``value`` as the answer ``question`` takes, or a problem to show the person."""
    if question.kind == "confirm":
        if isinstance(value, bool):
            return value, None
        if isinstance(value, str) and value.strip().lower() in _YES | _NO:
            return value.strip().lower() in _YES, None
        return None, "answer yes or no"
    if question.kind == "form":
        if not isinstance(value, Mapping) or any(not isinstance(k, str) for k in value):
            return None, f"answer with an object of the fields {', '.join(question.fields)}"
        missing = [f for f in question.fields if f not in value]
        if missing:
            return None, f"missing field(s): {', '.join(missing)}"
        return {f: _json(value[f]) for f in question.fields}, None
    if question.questions:
        if not isinstance(value, list) or len(value) != len(question.questions):
            return None, f"answer with a list of {len(question.questions)} answers"
        return [_json(v) for v in value], None
    if question.options:
        picked = value if isinstance(value, list) else [value]
        if not question.multi and len(picked) != 1:
            return None, "pick one option"
        names = [p for p in picked if isinstance(p, str) and p in question.options]
        if len(names) != len(picked):
            return None, f"pick from: {', '.join(question.options)}"
        return (list[JSONValue](names) if question.multi else names[0]), None
    if not isinstance(value, str):
        return None, "answer with text"
    return value, None


_YES = frozenset({"y", "yes", "true"})
_NO = frozenset({"n", "no", "false"})


def _json(value: object) -> JSONValue:
    return json.loads(json.dumps(value, default=str))  # type: ignore[no-any-return]


@dataclass(eq=False, slots=True)
class ScriptedAsker:
    """A test's answers, given in order: ``True``/``"yes"``/``"no"`` for a confirmation, text
    for a question, a list or an object for several questions or a form, ``None`` to decline.
    Running out of answers declines (the test said nothing more)."""

    answers: list[JSONValue]
    #: The questions put, in order, for the test to check.
    asked: list[Question] = field(default_factory=list)

    def can_ask(self) -> bool:
        return True

    async def answer(self, question: Question) -> JSONValue:
        self.asked.append(question)
        if not self.answers:
            raise UserDeclined(f"no scripted answer left for {question.prompt!r}")
        value = self.answers.pop(0)
        if value is None:
            raise UserDeclined(f"the test declined {question.prompt!r}")
        answer, problem = check_answer(question, value)
        if problem is not None:
            raise UserDeclined(f"the scripted answer {value!r} does not fit: {problem}")
        return answer


class Asking:
    """The seed's ``ask`` / ``confirm`` / ``form`` over one ``Asker`` (None: headless)."""

    def __init__(
        self, asker: Asker | None, sleep: Callable[[float], Awaitable[object]] = asyncio.sleep
    ) -> None:
        self.asker = asker
        self.sleep = sleep

    def can_ask(self) -> bool:
        return self.asker is not None and self.asker.can_ask()

    async def put(
        self, question: Question, timeout: float | None, default: JSONValue | None
    ) -> JSONValue:
        """The answer; on timeout (or headless, at once) ``default``, else ``AskTimeout``."""
        if self.asker is None or not self.asker.can_ask():
            return _timed_out(question, default, "nobody is there to answer (headless run)")
        answering = asyncio.ensure_future(self.asker.answer(question))
        if timeout is None:
            return await answering
        waiting = asyncio.ensure_future(self.sleep(timeout))
        try:
            await asyncio.wait({answering, waiting}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            waiting.cancel()
        # An answer that came with the deadline still counts.
        if answering.done():
            return answering.result()
        answering.cancel()
        return _timed_out(question, default, f"no answer within {timeout:g} s")

    async def ask(
        self,
        prompt: str,
        options: Sequence[str] | None = None,
        multi: bool = False,
        questions: Sequence[str] | None = None,
        timeout: float | None = DEFAULT_ASK_TIMEOUT_S,
        default: JSONValue | None = None,
    ) -> JSONValue:
        question = Question(
            "ask",
            prompt,
            options=tuple(str(o) for o in options or ()),
            multi=multi,
            questions=tuple(str(q) for q in questions or ()),
        )
        return await self.put(question, timeout, default)

    async def confirm(self, prompt: str, default: bool = False) -> bool:
        answer = await self.put(Question("confirm", prompt), DEFAULT_ASK_TIMEOUT_S, default)
        return answer is True

    async def form(self, prompt: str, fields: Sequence[str | Mapping[str, object]]) -> JSONObject:
        names = tuple(_field_name(f) for f in fields)
        answer = await self.put(Question("form", prompt, fields=names), DEFAULT_ASK_TIMEOUT_S, None)
        assert isinstance(answer, dict)
        return answer


def _field_name(field: str | Mapping[str, object]) -> str:
    if isinstance(field, str):
        return field
    name = field.get("name")
    if not isinstance(name, str) or not name:
        raise TypeError("a form field is a name, or a mapping with a 'name'")
    return name


def _timed_out(question: Question, default: JSONValue | None, why: str) -> JSONValue:
    if default is not None:
        return default
    raise AskTimeout(f"{why}: {question.prompt!r}")


ASK_USER_SPEC = ToolSpec(
    name="ask_user",
    description=(
        "Ask the person running you a question and wait for the answer. Use it when you "
        "need something only they know or a decision only they can make."
    ),
    parameters={
        "type": "object",
        "properties": {
            "question": {"type": "string", "description": "The question, in full."},
            "options": {
                "type": "array",
                "items": {"type": "string"},
                "description": "Answers to pick from; leave out for a free-text answer.",
            },
        },
        "required": ["question"],
    },
)


def ask_user_tool(asking: Asking) -> Tool:
    """The built-in ``ask_user`` tool: the model asks the person a question mid-turn.

    Every outcome is a result the model can go on with: the answer, a decline, no answer in
    time, or nobody there to ask.
    """

    async def ask_user(question: str, options: list[str] | None = None) -> str:
        if not asking.can_ask():
            return "Nobody is there to answer; go on without asking, or say what you need."
        try:
            answer = await asking.ask(question, options)
        except UserDeclined:
            return "The user declined to answer."
        except AskTimeout:
            return "No answer came in time."
        return answer if isinstance(answer, str) else json.dumps(answer, ensure_ascii=False)

    return Tool(ASK_USER_SPEC, ask_user, source="ask_user", is_async=True)
