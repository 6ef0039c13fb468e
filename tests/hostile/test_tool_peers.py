"""What a server an ``http`` tool calls may answer that once broke or froze the call.

Servers are ``LoopbackServer``s on 127.0.0.1; the tool is declared in YAML as a user writes
it and called the way the tool loop calls it.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from loopback import LoopbackServer, Reply

from openprogram_yaml.compile.project import compile_path


def fetch(tmp_path: Path, reply: Reply) -> object:
    """What an ``http`` tool calling a server that answers ``reply`` returns."""
    with LoopbackServer() as server:
        server.add(reply)
        path = tmp_path / "agent.yaml"
        path.write_text(
            "version: 1\nname: a\nmodel: test\n"
            f"tools:\n  fetch: {{description: x, http: {{url: '{server.url}/x'}}}}\n"
            "methods:\n  m: {prompt: go}\n",
            encoding="utf-8",
        )
        tool = next(t for t in compile_path(path).agent().tools if t.name == "fetch")

        async def go() -> object:
            try:
                return await tool.execute()
            finally:
                await tool.aclose()

        return asyncio.run(go())


@pytest.mark.parametrize(
    ("charset", "body"),
    [
        # idna and undefined refuse any body read with errors="replace" (a UnicodeError
        # reached the model); punycode refused non-ASCII, and took time growing with the
        # square of the body: 400 kB of digits held the event loop for 15 s.
        ("idna", "café".encode()),
        ("IDNA", b"hello"),
        ("undefined", b"hello"),
        ("punycode", "café".encode()),
        ("punycode", b"-" + b"9" * 200_000),
    ],
)
def test_a_charset_python_reads_no_text_with_is_read_as_utf8(
    tmp_path: Path, charset: str, body: bytes
) -> None:
    reply = Reply(200, body, {"content-type": f"text/plain; charset={charset}"})
    assert fetch(tmp_path, reply) == body.decode()


@pytest.mark.parametrize(
    ("charset", "body", "text"),
    [
        ("latin-1", "café".encode("latin-1"), "café"),
        ("shift_jis", "日本".encode("shift_jis"), "日本"),
        ("base64", b"aGk=", "aGk="),  # a bytes codec: no charset, UTF-8 as before
    ],
)
def test_a_charset_of_text_is_still_read_with_it(
    tmp_path: Path, charset: str, body: bytes, text: str
) -> None:
    reply = Reply(200, body, {"content-type": f"text/plain; charset={charset}"})
    assert fetch(tmp_path, reply) == text
