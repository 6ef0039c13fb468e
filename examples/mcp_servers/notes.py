"""A small MCP server for examples/mcp_notes.yaml: notes kept in memory, served over stdio.

Written with the official SDK's ``MCPServer``; run it alone with ``python notes.py`` (it
then waits for an MCP client on stdin).
"""

from mcp.server import MCPServer

server = MCPServer("notes")
NOTES: dict[str, str] = {
    "groceries": "milk, eggs, coffee",
    "release": "tag v1.4 on Friday; write the changelog first",
}


@server.tool()
def list_notes() -> list[str]:
    """The names of every note."""
    return sorted(NOTES)


@server.tool()
def read_note(name: str) -> str:
    """The text of the note called ``name``."""
    return NOTES.get(name, f"there is no note called {name!r}")


@server.tool()
def write_note(name: str, text: str) -> str:
    """Create or replace the note called ``name``."""
    NOTES[name] = text
    return f"saved {name!r}"


@server.tool()
def delete_note(name: str) -> str:
    """Delete the note called ``name``."""
    return f"deleted {name!r}" if NOTES.pop(name, None) is not None else f"no note {name!r}"


if __name__ == "__main__":
    server.run()
