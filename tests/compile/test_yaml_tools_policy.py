"""Toolsets, allow/deny and method tools declared in YAML, enforced when the model calls."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from openprogram_yaml.compile.project import compile_path
from openprogram_yaml.errors import ConfigError
from openprogram_yaml.providers.test import Reply, ScriptedRuntime
from openprogram_yaml.run.agent_runtime import open_runtime
from openprogram_yaml.run.method import run_method
from openprogram_yaml.runtimes.registry import register_runtime, unregister_runtime

AGENT = """
version: 1
name: desk
model: scripted:desk
runtimes:
  - {match: "scripted:*", runtime: scripted-desk}
tools:
  notes_read: {method: read_notes}
  notes_delete: {method: delete_notes}
toolsets:
  read_only: {tools: ["notes_*"], deny: ["*_delete"]}
methods:
  answer:
    prompt: Answer the ticket.
    toolset: read_only
    tools_allow: ["notes_*"]
  read_notes:
    prompt: READ NOTES
    toolset: none
  delete_notes:
    prompt: DELETE NOTES
    toolset: none
"""


@pytest.fixture
def scripted():  # type: ignore[no-untyped-def]
    made: list[ScriptedRuntime] = []

    def install(replies: list[Reply]) -> ScriptedRuntime:
        runtime = ScriptedRuntime(replies)
        made.append(runtime)
        register_runtime("scripted-desk", runtime)
        return runtime

    yield install
    unregister_runtime("scripted-desk")


def run(path: Path, method: str) -> object:
    agent = compile_path(path).agent()

    async def go() -> object:
        async with open_runtime(agent) as runtime:
            return await run_method(agent.method(method), runtime, {})

    return asyncio.run(go())


def test_denied_tool_requested_by_the_model_does_not_run(write, scripted) -> None:
    path = write("desk.yaml", AGENT)
    model = scripted([Reply.call("notes_delete", {}), Reply.text("done")])
    assert run(path, "answer") == "done"
    first, second = model.requests  # no third request: DELETE NOTES never ran
    assert first.tool_names == ["notes_read"]  # the denied tool is not even offered
    [result] = [m for m in second.messages if m.role == "tool"]
    assert result.is_error
    assert "denied" in result.text() or "not" in result.text()
    assert all("DELETE NOTES" not in m.text() for r in model.requests for m in r.messages)


def test_allowed_method_tool_runs_the_method(write, scripted) -> None:
    path = write("desk.yaml", AGENT)
    model = scripted([Reply.call("notes_read", {}), Reply.text("notes say hi"), Reply.text("ok")])
    assert run(path, "answer") == "ok"
    prompts = [m.text() for r in model.requests for m in r.messages if m.role == "user"]
    assert "READ NOTES" in prompts


def test_inner_allow_cannot_widen_outer_deny(write, scripted) -> None:
    text = AGENT.replace('tools_allow: ["notes_*"]', 'tools_allow: ["notes_delete"]')
    path = write("desk.yaml", text)
    model = scripted([Reply.call("notes_delete", {}), Reply.text("done")])
    assert run(path, "answer") == "done"
    assert model.requests[0].tool_names == []
    assert len(model.requests) == 2


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (('tools: ["notes_*"]', 'tools: ["notes_reed"]'), "names tool 'notes_reed'"),
        (('deny: ["*_delete"]}', 'deny: ["*_delete"], includes: [read_only]}'), "cycle"),
        (("toolset: read_only", "toolset: read_onyl"), "did you mean 'read_only'?"),
        (("{method: read_notes}", "{method: read_nots}"), "did you mean 'read_notes'?"),
    ],
)
def test_bad_toolsets_are_positioned_errors(write, change, expected) -> None:
    path = write("desk.yaml", AGENT.replace(*change))
    with pytest.raises(ConfigError) as info:
        compile_path(path)
    [diag] = info.value.diagnostics
    assert expected in diag.message
    assert diag.line > 0 and diag.col > 0


@pytest.mark.parametrize(
    ("tool", "line", "col", "expected"),
    [
        ("http: {url: 'file:///etc/passwd'}", 6, 18, "'file://' URLs are refused"),
        ("http: {url: 'ftp://host/{{ id }}'}", 6, 18, "'ftp://' URLs are refused"),
        ("http: {url: 'https://h{{ id }}'}", 6, 27, "scheme, host and port must be written"),
        ("command: [no-such-program-xyz, '{{ id }}']", 6, 14, "was not found on PATH"),
        ("python: os:system", 6, 13, "'os', which is not part of the project"),
    ],
)
def test_tool_mistakes_known_at_check_time(write, tool, line, col, expected) -> None:
    path = write(
        "tools.yaml",
        f"""
        version: 1
        name: t
        tools:
          bad:
            parameters: {{type: object, properties: {{id: {{type: string}}}}}}
            {tool}
        methods:
          m: {{prompt: hi, model: test}}
        """,
    )
    with pytest.raises(ConfigError) as info:
        compile_path(path)
    [diag] = info.value.diagnostics
    assert expected in diag.message
    assert (diag.line, diag.col) == (line, col)
