"""The compiled, immutable objects a run uses: ``Program`` → ``Agent`` → ``Method``."""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import difflib
import hashlib
import json
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from dataclasses import field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from openprogram_yaml._fast_dataclass import fast_dataclass

from ..errors import DecisionError, InputValidationError, ToolError, UsageError
from ..runtime.context import current_method
from ..runtime.validation import SchemaValidator

if TYPE_CHECKING:
    from ..runtime import Runtime, ToolsetPreset
    from ..runtimes.select import ProviderConfig, RuntimeSelector
    from .templates import CompiledTemplate
    from .tests import CompiledTest

__all__ = [
    "Agent",
    "ChoiceOption",
    "ExecOptions",
    "Method",
    "Program",
    "RetryPolicy",
    "RunState",
    "RuntimeRule",
]

#: How many methods one run may pass through by ``choices`` unless ``max_steps`` says.
DEFAULT_MAX_STEPS = 10


@fast_dataclass(frozen=True)
class ExecOptions:
    """Call options after ``defaults`` and the method's own settings are merged."""

    model: str | None = None
    timeout_s: float | None = None
    max_iterations: int | None = None
    temperature: float | None = None
    max_tokens: int | None = None
    tool_choice: str | None = None
    parallel_tool_calls: bool | None = None
    thinking_level: str | None = None
    max_steps: int | None = None


@fast_dataclass(frozen=True)
class ChoiceOption:
    """One ``choices`` option: a value, a method to continue with, or a schema of fields."""

    name: str
    description: str | None = None
    value: Any = None
    method: str | None = None
    schema: Mapping[str, Any] | None = None


@fast_dataclass
class RunState:
    """The path one run takes through methods by ``choices``, and its bound."""

    max_steps: int = DEFAULT_MAX_STEPS
    path: list[dict[str, Any]] = field(default_factory=list)

    def enter(self, agent: str, method: str) -> dict[str, Any]:
        if len(self.path) >= self.max_steps:
            trail = " -> ".join(step["method"] for step in self.path)
            raise DecisionError(
                f"the run passed through {len(self.path)} methods by choices ({trail}) and "
                f"would enter '{method}'; max_steps is {self.max_steps}. Raise 'max_steps' or "
                "change the choices so the run ends",
                kind="max_steps",
            )
        step: dict[str, Any] = {"agent": agent, "method": method}
        self.path.append(step)
        return step


@fast_dataclass(frozen=True)
class RetryPolicy:
    """The agent's retry settings; ``None`` leaves the Runtime's environment defaults."""

    max_retries: int | None = None
    backoff_base_s: float | None = None
    max_validation_retries: int | None = None


@fast_dataclass(frozen=True)
class RuntimeRule:
    """Models matching ``match`` (a glob) are served by ``runtime`` with ``options``."""

    match: str
    runtime: str
    options: Mapping[str, Any] = field(default_factory=dict)


def _did_you_mean(name: str, names: list[str]) -> str:
    close = difflib.get_close_matches(name, names, n=1, cutoff=0.6)
    return f"; did you mean '{close[0]}'?" if close else ""


def prompt_version(
    templates: Iterable[CompiledTemplate | None],
    response_format: Any,
    choices: Any,
    options: ExecOptions,
    variables: Mapping[str, Any],
) -> str:
    """A short hash of what shapes a method's requests, stable across runs and machines.

    Here, beside ``Method``, and not with the compiler: a compiled program that is loaded
    from the compile cache must not need the compiler to work out its versions.
    """
    digest = hashlib.sha256()
    for template in templates:
        if template is None:
            digest.update(b"-\0")
            continue
        digest.update(template.source.encode() + b"\0")
        for path in sorted(template.files):
            try:
                digest.update(path.read_bytes() + b"\0")
            except OSError:
                digest.update(b"?\0")
    rest = [response_format, [dataclasses.asdict(c) for c in choices], options, variables]
    digest.update(json.dumps(rest, sort_keys=True, default=_plain).encode())
    return digest.hexdigest()[:12]


