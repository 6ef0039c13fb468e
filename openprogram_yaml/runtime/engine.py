"""One exec, start to finish: requests with retries, the tool loop, repairs, the trace node.

``Runtime.async_exec`` prepares an ``ExecRun`` (model, runtime, terminal, tools, deadline)
and awaits ``run()``. Kept apart from ``Runtime`` so the per-call state lives in one object
and the hot path stays a straight line.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from openprogram_yaml.errors import ConfigError, ErrorReason, LLMError, StructuredOutputError
from openprogram_yaml.json_types import JSONObject, JSONValue
from openprogram_yaml.runtime.content import assistant_reply
from openprogram_yaml.runtime.retry import RecoveryBudget, RetryInfo, backoff_delay
from openprogram_yaml.runtime.structured import StructuredTerminal
from openprogram_yaml.runtime.toolgate import RECORDED_TOOL_RESULTS
from openprogram_yaml.runtime.toolloop import ToolRunner
from openprogram_yaml.runtime.toolsets import Tool
from openprogram_yaml.runtime.turn_end import Done, Terminal, Unset
from openprogram_yaml.runtimes.failures import (
    classify_error_text,
    classify_exception,
    is_retryable,
)
from openprogram_yaml.runtimes.protocol import (
    AgentRuntimeProtocol,
    Capabilities,
    Message,
    RuntimeDelta,
    RuntimeResult,
    TurnFailure,
    Usage,
)

if TYPE_CHECKING:
    from openprogram_yaml.runtime.runtime import Runtime
    from openprogram_yaml.runtime.trace import TraceNode

__all__ = ["ExecRun", "StreamEmitter", "message_record", "turn_kwargs"]

_TOOL_CHOICES = ("auto", "required", "none")


class StreamEmitter:
    """Calls ``on_stream(event)``; an observer that raises never breaks the exec."""

    __slots__ = ("callback",)

    def __init__(self, callback: Callable[[JSONObject], None]) -> None:
        self.callback = callback

    def __call__(self, event: JSONObject) -> None:
        with contextlib.suppress(Exception):  # observers must not break the run
            self.callback(event)

    def delta(self, delta: RuntimeDelta) -> None:
        """Forward a runtime's text and thinking deltas; tool events come from the tool loop."""
        if delta.type in ("text", "thinking") and delta.content:
            self({"type": delta.type, "text": delta.content})


def turn_kwargs(
    offered: Mapping[str, Tool],
    terminal: Terminal,
    tool_choice: str | JSONObject | Unset,
    parallel_tool_calls: bool | Unset,
    caps: Capabilities,
) -> dict[str, object]:
    """The tool and format ``run_turn`` kwargs every turn of an exec shares.

    ``tool_choice`` and ``parallel_tool_calls`` are sent only when the caller set them (or,
    for ``tool_choice``, when the terminal must force its hidden tool).
    """
    kwargs: dict[str, object] = {}
    for hidden in terminal.hidden_tools:
        if hidden.name in offered:
            raise ValueError(f"tool name {hidden.name!r} is reserved for structured output")
    specs = [t.spec for t in offered.values()]
    specs.extend(terminal.hidden_tools)
    if specs:
        kwargs["tools"] = specs
        if isinstance(tool_choice, Unset):
            choice = terminal.tool_choice(bool(offered))
            if not isinstance(choice, Unset):
                kwargs["tool_choice"] = choice
        else:
            if isinstance(tool_choice, dict):
                if tool_choice.get("name") not in offered:
                    raise ValueError(f"tool_choice names a tool not offered: {tool_choice!r}")
            elif tool_choice not in _TOOL_CHOICES:
                raise ValueError(f"tool_choice must be one of {_TOOL_CHOICES} or a dict")
            kwargs["tool_choice"] = tool_choice
        if not isinstance(parallel_tool_calls, Unset) and caps.parallel_tool_calls:
            kwargs["parallel_tool_calls"] = parallel_tool_calls
    if terminal.response_format is not None:
        kwargs["response_format"] = terminal.response_format
    return kwargs


def _without_bytes(block: JSONObject) -> JSONValue:
    # Media payloads would swamp the trace; keep their shape, not their bytes.
    data = block.get("data")
    return {**block, "data": f"<{len(data)} chars>"} if isinstance(data, str) else block


def message_record(message: Message) -> JSONObject:
    content: JSONValue = (
        [_without_bytes(b) for b in message.content]
        if isinstance(message.content, list)
        else message.content
    )
    record: JSONObject = {"role": message.role, "content": content}
    if message.tool_calls:
        record["tool_calls"] = [
            {"id": c.id, "name": c.name, "arguments": c.arguments} for c in message.tool_calls
        ]
    if message.tool_call_id is not None:
        record["tool_call_id"] = message.tool_call_id
    if message.is_error:
        record["is_error"] = True
    return record


