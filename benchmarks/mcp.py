"""A tool call through the ``mcp`` tool kind against the SDK's client calling the same server
directly, in the same run (issue 16, "Speed").

One small MCP server (written with the SDK's ``MCPServer``): over stdio, both sides use the
one connection the tool kind opened (a stdio server has one client), so the difference is
the tool kind's own work; over streamable HTTP, one server, each side its own client.
Rounds alternate between the sides: ``calls`` calls of ``read_note`` each, one at a time
and then 16 at a time, timed as a block. "ours" is ``McpTool.execute`` (arguments checked
against the tool's schema, the call, the result mapped to what the model sees); "direct"
is ``Client.call_tool`` on a client that listed the tools (so both check results against
the tools' output schemas).
Goal: ours at most 1.3x the direct call's time per call (the median of the per-round ratios).

    python benchmarks/mcp.py [--calls 200] [--rounds 9]
"""

from __future__ import annotations

import argparse
import asyncio
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from _common import HERE, median, report

# This file's name would shadow the SDK's ``mcp`` package: find it without this folder.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != HERE]
from mcp import Client  # noqa: E402

from openprogram_yaml.tools.mcp import McpServer  # noqa: E402

SERVER = """\
import sys

from mcp.server import MCPServer

server = MCPServer("bench")
NOTES = {"todo": "buy milk"}


@server.tool()
def read_note(name: str) -> str:
    \"\"\"Read a note.\"\"\"
    return NOTES.get(name, "none")


if len(sys.argv) == 2:
    server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[1]))
else:
    server.run()
"""

Call = Callable[[], Awaitable[object]]


async def _block(call: Call, calls: int, width: int) -> float:
    """Microseconds per call of ``calls`` calls, ``width`` at a time."""
    started = time.perf_counter()
    for _ in range(calls // width):
        await asyncio.gather(*(call() for _ in range(width)))
    return (time.perf_counter() - started) / calls * 1e6


async def compare(label: str, direct: Call, ours: Call, calls: int, rounds: int) -> None:
    """Both sides, ``rounds`` times, alternating which goes first; one, then 16 at a time."""
    for width in (1, 16):
        sides: dict[str, list[float]] = {"direct": [], "ours": []}
        await _block(direct, calls // 5, width)  # warm both sides
        await _block(ours, calls // 5, width)
        for round_ in range(rounds):
            # Alternate which side goes first, so drift in the machine's speed favours neither.
            order = [("direct", direct), ("ours", ours)]
            for side, call in order if round_ % 2 == 0 else reversed(order):
                sides[side].append(await _block(call, calls, width))
        base, mine = median(sides["direct"]), median(sides["ours"])
        ratio = median([m / b for m, b in zip(sides["ours"], sides["direct"], strict=True)])
        how = f"{label}, {'sequential' if width == 1 else f'{width} at a time'}"
        report(f"SDK client, direct ({how})", f"{base:,.0f} us/call")
        report(f"mcp tool kind ({how})", f"{mine:,.0f} us/call")
        report(f"mcp tool kind / direct ({how})", f"{ratio:.2f}x", "<= 1.3x", ratio <= 1.3)


async def stdio(script: Path, calls: int, rounds: int) -> None:
    """The server over stdio; both sides call it through the same connection (a stdio
    server has one client), so the difference is the tool kind's own work."""
    ours = McpServer("bench", command=[sys.executable, str(script)], cwd=script.parent)
    try:
        tool = {t.remote_name: t for t in await ours.tools()}["read_note"]
        client = ours.client
        assert client is not None

        async def direct() -> object:
            return await client.call_tool("read_note", {"name": "todo"})

        async def through_tool() -> object:
            return await tool.execute(name="todo")

        assert await through_tool() == "buy milk"
        await compare("stdio", direct, through_tool, calls, rounds)
    finally:
        await ours.aclose()


async def http(script: Path, calls: int, rounds: int) -> None:
    """One server over streamable HTTP, both sides its clients."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    process = subprocess.Popen(
        [sys.executable, str(script), str(port)], stderr=subprocess.PIPE, text=True
    )
    try:
        assert process.stderr is not None
        for line in process.stderr:
            if "Uvicorn running" in line:
                break
        # Its request log must not fill the pipe (the server would stall): read it away.
        threading.Thread(target=process.stderr.read, daemon=True).start()
        url = f"http://127.0.0.1:{port}/mcp"
        ours = McpServer("bench", url=url)
        tool = {t.remote_name: t for t in await ours.tools()}["read_note"]
        try:
            async with Client(url, cache=None) as client:
                await client.list_tools()

                async def direct() -> object:
                    return await client.call_tool("read_note", {"name": "todo"})

                async def through_tool() -> object:
                    return await tool.execute(name="todo")

                await compare("HTTP", direct, through_tool, calls, rounds)
        finally:
            await ours.aclose()
    finally:
        process.terminate()
        process.wait(timeout=30)


async def measure(calls: int, rounds: int) -> None:
    with tempfile.TemporaryDirectory() as folder:
        script = Path(folder) / "bench_server.py"
        script.write_text(SERVER)
        await stdio(script, calls, rounds)
        await http(script, calls, rounds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=9)
    args = parser.parse_args()
    asyncio.run(measure(args.calls, args.rounds))


if __name__ == "__main__":
    main()
