"""What the peers of ``http`` and ``command`` tools may send back that once broke or froze
the call, or showed the model a key.

Servers are ``LoopbackServer``s on 127.0.0.1, programs are Python run with ``-c``; each tool
is declared in YAML as a user writes it and called the way the tool loop calls it.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import pytest
from loopback import LoopbackServer, Reply, Request

from openprogram_yaml.compile.project import compile_path
from openprogram_yaml.errors import ToolError


def call_tool(folder: Path, tool: str) -> object:
    """What the tool ``tool`` (YAML, under ``tools:``, named ``t``) returns when called with
    no arguments, or the text of its ``ToolError``."""
    path = folder / "agent.yaml"
    path.write_text(
        f"version: 1\nname: a\nmodel: test\ntools:\n  t: {tool}\nmethods:\n  m: {{prompt: go}}\n",
        encoding="utf-8",
    )
    built = next(t for t in compile_path(path).agent().tools if t.name == "t")

    async def go() -> object:
        try:
            return await built.execute()
        except ToolError as exc:
            return str(exc)
        finally:
            await built.aclose()

    return asyncio.run(go())


def fetch(tmp_path: Path, reply: Reply) -> object:
    """What an ``http`` tool calling a server that answers ``reply`` returns."""
    with LoopbackServer() as server:
        server.add(reply)
        return call_tool(tmp_path, f"{{description: x, http: {{url: '{server.url}/x'}}}}")


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


# --- command tools: the program has the runner's environment, keys included -------------------


def _command_result(tmp_path: Path, code: str, *, max_output: int = 65536) -> str:
    """What a command tool running ``python -c code`` gives the model (its error, if any)."""
    command = json.dumps([sys.executable, "-c", code])
    tool = f"{{description: x, command: {command}, max_output_bytes: {max_output}}}"
    return str(call_tool(tmp_path, tool))


KEY = "sk-runner-key-5e6f7a8b9c"


@pytest.mark.parametrize(
    ("code", "max_output"),
    [
        ("import os; print(os.environ['OPENAI_API_KEY'])", 65536),  # an `env`
        ("import os, sys; sys.exit('bad key ' + os.environ['OPENAI_API_KEY'])", 65536),
        # the cut of stdout (its start kept) and of stderr (its end kept) through the key
        ("import os; print('x' * 90 + os.environ['OPENAI_API_KEY'] + 'y' * 90)", 100),
        ("import os, sys; sys.exit('x' * 90 + os.environ['OPENAI_API_KEY'] + 'y' * 90)", 100),
    ],
)
def test_a_key_the_program_prints_never_reaches_the_model(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, code: str, max_output: int
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    shown = _command_result(tmp_path, code, max_output=max_output)
    assert "***" in shown or "xxxxx" in shown or "yyyyy" in shown  # the rest is shown
    for size in range(6, len(KEY) + 1):  # nor the part of it a cut left
        assert KEY[:size] not in shown and KEY[-size:] not in shown, shown


def test_what_a_program_prints_besides_is_shown_as_before(tmp_path: Path) -> None:
    assert _command_result(tmp_path, "print('hello')") == "hello\n"
