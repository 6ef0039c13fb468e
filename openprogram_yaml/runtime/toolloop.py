"""Running the tool calls a model asked for, and turning every outcome into a tool message.

Nothing a tool does ends the exec: an unknown tool, refused tool, invalid arguments or a
raising tool become an error result (``Message(role="tool", is_error=True)``) the model sees
and can react to. ``execute`` receives the parsed arguments as keyword arguments.
"""

from __future__ import annotations

import asyncio
import inspect
import json
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from openprogram_yaml.errors import StructuredOutputError
from openprogram_yaml.json_types import JSONObject
from openprogram_yaml.runtime.asking import Asking
from openprogram_yaml.runtime.blocking import run_blocking
from openprogram_yaml.runtime.content import ToolContent
from openprogram_yaml.runtime.structured import parse_json_strict
from openprogram_yaml.runtime.toolgate import StandIn, ToolGate
from openprogram_yaml.runtime.toolsets import Tool, ToolPolicy, current_policy
from openprogram_yaml.runtime.validators import validator_for
from openprogram_yaml.runtimes.protocol import Message, ToolCall

if TYPE_CHECKING:
    from openprogram_yaml.runtime.trace import SessionTrace

__all__ = [
    "MAX_PARALLEL_CALLS",
    "MAX_RESULT_CHARS",
    "MAX_SAME_FAILURES",
    "ToolRunner",
    "call_maybe_async",
    "render_result",
]

#: Tool results longer than this are cut, with a marker saying how much was left out.
MAX_RESULT_CHARS = 20_000
#: A call (same tool, same arguments) that failed this many times is not run again.
MAX_SAME_FAILURES = 2
#: How many calls of one reply run at once; the rest wait their turn. The model decides how
#: many it asks for: 1,500 calls of a command tool started 1,500 programs at once, past a
#: process's usual 1,024 file descriptors (and in ``serve`` every run shares those).
MAX_PARALLEL_CALLS = 16

StreamEmit = Callable[[JSONObject], None]


async def call_maybe_async(
    fn: Callable[..., object], is_async: bool, kwargs: Mapping[str, object]
) -> object:
    """Call ``fn(**kwargs)``: awaited if async, in a worker thread if sync (it may block:
    ``runtime.blocking`` says why, and where)."""
    if is_async:
        result = fn(**kwargs)
    else:
        result = await run_blocking(fn, **kwargs)
    if inspect.isawaitable(result):
        result = await result
    return result


def render_result(value: object, cap: int = MAX_RESULT_CHARS) -> str:
    """A tool's return value as the text the model sees, capped at ``cap`` characters.

    Of a ``ToolContent`` (text and images), its text with a note for each image: what
    records, traces and events show; the model gets the blocks themselves.
    """
    if isinstance(value, str):
        text = value
    elif isinstance(value, ToolContent):
        text = value.text()
    else:
        try:
            text = json.dumps(value, ensure_ascii=False, default=str)
        except (TypeError, ValueError):
            text = repr(value)
    if len(text) > cap:
        text = f"{text[:cap]}\n[truncated: {len(text) - cap} more characters]"
    return text


