"""A Program as MCP sees it: each method a tool and a prompt, named ``agent.method``.

The names keep the agent even when there is one: adding a second agent file must not rename
the tools a client already uses. ``agent.method`` is a valid MCP tool name (SEP-986 allows
letters, digits, ``_``, ``-`` and ``.``; agent and method names hold no other character).

A method's ``inputs`` schema is the tool's ``inputSchema``. Its response schema becomes the
``outputSchema`` (and the result's ``structuredContent``) only where the output is sure to
match it: an object schema, no ``fallback`` (which may return other text), no ``choices``
(which may end in another method's output or a value). A client checks structured content
against the output schema, so promising one the output may break would fail its calls.

MCP prompt arguments are strings; an input whose schema is not a string takes JSON text
(``3``, ``true``, ``["a"]``) and is parsed before the inputs are checked.

Tool arguments and prompt arguments are JSON: ``NaN`` and ``Infinity`` (which the SDK's
parser and ``json.loads`` both read, and ``1e999`` becomes) are none. A tool call holding one
is refused (``unfit_arguments``); a prompt argument that reads as one stays text, which the
input check then refuses. Either way no run or record holds one (a records line saying
``NaN`` is no JSON).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import mcp_types as types

from ..json_types import JSONValue, parse_json
from ..redaction import redact, redact_json
from ..run.record import run_secrets

if TYPE_CHECKING:
    from ..compile.program import Agent, Method, Program

__all__ = ["Catalog", "MethodRef", "arguments_to_inputs", "unfit_arguments"]


@dataclass(frozen=True, slots=True)
class MethodRef:
    """Which method an MCP name stands for."""

    agent: str
    method: str
    description: str


@dataclass(frozen=True, slots=True)
class Catalog:
    """The tools and prompts of one Program version, built once per version."""

    version: str
    tools: tuple[types.Tool, ...]
    prompts: tuple[types.Prompt, ...]
    #: MCP name -> the method it runs.
    methods: Mapping[str, MethodRef]
    #: Tool names whose results carry ``structuredContent``.
    structured: frozenset[str]

    @classmethod
    def of(cls, program: Program) -> Catalog:
        tools: list[types.Tool] = []
        prompts: list[types.Prompt] = []
        methods: dict[str, MethodRef] = {}
        structured: set[str] = set()
        for agent_name in sorted(program.agents):
            agent = program.agents[agent_name]
            # A description, or a schema's description or default, may read ``${env:…}``:
            # redacted as serve's /agents and /v1/models are (they were listed as read).
            secrets = run_secrets(agent)
            for method_name in sorted(agent.methods):
                method = agent.methods[method_name]
                name = f"{agent.name}.{method.name}"
                description = redact(_description(agent, method), secrets)
                methods[name] = MethodRef(agent.name, method.name, description)
                output_schema = _output_schema(method)
                if output_schema is not None:
                    structured.add(name)
                    output_schema = redact_json(output_schema, secrets)
                tools.append(
                    types.Tool(
                        name=name,
                        description=description,
                        input_schema=redact_json(dict(method.input_schema), secrets),
                        output_schema=output_schema,
                    )
                )
                prompts.append(
                    types.Prompt(
                        name=name,
                        description=description,
                        arguments=_prompt_arguments(method, secrets),
                    )
                )
        return cls(program.version, tuple(tools), tuple(prompts), methods, frozenset(structured))

    def tools_fingerprint(self) -> str:
        """What a client sees of the tool list: a change means a ``list_changed``."""
        return _fingerprint(self.tools)

    def prompts_fingerprint(self) -> str:
        return _fingerprint(self.prompts)


def _fingerprint(items: tuple[types.Tool, ...] | tuple[types.Prompt, ...]) -> str:
    return json.dumps(
        [i.model_dump(mode="json", by_alias=True, exclude_none=True) for i in items],
        sort_keys=True,
    )


def _description(agent: Agent, method: Method) -> str:
    if method.description:
        return method.description
    if agent.description:
        return f"{agent.description} (method '{method.name}')"
    return f"Method '{method.name}' of agent '{agent.name}'."


def _output_schema(method: Method) -> dict[str, Any] | None:
    envelope = method.response_format
    if envelope is None or method.choices or "fallback" in envelope:
        return None
    schema = envelope.get("schema")
    if not isinstance(schema, Mapping) or schema.get("type") != "object":
        return None
    return dict(schema)


def _prompt_arguments(method: Method, secrets: frozenset[str]) -> list[types.PromptArgument]:
    required = method.input_schema.get("required")
    needed = set(required) if isinstance(required, list) else set()
    arguments = []
    for name, schema in method.inputs.items():
        described = schema.get("description") if isinstance(schema, Mapping) else None
        arguments.append(
            types.PromptArgument(
                name=name,
                description=redact(described, secrets) if isinstance(described, str) else None,
                required=name in needed,
            )
        )
    return arguments


def arguments_to_inputs(method: Method, arguments: Mapping[str, str]) -> dict[str, JSONValue]:
    """Prompt arguments (text) as the method's inputs: JSON text for non-string inputs."""
    inputs: dict[str, JSONValue] = {}
    for name, text in arguments.items():
        schema = method.inputs.get(name)
        kind = schema.get("type") if isinstance(schema, Mapping) else None
        if kind == "string" or kind is None:
            inputs[name] = text
            continue
        try:
            value = parse_json(text)
        except ValueError:
            value = text  # the input check says what is wrong with it
        inputs[name] = text if unfit_arguments(value) is not None else value
    return inputs


def unfit_arguments(value: object) -> str | None:
    """What in JSON data ``value`` is no JSON (NaN, an infinity, a lone surrogate), or
    None: the input check every run makes (``unfit_input``), asked before a run starts."""
    from ..compile.program import unfit_input

    return unfit_input(value, "arguments")  # type: ignore[arg-type]  # what the SDK parsed
