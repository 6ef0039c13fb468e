"""What an MCP server an agent declares may send that once held the run or leaked a secret.

The server is a small program speaking the protocol's lines over stdio without the SDK, so
it can send what the SDK's own server never would; each test gives it its tool list and the
lines it answers a call with.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from openprogram_yaml.errors import ToolError
from openprogram_yaml.tools.mcp import McpServer

_SERVER = textwrap.dedent(
    """
    import json, sys
    script = json.load(open(sys.argv[1]))

    def send(text):
        sys.stdout.write(text + "\\n")
        sys.stdout.flush()

    for line in sys.stdin:
        message = json.loads(line)
        method, ident = message.get("method"), json.dumps(message.get("id"))
        if method == "server/discover":
            send(json.dumps({"jsonrpc": "2.0", "id": message["id"],
                             "error": {"code": -32601, "message": "Method not found"}}))
        elif method == "initialize":
            send(json.dumps({"jsonrpc": "2.0", "id": message["id"], "result": {
                "protocolVersion": message["params"]["protocolVersion"],
                "capabilities": {"tools": {}}, "serverInfo": {"name": "raw", "version": "1"}}}))
        elif method == "tools/list":
            send(json.dumps({"jsonrpc": "2.0", "id": message["id"],
                             "result": {"tools": script["tools"]}}))
        elif method == "tools/call":
            for text in script["answer"]:
                send(text.replace("ID", ident))
    """
)

_OK = '{"jsonrpc": "2.0", "id": ID, "result": {"content": [{"type": "text", "text": "ok"}]}}'


def _server(
    tmp_path: Path, tools: list[dict[str, Any]], answer: list[str], **options: Any
) -> McpServer:
    (tmp_path / "server.py").write_text(_SERVER, encoding="utf-8")
    (tmp_path / "script.json").write_text(json.dumps({"tools": tools, "answer": answer}))
    command = [sys.executable, "server.py", "script.json"]
    return McpServer("raw", command=command, cwd=tmp_path, timeout_s=20, **options)


def _tool(schema: dict[str, Any]) -> dict[str, Any]:
    return {"name": "find", "description": "Find.", "inputSchema": schema}


async def _tools(server: McpServer) -> object:
    try:
        return await server.tools()
    finally:
        await server.aclose()


def _call(server: McpServer, **arguments: Any) -> object:
    async def go() -> object:
        try:
            (tool,) = await server.tools()
            return await tool.execute(**arguments)
        finally:
            await server.aclose()

    return asyncio.run(go())


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "object", "properties": {"q": {"type": "string", "pattern": "^(a+)+$"}}},
        {"type": "object", "patternProperties": {"^(\\w+\\s?)*$": {"type": "string"}}},
        {"type": "object", "$defs": {"q": {"items": [{"pattern": "(a*)*b"}]}}},
    ],
)
def test_a_tool_checking_arguments_with_a_runaway_pattern_is_refused_at_start(
    tmp_path: Path, schema: dict[str, Any]
) -> None:
    # Its arguments are checked here, with Python's re, before the server gets them: forty
    # "a" and a "!" from the model held the run (and a serve process) for minutes.
    server = _server(tmp_path, [_tool(schema)], [_OK])
    with pytest.raises(ToolError) as info:
        asyncio.run(_tools(server))  # (not called: with the pattern let through, it hangs)
    message = str(info.value)
    assert "MCP server 'raw'" in message and "failed to start" in message
    assert "its tool 'find'" in message and "nests unbounded repetitions" in message


def test_a_tool_with_an_ordinary_pattern_is_offered_and_checks_it(tmp_path: Path) -> None:
    schema = {
        "type": "object",
        "properties": {"q": {"type": "string", "pattern": "^\\w+(\\.\\w+)*$"}},
    }
    assert _call(_server(tmp_path, [_tool(schema)], [_OK]), q="a.b") == "ok"
    with pytest.raises(ToolError, match="invalid arguments"):
        _call(_server(tmp_path, [_tool(schema)], [_OK]), q="a" * 40 + "!")


def test_a_line_the_sdk_cannot_read_shows_neither_its_secret_nor_a_traceback(
    tmp_path: Path,
) -> None:
    # The server was given the token; it ends a broken line with it. The SDK logs the line's
    # end with a traceback: with no logging configured, Python printed it on stderr. (In a
    # process of its own: pytest's logging capture would keep it from stderr here.)
    token = "tok-7f3a9c1e5b"
    broken = '{"jsonrpc": "2.0", "id": ID, "result": {"content": []}} ' + token
    _server(tmp_path, [_tool({"type": "object"})], [broken, _OK])
    caller = textwrap.dedent(
        f"""
        import asyncio, sys
        from openprogram_yaml.tools.mcp import McpServer

        async def main():
            command = [sys.executable, "server.py", "script.json"]
            server = McpServer("raw", command=command, env={{"RAW_TOKEN": {token!r}}})
            try:
                (tool,) = await server.tools()
                print(await tool.execute())
            finally:
                await server.aclose()

        asyncio.run(main())
        """
    )
    run = subprocess.run(
        [sys.executable, "-c", caller], cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    assert (run.returncode, run.stdout) == (0, "ok\n"), run.stderr
    assert token not in run.stderr and "Traceback" not in run.stderr
