"""Running one compiled method: inputs checked, prompt rendered, the model called, and the
``choices`` pick routed (a value, fields, or the method it continues with)."""

from __future__ import annotations

import contextvars
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any

from ..errors import DecisionError, ToolError
from ..json_types import JSONObject, JSONValue
from ..runtime.context import current_method
from .events import emit
from .fallback import with_fallbacks
from .history import trim_history

if TYPE_CHECKING:
    from ..compile.program import ChoiceOption, Method
    from ..runtime import Runtime
    from ..runtime.choices import Choice
    from ..runtimes.protocol import Message

__all__ = ["DEFAULT_MAX_STEPS", "RunState", "method_tool", "run_method"]

#: How many methods one run may pass through by ``choices`` unless ``max_steps`` says.
DEFAULT_MAX_STEPS = 10


@dataclass(eq=False, slots=True)
class RunState:
    """The path one run takes through methods by ``choices``, and its bound."""

    max_steps: int = DEFAULT_MAX_STEPS
    path: list[JSONObject] = field(default_factory=list)
    #: The models the run tries in turn (``run.fallback``); empty: the method's own model.
    models: tuple[str, ...] = ()
    #: Each model that failed for good and passed its call on (the record's ``fallbacks``).
    fallbacks: list[JSONObject] = field(default_factory=list)
    #: Errors a method's fallback models were already tried for (``with_fallbacks``).
    settled: list[BaseException] = field(default_factory=list)

    def enter(self, agent: str, method: str) -> JSONObject:
        if len(self.path) >= self.max_steps:
            trail = " -> ".join(str(step["method"]) for step in self.path)
            raise DecisionError(
                f"the run passed through {len(self.path)} methods by choices ({trail}) and "
                f"would enter '{method}'; max_steps is {self.max_steps}. Raise 'max_steps' or "
                "change the choices so the run ends",
                kind="max_steps",
            )
        step: JSONObject = {"agent": agent, "method": method}
        self.path.append(step)
        return step


async def run_method(
    method: Method,
    runtime: Runtime,
    inputs: Mapping[str, JSONValue],
    *,
    model: str | None = None,
    state: RunState | None = None,
    history: Sequence[Message] = (),
) -> JSONValue:
    """Check the inputs, render, and call the model through ``runtime``.

    With ``choices``, the pick decides the result: a value, fields, or the result of the
    method it continues with. ``state.path`` records every step and pick. ``history`` (a
    chat session's earlier messages) is sent before the prompt, cut to what the method's
    ``history:`` allows; methods a pick continues with are not sent it.
    """
    if state is None:
        state = RunState(method.options.max_steps or DEFAULT_MAX_STEPS)
    step = state.enter(method.agent, method.name)
    step["prompt_version"] = method.prompt_version
    emit(runtime.on_stream, {"type": "method", "agent": method.agent, "method": method.name})
    given = dict(inputs)
    values = method.prepare_inputs(inputs)
    if history and method.history is not None:
        history = trim_history(history, method.history)
    token = current_method.set(f"{method.agent}.{method.name}")
    try:
        if runtime.trace is None:
            return await _call(method, runtime, given, values, model, state, step, history)
        with runtime.trace.span("method", f"{method.agent}.{method.name}", values) as node:
            node.data["prompt_version"] = method.prompt_version
            node.output = await _call(method, runtime, given, values, model, state, step, history)
            return node.output
    finally:
        current_method.reset(token)


async def _call(
    method: Method,
    runtime: Runtime,
    given: Mapping[str, JSONValue],
    values: Mapping[str, JSONValue],
    model: str | None,
    state: RunState,
    step: JSONObject,
    history: Sequence[Message],
) -> JSONValue:
    content = method.render(values)
    opts = method.options
    # Everything async_exec is given but the model: the same for each model tried.
    call: dict[str, Any] = {
        "timeout_s": opts.timeout_s,
        "toolset": method.toolset,
        "tools_allow": method.tools_allow,
        "tools_deny": method.tools_deny,
        "model_options": {
            "temperature": opts.temperature,
            "max_tokens": opts.max_tokens,
            "thinking_level": opts.thinking_level,
        },
        "history": history,
        # A YAML method keeps exec()'s cap of 20 when it sets none (async_exec's is none).
        "max_iterations": 20 if opts.max_iterations is None else opts.max_iterations,
    }
    if opts.tool_choice is not None:
        call["tool_choice"] = opts.tool_choice
    if opts.parallel_tool_calls is not None:
        call["parallel_tool_calls"] = opts.parallel_tool_calls
    if method.choices:
        call["choices"] = _choices(method, runtime, given, model, state, step)
    chosen = model or opts.model
    if len(state.models) < 2 or chosen != state.models[0]:
        return await _exec(runtime, method, content, call, chosen)
    result, answered = await with_fallbacks(
        state.models,
        partial(_exec, runtime, method, content, call),
        runtime=runtime,
        where=f"{method.agent}.{method.name}",
        log=state.fallbacks,
        settled=state.settled,
    )
    if answered != state.models[0]:
        step["answered_by"] = answered  # the record's path says who answered this method
    return result


