"""What an MCP server an agent declares may send that once held the run or leaked a secret.

The servers speak the protocol without the SDK, so they can send what the SDK's own server
never would: over stdio, a small program given its tool list and the lines it answers a call
with; over HTTP, an aiohttp server on 127.0.0.1 given the reply to a call.
"""

from __future__ import annotations

import asyncio
import gzip
import json
import subprocess
import sys
import textwrap
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from openprogram_yaml.errors import ToolError
from openprogram_yaml.tools.mcp import McpServer
from openprogram_yaml.tools.mcp_http import MAX_HTTP_REPLY_BYTES
from openprogram_yaml.tools.mcp_stdio import MAX_MESSAGE_BYTES

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
        elif method == "tools/list" and script.get("endless"):  # a next page, forever
            page = int((message.get("params") or {}).get("cursor") or 0)
            tools = [dict(tool, name=f"{tool['name']}{page}") for tool in script["tools"]]
            send(json.dumps({"jsonrpc": "2.0", "id": message["id"],
                             "result": {"tools": tools, "nextCursor": str(page + 1)}}))
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
    tmp_path: Path,
    tools: list[dict[str, Any]],
    answer: list[str],
    *,
    endless: bool = False,
    **options: Any,
) -> McpServer:
    (tmp_path / "server.py").write_text(_SERVER, encoding="utf-8")
    script = {"tools": tools, "answer": answer, "endless": endless}
    (tmp_path / "script.json").write_text(json.dumps(script))
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
        {"type": "object", "properties": {"q": {"type": "string", "pattern": "^(a|aa)+$"}}},
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
    assert "its tool 'find'" in message
    shape = "repeats alternatives" if "(a|aa)" in json.dumps(schema) else "nests unbounded"
    assert f"which {shape}" in message


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


def test_a_result_with_a_lone_surrogate_is_read_with_it_replaced(tmp_path: Path) -> None:
    # What Python's json.dumps writes for a file name that is not UTF-8. The SDK's parser
    # refuses the line and drops it: the call waited for its timeout, "did not answer".
    answer = _OK.replace('"ok"', '"file\\udcff.txt"')
    assert _call(_server(tmp_path, [_tool({"type": "object"})], [answer])) == "file\ufffd.txt"


def test_a_result_written_in_latin_1_is_read_with_the_odd_bytes_replaced(tmp_path: Path) -> None:
    # A server writing its stdout in another encoding: the line is not UTF-8. Dropped by the
    # SDK as well, the call waited for its timeout.
    answer = _OK.replace('"ok"', '"caf\u00e9"')
    server = _server(tmp_path, [_tool({"type": "object"})], [answer])
    server.env["PYTHONIOENCODING"] = "latin-1"
    assert _call(server) == "caf\ufffd"


def test_a_message_past_the_cap_over_stdio_fails_the_call_at_once(tmp_path: Path) -> None:
    # The SDK joined a line's chunks with no limit, each copying all before it: a 50 MB line
    # took 33 s and 310 MB, and one without end grew until the process died.
    answer = _OK.replace('"ok"', '"' + "x" * MAX_MESSAGE_BYTES + '"')
    with pytest.raises(ToolError) as info:
        _call(_server(tmp_path, [_tool({"type": "object"})], [answer]))
    message = str(info.value)
    assert "MCP server 'raw' failed on tool 'raw__find'" in message
    assert "larger than 67,108,864 bytes" in message


def test_a_line_of_many_reads_within_the_cap_is_read_whole(tmp_path: Path) -> None:
    text = "".join(chr(ord("a") + i % 26) for i in range(3_000_000))
    answer = _OK.replace('"ok"', json.dumps(text))
    assert _call(_server(tmp_path, [_tool({"type": "object"})], [answer])) == text


@pytest.mark.parametrize(
    ("per_page", "message"),
    [(100, "it lists more than 5,000 tools"), (0, "its tool list did not end after 5,000 pages")],
)
def test_a_tool_list_without_end_fails_the_start_saying_so(
    tmp_path: Path, per_page: int, message: str
) -> None:
    # A next page forever held the start for start_timeout_s (30 s; 700 MB of tools with
    # 1,000 a page), then failed as "did not start within 30s".
    tools = [_tool({"type": "object"}) for _ in range(per_page)]
    for index, tool in enumerate(tools):
        tool["name"] = f"t{index}_"
    server = _server(tmp_path, tools, [_OK], endless=True, start_timeout_s=60)
    with pytest.raises(ToolError) as info:
        asyncio.run(_tools(server))
    assert "MCP server 'raw'" in str(info.value) and message in str(info.value)


