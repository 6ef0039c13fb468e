"""Running a compiled program: one record per run, whatever happens in it."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from openprogram_yaml.compile.project import compile_path
from openprogram_yaml.errors import UsageError
from openprogram_yaml.run.execute import execute_run
from openprogram_yaml.run.version import VersionStamp
from openprogram_yaml.runner.cli import main
from openprogram_yaml.runtime.trace import SessionTrace

TWO_METHODS = """
version: 1
name: desk
model: test
methods:
  greet: {prompt: Say hello.}
  part: {prompt: Say goodbye.}
"""

ONE_METHOD = """
version: 1
name: desk
model: test
methods:
  greet: {prompt: Say hello.}
"""

#: A method offered to itself as a tool: the offline model calls every tool it is offered.
SELF_CALLING = """
version: 1
name: loop
model: test
tools:
  again: {method: echo, description: Echo again.}
methods:
  echo:
    inputs: {q: {type: string}}
    prompt: "echo {{ q }}"
"""


def test_an_agent_with_one_method_runs_it_when_none_is_named(write) -> None:  # type: ignore[no-untyped-def]
    agent = compile_path(write("desk.yaml", ONE_METHOD)).agent()
    assert agent.method().name == "greet"
    assert main([str(agent.path)]) == 0


def test_an_agent_with_several_methods_asks_which(write, capsys) -> None:  # type: ignore[no-untyped-def]
    path = write("desk.yaml", TWO_METHODS)
    with pytest.raises(UsageError, match="name a method of agent 'desk': greet, part"):
        compile_path(path).agent().method()
    assert main([str(path)]) == 2
    assert "error: name a method of agent 'desk': greet, part" in capsys.readouterr().err


def test_a_run_that_cannot_start_still_ends_as_a_record(write) -> None:  # type: ignore[no-untyped-def]
    program = compile_path(write("desk.yaml", TWO_METHODS))
    record = asyncio.run(execute_run(program, VersionStamp(program.version), None, None, {}))
    assert (record.status, record.exit_code, record.agent) == ("failed", 2, "desk")
    assert record.error is not None
    assert record.error["message"] == "name a method of agent 'desk': greet, part"


def test_a_method_tool_cannot_call_itself_and_the_run_still_ends(tmp_path: Path) -> None:
    (tmp_path / "loop.yaml").write_text(SELF_CALLING)
    program = compile_path(tmp_path / "loop.yaml")
    trace = SessionTrace()
    record = asyncio.run(
        execute_run(program, VersionStamp(program.version), None, "echo", {"q": "hi"}, trace=trace)
    )
    assert record.status == "ok", record.error
    tools = [n for n in trace.nodes if n.kind == "tool"]
    # The outer run calls `again` (the method runs as a tool); inside it, the model calls
    # `again` once more, which is refused instead of recursing.
    assert [n.name for n in tools] == ["again", "again"]
    refused = [n for n in tools if n.error is not None]
    assert len(refused) == 1
    assert "a method tool cannot call itself" in refused[0].error["message"]  # type: ignore[index]


def test_a_schema_methods_runs_keep_its_response_format_and_trace_it_alike(write) -> None:  # type: ignore[no-untyped-def]
    # run_method hands the runtime the method's own response_format (no copy per call):
    # each run answers and traces alike, and the method's mapping is left as compiled.
    import copy

    program = compile_path(
        write(
            "desk.yaml",
            """
            version: 1
            name: desk
            model: test
            methods:
              label:
                prompt: Label it.
                response_schema:
                  type: object
                  properties: {label: {type: string, enum: [a, b]}}
                  required: [label]
            """,
        )
    )
    method = program.agent("desk").method("label")
    compiled = copy.deepcopy(method.response_format)
    stamp = VersionStamp(program.version)
    traces = [SessionTrace() for _ in range(3)]
    records = [
        asyncio.run(execute_run(program, stamp, None, None, {}, trace=trace)) for trace in traces
    ]
    assert all(r.status == "ok" for r in records), records[0].error
    assert len({repr(r.output) for r in records}) == 1
    options = [
        [n.data["options"]["response_format"] for n in t.nodes if n.kind == "exec"] for t in traces
    ]
    assert options[0] == options[1] == options[2] == [compiled]
    assert method.response_format == compiled
