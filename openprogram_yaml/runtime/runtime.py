"""``Runtime``: ``exec()`` / ``async_exec()`` around any runtime, the same for every runtime.

Retries, timeouts, structured output and repair, the tool loop, toolsets, ``choices``,
streaming events, usage and the session trace are applied here (see ``engine.ExecRun``);
the runtime chosen for the model only answers single turns. ``exec`` is the sync face of
``async_exec``: it runs on an event loop kept per thread, so pooled connections survive
between sync calls.
"""

from __future__ import annotations

import asyncio
import os
import random as _random
import secrets
import threading
import time
import warnings
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any, TypeVar

from openprogram_yaml.errors import UsageError
from openprogram_yaml.json_types import JSONObject, JSONValue
from openprogram_yaml.runtime.asking import DEFAULT_ASK_TIMEOUT_S, Asker, Asking
from openprogram_yaml.runtime.callable import CallableRuntime, CallFn
from openprogram_yaml.runtime.content import render_content
from openprogram_yaml.runtime.engine import ExecRun, StreamEmitter, message_record, turn_kwargs
from openprogram_yaml.runtime.request import ExecRequest
from openprogram_yaml.runtime.retry import (
    DEFAULT_BACKOFF_BASE_S,
    DEFAULT_MAX_RETRIES,
    RecoveryBudget,
    RetryInfo,
    resolve_backoff_base,
    resolve_max_retries,
)
from openprogram_yaml.runtime.structured import (
    DEFAULT_VALIDATION_RETRIES,
    StructuredTerminal,
    normalize_response_format,
    select_mode,
)
from openprogram_yaml.runtime.toolgate import ToolGate
from openprogram_yaml.runtime.toolloop import ToolRunner
from openprogram_yaml.runtime.toolsets import (
    RESERVED_TOOLSETS,
    Tool,
    ToolsetPreset,
    as_tool,
    offer_tools,
)
from openprogram_yaml.runtime.turn_end import TEXT_TERMINAL, UNSET, Terminal, Unset
from openprogram_yaml.runtimes.protocol import (
    AgentRuntimeProtocol,
    Message,
    RuntimeSelectorProtocol,
    Usage,
    capabilities_of,
    is_runtime,
    is_selector,
)
from openprogram_yaml.runtimes.rules import split_model_ref

if TYPE_CHECKING:
    from openprogram_yaml.runtime.meter import UsageMeter
    from openprogram_yaml.runtime.syncface import LoopRunner
    from openprogram_yaml.runtime.trace import SessionTrace
    from openprogram_yaml.runtimes.select import RuntimeSelector

__all__ = ["Runtime"]

T = TypeVar("T")

#: Held while a ``Runtime`` makes its ``LoopRunner`` (rarely: once per Runtime that runs sync).
_LOOP_RUNNER_MADE = threading.Lock()


def _env_value(name: str) -> str | None:
    """``os.environ.get(name)``, without the ``KeyError`` that ``Mapping.get`` raises and
    catches inside for a name that is not set (about 1 us a look; every run's ``Runtime``
    looks up three settings that are seldom set). The same mapping is read, as it is now."""
    environ: Any = os.environ
    data = getattr(environ, "_data", None)
    if not isinstance(data, dict):  # not CPython's os.environ
        return os.environ.get(name)
    raw = data.get(environ.encodekey(name))
    return None if raw is None else str(environ.decodevalue(raw))


def _default_selector() -> RuntimeSelector:
    """The registry's selection, for a ``Runtime`` given no ``call=`` or ``runtimes=``."""
    # Loaded on first need: a Runtime given call= or runtimes= never reads the registry.
    from openprogram_yaml.runtimes.select import RuntimeSelector

    return RuntimeSelector()