async def _exec(
    runtime: Runtime,
    method: Method,
    content: list[JSONObject],
    call: Mapping[str, Any],
    model_ref: str | None,
) -> JSONValue:
    """One model's try at the method's call (``call``: ``async_exec``'s other arguments)."""
    # A method's reply is text, a JSON value (response_format) or what its choices give.
    # The method's own mapping, not a copy: the runtime keeps what it made of it by the
    # object (a fresh shallow copy each call, its schema shared anyway, was made anew).
    result: JSONValue = await runtime.async_exec(
        content,
        response_format=method.response_format or None,
        model=model_ref,
        **call,
    )
    return result


def _choices(
    method: Method,
    runtime: Runtime,
    values: Mapping[str, JSONValue],
    model: str | None,
    state: RunState,
    step: JSONObject,
) -> dict[str, Choice]:
    """The runtime's ``choices``: every option a function, so the pick is recorded."""
    # Loaded only by methods that pick, as the runtime loads it only for them.
    from ..runtime.choices import Choice

    out: dict[str, Choice] = {}
    for option in method.choices or ():
        description = option.description or ""
        if option.method is not None:
            target = method.linked[option.method]
            schema = dict(option.schema or _continue_schema(target, values))
            go = _continue_with(option.name, target, runtime, values, model, state, step, method)
            out[option.name] = Choice(option.name, description, method=go, schema=schema)
        else:
            fields = dict(option.schema) if option.schema is not None else _NO_FIELDS
            settle = _settle(option, step, method, runtime)
            out[option.name] = Choice(option.name, description, method=settle, schema=fields)
    return out


_NO_FIELDS: JSONObject = {"type": "object", "properties": {}}


def _continue_schema(target: Method, known: Mapping[str, object]) -> JSONObject:
    """The fields a pick gives ``target``: its inputs the run does not already carry.

    Inputs the caller gave are carried over by name and not offered again, so the model
    cannot rewrite what the user said; it supplies only what is new.
    """
    offered = {n: s for n, s in target.inputs.items() if n not in known}
    listed = target.input_schema.get("required")
    required: list[JSONValue] = (
        [n for n in listed if isinstance(n, str) and n in offered]
        if isinstance(listed, list)
        else []
    )
    return {
        "type": "object",
        "properties": offered,
        "required": required,
        "additionalProperties": False,
    }


def _continue_with(
    name: str,
    target: Method,
    runtime: Runtime,
    values: Mapping[str, JSONValue],
    model: str | None,
    state: RunState,
    step: JSONObject,
    method: Method,
) -> Callable[..., Awaitable[JSONValue]]:
    async def go(**fields: JSONValue) -> JSONValue:
        step["choice"] = name
        if fields:
            step["fields"] = fields
        _tell_pick(runtime, method, name, fields)
        carried = {k: v for k, v in values.items() if k in target.inputs}
        return await run_method(target, runtime, {**fields, **carried}, model=model, state=state)

    return go


def _settle(
    option: ChoiceOption, step: JSONObject, method: Method, runtime: Runtime
) -> Callable[..., JSONValue]:
    def pick(**fields: JSONValue) -> JSONValue:
        step["choice"] = option.name
        _tell_pick(runtime, method, option.name, fields)
        if option.schema is not None:
            step["fields"] = fields
            return {"decision": option.name, **fields}
        return option.value

    return pick


def _tell_pick(
    runtime: Runtime, method: Method, choice: str, fields: Mapping[str, JSONValue]
) -> None:
    event: JSONObject = {"type": "pick", "agent": method.agent, "method": method.name}
    event["choice"] = choice
    if fields:
        event["fields"] = dict(fields)
    emit(runtime.on_stream, event)


_active_method_tools: contextvars.ContextVar[tuple[str, ...]] = contextvars.ContextVar(
    "openprogram_active_method_tools", default=()
)


def method_tool(name: str, method: Method, runtime: Runtime) -> dict[str, object]:
    """A method offered to the model as a tool; it runs on the calling runtime."""

    key = f"{method.agent}.{method.name}"

    async def execute(**arguments: JSONValue) -> object:
        active = _active_method_tools.get()
        if key in active:
            # Without this a model (or the offline test model, which calls every tool it is
            # offered) could recurse through a method that offers itself as a tool.
            raise ToolError(
                f"method '{method.name}' is already running in this call chain "
                f"({' -> '.join(active)}); a method tool cannot call itself"
            )
        token = _active_method_tools.set((*active, key))
        try:
            return await run_method(method, runtime, arguments)
        finally:
            _active_method_tools.reset(token)

    return {
        "spec": {
            "name": name,
            "description": method.description or f"Run method '{method.name}'.",
            "parameters": dict(method.input_schema),
        },
        "execute": execute,
    }