@dataclass(eq=False, slots=True)
class ExecRun:
    """The state of one exec. Built by ``Runtime.async_exec``."""

    owner: Runtime
    runtime: AgentRuntimeProtocol
    model_ref: str
    provider: str | None
    terminal: Terminal
    messages: list[Message]
    system_prompt: str | None
    kwargs: dict[str, object]
    runner: ToolRunner
    max_iterations: int | None
    timeout_s: float | None
    on_retry: Callable[[RetryInfo], object] | None
    emit: StreamEmitter | None
    streams: bool
    budget: RecoveryBudget
    started: float = 0.0
    deadline: float | None = None
    usage: Usage | None = None
    turns: int = 0
    attempts: list[JSONObject] | None = None
    repairs: list[JSONObject] | None = None
    pick: JSONObject | None = None
    node: TraceNode | None = None
    #: The last reply that ended a request (kept for the trace only).
    last_reply: RuntimeResult | None = None

    async def run(self) -> object:
        clock = self.owner.clock
        self.started = clock()
        if self.timeout_s is not None:
            self.deadline = self.started + self.timeout_s
        try:
            return await self._loop()
        finally:
            total = self.usage or Usage()
            self.owner.last_usage = total.to_dict()
            self.owner.total_usage = self.owner.total_usage + total
            if self.node is not None:
                self._record()

    async def _loop(self) -> object:
        terminal = self.terminal
        iterations = 0
        redos = 0
        while True:
            result = await self._request()
            if not self.streams and self.emit is not None and result.content:
                self.emit({"type": "text", "text": result.content})
            outcome = terminal.accept(result)
            if outcome is None:
                iterations += 1
                if self.max_iterations is not None and iterations >= self.max_iterations:
                    if isinstance(terminal, StructuredTerminal):
                        raise terminal.out_of_iterations(self.max_iterations)
                    raise self._error(
                        f"exec() hit max_iterations={self.max_iterations} with "
                        f"{len(result.tool_calls)} tool call(s) pending",
                        ErrorReason.MAX_ITERATIONS,
                    )
                self.messages.append(assistant_reply(result))
                recorded = result.metadata.get(RECORDED_TOOL_RESULTS)
                self.messages.extend(
                    await self.runner.run(
                        result.tool_calls, recorded if isinstance(recorded, dict) else None
                    )
                )
                continue
            if isinstance(outcome, Done):
                break
            if redos >= terminal.max_redos or (terminal.budgeted and not self.budget.take_repair()):
                if isinstance(outcome.error, StructuredOutputError):
                    outcome.error.repairs = redos  # the CLI says how many were tried
                raise outcome.error
            redos += 1
            if self.repairs is None:
                self.repairs = []
            self.repairs.append({"code": outcome.code, "issues": [*outcome.issues]})
            if self.emit is not None and terminal.budgeted:
                self.emit(
                    {
                        "type": "structured_output_retry",
                        "attempt": redos,
                        "code": outcome.code,
                        "issues": [*outcome.issues],
                    }
                )
            self.messages.extend(outcome.messages)
        if terminal.picks_choice:
            # Loaded only by runs that pick: most methods have no ``choices``.
            from openprogram_yaml.runtime.choices import ChoiceTerminal, Pick, resolve_choice

            assert isinstance(terminal, ChoiceTerminal)
            picked = outcome.value
            assert isinstance(picked, Pick)
            self.pick = {
                "decision": picked.choice.name,
                "fields": picked.fields,
                "repicks": redos,
                "mode": terminal.mode,
            }
            return await resolve_choice(picked.choice, picked.fields)
        return outcome.value

    # --- one model request, with transport retries ---------------------------------------

    def _remaining(self) -> float | None:
        if self.deadline is None:
            return None
        remaining = self.deadline - self.owner.clock()
        if remaining <= 0:
            raise self._timeout()
        return remaining

    async def _request(self) -> RuntimeResult:
        failures: list[TurnFailure] = []
        owner = self.owner
        while True:
            remaining = self._remaining()
            kwargs = self.kwargs if remaining is None else {**self.kwargs, "timeout_s": remaining}
            meter = owner.meter
            if meter is not None:
                meter.before_call(self.model_ref, self.runtime)  # a budget may stop the run
            self.turns += 1
            call: Awaitable[RuntimeResult] = self.runtime.run_turn(
                list(self.messages),
                system_prompt=self.system_prompt,
                model_ref=self.model_ref,
                **kwargs,
            )
            failure: TurnFailure | None
            try:
                if remaining is None:
                    result = await call
                else:
                    async with asyncio.timeout(remaining):
                        result = await call
            except (TypeError, NotImplementedError, ConfigError):
                # A bug, or files the user gave the runtime that it cannot use (a broken
                # recordings folder): neither a retry nor another model would help.
                raise
            except Exception as exc:  # a runtime that raised despite the protocol
                failure = classify_exception(exc)
            else:
                if result.usage is not None:
                    self.usage = result.usage if self.usage is None else self.usage + result.usage
                    if meter is not None:
                        meter.add(self.model_ref, self.runtime, result.usage)
                failure = result.failure
                if failure is None and result.error:
                    failure = classify_error_text(result.error)
                if failure is None:
                    self.budget.settle_transport()
                    if self.node is not None:
                        self.last_reply = result
                    return result
            failures.append(failure)
            self._note_attempt(failure, None)
            if self.deadline is not None and owner.clock() >= self.deadline:
                raise self._timeout(failures)
            if not is_retryable(failure):
                raise self._failed(failures)
            if not self.budget.take_transport():
                raise self._failed(failures)
            delay = backoff_delay(
                len(failures) - 1,
                base_s=owner.backoff_base_s,
                rand=owner.random,
                retry_after_s=failure.retry_after_s,
            )
            if self.attempts:
                self.attempts[-1]["delay_s"] = delay
            if self.deadline is not None and owner.clock() + delay > self.deadline:
                raise self._timeout(failures, pending_sleep=delay)
            if self.on_retry is not None or self.emit is not None:
                self._announce_retry(failure, len(failures), delay)
            await owner.sleep(delay)

    def _announce_retry(self, failure: TurnFailure, attempt: int, delay: float) -> None:
        """Tell ``on_retry`` and the stream that attempt ``attempt`` failed and another
        follows after ``delay`` seconds.

        The stream event matters most when streaming: what the failed attempt streamed is
        void, and the next attempt streams its reply from the start.
        """
        owner = self.owner
        info = RetryInfo(
            attempt=attempt,
            max_retries=owner.max_retries,
            delay_s=delay,
            reason=failure.reason,
            message=failure.message,
            retryable=True,
            http_status=failure.http_status,
            retry_after_s=failure.retry_after_s,
            elapsed_s=owner.clock() - self.started,
            model=self.model_ref,
            provider=self.provider,
        )
        if self.on_retry is not None:
            with contextlib.suppress(Exception):  # the seed: on_retry errors are swallowed
                self.on_retry(info)
        if self.emit is not None:
            self.emit(
                {
                    "type": "retry",
                    "attempt": attempt,
                    "max_retries": info.max_retries,
                    "delay_s": delay,
                    "reason": failure.reason,
                    "message": failure.message,
                    "http_status": failure.http_status,
                }
            )

    def _note_attempt(self, failure: TurnFailure, delay: float | None) -> None:
        if self.attempts is None:
            self.attempts = []
        self.attempts.append(
            {
                "reason": failure.reason,
                "message": failure.message,
                "retryable": failure.retryable,
                "http_status": failure.http_status,
                "retry_after_s": failure.retry_after_s,
                "delay_s": delay,
            }
        )

    # --- errors -------------------------------------------------------------------------

    @staticmethod
    def _report(failures: list[TurnFailure]) -> str:
        return "".join(
            f"\nAttempt {i}: {f.reason}: {f.message}" for i, f in enumerate(failures, start=1)
        )

    def _error(
        self,
        message: str,
        reason: ErrorReason | str,
        *,
        failure: TurnFailure | None = None,
        attempts: int = 1,
        retryable: bool = False,
    ) -> LLMError:
        return LLMError(
            message,
            reason=reason,
            retryable=retryable,
            http_status=failure.http_status if failure else None,
            retry_after_s=failure.retry_after_s if failure else None,
            attempts=attempts,
            elapsed_s=self.owner.clock() - self.started,
            provider=self.provider,
            model=self.model_ref,
        )

    def _failed(self, failures: list[TurnFailure]) -> LLMError:
        last = failures[-1]
        head = f"exec() failed after {len(failures)} attempt(s)"
        if not is_retryable(last):
            head += f" (not retryable: {last.reason})"
        return self._error(
            head + ":" + self._report(failures),
            last.reason,
            failure=last,
            attempts=len(failures),
            retryable=is_retryable(last),
        )

    def _timeout(
        self, failures: list[TurnFailure] | None = None, pending_sleep: float | None = None
    ) -> LLMError:
        elapsed = self.owner.clock() - self.started
        head = f"exec() timed out after {elapsed:.3f}s (timeout_s={self.timeout_s})"
        if pending_sleep is not None:
            head += f"; the next retry would have waited {pending_sleep:.3f}s past the deadline"
        failures = failures or []
        return self._error(
            head + (":" + self._report(failures) if failures else ""),
            ErrorReason.TIMEOUT,
            failure=failures[-1] if failures else None,
            attempts=max(1, len(failures)),
        )

    # --- trace --------------------------------------------------------------------------

    def _record(self) -> None:
        assert self.node is not None
        data = self.node.data
        data["model"] = self.model_ref
        data["provider"] = self.provider
        data["session_id"] = self.owner.session_id
        data["terminal"] = self.terminal.name
        data["system_prompt"] = self.system_prompt
        data["messages"] = [message_record(m) for m in self.messages]
        data["usage"] = (self.usage or Usage()).to_dict()
        data["turns"] = self.turns
        data["elapsed_s"] = self.owner.clock() - self.started
        data["attempts"] = self.attempts or []
        data["repairs"] = self.repairs or []
        data["tool_calls"] = self.runner.records
        if self.pick is not None:
            data["pick"] = self.pick
        if self.last_reply is not None:
            # Who answered, as the server said (a dated model id, the reply's id).
            meta = self.last_reply.metadata
            data["response"] = {
                "model": meta.get("model"),
                "id": meta.get("response_id"),
                "finish_reason": self.last_reply.finish_reason,
            }
