"""The compiled, immutable objects a run uses: ``Program`` → ``Agent`` → ``Method``."""

from __future__ import annotations

import contextlib
import difflib
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import InputValidationError, UsageError
from ..runtime.validation import SchemaValidator

if TYPE_CHECKING:
    from ..runtime import Runtime
    from ..runtimes.select import RuntimeSelector
    from .templates import CompiledTemplate

__all__ = ["Agent", "ExecOptions", "Method", "Program", "RetryPolicy", "RuntimeRule"]


@dataclass(frozen=True, slots=True)
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


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """The agent's retry settings; ``None`` leaves the Runtime's environment defaults."""

    max_retries: int | None = None
    backoff_base_s: float | None = None
    max_validation_retries: int | None = None


@dataclass(frozen=True, slots=True)
class RuntimeRule:
    """Models matching ``match`` (a glob) are served by ``runtime`` with ``options``."""

    match: str
    runtime: str
    options: Mapping[str, Any] = field(default_factory=dict)


def _did_you_mean(name: str, names: list[str]) -> str:
    close = difflib.get_close_matches(name, names, n=1, cutoff=0.6)
    return f"; did you mean '{close[0]}'?" if close else ""


@dataclass(frozen=True, slots=True)
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
        self, runtime: Runtime, inputs: Mapping[str, Any], *, model: str | None = None
    ) -> Any:
        """Check the inputs, render, and call the model through ``runtime``."""
        values = self.prepare_inputs(inputs)
        content = self.render(values)
        opts = self.options
        kwargs: dict[str, Any] = {}
        if opts.tool_choice is not None:
            kwargs["tool_choice"] = opts.tool_choice
        if opts.parallel_tool_calls is not None:
            kwargs["parallel_tool_calls"] = opts.parallel_tool_calls
        if opts.max_iterations is not None:
            kwargs["max_iterations"] = opts.max_iterations
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
            toolset="none",
            model_options=model_options,
            **kwargs,
        )


@dataclass(frozen=True, slots=True)
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
            rules=[SelectRule(r.match, r.runtime, dict(r.options)) for r in self.runtime_rules]
        )

    @contextlib.asynccontextmanager
    async def open_runtime(self, **kwargs: Any) -> AsyncIterator[Runtime]:
        """A ``Runtime`` set up from this agent's model, retry policy and runtime rules.

        Closes the runtime and every provider client it opened on exit.
        """
        from ..runtime import Runtime

        selector = self.make_selector()
        runtime = Runtime(
            model=self.model or "default",
            max_retries=self.retry.max_retries,
            backoff_base_s=self.retry.backoff_base_s,
            runtimes=selector,
            **kwargs,
        )
        try:
            yield runtime
        finally:
            try:
                await runtime.aclose()
            finally:
                await selector.aclose()


@dataclass(frozen=True, slots=True)
class Program:
    """Everything compiled from a set of files; immutable, so a reload swaps it whole."""

    root: Path
    agents: Mapping[str, Agent]
    files: frozenset[Path]
    #: A content hash of every source file: which version of the prompts a run used.
    version: str

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
