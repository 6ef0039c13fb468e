"""``openprogram-run mcp PATH`` over stdio, driven by the official SDK's client (a real
subprocess, as a desktop client starts it): tools and prompts, runs with records, run
errors, secrets, questions by elicitation, and reloads announced in both protocol eras."""

from __future__ import annotations

import asyncio
import json
import subprocess
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import pytest
from mcp import MCPError
from mcp.client.subscriptions import PromptsListChanged, ToolsListChanged
from mcp_repository import (
    AGENT,
    SECRET,
    SECRET_AGENT,
    TIMEOUT_S,
    StderrLines,
    command,
    save,
    stdio_session,
    write_agent,
)
from support import JANITOR_AGENT, JANITOR_TOOLS

NEW_METHOD = (
    AGENT
    + """\
  summarize:
    description: Sum up a ticket.
    inputs: {ticket: {type: string}}
    prompt: "Sum up: {{ ticket }}"
"""
)


def test_methods_are_tools_and_a_call_runs_the_method_with_a_record(tmp_path: Path) -> None:
    agent = write_agent(tmp_path)
    records = tmp_path / "runs.jsonl"

    async def scenario() -> tuple[Any, ...]:
        with (tmp_path / "server.log").open("w") as log:
            async with stdio_session(agent, log, "--records", str(records)) as client:
                tools = await client.list_tools()
                prompts = await client.list_prompts()
                result = await client.call_tool("desk.classify", {"ticket": "I was charged twice"})
                return tools, prompts, result

    tools, prompts, result = asyncio.run(scenario())
    by_name = {t.name: t for t in tools.tools}
    assert sorted(by_name) == ["desk.classify", "desk.reply"]
    classify = by_name["desk.classify"]
    assert classify.description == "Label a ticket."
    assert classify.input_schema["properties"]["ticket"]["minLength"] == 1
    assert classify.input_schema["required"] == ["ticket"]
    assert classify.output_schema is not None
    assert classify.output_schema["required"] == ["label"]
    # No response schema: no output schema, and the agent's description stands in.
    assert by_name["desk.reply"].output_schema is None
    assert "help desk" in (by_name["desk.reply"].description or "")
    assert [p.name for p in prompts.prompts] == ["desk.classify", "desk.reply"]
    reply_args = {a.name: a for a in prompts.prompts[1].arguments or []}
    assert reply_args["ticket"].required and not reply_args["words"].required

    assert not result.is_error
    assert result.structured_content["label"] in ("bug", "billing")
    assert json.loads(result.content[0].text) == result.structured_content
    run = result.meta["openprogram/run"]
    (record,) = [json.loads(line) for line in records.read_text().splitlines()]
    assert record["id"] == run["id"] and record["status"] == "ok"
    assert record["method"] == "classify" and record["inputs"] == {"ticket": "I was charged twice"}
    assert record["version"]["hash"] == run["version"]["hash"]


def test_a_failed_run_is_a_tool_error_and_an_unknown_tool_a_protocol_error(
    tmp_path: Path,
) -> None:
    agent = write_agent(tmp_path)

    async def scenario() -> tuple[types.CallToolResult, str]:
        with (tmp_path / "server.log").open("w") as log:
            async with stdio_session(agent, log) as client:
                failed = await client.call_tool("desk.classify", {"tickt": "typo"})
                with pytest.raises(MCPError) as unknown:
                    await client.call_tool("desk.nothing", {})
                return failed, str(unknown.value)

    failed, unknown = asyncio.run(scenario())
    assert failed.is_error
    assert "unknown input 'tickt'; did you mean 'ticket'?" in failed.content[0].text
    assert "no tool 'desk.nothing'" in unknown and "desk.classify" in unknown


def test_a_prompt_is_rendered_by_the_method_templates(tmp_path: Path) -> None:
    agent = write_agent(tmp_path)

    async def scenario() -> tuple[types.GetPromptResult, types.GetPromptResult, str]:
        with (tmp_path / "server.log").open("w") as log:
            async with stdio_session(agent, log) as client:
                default = await client.get_prompt("desk.reply", {"ticket": "Hi"})
                seven = await client.get_prompt("desk.reply", {"ticket": "Hi", "words": "7"})
                with pytest.raises(MCPError) as missing:
                    await client.get_prompt("desk.reply", {})
                return default, seven, str(missing.value)

    default, seven, missing = asyncio.run(scenario())
    # MCP prompts have no system role: the instructions come first, as a user message.
    assert [(m.role, m.content.text) for m in default.messages] == [
        ("user", "You work the help desk."),
        ("user", "Answer in 50 words: Hi"),
    ]
    assert seven.messages[1].content.text == "Answer in 7 words: Hi"  # "7" read as JSON
    assert "cannot render prompt 'desk.reply'" in missing and "ticket" in missing