# --- over streamable HTTP ---------------------------------------------------------------------


class HttpMcpServer:
    """An MCP server over HTTP on 127.0.0.1 (aiohttp, in a thread of its own) whose answer to
    a call is ``answer(id)``: the body and headers of a JSON reply."""

    def __init__(self, answer: Callable[[object], tuple[bytes, dict[str, str]]]) -> None:
        self.answer = answer
        self.url = ""
        self._ready = threading.Event()
        self._stop: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread = threading.Thread(target=asyncio.run, args=(self._serve(),), daemon=True)

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        message = await request.json()
        method, ident = message.get("method"), message.get("id")
        if ident is None:
            return web.Response(status=202)
        if method == "initialize":
            version = message["params"]["protocolVersion"]
            info = {"name": "raw", "version": "1"}
            result = {"protocolVersion": version, "capabilities": {"tools": {}}, "serverInfo": info}
        elif method == "tools/list":
            result = {"tools": [_tool({"type": "object"})]}
        elif method == "tools/call":
            body, headers = self.answer(ident)
            return web.Response(body=body, headers={"content-type": "application/json", **headers})
        else:
            error = {"code": -32601, "message": "Method not found"}
            return web.json_response({"jsonrpc": "2.0", "id": ident, "error": error})
        return web.json_response({"jsonrpc": "2.0", "id": ident, "result": result})

    async def _serve(self) -> None:
        app = web.Application(client_max_size=1 << 20)
        app.router.add_post("/mcp", self._handle)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        self.url = f"http://127.0.0.1:{runner.addresses[0][1]}/mcp"
        self._loop, self._stop = asyncio.get_running_loop(), asyncio.Event()
        self._ready.set()
        await self._stop.wait()
        await runner.cleanup()

    def __enter__(self) -> HttpMcpServer:
        self._thread.start()
        assert self._ready.wait(30)
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._loop is not None and self._stop is not None
        self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(30)


def _text_reply(ident: object, text: str) -> bytes:
    result = {"content": [{"type": "text", "text": text}]}
    return json.dumps({"jsonrpc": "2.0", "id": ident, "result": result}).encode()


def test_a_reply_past_the_cap_fails_the_call_instead_of_filling_memory() -> None:
    # 200 MB of text once took 1.2 GB to read whole; it never ended the call by itself.
    text = "x" * MAX_HTTP_REPLY_BYTES
    with HttpMcpServer(lambda ident: (_text_reply(ident, text), {})) as http:
        server = McpServer("raw", url=http.url, timeout_s=60)
        with pytest.raises(ToolError, match="larger than 67,108,864 bytes"):
            _call(server)


def test_a_compressed_reply_fails_the_call_and_is_never_inflated() -> None:
    # A few kB of gzip can inflate to gigabytes; the client asks for none (identity).
    packed = gzip.compress(b"x" * 1000)
    with HttpMcpServer(lambda ident: (packed, {"content-encoding": "gzip"})) as http:
        server = McpServer("raw", url=http.url, timeout_s=60)
        with pytest.raises(ToolError, match="compressed with 'gzip'"):
            _call(server)


def test_a_reply_within_the_cap_is_read() -> None:
    text = "x" * (MAX_HTTP_REPLY_BYTES // 2)
    with HttpMcpServer(lambda ident: (_text_reply(ident, text), {})) as http:
        assert _call(McpServer("raw", url=http.url, timeout_s=60)) == text


def test_an_error_result_of_megabytes_reaches_the_model_cut(tmp_path: Path) -> None:
    # A result is cut by the tool loop; an error went to the model whole (2 MB of it).
    result = {"isError": True, "content": [{"type": "text", "text": "E" * 2_000_000}]}
    answer = '{"jsonrpc": "2.0", "id": ID, "result": ' + json.dumps(result) + "}"
    with pytest.raises(ToolError) as info:
        _call(_server(tmp_path, [_tool({"type": "object"})], [answer]))
    message = str(info.value)
    assert message.startswith("E" * 2000) and len(message) < 2100
    assert "[truncated: 1998000 more characters not shown]" in message