def _plain(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    return repr(value)


@fast_dataclass(frozen=True)
class Method:
    """A method ready to run: inputs checked, prompt rendered, options merged."""

    agent: str
    name: str
    description: str | None
    inputs: Mapping[str, Any]
    input_schema: Mapping[str, Any]
    input_validator: SchemaValidator
    prompt: CompiledTemplate
    instructions: CompiledTemplate | None
    response_format: Mapping[str, Any] | None
    options: ExecOptions
    variables: Mapping[str, Any] = field(default_factory=dict)
    toolset: str | None = None
    tools_allow: tuple[str, ...] | None = None
    tools_deny: tuple[str, ...] | None = None
    choices: tuple[ChoiceOption, ...] | None = None
    #: Methods this one's choices continue with, by name (filled when the agent is linked).
    linked: Mapping[str, Method] = field(default_factory=dict)
    _prompt_hash: Callable[[], str] = field(default=lambda: "", repr=False)
    _prompt_hashed: list[str] = field(default_factory=list, repr=False)

    @property
    def prompt_version(self) -> str:
        """A hash of everything that shapes what this method sends: templates (with the
        files they include), response format, choices and options. Runs and traces name it.
        Worked out when first asked for (a run, a lock file), not at every load."""
        if not self._prompt_hashed:
            self._prompt_hashed.append(self._prompt_hash())
        return self._prompt_hashed[0]

    def prepare_templates(self) -> None:
        """Generate the code of this method's templates now instead of at their first
        render (the command line does it before a run, as part of start-up)."""
        for template in (self.instructions, self.prompt):
            if template is not None:
                template.prepare()

    def prepare_inputs(self, given: Mapping[str, Any]) -> dict[str, Any]:
        """The inputs with defaults applied, checked against the declared schema.

        Raises ``InputValidationError`` (exit 2) naming every problem.
        """
        unknown = [k for k in given if k not in self.inputs]
        if unknown:
            names = sorted(self.inputs)
            problems = [f"unknown input '{k}'{_did_you_mean(k, names)}" for k in unknown]
            declared = ", ".join(names) if names else "none"
            raise InputValidationError(
                f"method '{self.name}' of agent '{self.agent}' got unknown inputs "
                f"(it declares: {declared})",
                problems,
            )
        values = dict(given)
        for name, schema in self.inputs.items():
            if name not in values and isinstance(schema, dict) and "default" in schema:
                values[name] = schema["default"]
        issues = self.input_validator.errors(values)
        if issues:
            raise InputValidationError(
                f"inputs of method '{self.name}' of agent '{self.agent}' do not match its "
                "'inputs' schema; pass them with -i NAME=VALUE or --input-json",
                issues,
            )
        return values

    def render(self, inputs: Mapping[str, Any]) -> list[dict[str, Any]]:
        """The content blocks for one call: instructions as a system block, then the prompt."""
        context = {**self.variables, **inputs}
        blocks: list[dict[str, Any]] = []
        if self.instructions is not None:
            system = self.instructions.render(context)
            if system.strip():
                blocks.append({"type": "text", "role": "system", "text": system})
        blocks.append({"type": "text", "text": self.prompt.render(context)})
        return blocks

    async def run(
        self,
        runtime: Runtime,
        inputs: Mapping[str, Any],
        *,
        model: str | None = None,
        state: RunState | None = None,
    ) -> Any:
        """Check the inputs, render, and call the model through ``runtime``.

        With ``choices``, the pick decides the result: a value, fields, or the result of the
        method it continues with. ``state.path`` records every step and pick.
        """
        if state is None:
            state = RunState(self.options.max_steps or DEFAULT_MAX_STEPS)
        step = state.enter(self.agent, self.name)
        step["prompt_version"] = self.prompt_version
        given = dict(inputs)
        values = self.prepare_inputs(inputs)
        token = current_method.set(f"{self.agent}.{self.name}")
        try:
            if runtime.trace is None:
                return await self._call(runtime, given, values, model, state, step)
            with runtime.trace.span("method", f"{self.agent}.{self.name}", values) as node:
                node.data["prompt_version"] = self.prompt_version
                node.output = await self._call(runtime, given, values, model, state, step)
                return node.output
        finally:
            current_method.reset(token)

    async def _call(
        self,
        runtime: Runtime,
        given: Mapping[str, Any],
        values: Mapping[str, Any],
        model: str | None,
        state: RunState,
        step: dict[str, Any],
    ) -> Any:
        content = self.render(values)
        opts = self.options
        kwargs: dict[str, Any] = {}
        if opts.tool_choice is not None:
            kwargs["tool_choice"] = opts.tool_choice
        if opts.parallel_tool_calls is not None:
            kwargs["parallel_tool_calls"] = opts.parallel_tool_calls
        if opts.max_iterations is not None:
            kwargs["max_iterations"] = opts.max_iterations
        if self.choices:
            kwargs["choices"] = self._choices(runtime, given, model, state, step)
        model_options = {
            "temperature": opts.temperature,
            "max_tokens": opts.max_tokens,
            "thinking_level": opts.thinking_level,
        }
        return await runtime.async_exec(
            content,
            response_format=dict(self.response_format) if self.response_format else None,
            model=model or opts.model,
            timeout_s=opts.timeout_s,
            toolset=self.toolset,
            tools_allow=self.tools_allow,
            tools_deny=self.tools_deny,
            model_options=model_options,
            **kwargs,
        )

    def _choices(
        self,
        runtime: Runtime,
        values: Mapping[str, Any],
        model: str | None,
        state: RunState,
        step: dict[str, Any],
    ) -> dict[str, dict[str, Any]]:
        """The runtime's ``choices``: every option a callable, so the pick is recorded."""
        out: dict[str, dict[str, Any]] = {}
        for option in self.choices or ():
            entry: dict[str, Any] = {"description": option.description or ""}
            if option.method is not None:
                target = self.linked[option.method]
                entry["schema"] = option.schema or _continue_schema(target, values)
                entry["method"] = _continue_with(
                    option.name, target, runtime, values, model, state, step
                )
            else:
                if option.schema is not None:
                    entry["schema"] = option.schema
                entry["method"] = _settle(option, step)
            out[option.name] = entry
        return out


def _continue_schema(target: Method, known: Mapping[str, Any]) -> dict[str, Any]:
    """The fields a pick gives ``target``: its inputs the run does not already carry.

    Inputs the caller gave are carried over by name and not offered again, so the model
    cannot rewrite what the user said; it supplies only what is new.
    """
    offered = {n: s for n, s in target.inputs.items() if n not in known}
    required = [n for n in target.input_schema.get("required", ()) if n in offered]
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
    values: Mapping[str, Any],
    model: str | None,
    state: RunState,
    step: dict[str, Any],
) -> Any:
    async def go(**fields: Any) -> Any:
        step["choice"] = name
        if fields:
            step["fields"] = fields
        carried = {k: v for k, v in values.items() if k in target.inputs}
        return await target.run(runtime, {**fields, **carried}, model=model, state=state)

    return go