def test_secrets_never_reach_the_client_nor_the_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MCP_TEST_SECRET", SECRET)
    agent = write_agent(tmp_path, SECRET_AGENT)

    async def scenario() -> tuple[types.CallToolResult, types.GetPromptResult]:
        with (tmp_path / "server.log").open("w") as log:
            async with stdio_session(agent, log) as client:
                result = await client.call_tool("desk.reply", {"ticket": "Hi"})
                prompt = await client.get_prompt("desk.reply", {"ticket": "Hi"})
                return result, prompt

    result, prompt = asyncio.run(scenario())
    assert not result.is_error
    shown = result.model_dump_json() + prompt.model_dump_json()
    assert "***" in prompt.messages[-1].content.text
    assert SECRET not in shown
    assert SECRET not in (tmp_path / "server.log").read_text()


def test_a_reload_tells_a_listening_client_and_a_broken_edit_keeps_the_last_version(
    tmp_path: Path,
) -> None:
    agent = write_agent(tmp_path)
    stderr = StderrLines()

    async def scenario() -> tuple[list[object], list[str], list[str], str]:
        async with stdio_session(agent, stderr.writer) as client:
            await stderr.until("serving 2 methods")
            assert client.protocol_version == "2026-07-28"
            events: list[object] = []
            async with client.listen(tools_list_changed=True, prompts_list_changed=True) as sub:
                save(agent, "version: 1\nname: desk\nmethods: {broken")
                failed = await stderr.until("still serving version")
                # The broken edit announced nothing and the last version still serves.
                during = [t.name for t in (await client.list_tools()).tools]
                save(agent, NEW_METHOD)
                with anyio.fail_after(TIMEOUT_S):
                    async for event in sub:
                        events.append(event)
                        if len(events) == 2:
                            break
            after = [t.name for t in (await client.list_tools()).tools]
            return events, during, after, failed

    try:
        events, during, after, failed = asyncio.run(scenario())
    finally:
        stderr.close()
    assert [type(e) for e in events] == [ToolsListChanged, PromptsListChanged]
    assert during == ["desk.classify", "desk.reply"]
    assert after == ["desk.classify", "desk.reply", "desk.summarize"]
    assert "error in the new version (desk.yaml changed)" in failed
    assert any("desk.yaml:4:1: error: invalid YAML" in line for line in stderr.lines)


def test_a_handshake_era_client_gets_list_changed_notifications(tmp_path: Path) -> None:
    agent = write_agent(tmp_path)
    notified: list[str] = []
    both = anyio.Event()

    async def on_message(message: object) -> None:
        if isinstance(message, types.ServerNotification):
            notified.append(message.method)
            if {"notifications/tools/list_changed", "notifications/prompts/list_changed"} <= set(
                notified
            ):
                both.set()

    async def scenario() -> list[str]:
        with (tmp_path / "server.log").open("w") as log:
            async with stdio_session(agent, log, mode="legacy", message_handler=on_message) as c:
                assert c.protocol_version == "2025-11-25"
                assert c.server_capabilities.tools and c.server_capabilities.tools.list_changed
                save(agent, NEW_METHOD)
                with anyio.fail_after(TIMEOUT_S):
                    await both.wait()
                return [p.name for p in (await c.list_prompts()).prompts]

    prompts = asyncio.run(scenario())
    assert "desk.summarize" in prompts


def _asking_repo(tmp_path: Path) -> Path:
    (tmp_path / "janitor_tools.py").write_text(JANITOR_TOOLS, encoding="utf-8")
    return write_agent(tmp_path, JANITOR_AGENT, "janitor.yaml")


