"""What an MCP client may send ``openprogram-run mcp`` that it once left unanswered: every
request gets a reply, as JSON-RPC asks, even one the SDK cannot read.

The server runs as a subprocess on stdio, spoken to in raw lines (the official client cannot
send a malformed one); each reply is awaited with a generous timeout, nothing sleeps.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import mcp_types as types
import pytest
from support import JANITOR_AGENT, JANITOR_TOOLS

from openprogram_yaml.compile.project import compile_path
from openprogram_yaml.mcp.catalog import Catalog
from openprogram_yaml.mcp.stdio import (
    StdinMessages,
    UnreadableLine,
    parse_line,
    response_in_place_of,
)

#: Generous: a subprocess starts in about a second.
TIMEOUT_S = 30.0

AGENT = """\
version: 1
name: desk
model: test
methods:
  answer:
    inputs: {ticket: {type: string}}
    prompt: "Answer: {{ ticket }}"
  scale:
    inputs: {ticket: {type: string}, n: {type: array, items: {type: number}}}
    prompt: "Scale {{ ticket }} by {{ n }}"
"""


def call(request_id: int, arguments: str) -> bytes:
    """A ``tools/call`` line with ``arguments`` as raw JSON text."""
    head = f'{{"jsonrpc": "2.0", "id": {request_id}, "method": "tools/call", '
    return (head + f'"params": {{"name": "desk.answer", "arguments": {arguments}}}}}\n').encode()


#: Lines the SDK cannot read, though a client may well send them (all but the last are
#: JSON that Python reads): each was dropped, and its caller waited for ever.
UNREADABLE = {
    "half a surrogate pair": call(2, '{"ticket": "\\ud800"}'),
    "a number past the decoder's range": call(3, '{"ticket": ' + "9" * 5000 + "}"),
    "nesting past the decoder's limit": call(4, '{"ticket": ' + "[" * 5000 + "]" * 5000 + "}"),
    "no JSON at all": call(5, '{"ticket": "cut short'),
}


Reply = Callable[[bytes], Awaitable[dict[str, Any]]]


def refusal_of_line(line: str) -> types.JSONRPCError | None:
    """The error answering ``line``, or None when it is a message."""
    try:
        parse_line(line)
    except UnreadableLine as exc:
        return exc.refusal
    return None


@asynccontextmanager
async def mcp_stdio(agent: Path, *args: str, capabilities: bytes = b"{}") -> AsyncIterator[Reply]:
    """``openprogram-run mcp AGENT`` on stdio, past its handshake; yields ``reply(line)``,
    which sends a line and reads the next one the server writes."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPENPROGRAM_")}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "openprogram_yaml", "mcp", str(agent), *args,
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL, env=env, limit=1 << 20,
    )  # fmt: skip
    assert proc.stdin is not None and proc.stdout is not None
    stdin, stdout = proc.stdin, proc.stdout

    async def reply(line: bytes) -> dict[str, Any]:
        stdin.write(line)
        await stdin.drain()
        answer: dict[str, Any] = json.loads(await asyncio.wait_for(stdout.readline(), TIMEOUT_S))
        return answer

    try:
        hello = await reply(
            b'{"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": '
            b'{"protocolVersion": "2025-06-18", "capabilities": ' + capabilities + b", "
            b'"clientInfo": {"name": "t", "version": "1"}}}\n'
        )
        assert hello["id"] == 1 and "result" in hello
        stdin.write(b'{"jsonrpc": "2.0", "method": "notifications/initialized"}\n')
        yield reply
    finally:
        stdin.close()
        await asyncio.wait_for(proc.wait(), TIMEOUT_S)


def write_agent(tmp_path: Path) -> Path:
    agent = tmp_path / "desk.yaml"
    agent.write_text(AGENT, encoding="utf-8")
    return agent


