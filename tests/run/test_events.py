"""What a run tells its observer as it goes: methods, text, tool calls, picks."""

from __future__ import annotations

import asyncio

from openprogram_yaml.compile.project import compile_path
from openprogram_yaml.json_types import JSONObject
from openprogram_yaml.run.execute import execute_run
from openprogram_yaml.run.version import VersionStamp

ROUTING = """
version: 1
name: desk
model: test
tools:
  lookup: {method: answer, description: Look a thing up.}
methods:
  triage:
    inputs: {ticket: {type: string}}
    prompt: "Sort: {{ ticket }}"
    choices:
      answer: {method: answer, description: Answer it.}
  answer:
    inputs: {ticket: {type: string}}
    prompt: "Answer: {{ ticket }}"
"""


def test_a_run_tells_its_observer_each_method_tool_call_pick_and_text(write) -> None:  # type: ignore[no-untyped-def]
    program = compile_path(write("desk.yaml", ROUTING))
    events: list[JSONObject] = []
    record = asyncio.run(
        execute_run(
            program,
            VersionStamp(hash="v"),
            None,
            "triage",
            {"ticket": "my printer is on fire"},
            on_event=events.append,
        )
    )
    assert record.status == "ok", record.error
    types = [e["type"] for e in events]
    assert types[0] == "method" and events[0]["method"] == "triage"
    assert "tool_use" in types and "tool_result" in types
    pick = next(e for e in events if e["type"] == "pick")
    assert pick == {"type": "pick", "agent": "desk", "method": "triage", "choice": "answer"}
    after = types[types.index("pick") + 1 :]
    assert after[0] == "method" and events[types.index("pick") + 1]["method"] == "answer"
    assert "text" in after


def test_an_observer_that_raises_never_breaks_the_run(write) -> None:  # type: ignore[no-untyped-def]
    program = compile_path(write("desk.yaml", ROUTING))

    def broken(event: JSONObject) -> None:
        raise RuntimeError("observer bug")

    record = asyncio.run(
        execute_run(
            program, VersionStamp(hash="v"), None, "triage", {"ticket": "t"}, on_event=broken
        )
    )
    assert record.status == "ok", record.error