class ToolRunner:
    """Runs the tool calls of one exec; remembers failures across its turns."""

    def __init__(
        self,
        offered: Mapping[str, Tool],
        policy: ToolPolicy,
        *,
        known: Mapping[str, Tool],
        sequential: bool = False,
        emit: StreamEmit | None = None,
        trace: SessionTrace | None = None,
        max_result_chars: int = MAX_RESULT_CHARS,
        gate: ToolGate | None = None,
        asking: Asking | None = None,
        offline: bool = False,
    ) -> None:
        self.offered = offered
        self.policy = policy
        self.known = known
        self.sequential = sequential
        self.emit = emit
        self.trace = trace
        self.max_result_chars = max_result_chars
        self.gate = gate if gate is not None else ToolGate()
        #: Who approves calls of tools declared ``confirm`` (None: nobody is there).
        self.asking = asking
        #: The turns come from an offline runtime (the ``test`` model): see ``toolgate``.
        self.offline = offline
        self.failures: dict[tuple[str, str], int] = {}
        self.records: list[JSONObject] = []

    async def run(
        self, calls: list[ToolCall], recorded: Mapping[str, object] | None = None
    ) -> list[Message]:
        """One tool message per call, in the order of ``calls``.

        ``recorded``: the results a replayed turn's calls got when it was recorded (None when
        the turn was not replayed); such calls are answered from it, never run.
        """
        if len(calls) == 1 or self.sequential:
            return [await self._run_one(call, recorded) for call in calls]
        if len(calls) <= MAX_PARALLEL_CALLS:
            return list(await asyncio.gather(*(self._run_one(call, recorded) for call in calls)))
        slots = asyncio.Semaphore(MAX_PARALLEL_CALLS)

        async def in_turn(call: ToolCall) -> Message:
            async with slots:
                return await self._run_one(call, recorded)

        return list(await asyncio.gather(*(in_turn(call) for call in calls)))

    def _refusal(self, name: str) -> str | None:
        tool = self.offered.get(name)
        reason = self.policy.refusal(name)
        if reason is not None:
            return f"Refused: {reason}."
        if tool is None:
            if name in self.known:
                return f"Refused: tool {name!r} is not available in this call."
            available = ", ".join(sorted(self.offered)) or "none"
            return f"Unknown tool {name!r}. Available tools: {available}."
        return None

    def _arguments(self, tool: Tool, raw: str) -> tuple[JSONObject | None, str]:
        """Parsed, validated arguments, or None and the problem."""
        try:
            args = parse_json_strict(raw) if raw.strip() else {}
        except StructuredOutputError as exc:
            return None, f"Invalid arguments for {tool.name!r}: {'; '.join(exc.issues)}"
        if not isinstance(args, dict):
            return None, f"Invalid arguments for {tool.name!r}: expected a JSON object"
        issues = validator_for(
            tool.spec.parameters, what=f"parameters of tool {tool.name!r}"
        ).errors(args)
        if issues:
            return None, f"Invalid arguments for {tool.name!r}:\n" + "\n".join(
                f"- {i}" for i in issues
            )
        return args, ""

    @staticmethod
    def _key(call: ToolCall) -> tuple[str, str]:
        try:
            canonical = json.dumps(json.loads(call.arguments or "{}"), sort_keys=True)
        except (ValueError, RecursionError):
            canonical = call.arguments
        return call.name, canonical

    async def _run_one(self, call: ToolCall, recorded: Mapping[str, object] | None) -> Message:
        # Canonical arguments only where failures are counted: most calls never fail.
        key = self._key(call) if self.failures else None
        record: JSONObject = {"id": call.id, "name": call.name, "arguments": call.arguments}
        self.records.append(record)
        if self.emit is not None:
            self.emit(
                {"type": "tool_use", "id": call.id, "name": call.name, "arguments": call.arguments}
            )
        outcome, ok = await self._outcome(call, key, record, recorded)
        text = outcome if isinstance(outcome, str) else render_result(outcome)
        if not ok:
            key = key or self._key(call)
            self.failures[key] = self.failures.get(key, 0) + 1
        record["is_error"] = not ok
        record["result"] = text if len(text) <= 2000 else text[:2000] + "…"
        if self.emit is not None:
            self.emit(
                {
                    "type": "tool_result",
                    "id": call.id,
                    "name": call.name,
                    "content": text,
                    "is_error": not ok,
                }
            )
        content: str | list[JSONObject] = text
        if isinstance(outcome, ToolContent):
            content = _capped(outcome.blocks, self.max_result_chars)
        return Message("tool", content, tool_call_id=call.id, name=call.name, is_error=not ok)

    async def _outcome(
        self,
        call: ToolCall,
        key: tuple[str, str] | None,
        record: JSONObject,
        recorded: Mapping[str, object] | None,
    ) -> tuple[str | ToolContent, bool]:
        refusal = self._refusal(call.name)
        if refusal is not None:
            return refusal, False
        if key is not None and self.failures.get(key, 0) >= MAX_SAME_FAILURES:
            return (
                f"Not run: this exact call to {call.name!r} already failed "
                f"{self.failures[key]} times. Change the arguments or try something else.",
                False,
            )
        tool = self.offered[call.name]
        args, problem = self._arguments(tool, call.arguments)
        if args is None:
            return problem, False
        stand_in = self.gate.stand_in(
            tool.name, tool.source, args, offline=self.offline, recorded=recorded, call_id=call.id
        )
        # Asked only of a call that would run (for real or as a test's double): a replayed
        # or offline-refused call does nothing the person could approve.
        if tool.confirm is not None and (stand_in is None or stand_in.how == "double"):
            try:
                question = tool.confirm(args)
            except Exception as exc:  # a question that cannot be written: the call fails
                return f"Tool {call.name!r} failed: {exc}", False
            approval = await self.gate.approval(tool.name, question, self.asking)
            if isinstance(approval, StandIn):
                return self._stood_in(tool, args, approval, record)
            record["confirmed"] = approval
        if stand_in is not None:
            return self._stood_in(tool, args, stand_in, record)
        token = current_policy().set(self.policy)
        try:
            if self.trace is None:
                value = await call_maybe_async(tool.execute, tool.is_async, args)
            else:
                with self.trace.span("tool", name=tool.name, inputs=args) as node:
                    node.data["call_id"] = call.id
                    if "confirmed" in record:
                        node.data["confirmed"] = record["confirmed"]
                    value = await call_maybe_async(tool.execute, tool.is_async, args)
                    node.output = render_result(value, 2000)
        except Exception as exc:  # any tool failure is reported to the model, not raised
            # Capped as a result is: an error's text is the tool's to choose, of any length.
            failed = f"Tool {call.name!r} failed: {type(exc).__name__}: {exc}"
            return render_result(failed, self.max_result_chars), False
        finally:
            current_policy().reset(token)
        if isinstance(value, ToolContent):
            return value, True  # the blocks go to the model as they are
        return render_result(value, self.max_result_chars), True

    def _stood_in(
        self, tool: Tool, args: JSONObject, stand_in: StandIn, record: JSONObject
    ) -> tuple[str | ToolContent, bool]:
        """The answer of a call the gate kept from running, marked in the record and trace."""
        mark: JSONObject = (
            {"not_run": stand_in.reason} if stand_in.how == "not_run" else {stand_in.how: True}
        )
        record.update(mark)
        text = render_result(stand_in.value, self.max_result_chars)
        if self.trace is not None:
            # A span even for a call that did not run: the trace lists every call the model
            # made, and tests' `tools_called` read it.
            with self.trace.span("tool", name=tool.name, inputs=args) as node:
                node.data["call_id"] = record["id"]
                node.data.update(mark)
                if "confirmed" in record:
                    node.data["confirmed"] = record["confirmed"]
                node.output = text[:2000]
        if isinstance(stand_in.value, ToolContent):
            return stand_in.value, not stand_in.is_error  # blocks, as the tool gave them
        return text, not stand_in.is_error


def _capped(blocks: tuple[JSONObject, ...], cap: int) -> list[JSONObject]:
    """A tool result's blocks with each text block capped like a text result."""
    return [
        {**block, "text": render_result(str(block.get("text", "")), cap)}
        if block.get("type") == "text"
        else dict(block)
        for block in blocks
    ]