def test_a_confirmation_is_put_to_the_client_by_elicitation(tmp_path: Path) -> None:
    agent = _asking_repo(tmp_path)
    records = tmp_path / "runs.jsonl"
    asked: list[types.ElicitRequestParams] = []

    async def approve(ctx: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        asked.append(params)
        return types.ElicitResult(action="accept", content={"approve": True})

    async def scenario() -> types.CallToolResult:
        with (tmp_path / "server.log").open("w") as log:
            async with stdio_session(
                agent, log, "--records", str(records), mode="legacy", elicitation_callback=approve
            ) as client:
                return await client.call_tool("janitor.tidy", {})

    result = asyncio.run(scenario())
    assert not result.is_error
    (question,) = asked
    assert question.message.startswith("Remove ") and question.message.endswith("?")
    (record,) = [json.loads(line) for line in records.read_text().splitlines()]
    (confirmation,) = record["confirmations"]
    assert confirmation["name"] == "remove"
    assert (confirmation["answer"], confirmation["by"]) == ("approved", "user")


def test_without_elicitation_a_confirmation_is_refused_unless_yes(tmp_path: Path) -> None:
    agent = _asking_repo(tmp_path)

    async def record(*args: str) -> dict[str, Any]:
        records = tmp_path / f"runs{len(args)}.jsonl"
        with (tmp_path / "server.log").open("w") as log:
            async with stdio_session(agent, log, "--records", str(records), *args) as client:
                await client.call_tool("janitor.tidy", {})
        (found,) = [json.loads(line) for line in records.read_text().splitlines()]
        return found  # type: ignore[no-any-return]

    refused = asyncio.run(record())
    assert refused["tools_not_run"] == [{"name": "remove", "reason": "unconfirmed"}]
    approved = asyncio.run(record("--yes"))
    assert approved["confirmations"][0]["by"] == "--yes"
    assert "tools_not_run" not in approved


def test_sigterm_stops_the_server_while_the_client_keeps_stdin_open(tmp_path: Path) -> None:
    agent = write_agent(tmp_path)
    process = subprocess.Popen(
        command(agent),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stdin is not None and process.stdout is not None
    hello = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "test", "version": "1"},
        },
    }
    process.stdin.write(json.dumps(hello) + "\n")
    process.stdin.flush()
    answer = json.loads(process.stdout.readline())  # serving: the pipe stays open
    process.terminate()
    _, err = process.communicate(timeout=TIMEOUT_S)
    assert answer["result"]["serverInfo"]["name"] == "openprogram"
    assert process.returncode == 0
    assert err.rstrip().endswith("stopped")


@pytest.mark.parametrize("mode", ["auto", "legacy"])
def test_a_caller_asking_for_progress_hears_the_steps_of_the_run(tmp_path: Path, mode: str) -> None:
    agent = _asking_repo(tmp_path)
    heard: list[str] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        heard.append(message or "")

    async def scenario() -> types.CallToolResult:
        with (tmp_path / "server.log").open("w") as log:
            async with stdio_session(agent, log, "--yes", mode=mode) as client:
                return await client.call_tool("janitor.tidy", {}, progress_callback=on_progress)

    result = asyncio.run(scenario())
    assert not result.is_error
    assert heard == ["running janitor.tidy", "calling tool remove"]


WAITING_AGENT = """\
version: 1
name: waiter
model: test
tools:
  wait:
    python: waiter_tools:wait
methods:
  hold:
    prompt: Wait.
"""

WAITING_TOOLS = '''
import asyncio


async def wait() -> str:
    """Wait until cancelled."""
    await asyncio.Event().wait()
    return "never"
'''


def test_a_cancelled_call_stops_its_run_which_is_recorded_as_interrupted(tmp_path: Path) -> None:
    (tmp_path / "waiter_tools.py").write_text(WAITING_TOOLS, encoding="utf-8")
    agent = write_agent(tmp_path, WAITING_AGENT, "waiter.yaml")
    records = tmp_path / "runs.jsonl"

    async def scenario() -> None:
        with (tmp_path / "server.log").open("w") as log:
            async with stdio_session(agent, log, "--records", str(records)) as client:
                waiting = anyio.Event()

                async def on_progress(
                    done: float, total: float | None, message: str | None
                ) -> None:
                    if message == "calling tool wait":
                        waiting.set()

                async with anyio.create_task_group() as group:

                    async def call() -> None:
                        await client.call_tool("waiter.hold", {}, progress_callback=on_progress)

                    group.start_soon(call)
                    with anyio.fail_after(TIMEOUT_S):
                        await waiting.wait()
                    group.cancel_scope.cancel()  # the client gives up: notifications/cancelled

    asyncio.run(scenario())
    (record,) = [json.loads(line) for line in records.read_text().splitlines()]
    assert record["status"] == "interrupted"
    # Stopped by the cancellation, not by the shutdown's grace period running out.
    assert "in flight" not in (tmp_path / "server.log").read_text()