class Runtime:
    """Runs model calls: ``exec(content, ...)`` returns text, a JSON value or a choice result.

    Constructor arguments follow the seed (``call``, ``model``, ``max_retries``, ``api_key``,
    ``skills``); the keyword-only ones inject collaborators: ``runtimes`` (a selector with
    ``.select(model_ref)`` or one runtime instance), ``clock`` / ``sleep`` / ``random`` (so tests
    never sleep), ``on_stream``, ``trace`` (a ``SessionTrace``), ``tools`` and ``toolsets``
    (the registered set an exec gets when it names none), ``tool_gate`` (which tool calls run
    for real: under the offline ``test`` model no http or command tool does by default),
    ``on_retry`` (the default of every exec's ``on_retry``), ``asker`` (the front end
    ``ask`` / ``confirm`` / ``form`` and confirmed tools put questions to; None: headless).
    """

    def __init__(
        self,
        call: CallFn | None = None,
        model: str = "default",
        max_retries: int | None = None,
        api_key: str | None = None,
        skills: bool | Sequence[str] | None = None,
        *,
        runtimes: RuntimeSelectorProtocol | AgentRuntimeProtocol | None = None,
        backoff_base_s: float | None = None,
        clock: Callable[[], float] | None = None,
        sleep: Callable[[float], Awaitable[object]] | None = None,
        random: Callable[[], float] | None = None,
        on_stream: Callable[[JSONObject], None] | None = None,
        trace: SessionTrace | None = None,
        tools: Iterable[object] = (),
        toolsets: Mapping[str, ToolsetPreset] | None = None,
        max_validation_retries: int = DEFAULT_VALIDATION_RETRIES,
        tool_gate: ToolGate | None = None,
        on_retry: Callable[[RetryInfo], object] | None = None,
        asker: Asker | None = None,
    ) -> None:
        self.model = model
        # Their variables are rarely set: one cheap look each, and ``resolve_*`` (which reads
        # the variable again and says what is wrong with it) only when one is.
        self.max_retries = (
            DEFAULT_MAX_RETRIES
            if max_retries is None and _env_value("OPENPROGRAM_MAX_RETRIES") is None
            else resolve_max_retries(max_retries)
        )
        self.backoff_base_s = (
            DEFAULT_BACKOFF_BASE_S
            if backoff_base_s is None and _env_value("OPENPROGRAM_RETRY_BACKOFF_BASE") is None
            else resolve_backoff_base(backoff_base_s)
        )
        self.skills = skills
        self.system = ""
        self.thinking_level = "off"
        self.session_id = "op-" + secrets.token_hex(8)
        self.on_stream = on_stream
        #: Told of every retry of every exec that names no ``on_retry`` of its own.
        self.on_retry = on_retry
        self.last_usage: dict[str, int] | None = None
        #: Usage summed over every exec of this Runtime (nested execs included).
        self.total_usage = Usage()
        #: Told of every reply's usage and asked before every request (costs, budgets).
        self.meter: UsageMeter | None = None
        self.trace = trace
        self.clock: Callable[[], float] = clock or time.monotonic
        self.sleep: Callable[[float], Awaitable[object]] = sleep or asyncio.sleep
        self.random: Callable[[], float] = random or _random.random
        if max_validation_retries not in (0, 1, 2):
            raise ValueError("max_validation_retries must be 0, 1 or 2")
        self.max_validation_retries = max_validation_retries
        #: Who answers ``ask`` / ``confirm`` / ``form`` and tools declared ``confirm``.
        self.asking = Asking(asker, self.sleep)
        self._api_key = api_key
        self._closed = False
        self._skills_text: str | None = None
        self._tools: dict[str, Tool] = {}
        #: Which tool calls run for real (``runtime.toolgate``); one per run.
        self.tool_gate = tool_gate if tool_gate is not None else ToolGate()
        self._toolsets: dict[str, ToolsetPreset] = {}
        #: The sync face's loops (``exec`` and the sync ``ask``…), made at its first use:
        #: a run's Runtime used only through ``async_exec`` never needs one.
        self._loop_runner: LoopRunner | None = None
        self._selector: RuntimeSelectorProtocol | None = None
        self._fixed: AgentRuntimeProtocol | None = None
        if runtimes is not None and call is not None:
            raise TypeError("pass call= or runtimes=, not both")
        if runtimes is not None:
            if is_selector(runtimes):
                self._selector = runtimes
            elif is_runtime(runtimes):
                self._fixed = runtimes
            else:
                raise TypeError("runtimes= must be a selector (.select) or a runtime (.run_turn)")
        elif call is not None:
            self._fixed = CallableRuntime(call)
        elif (
            type(self)._async_call is not Runtime._async_call
            or type(self)._call is not Runtime._call
        ):
            self._fixed = CallableRuntime(self._async_call)
        elif split_model_ref(model)[0] is not None:
            # The seed: an unknown "provider:model_id" is a ValueError here, not at the first
            # exec. The selection is kept, so the first exec does not decide it again.
            selector = self._selector = _default_selector()
            try:
                selector.explain(model)
            except UsageError as exc:
                raise ValueError(str(exc)) from None
        self.register_tools(*tools)
        for name, preset in (toolsets or {}).items():
            self.register_toolset(name, preset)

    @property
    def _loops(self) -> LoopRunner:
        runner = self._loop_runner
        if runner is None:
            with _LOOP_RUNNER_MADE:  # two threads' first exec at once make one between them
                runner = self._loop_runner
                if runner is None:
                    from openprogram_yaml.runtime.syncface import LoopRunner  # sync runs only

                    runner = self._loop_runner = LoopRunner()
        return runner

    def __repr__(self) -> str:
        return (
            f"Runtime(model={self.model!r}, max_retries={self.max_retries}, "
            f"session_id={self.session_id!r})"
        )

    # --- subclass hooks (the seed's _call / _async_call) -------------------------------

    def _call(
        self,
        content: list[JSONObject],
        model: str = "default",
        response_format: JSONObject | None = None,
    ) -> object:
        """Override to call a model once, synchronously (no retries: exec wraps it).
        ``response_format`` is the caller's, as passed to ``exec``."""
        raise NotImplementedError(
            "no provider configured: pass call=, a provider:model, or subclass"
        )

    async def _async_call(
        self,
        content: list[JSONObject],
        model: str = "default",
        response_format: JSONObject | None = None,
    ) -> object:
        """Override to call a model once, asynchronously. Defaults to ``_call`` in a thread."""
        return await asyncio.to_thread(self._call, content, model, response_format)

    # --- tools --------------------------------------------------------------------------

    def register_tools(self, *tools: object) -> None:
        """Add tools to the set an exec gets by default (``tools=None``)."""
        for obj in tools:
            tool = as_tool(obj)
            self._tools[tool.name] = tool

    def register_toolset(self, name: str, preset: ToolsetPreset) -> None:
        """Add a named preset usable as ``toolset=name``."""
        if name in RESERVED_TOOLSETS:
            raise ValueError(f"toolset name {name!r} is reserved")
        self._toolsets[name] = preset

    # --- asking the person (the seed's "Asking the user") ---------------------------------

    def can_ask(self) -> bool:
        """Whether anyone is there to answer (False on headless runs)."""
        return self.asking.can_ask()

    def ask(
        self,
        prompt: str,
        options: Sequence[str] | None = None,
        multi: bool = False,
        questions: Sequence[str] | None = None,
        timeout: float = DEFAULT_ASK_TIMEOUT_S,
        default: JSONValue | None = None,
    ) -> JSONValue:
        """Ask the person: free text, one of ``options`` (a list of them with ``multi``), or
        a list of answers to ``questions`` asked in one card. ``UserDeclined`` if declined;
        with no answer in ``timeout`` seconds (headless: at once) ``default``, else
        ``AskTimeout``."""
        return self._loops.run(self.asking.ask(prompt, options, multi, questions, timeout, default))

    async def async_ask(
        self,
        prompt: str,
        options: Sequence[str] | None = None,
        multi: bool = False,
        questions: Sequence[str] | None = None,
        timeout: float = DEFAULT_ASK_TIMEOUT_S,
        default: JSONValue | None = None,
    ) -> JSONValue:
        """``ask`` for async callers."""
        return await self.asking.ask(prompt, options, multi, questions, timeout, default)

    def confirm(self, prompt: str, default: bool = False) -> bool:
        """A yes/no question; ``default`` when no answer comes (or nobody is there)."""
        return self._loops.run(self.asking.confirm(prompt, default))

    async def async_confirm(self, prompt: str, default: bool = False) -> bool:
        """``confirm`` for async callers."""
        return await self.asking.confirm(prompt, default)

    def form(self, prompt: str, fields: Sequence[str | Mapping[str, object]]) -> JSONObject:
        """Several fields in one card (names, or mappings with a ``name``); the answer maps
        each name to its value."""
        return self._loops.run(self.asking.form(prompt, fields))

    async def async_form(
        self, prompt: str, fields: Sequence[str | Mapping[str, object]]
    ) -> JSONObject:
        """``form`` for async callers."""
        return await self.asking.form(prompt, fields)

    # --- exec ---------------------------------------------------------------------------

    def _runtime_for(
        self, model_ref: str, stream_fn: AgentRuntimeProtocol | CallFn | None
    ) -> AgentRuntimeProtocol:
        if stream_fn is not None:
            if is_runtime(stream_fn):
                return stream_fn
            return CallableRuntime(stream_fn)
        if self._fixed is not None:
            return self._fixed
        if self._selector is None:
            if model_ref == "default":
                raise NotImplementedError(
                    "no provider configured: pass call=, runtimes=, a 'provider:model' or 'test'"
                )
            self._selector = _default_selector()
        return self._selector.select(model_ref)

    def _system_prompt(self, extra: list[str], terminal: Terminal) -> str | None:
        if self.skills and self._skills_text is None:  # once, and only with skills
            from openprogram_yaml.runtime.skills import default_skill_dirs, skills_block

            dirs = default_skill_dirs() if self.skills is True else list(self.skills)
            self._skills_text = skills_block(dirs)
        if not (extra or self._skills_text or terminal.system_suffix):
            return self.system or None  # the usual exec: nothing to join
        parts = [self.system, *extra, self._skills_text or "", terminal.system_suffix]
        text = "\n\n".join(p for p in parts if p)
        return text or None

    def exec(
        self,
        content: str | Sequence[object],
        context: object = None,
        response_format: object = None,
        model: str | None = None,
        tools: Sequence[object] | None = None,
        toolset: str | None = None,
        tools_source: Sequence[str] | None = None,
        tools_allow: Sequence[str] | None = None,
        tools_deny: Sequence[str] | None = None,
        tool_choice: str | JSONObject | Unset = UNSET,
        parallel_tool_calls: bool | Unset = UNSET,
        max_iterations: int = 20,
        choices: object = None,
        timeout_s: float | None = None,
        on_retry: Callable[[RetryInfo], object] | None = None,
        web_search: bool = False,
        stream_fn: AgentRuntimeProtocol | CallFn | None = None,
        max_validation_retries: int | None = None,
        model_options: Mapping[str, object] | None = None,
    ) -> Any:
        """Call the model (see ``async_exec``); blocks until the result is ready."""
        if self._closed:
            raise RuntimeError("this Runtime is closed")
        return self._loops.run(
            self.async_exec(
                content,
                context,
                response_format,
                model,
                timeout_s,
                on_retry,
                tools,
                toolset,
                max_iterations,
                tools_source=tools_source,
                tools_allow=tools_allow,
                tools_deny=tools_deny,
                tool_choice=tool_choice,
                parallel_tool_calls=parallel_tool_calls,
                choices=choices,
                web_search=web_search,
                stream_fn=stream_fn,
                max_validation_retries=max_validation_retries,
                model_options=model_options,
            )
        )

    async def async_exec(
        self,
        content: str | Sequence[object],
        context: object = None,
        response_format: object = None,
        model: str | None = None,
        timeout_s: float | None = None,
        on_retry: Callable[[RetryInfo], object] | None = None,
        tools: Sequence[object] | None = None,
        toolset: str | None = None,
        max_iterations: int | None = None,
        *,
        tools_source: Sequence[str] | None = None,
        tools_allow: Sequence[str] | None = None,
        tools_deny: Sequence[str] | None = None,
        tool_choice: str | JSONObject | Unset = UNSET,
        parallel_tool_calls: bool | Unset = UNSET,
        choices: object = None,
        web_search: bool = False,
        stream_fn: AgentRuntimeProtocol | CallFn | None = None,
        max_validation_retries: int | None = None,
        model_options: Mapping[str, object] | None = None,
        history: Sequence[Message] = (),
    ) -> Any:
        """Call the model: text by default, a validated JSON value with ``response_format``,
        the decision result with ``choices``. ``context`` is accepted and ignored (legacy);
        ``history`` is the conversation so far (user and assistant messages, oldest first),
        sent before ``content``.
        The positional order is the seed's; ``max_iterations=None`` puts no cap on the tool
        loop (the seed: only ``exec`` defaults to 20), ``timeout_s`` still bounds it.
        ``model_options`` (``temperature``, ``max_tokens``, ``thinking_level``, …) are passed
        to the runtime on every turn; ``None`` values are left out."""
        request = ExecRequest(
            content, response_format, model, tools, toolset, tools_source, tools_allow,
            tools_deny, tool_choice, parallel_tool_calls, max_iterations, choices, timeout_s,
            on_retry, web_search, stream_fn, max_validation_retries, model_options,
            tuple(history),
        )  # fmt: skip
        if self.trace is None:
            return await self._prepare(request).run()
        # Open the node first, so that a run failing before its first request is recorded too.
        with self.trace.span("exec", name=model or self.model) as node:
            node.data["options"] = options = request.traced_options()
            run = self._prepare(request)
            run.node = node
            node.inputs = {"content": message_record(run.messages[-1])["content"]}
            options["offered_tools"] = list(run.runner.offered)
            node.output = await run.run()
        return node.output

    def _prepare(self, request: ExecRequest) -> ExecRun:
        """Everything an exec needs, checked before any request is made."""
        if self._closed:
            raise RuntimeError("this Runtime is closed")
        if request.max_iterations is not None and (
            isinstance(request.max_iterations, bool) or not isinstance(request.max_iterations, int)
        ):
            raise TypeError("max_iterations must be an int or None")
        if request.max_validation_retries is not None and request.max_validation_retries not in (
            0,
            1,
            2,
        ):
            raise ValueError("max_validation_retries must be 0, 1 or 2")
        model_ref = request.model or self.model
        runtime = self._runtime_for(model_ref, request.stream_fn)
        caps = capabilities_of(runtime, model_ref)
        terminal: Terminal
        if request.choices is not None and request.response_format is not None:
            # Both decide what the turn ends with; a schema option gives one choice fields.
            raise UsageError(
                "choices and response_format cannot be combined: the turn ends with a pick; "
                "to get structured fields with a choice, give that option a schema "
                '(choices={"refund": ("Refund the order", {"amount": float})})'
            )
        if request.response_format is not None:
            fmt = normalize_response_format(request.response_format)
            retries = (
                self.max_validation_retries
                if request.max_validation_retries is None
                else request.max_validation_retries
            )
            terminal = StructuredTerminal(fmt, select_mode(fmt, caps), retries)
        elif request.choices is not None:
            from openprogram_yaml.runtime.choices import ChoiceTerminal, normalize_choices

            terminal = ChoiceTerminal(normalize_choices(request.choices), caps)
        else:
            terminal = TEXT_TERMINAL
        message, system_extra = render_content(request.content)
        offered, policy, explicit = offer_tools(
            self._tools,
            self._toolsets,
            request.tools,
            request.toolset,
            request.tools_source,
            request.tools_allow,
            request.tools_deny,
        )
        if offered and not caps.tools:
            if explicit:
                raise ValueError(f"the runtime for {model_ref!r} cannot call tools")
            # Said, not silent: these were registered for every exec that names no tools.
            who = "a call= function" if isinstance(runtime, CallableRuntime) else "the runtime"
            warnings.warn(
                f"{who} serving {model_ref!r} cannot call tools, so the registered tools "
                f"({', '.join(sorted(offered))}) are not offered; pass toolset='none' or "
                "tools=[] to run without them",
                RuntimeWarning,
                stacklevel=2,
            )
            offered = {}
        parallel_tool_calls = request.parallel_tool_calls
        if isinstance(terminal, StructuredTerminal):
            parallel_tool_calls = terminal.tool_settings(
                offered, request.tool_choice, parallel_tool_calls
            )
        kwargs = turn_kwargs(offered, terminal, request.tool_choice, parallel_tool_calls, caps)
        if isinstance(runtime, CallableRuntime) and request.response_format is not None:
            # The seed: a call= function and _call() get the caller's response_format.
            kwargs["response_format"] = request.response_format
        kwargs["session_id"] = self.session_id
        if self.thinking_level != "off":
            kwargs["thinking_level"] = self.thinking_level
        if request.web_search:
            if isinstance(runtime, CallableRuntime):
                raise UsageError(
                    "web_search=True needs a provider runtime (openai, anthropic): a call= "
                    "function is given content, model and response_format only"
                )
            kwargs["web_search"] = True
        for key, value in (request.model_options or {}).items():
            # Sampling knobs (temperature, max_tokens, …) go to the runtime as they are.
            if value is not None:
                kwargs[key] = value
        if self._api_key:
            kwargs["api_key"] = self._api_key
        emit = StreamEmitter(self.on_stream) if self.on_stream is not None else None
        streams = emit is not None and caps.streaming
        if streams:
            assert emit is not None
            kwargs["on_delta"] = emit.delta
        timeout_s = request.timeout_s
        if timeout_s is None:
            raw = (_env_value("OPENPROGRAM_EXEC_TIMEOUT_S") or "").strip()
            timeout_s = float(raw) if raw else None
        if timeout_s is not None and timeout_s <= 0:
            timeout_s = None
        # Even with no tools offered a model may call one; the runner answers it with an error.
        runner = ToolRunner(
            offered,
            policy,
            known=self._tools,
            emit=emit,
            trace=self.trace,
            sequential=request.parallel_tool_calls is False,
            gate=self.tool_gate,
            asking=self.asking,
            offline=bool(getattr(runtime, "offline", False)),
        )
        return ExecRun(
            owner=self,
            runtime=runtime,
            model_ref=model_ref,
            provider=getattr(runtime, "provider", None) or model_ref.partition(":")[0] or None,
            terminal=terminal,
            messages=[*request.history, message],
            system_prompt=self._system_prompt(system_extra, terminal),
            kwargs=kwargs,
            runner=runner,
            max_iterations=None
            if request.max_iterations is None
            else max(1, request.max_iterations),
            timeout_s=timeout_s,
            on_retry=request.on_retry if request.on_retry is not None else self.on_retry,
            emit=emit,
            streams=streams,
            budget=RecoveryBudget(self.max_retries - 1),
        )

    # --- the sync face and lifetime -----------------------------------------------------

    async def aclose(self) -> None:
        """Close the selector this object was given (``runtimes=``) or created, and so the
        runtimes it created; later execs raise ``RuntimeError``. A single runtime instance
        given as ``runtimes=`` is shared and left open, as a selector leaves shared
        instances open."""
        self._closed = True
        selector, self._selector = self._selector, None
        if selector is not None:
            await selector.aclose()

    def close(self) -> None:
        """Release resources; after this, ``exec()`` raises ``RuntimeError``."""
        if not self._closed and self._selector is not None:
            try:
                asyncio.get_running_loop()
            except RuntimeError:
                self._loops.run(self.aclose())
            # Inside a running loop we cannot wait here; ``await aclose()`` is the async way.
        self._closed = True
        if self._loop_runner is not None:
            self._loop_runner.close()

    def __enter__(self) -> Runtime:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    async def __aenter__(self) -> Runtime:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()
