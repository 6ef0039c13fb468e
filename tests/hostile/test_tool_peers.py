"""What a server an ``http`` tool calls may answer that once broke or froze the call.

Servers are ``LoopbackServer``s on 127.0.0.1; the tool is declared in YAML as a user writes
it and called the way the tool loop calls it.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from loopback import LoopbackServer, Reply, Request

from openprogram_yaml.compile.project import compile_path
from openprogram_yaml.errors import ToolError


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


def _echo(request: Request) -> Reply:
    """What the server was sent, echoed back (as many APIs' error bodies do)."""
    body = {"path": request.path, "body": request.body.decode()}
    return Reply(400, json.dumps(body).encode(), {"content-type": "application/json"})


def test_a_credential_in_the_url_query_or_body_never_reaches_the_model(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # As header values always were: a bot token in the path, a key in the query or the body
    # came back to the model in the error's URL and in what the server echoed.
    monkeypatch.setenv("BOT_TOKEN", "123456:AAbot-token-value")
    monkeypatch.setenv("SHOP_API_KEY", "shop-key-0f9e8d7c")
    monkeypatch.setenv("SIGNING_SECRET", "signing-secret-5a4b")
    with LoopbackServer() as server:
        server.add(_echo, lambda request: Reply(200, _echo(request).body, {}))
        path = tmp_path / "agent.yaml"
        path.write_text(
            "version: 1\nname: a\nmodel: test\ntools:\n  send:\n    description: x\n"
            "    http:\n      method: POST\n"
            f"      url: '{server.url}/bot${{env:BOT_TOKEN}}/send'\n"
            "      query: {key: '${env:SHOP_API_KEY}'}\n"
            "      body: {sign: '${env:SIGNING_SECRET}', text: hi}\n"
            "methods:\n  m: {prompt: go}\n",
            encoding="utf-8",
        )
        tool = next(t for t in compile_path(path).agent().tools if t.name == "send")

        async def go() -> tuple[str, object]:
            try:
                with pytest.raises(ToolError) as info:
                    await tool.execute()
                return str(info.value), await tool.execute()
            finally:
                await tool.aclose()

        error, result = asyncio.run(go())
        sent = server.requests[0]
    assert "123456:AAbot-token-value" in sent.path and "shop-key-0f9e8d7c" in sent.path
    assert "signing-secret-5a4b" in sent.body.decode()  # the server still gets them
    for shown in (error, str(result)):
        for secret in ("123456:AAbot-token-value", "shop-key-0f9e8d7c", "signing-secret-5a4b"):
            assert secret not in shown
    assert "/bot***/send" in error
