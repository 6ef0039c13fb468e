"""How a turn ends: what the loop does with a reply that calls no (user) tool.

A terminal strategy turns the model's final reply into the exec's value (``Done``), or asks
for another turn with feedback (``Redo``). ``None`` means the reply called user tools and the
tool loop carries on. Structured output and ``choices`` are terminals; so is plain text.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from openprogram_yaml.json_types import JSONObject
from openprogram_yaml.runtimes.protocol import Message, RuntimeResult, ToolSpec

__all__ = ["UNSET", "Done", "Redo", "Terminal", "TextTerminal", "Unset"]


class Unset:
    """The type of ``UNSET``: an option the caller did not set (so it is not sent)."""

    _instance: Unset | None = None

    def __new__(cls) -> Unset:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "UNSET"

    def __bool__(self) -> bool:
        return False


UNSET = Unset()


@dataclass(slots=True)
class Done:
    """The turn ended well; ``value`` is what the terminal extracted."""

    value: object


@dataclass(slots=True)
class Redo:
    """Ask again: append ``messages`` and run another turn, if the allowance permits.

    ``error`` is raised instead when no allowance is left.
    """

    messages: list[Message]
    code: str
    issues: list[str]
    error: Exception
    extra: JSONObject = field(default_factory=dict)


class Terminal(Protocol):
    """A way to end a turn. ``budgeted`` redos spend the exec's shared recovery budget."""

    name: str
    hidden_tools: tuple[ToolSpec, ...]
    response_format: JSONObject | None
    system_suffix: str
    max_redos: int
    budgeted: bool
    #: Whether the answer is a ``choices`` pick, resolved (to a value or a method) after it.
    picks_choice: bool

    def tool_choice(self, has_user_tools: bool) -> str | JSONObject | Unset: ...

    def accept(self, result: RuntimeResult) -> Done | Redo | None: ...


class TextTerminal:
    """Plain text: the first reply without tool calls is the answer."""

    name = "text"
    hidden_tools: tuple[ToolSpec, ...] = ()
    response_format: JSONObject | None = None
    system_suffix = ""
    max_redos = 0
    budgeted = False
    picks_choice = False

    def tool_choice(self, has_user_tools: bool) -> str | JSONObject | Unset:
        return UNSET

    def accept(self, result: RuntimeResult) -> Done | Redo | None:
        if result.tool_calls:
            return None
        return Done(result.content)


TEXT_TERMINAL = TextTerminal()
