"""Which tool calls run for real: the one place the tool loop asks before it runs a tool.

A call is answered without running its tool when

- the run's test gave the tool doubles: the first double whose ``when`` matches the
  arguments answers (returns or raises); a doubled tool never runs, even with live tools;
- the turn that asked for it was replayed from a recording: the recording's result answers
  (a recording holds what the tool said then; running it again could repeat a side effect);
- the turn's runtime is offline (the built-in ``test`` model) and the tool's kind reaches
  outside the project (http, command, or any kind not in ``RUNS_OFFLINE``), unless the run
  asked for live tools.

A tool declared ``confirm`` is put to the person before each call (``approval``): approved,
it goes on as above; declined, the model is told "declined by the user"; with nobody to ask
and no ``approve_all`` (``--yes``), it is refused, never run. A replayed call is not asked
again: it does not run.

Python tools (``python``: functions from modules inside the project or packages it names),
functions handed to ``Runtime`` from Python (``local``) and methods called as tools
(``method``: they go through this gate again for their own calls) run offline: they are the
project's own code.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from openprogram_yaml.errors import AskTimeout, UserDeclined
from openprogram_yaml.json_types import json_equal
from openprogram_yaml.runtime.asking import Asking
from openprogram_yaml.runtime.content import ToolContent

__all__ = [
    "RECORDED_TOOL_RESULTS",
    "RUNS_OFFLINE",
    "StandIn",
    "ToolDouble",
    "ToolGate",
    "arguments_match",
]

#: Tool sources (kinds) that run under an offline runtime without ``live_tools``.
RUNS_OFFLINE = frozenset({"python", "local", "method", "ask_user"})

#: The ``RuntimeResult.metadata`` key of a replayed turn: ``{call id: {"content", "is_error"}}``,
#: the results its tool calls got when the turn was recorded (empty when none was recorded).
RECORDED_TOOL_RESULTS = "recorded_tool_results"


@dataclass(frozen=True, slots=True)
class ToolDouble:
    """What a test says a tool returns (or raises) for arguments matching ``when``."""

    returns: object = None
    #: When set, the call fails with this message instead of returning.
    raises: str | None = None
    #: Arguments the call must have (others may be present); None matches any call.
    when: Mapping[str, object] | None = None

    def matches(self, arguments: Mapping[str, object]) -> bool:
        return self.when is None or arguments_match(self.when, arguments)


def arguments_match(expected: Mapping[str, object], arguments: Mapping[str, object]) -> bool:
    """Whether ``arguments`` has every argument ``expected`` names, with an equal value
    (``json_equal``: ``true`` is not ``1``)."""
    return all(k in arguments and json_equal(arguments[k], v) for k, v in expected.items())


@dataclass(slots=True)
class StandIn:
    """A tool call answered without running the tool, and why."""

    how: Literal["double", "replayed", "not_run", "declined"]
    #: The tool's result as the model sees it: a value (rendered like a tool's return
    #: value) or, for an error, its text.
    value: object
    is_error: bool
    #: Why a call was not run: "offline", "replay" or "unconfirmed".
    reason: str | None = None


@dataclass(eq=False, slots=True)
class ToolGate:
    """What one run allows: live tools under an offline runtime, doubles by tool name, and
    every confirmation approved (``approve_all``: ``--yes``).

    ``not_run`` collects the calls refused and ``confirmations`` every confirmation asked
    (``{"name", "question", "answer": "approved" | "declined", "by": "user" | "--yes"}``),
    for the run's record.
    """

    live_tools: bool = False
    doubles: Mapping[str, tuple[ToolDouble, ...]] = field(default_factory=dict)
    not_run: list[dict[str, str]] = field(default_factory=list)
    approve_all: bool = False
    confirmations: list[dict[str, str]] = field(default_factory=list)

    async def approval(
        self, name: str, question: str, asking: Asking | None
    ) -> StandIn | Literal["user", "--yes"]:
        """Whether the person lets this call of a confirmed tool go on: who approved it, or
        how the call is answered instead (declined, or refused with nobody to ask)."""
        if self.approve_all:
            self._confirmed(name, question, "approved", "--yes")
            return "--yes"
        if asking is None or not asking.can_ask():
            return self._refuse(
                name,
                "unconfirmed",
                f"tool {name!r} was not run: it needs the person's confirmation and nobody "
                "is there to answer; pass --yes to approve every confirmation of the run",
            )
        try:
            approved = await asking.confirm(question)
        except (UserDeclined, AskTimeout):
            approved = False
        if approved:
            self._confirmed(name, question, "approved", "user")
            return "user"
        self._confirmed(name, question, "declined", "user")
        return StandIn("declined", f"declined by the user: tool {name!r} was not run", True)

    def _confirmed(self, name: str, question: str, answer: str, by: str) -> None:
        self.confirmations.append({"name": name, "question": question, "answer": answer, "by": by})

    def stand_in(
        self,
        name: str,
        source: str,
        arguments: Mapping[str, object],
        *,
        offline: bool,
        recorded: Mapping[str, object] | None = None,
        call_id: str = "",
    ) -> StandIn | None:
        """How to answer this call without running the tool, or None to run it.

        ``recorded`` is the replayed turn's ``RECORDED_TOOL_RESULTS`` (None: not replayed).
        """
        doubles = self.doubles.get(name)
        if doubles is not None:
            return _doubled(name, doubles, arguments)
        if recorded is not None:
            entry = recorded.get(call_id)
            if isinstance(entry, Mapping):
                content = entry.get("content", "")
                # A result with images was recorded as its blocks, and is given back so.
                value: object = (
                    ToolContent(tuple(b for b in content if isinstance(b, dict)))
                    if isinstance(content, list)
                    else str(content)
                )
                return StandIn("replayed", value, bool(entry.get("is_error")))
            return self._refuse(
                name,
                "replay",
                f"tool {name!r} was not run: this call was replayed from a recording that "
                "holds no result for it; re-record the test",
            )
        if offline and not self.live_tools and source not in RUNS_OFFLINE:
            return self._refuse(
                name,
                "offline",
                f"tool {name!r} was not run: the offline test model does not run {source} "
                "tools; pass --live-tools to run them, or give the test a tool double",
            )
        return None

    def _refuse(self, name: str, reason: str, text: str) -> StandIn:
        entry = {"name": name, "reason": reason}
        if entry not in self.not_run:
            self.not_run.append(entry)
        return StandIn("not_run", text, True, reason)


def _doubled(
    name: str, doubles: tuple[ToolDouble, ...], arguments: Mapping[str, object]
) -> StandIn:
    for double in doubles:
        if double.matches(arguments):
            if double.raises is not None:
                return StandIn("double", f"Tool {name!r} failed: {double.raises}", True)
            return StandIn("double", double.returns, False)
    shown = json.dumps(dict(arguments), ensure_ascii=False, sort_keys=True, default=str)
    return StandIn(
        "double",
        f"Tool {name!r} failed: no double of tool {name!r} matches the arguments {shown} "
        "(a doubled tool never runs; add a double for them, or one with no 'when')",
        True,
    )
