"""An MCP server for the tests of the ``mcp`` tool kind, written with the SDK's ``MCPServer``.

``python notes_server.py`` serves over stdio; ``python notes_server.py --http PORT`` over
streamable HTTP on 127.0.0.1. Its tools cover what the tool kind maps: text, structured
JSON, an image, an embedded resource, an ``isError`` result, a crash (the process exits
mid-call) and a call that never ends (it waits on an event nobody sets). ``whoami`` reports
its process id, so a test can check the process is gone after shutdown (and
``NOTES_STDERR_BYTES`` makes it log that much to stderr first); ``secret`` returns
the ``NOTES_TOKEN`` its environment was given (and the HTTP server checks ``Authorization``).
"""

from __future__ import annotations

import asyncio
import os
import sys

from mcp.server import MCPServer
from mcp.server.mcpserver import Image
from mcp.types import EmbeddedResource, TextResourceContents

server = MCPServer("notes")
NOTES: dict[str, str] = {"todo": "buy milk"}
_never = asyncio.Event()


@server.tool()
def read_note(name: str) -> str:
    """Read the note called ``name``."""
    return NOTES.get(name, f"no note {name!r}")


@server.tool()
def delete_note(name: str) -> str:
    """Delete the note called ``name``."""
    NOTES.pop(name, None)
    return f"deleted {name}"


@server.tool()
def add(a: int, b: int) -> dict[str, int]:
    """Add two numbers; the answer comes back as structured content."""
    return {"sum": a + b}


@server.tool()
def picture() -> Image:
    """A one-pixel PNG."""
    return Image(data=bytes.fromhex("89504e470d0a1a0a"), format="png")


@server.tool()
def attachment() -> EmbeddedResource:
    """An embedded text resource."""
    return EmbeddedResource(
        type="resource",
        resource=TextResourceContents(uri="notes://todo", mime_type="text/plain", text="buy milk"),
    )


@server.tool()
def broken(reason: str) -> str:
    """Fails with ``reason`` (an isError result)."""
    raise ValueError(reason)


@server.tool()
def crash() -> str:
    """The server process exits in the middle of the call."""
    os._exit(3)


@server.tool()
async def wait_forever() -> str:
    """Never answers (waits on an event nobody sets)."""
    await _never.wait()
    return "unreachable"


@server.tool()
def whoami() -> int:
    """The server's process id."""
    return os.getpid()


@server.tool()
def secret() -> str:
    """The NOTES_TOKEN this server was started with, echoed (as a careless server would), and
    its length (which shows the value arrived when the echo is blanked out)."""
    token = os.environ.get("NOTES_TOKEN")
    return f"{token} ({len(token)} characters)" if token else "(unset)"


def _serve_http(port: int) -> None:
    """Streamable HTTP on 127.0.0.1:``port``; with NOTES_TOKEN set, every request must carry
    ``Authorization: Bearer <NOTES_TOKEN>`` (401 otherwise)."""
    import uvicorn

    app = server.streamable_http_app()
    token = os.environ.get("NOTES_TOKEN")

    async def guarded(scope, receive, send):  # type: ignore[no-untyped-def]
        if scope["type"] == "http" and token is not None:
            headers = dict(scope["headers"])
            if headers.get(b"authorization") != f"Bearer {token}".encode():
                await send({"type": "http.response.start", "status": 401, "headers": []})
                await send({"type": "http.response.body", "body": b"no entry"})
                return
        await app(scope, receive, send)

    uvicorn.run(guarded, host="127.0.0.1", port=port, log_level="info")


if __name__ == "__main__":
    # NOTES_STDERR_BYTES: a chatty server, logging that much to stderr before it serves.
    chatter = int(os.environ.get("NOTES_STDERR_BYTES", "0"))
    for n in range(chatter // 64):
        sys.stderr.write(f"log line {n:08d} ".ljust(63, ".") + "\n")
    sys.stderr.flush()
    if len(sys.argv) == 3 and sys.argv[1] == "--http":
        _serve_http(int(sys.argv[2]))
    else:
        server.run()
