"""Compiling an agent's methods: `response_schema` and its `fallback`."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from openprogram_yaml.compile.project import compile_path
from openprogram_yaml.errors import ConfigError, StructuredOutputUnsupportedError
from openprogram_yaml.providers.test import Reply, ScriptedRuntime
from openprogram_yaml.run.agent_runtime import open_runtime
from openprogram_yaml.run.method import run_method
from openprogram_yaml.runtimes.protocol import Capabilities
from openprogram_yaml.runtimes.registry import register_runtime, unregister_runtime

AGENT = """
version: 1
name: desk
model: plain:desk
runtimes:
  - {{match: "plain:*", runtime: plain-desk}}
methods:
  label:
    prompt: Label the ticket.
    response_schema: {{type: object, properties: {{label: {{type: string}}}}, required: [label]}}
{extra}
"""
#: A model with neither native structured output nor a tool it can force.
PLAIN = Capabilities(tools=False, native_json_schema=False, forced_tool_choice=False)


@pytest.fixture
def plain() -> Iterator[ScriptedRuntime]:
    runtime = ScriptedRuntime([Reply.json({"label": "bug"})], capabilities=PLAIN)
    register_runtime("plain-desk", runtime)
    yield runtime
    unregister_runtime("plain-desk")


def run(path: Path, method: str) -> object:
    agent = compile_path(path).agent()

    async def go() -> object:
        async with open_runtime(agent) as runtime:
            return await run_method(agent.method(method), runtime, {})

    return asyncio.run(go())


def test_fallback_prompt_next_to_response_schema(
    write: Callable[[str, str], Path], plain: ScriptedRuntime
) -> None:
    path = write("a.yaml", AGENT.format(extra="    fallback: prompt"))
    assert run(path, "label") == {"label": "bug"}
    assert "JSON Schema" in (plain.requests[0].system_prompt or "")


def test_without_fallback_prompt_such_a_model_is_refused(
    write: Callable[[str, str], Path], plain: ScriptedRuntime
) -> None:
    path = write("a.yaml", AGENT.format(extra=""))
    with pytest.raises(StructuredOutputUnsupportedError, match="fallback: prompt"):
        run(path, "label")
    assert plain.requests == []


@pytest.mark.parametrize(
    ("method", "expected"),
    [
        (
            "  other:\n    prompt: hi\n    fallback: prompt",
            "'fallback' applies to 'response_schema'",
        ),
        (
            "  other:\n    prompt: hi\n    fallback: sometimes\n"
            "    response_schema: {type: string}",
            "fallback",
        ),
        (
            "  other:\n    prompt: hi\n    fallback: prompt\n"
            "    response_schema: {schema: {type: string}, fallback: none}",
            "disagrees",
        ),
    ],
)
def test_fallback_mistakes_are_positioned_errors(
    write: Callable[[str, str], Path], method: str, expected: str
) -> None:
    path = write("a.yaml", AGENT.format(extra=method))
    with pytest.raises(ConfigError) as info:
        compile_path(path)
    (diagnostic,) = info.value.diagnostics
    assert expected in diagnostic.message
    assert (diagnostic.line, diagnostic.col) == (12, 15)  # at `other`'s fallback value


def test_the_seeds_envelope_is_accepted_in_yaml(
    write: Callable[[str, str], Path], plain: ScriptedRuntime
) -> None:
    extra = (
        "  seed:\n    prompt: Label it.\n"
        "    response_schema: {type: json_schema, fallback: prompt,\n"
        "                      schema: {type: object, required: [label]}}"
    )
    path = write("a.yaml", AGENT.format(extra=extra))
    assert run(path, "seed") == {"label": "bug"}