def _settle(option: ChoiceOption, step: dict[str, Any]) -> Any:
    def pick(**fields: Any) -> Any:
        step["choice"] = option.name
        if option.schema is not None:
            step["fields"] = fields
            return {"decision": option.name, **fields}
        return option.value

    return pick


@fast_dataclass(frozen=True)
class Agent:
    """An agent file, compiled."""

    name: str
    description: str | None
    path: Path
    model: str | None
    methods: Mapping[str, Method]
    retry: RetryPolicy
    runtime_rules: tuple[RuntimeRule, ...]
    secrets: frozenset[str]
    files: frozenset[Path]
    #: Tools that run on their own (python, http, command), ready to register.
    tools: tuple[Any, ...] = ()
    #: Tools that call a method: tool name -> the method (linked after all agents compile).
    method_tools: Mapping[str, Method] = field(default_factory=dict)
    toolsets: Mapping[str, ToolsetPreset] = field(default_factory=dict)
    providers: Mapping[str, ProviderConfig] = field(default_factory=dict)

    def method(self, name: str) -> Method:
        """The method called ``name``; a ``UsageError`` with a did-you-mean otherwise."""
        try:
            return self.methods[name]
        except KeyError:
            names = sorted(self.methods)
            raise UsageError(
                f"agent '{self.name}' has no method '{name}'{_did_you_mean(name, names)}"
                f" (methods: {', '.join(names)})"
            ) from None

    def make_selector(self) -> RuntimeSelector:
        """The runtime selector this agent's ``runtimes:`` rules describe."""
        from ..runtimes.select import RuntimeRule as SelectRule
        from ..runtimes.select import RuntimeSelector

        return RuntimeSelector(
            rules=[SelectRule(r.match, r.runtime, dict(r.options)) for r in self.runtime_rules],
            providers=self.providers,
        )

    @contextlib.asynccontextmanager
    async def open_runtime(
        self, *, wrap_selector: Callable[[RuntimeSelector], Any] | None = None, **kwargs: Any
    ) -> AsyncIterator[Runtime]:
        """A ``Runtime`` set up from this agent's model, retry policy and runtime rules.

        ``wrap_selector`` may put something between the runtime and the selector (recording
        every turn, or replaying recorded ones); what it returns is closed on exit.
        Closes the runtime and every provider client it opened on exit.
        """
        from ..runtime import Runtime

        selector: Any = self.make_selector()
        if wrap_selector is not None:
            selector = wrap_selector(selector)
        runtime = Runtime(
            model=self.model or "default",
            max_retries=self.retry.max_retries,
            backoff_base_s=self.retry.backoff_base_s,
            runtimes=selector,
            tools=self.tools,
            toolsets=self.toolsets,
            **kwargs,
        )
        runtime.register_tools(
            *(_method_tool(name, m, runtime) for name, m in self.method_tools.items())
        )
        try:
            yield runtime
        finally:
            try:
                await runtime.aclose()
            finally:
                try:
                    await selector.aclose()
                finally:
                    for tool in self.tools:
                        closer = getattr(tool, "aclose", None)
                        if closer is not None:
                            await closer()


