"""What the tests of ``openprogram-run mcp`` share: agent files, and the server started as a
subprocess that the official SDK's client talks to (over stdio or streamable HTTP)."""

from __future__ import annotations

import os
import queue
import re
import subprocess
import sys
import threading
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import IO, Any

import anyio
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client

#: Generous: a subprocess starts in about a second; a reload takes milliseconds.
TIMEOUT_S = 30.0

SECRET = "hunter2-secret-value"

AGENT = """\
version: 1
name: desk
model: test
description: A help desk.
instructions: You work the help desk.
methods:
  classify:
    description: Label a ticket.
    inputs:
      ticket: {type: string, minLength: 1, description: The ticket text}
    prompt: "Label this ticket: {{ ticket }}"
    response_schema:
      type: object
      required: [label]
      additionalProperties: false
      properties: {label: {type: string, enum: [bug, billing]}}
  reply:
    inputs:
      ticket: {type: string}
      words: {type: integer, default: 50}
    prompt: "Answer in {{ words }} words: {{ ticket }}"
"""

#: The prompt holds a secret, which the offline model echoes back.
SECRET_AGENT = AGENT.replace('{{ ticket }}"', '{{ ticket }} ${env:MCP_TEST_SECRET}"')


def write_agent(root: Path, text: str = AGENT, name: str = "desk.yaml") -> Path:
    path = root / name
    path.write_text(text, encoding="utf-8")
    return path


def save(path: Path, text: str) -> None:
    """Save as editors do: write a new file, then rename it over the old one."""
    tmp = path.with_name(path.name + ".tmp~")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)


def command(path: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "openprogram_yaml", "mcp", str(path), *args]


class StderrLines:
    """A pipe for a server's stderr, read line by line as the server writes them: a test
    waits for a line instead of sleeping."""

    def __init__(self) -> None:
        read, write = os.pipe()
        self.writer = os.fdopen(write, "w")
        self._reader = os.fdopen(read, "r")
        self.lines: list[str] = []

    async def until(self, text: str) -> str:
        """The next line holding ``text`` (the lines before it are kept in ``lines``)."""
        with anyio.fail_after(TIMEOUT_S):
            while True:
                line = await anyio.to_thread.run_sync(self._reader.readline, abandon_on_cancel=True)
                if not line:
                    raise AssertionError(f"the server ended without saying {text!r}")
                self.lines.append(line)
                if text in line:
                    return line

    def close(self) -> None:
        self.writer.close()
        self._reader.close()


@asynccontextmanager
async def stdio_session(
    path: Path, log: IO[str], *args: str, mode: str = "auto", **options: Any
) -> AsyncIterator[Client]:
    """The SDK's client on ``openprogram-run mcp PATH`` over stdio; the server's stderr
    goes to ``log``."""
    argv = command(path, *args)
    params = StdioServerParameters(command=argv[0], args=argv[1:], env=dict(os.environ))
    async with Client(stdio_client(params, errlog=log), mode=mode, **options) as client:
        yield client


@contextmanager
def http_server(path: Path, log: Path, *args: str) -> Iterator[str]:
    """``openprogram-run mcp PATH --http --port 0`` running; yields its ``/mcp`` URL (read
    from the startup line on its stderr). Stopped with SIGTERM at the end."""
    process = subprocess.Popen(
        command(path, "--http", "--port", "0", *args),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    stderr = process.stderr
    assert stderr is not None
    lines: list[str] = []
    try:
        # Read by a thread, so that waiting for the startup line has a deadline (a server
        # that hangs before it listens fails the test instead of hanging it).
        found: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=lambda: found.put(_url_line(stderr, lines)), daemon=True).start()
        try:
            url = found.get(timeout=TIMEOUT_S)
        except queue.Empty:
            process.kill()
            raise AssertionError(f"no startup line within {TIMEOUT_S:g} s") from None
        assert url is not None, "".join(lines)
        yield url
    finally:
        process.terminate()
        _, rest = process.communicate(timeout=TIMEOUT_S)
        log.write_text("".join(lines) + rest, encoding="utf-8")


def _url_line(stderr: IO[str], lines: list[str]) -> str | None:
    """The URL of the startup line, None when the server exits before saying it."""
    for line in stderr:
        lines.append(line)
        found = re.search(r"at (http://\S+/mcp) ", line)
        if found:
            return found.group(1)
    return None