def test_a_line_the_sdk_cannot_read_is_answered_with_its_id(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with mcp_stdio(write_agent(tmp_path)) as reply:
            for what, line in UNREADABLE.items():
                answer = await reply(line)
                request_id = json.loads(line[line.index(b'"id": ') + 6 :].split(b",")[0])
                assert answer["id"] == request_id, what
                assert answer["error"]["code"] == -32700, what
                assert answer["error"]["message"].startswith("Parse error: "), what
            # and the connection serves on
            done = await reply(call(9, '{"ticket": "printer"}'))
            assert done["id"] == 9 and done["result"]["isError"] is False

    asyncio.run(scenario())


@pytest.mark.parametrize("number", ["NaN", "-Infinity", "1e999"])
def test_nan_or_infinity_in_arguments_runs_nothing_and_records_nothing(
    tmp_path: Path, number: str
) -> None:
    """The SDK's parser reads ``NaN`` and ``Infinity``: a number input took one, the model
    was sent ``nan``, and the records file got a line saying ``"inputs": {"f": NaN}``,
    which is no JSON. A prompt argument that reads as one was rendered as ``inf``."""
    records = tmp_path / "records.jsonl"

    async def scenario() -> None:
        async with mcp_stdio(write_agent(tmp_path), "--records", str(records)) as reply:
            line = call(2, f'{{"ticket": "x", "n": [{number}]}}').replace(b"answer", b"scale")
            refused = await reply(line)
            assert refused["id"] == 2 and refused["error"]["code"] == -32602
            assert "NaN or Infinity" in refused["error"]["message"]
            assert "(arguments.n[0]: " in refused["error"]["message"]  # where, as -i says it
            get = (
                '{"jsonrpc": "2.0", "id": 3, "method": "prompts/get", "params": '
                f'{{"name": "desk.scale", "arguments": {{"ticket": "x", "n": "[{number}]"}}}}}}\n'
            )
            rendered = await reply(get.encode())
            assert rendered["id"] == 3 and rendered["error"]["code"] == -32602
            assert "is not of type 'array'" in rendered["error"]["message"]  # it stayed text
            done = await reply(call(4, '{"ticket": "printer"}'))
            assert done["result"]["isError"] is False

    asyncio.run(scenario())
    [line] = records.read_text(encoding="utf-8").splitlines()  # the good call's alone
    json.loads(line, parse_constant=_not_json)


def _not_json(name: str) -> None:
    raise AssertionError(f"the record holds {name}, which is not JSON")


@pytest.mark.parametrize(
    ("line", "request_id", "code"),
    [
        (b'{"id": "a\\"b", "method": "x", "params": ', 'a"b', -32700),
        (b'{"params": {"id": 7}, "id": 8, "method": "tools/call"', 8, -32700),
        (b'{"params": {"id": 7}, "method": "tools/call"', None, -32700),  # 7 is not its id
        (b'{"method": "id", "params": {}, "id": 1.5}', None, -32600),
        (b'{"id": 3}', None, -32600),  # no method: no request to answer
        (b'{"jsonrpc": "2.0", "id": 1, "result": [1]}', None, -32600),  # a response
        (b"[1, 2]", None, -32600),
        (b"\xff\xfe", None, -32700),
    ],
)
def test_the_id_of_an_unreadable_line_is_its_own_or_null(
    line: bytes, request_id: object, code: int
) -> None:
    refusal = refusal_of_line(line.decode("utf-8", "replace"))
    assert refusal is not None
    assert (refusal.id, refusal.error.code) == (request_id, code)


def test_a_readable_line_is_a_message() -> None:
    assert refusal_of_line(call(1, '{"ticket": "x"}').decode()) is None


def test_a_line_past_the_limit_is_answered_and_skipped_and_the_next_one_read() -> None:
    """A line longer than the reader's limit (64 MiB in use) made ``readline`` raise
    ValueError out of the SDK's reader task: the server ended with a traceback."""

    async def scenario() -> None:
        reader = asyncio.StreamReader(limit=64)
        lines = StdinMessages(reader)
        refused: list[types.JSONRPCError] = []

        async def refuse(error: types.JSONRPCError) -> None:
            refused.append(error)

        lines.refuse = refuse
        long_line = call(7, '{"ticket": "' + "x" * 500 + '"}')
        ping = b'{"jsonrpc": "2.0", "id": 8, "method": "ping"}\n'
        for chunk in (long_line[:100], long_line[100:], ping, long_line[:-1]):
            reader.feed_data(chunk)
        reader.feed_eof()
        assert await lines.__anext__() == parse_line(ping.decode())
        [error] = refused
        assert (error.id, error.error.code) == (7, types.INVALID_REQUEST)
        assert "longer than 64 MiB" in error.error.message
        with pytest.raises(StopAsyncIteration):  # the last, cut off by the end, dropped too
            await lines.__anext__()
        assert len(refused) == 2 and refused[1].id == 7

    asyncio.run(scenario())


@pytest.mark.parametrize(
    "result",
    [
        b"[1]",  # no ElicitResult at all: a line the SDK could not read
        b'{"action": "explode"}',
        b'{"action": "accept", "content": {"approve": [1, 2]}}',
    ],
)
def test_an_unreadable_answer_to_an_elicitation_declines_and_the_call_is_answered(
    tmp_path: Path, result: bytes
) -> None:
    """A client's response that is no JSON-RPC message was answered with an error bearing
    its id, which is the server's request's: a client takes it for its own request of that
    id (here the tools/call). Without that, the SDK dropped the line, and the elicitation
    and the call waited for ever. A result that is no ElicitResult failed the run with
    pydantic's dump of it. Each is a decline now: the tool is not run, the run goes on."""
    (tmp_path / "janitor_tools.py").write_text(JANITOR_TOOLS, encoding="utf-8")
    agent = tmp_path / "janitor.yaml"
    agent.write_text(JANITOR_AGENT, encoding="utf-8")

    async def scenario() -> None:
        async with mcp_stdio(agent, capabilities=b'{"elicitation": {}}') as reply:
            asked = await reply(
                b'{"jsonrpc": "2.0", "id": 1, "method": "tools/call", '
                b'"params": {"name": "janitor.tidy", "arguments": {}}}\n'
            )
            assert asked["method"] == "elicitation/create"
            head = b'{"jsonrpc": "2.0", "id": ' + json.dumps(asked["id"]).encode()
            done = await reply(head + b', "result": ' + result + b"}\n")
            assert done["id"] == 1 and "result" in done, done
            [text] = done["result"]["content"]
            assert "declined" in text["text"] and "removed" not in text["text"]
            assert "validation error" not in text["text"]

    asyncio.run(scenario())


def test_an_unreadable_response_reaches_the_sdk_as_an_error_with_its_id() -> None:
    line = '{"jsonrpc": "2.0", "id": 4, "result": [1]}'
    refusal = refusal_of_line(line)
    assert refusal is not None
    error = response_in_place_of(line, refusal)
    assert isinstance(error, types.JSONRPCError) and error.id == 4
    assert "could not be read" in error.error.message
    # a request, or a line with no id, is answered instead (refusal_of_line)
    for other in ('{"id": 4, "method": "x", "params": 3}', '{"result": [1]}'):
        found = refusal_of_line(other)
        assert found is not None and response_in_place_of(other, found) is None


SECRET = "zq-secret-value-7781"

SECRET_AGENT = """\
version: 1
name: desk
model: test
description: "A desk; ${env:MCP_FRONT_SECRET}"
methods:
  answer:
    inputs:
      ticket: {type: string, description: "t ${env:MCP_FRONT_SECRET}"}
      tone: {type: string, default: "${env:MCP_FRONT_SECRET}"}
    prompt: "Answer: {{ ticket }}"
  label:
    description: "Label ${env:MCP_FRONT_SECRET}"
    inputs: {ticket: {type: string}}
    prompt: "Label: {{ ticket }}"
    response_schema:
      type: object
      properties: {label: {type: string, description: "${env:MCP_FRONT_SECRET}"}}
      required: [label]
"""


def test_the_tools_and_prompts_listed_show_no_secret(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A description, or a schema's description or default, reading ``${env:…}`` was listed
    by tools/list and prompts/list as read (serve's /agents and /v1/models redact it)."""
    monkeypatch.setenv("MCP_FRONT_SECRET", SECRET)
    agent = tmp_path / "desk.yaml"
    agent.write_text(SECRET_AGENT, encoding="utf-8")
    catalog = Catalog.of(compile_path(agent))
    listed = json.dumps(
        [item.model_dump(mode="json", by_alias=True) for item in (*catalog.tools, *catalog.prompts)]
    )
    assert SECRET not in listed and "***" in listed
    assert all(SECRET not in ref.description for ref in catalog.methods.values())
    tool = next(t for t in catalog.tools if t.name == "desk.label")
    assert tool.output_schema is not None  # still promised, redacted


def test_only_the_start_of_an_unreadable_line_is_scanned_for_its_id() -> None:
    """A line of 64 MiB of short strings took 4 s to scan whole for its id, the event loop
    (every other request) waiting: the first MiB is scanned, where clients write ``id``
    and ``method`` (before ``params``)."""
    params = '"params": {"x": [' + ",".join(['"a"'] * (1 << 20)) + "], NaN}"
    first = refusal_of_line('{"jsonrpc": "2.0", "id": 3, "method": "m", ' + params + "}")
    last = refusal_of_line('{"jsonrpc": "2.0", ' + params + ', "id": 3, "method": "m"}')
    assert first is not None and first.id == 3
    assert last is not None and last.id is None