_active_method_tools: contextvars.ContextVar[tuple[str, ...]] = contextvars.ContextVar(
    "openprogram_active_method_tools", default=()
)


def _method_tool(name: str, method: Method, runtime: Runtime) -> dict[str, Any]:
    """A method offered to the model as a tool; it runs on the calling runtime."""

    key = f"{method.agent}.{method.name}"

    async def execute(**arguments: Any) -> Any:
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
            return await method.run(runtime, arguments)
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


@fast_dataclass(frozen=True)
class BuildInputs:
    """What a compile read besides the contents of ``Program.files``: enough to tell, later,
    whether compiling again would give the same program (the compile cache asks)."""

    #: Every environment variable a file named with ``${env:…}``, set or not.
    env_names: frozenset[str] = frozenset()
    #: The template and schema folders: where names are looked up, so a file added there
    #: may shadow another (the folder of every file in ``Program.files`` counts too).
    folders: frozenset[Path] = frozenset()
    #: The project's file patterns (``agents:``, ``tests:``), each with the files it matched.
    globs: tuple[tuple[str, tuple[Path, ...]], ...] = ()
    #: Paths looked at while finding the project (``openprogram.yaml`` and ``.git`` in the
    #: file's folder and its parents), each with what was there: ``""`` for nothing, so
    #: that a project file appearing later in a parent folder is seen.
    lookups: tuple[tuple[Path, str], ...] = ()


@fast_dataclass(frozen=True)
class Program:
    """Everything compiled from a set of files; immutable, so a reload swaps it whole."""

    root: Path
    agents: Mapping[str, Agent]
    files: frozenset[Path]
    #: A content hash of every source file: which version of the prompts a run used.
    version: str
    #: Tests kept with the prompts (in agent files and the repository's test files).
    tests: tuple[CompiledTest, ...] = ()
    #: Where recorded model replies are kept, when the project says.
    recordings: Path | None = None
    #: What else the compile read (environment variables, folder listings, file patterns).
    inputs: BuildInputs = BuildInputs()

    def select(
        self, method: str | None, *, agent: str | None = None, path: Path | None = None
    ) -> tuple[Agent, str | None]:
        """The agent and method a command line names.

        ``method`` may be "agent.method". Otherwise the agent is ``agent``, or the one
        compiled from ``path`` when that is an agent file, or the only agent there is.
        """
        if method and "." in method and agent is None:
            head, _, tail = method.partition(".")
            if head in self.agents:
                return self.agents[head], tail or None
            if len(self.agents) > 1:
                return self.agent(head), tail or None
        if agent is None and path is not None and path.is_file():
            resolved = path.resolve()
            for candidate in self.agents.values():
                if candidate.path == resolved:
                    return candidate, method
        if agent is None and len(self.agents) > 1:
            names = ", ".join(
                f"{a}.{m}" for a in sorted(self.agents) for m in sorted(self.agents[a].methods)
            )
            raise UsageError(
                f"this project holds several agents; name a method as AGENT.METHOD: {names}"
            )
        return self.agent(agent), method

    def agent(self, name: str | None = None) -> Agent:
        """The agent called ``name``, or the only one when ``name`` is None."""
        if name is None:
            if len(self.agents) == 1:
                return next(iter(self.agents.values()))
            raise UsageError(
                "this project holds several agents; name one: " + ", ".join(sorted(self.agents))
            )
        try:
            return self.agents[name]
        except KeyError:
            names = sorted(self.agents)
            raise UsageError(
                f"no agent '{name}'{_did_you_mean(name, names)} (agents: {', '.join(names)})"
            ) from None
