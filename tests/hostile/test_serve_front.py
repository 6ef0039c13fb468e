"""What a client of ``serve`` may send that its routes once answered badly: each is refused
with a 4xx saying what is wrong, never a 500, and nothing it sent reaches a record as
something other than JSON.

The server listens on 127.0.0.1 and is spoken to in raw HTTP bytes; no test sleeps.
"""

from __future__ import annotations

import asyncio
import json
import tracemalloc
import zlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from support import ANY_INPUT_AGENT

from openprogram_yaml.compile.project import compile_path
from openprogram_yaml.run.record import RunRecord
from openprogram_yaml.run.reload import ProgramHolder
from openprogram_yaml.run.service import RunService
from openprogram_yaml.run.version import VersionStamp
from openprogram_yaml.serve.app import Server, ServeState
from openprogram_yaml.serve.guard import read_json
from openprogram_yaml.serve.history import RunHistory
from openprogram_yaml.serve.openai_api import OpenAIError, find_method, parse_chat_request

#: Generous: nothing here waits on a clock, only on the loopback server.
TIMEOUT_S = 30.0

AGENT = ANY_INPUT_AGENT


@asynccontextmanager
async def served(tmp_path: Path, **options: Any) -> AsyncIterator[tuple[Server, int]]:
    agent = tmp_path / "echo.yaml"
    agent.write_text(AGENT, encoding="utf-8")
    holder = ProgramHolder(agent)
    holder.load()
    server = Server(ServeState(holder, RunService(holder.snapshot), **options))
    port = await server.start(0)
    try:
        yield server, port
    finally:
        await server.close(grace_s=0)


async def post(port: int, path: str, body: bytes) -> tuple[int, Any]:
    """POST ``body`` as JSON; the status and the reply, which must be JSON."""
    head = (
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
        "Content-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    )
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(head.encode("ascii") + body)
        await writer.drain()
        data = await asyncio.wait_for(reader.read(), TIMEOUT_S)
    finally:
        writer.close()
    status_line, _, reply = data.partition(b"\r\n\r\n")
    # Strict JSON, as a browser's JSON.parse reads it: no NaN, no Infinity.
    return int(status_line.split(b" ")[1]), json.loads(reply, parse_constant=_not_json)


async def get_head(port: int, target: str) -> bytes:
    """GET ``target`` (sent as it is); the reply's status line and headers."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(
            f"GET {target} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n".encode()
        )
        await writer.drain()
        data = await asyncio.wait_for(reader.read(), TIMEOUT_S)
    finally:
        writer.close()
    return data.partition(b"\r\n\r\n")[0]


def _not_json(name: str) -> None:
    raise AssertionError(f"the reply holds {name}, which is not JSON")


# --- numbers JSON has no value for --------------------------------------------------------

NOT_NUMBERS = [b"NaN", b"Infinity", b"-Infinity", b"1e999", b"-1e999"]


@pytest.mark.parametrize("number", NOT_NUMBERS)
def test_nan_infinity_and_a_number_past_a_float_are_refused_before_a_run(
    tmp_path: Path, number: bytes
) -> None:
    """``json.loads`` reads ``NaN``/``Infinity`` (and makes ``1e999`` infinity): the run
    went ahead and its record, the reply, said ``"x": NaN``, which no JSON decoder but
    Python's reads (a browser's ``JSON.parse`` fails on the whole reply)."""

    async def scenario() -> None:
        async with served(tmp_path) as (server, port):
            status, reply = await post(port, "/run/echo/say", b'{"x": ' + number + b"}")
            assert status == 400
            assert "not JSON" in reply["error"]
            assert server.state.history.summaries() == []  # no run
            chat = b'{"model": "echo.say", "messages": [{"role": "user", "content": "hi"}], "n": '
            status, reply = await post(port, "/v1/chat/completions", chat + number + b"}")
            assert status == 400
            assert "not JSON" in reply["error"]["message"]

    asyncio.run(scenario())


def test_read_json_reads_every_finite_number() -> None:
    assert read_json(b"[1.5, -0.0, 1e308, 1e-400, 12345678901234567890]") == [
        1.5,
        -0.0,
        1e308,
        0.0,
        12345678901234567890,
    ]
    assert read_json('"NaN"') == "NaN"  # in a string, only text
    for text in ('{"a": NaN}', "[Infinity]", "-Infinity", "1e999"):
        with pytest.raises(ValueError, match="not JSON"):
            read_json(text)


# --- the OpenAI-compatible endpoint ----------------------------------------------------------


@pytest.mark.parametrize("audio_format", [["wav"], {"wav": 1}, 3, None])
def test_an_input_audio_format_that_is_not_a_name_is_a_400(audio_format: object) -> None:
    """A list or an object as ``input_audio.format`` was looked up in a dict: a TypeError,
    answered 500."""
    part = {"type": "input_audio", "input_audio": {"data": "AAAA", "format": audio_format}}
    body = {"model": "echo.say", "messages": [{"role": "user", "content": [part]}]}
    with pytest.raises(OpenAIError) as caught:
        parse_chat_request(body)
    assert caught.value.status == 400
    assert "'format' (wav or mp3)" in caught.value.message


def test_an_unknown_model_name_too_long_to_be_near_any_is_not_compared_with_them(
    tmp_path: Path,
) -> None:
    """difflib indexed every character of the name sent: a 27 MB ``model`` held the event
    loop, and every other request, for 3 s. A name more than 5/3 as long as the longest
    cannot be within the cutoff of any, so none is compared: nothing is built of it."""
    agent = tmp_path / "echo.yaml"
    agent.write_text(AGENT, encoding="utf-8")
    program = compile_path(agent)
    for name, hint in [("echo.sya", "did you mean 'echo.say'"), ("x" * 14, "")]:
        with pytest.raises(OpenAIError) as caught:
            find_method(program, name)
        assert caught.value.status == 404 and hint in caught.value.message
    long_name = "e" * 10**6
    tracemalloc.start()
    try:
        with pytest.raises(OpenAIError) as caught:
            find_method(program, long_name)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert caught.value.status == 404 and "did you mean" not in caught.value.message
    # difflib's index of a million characters takes about 8 MB; the message quotes the
    # name cut short (or whole: 1 MB at most).
    assert peak < 3_000_000, peak


# --- the token's first visit ----------------------------------------------------------------

TOKEN = "tok-0123456789abcdef"


@pytest.mark.parametrize(
    ("target", "location"),
    [
        (f"//evil.example/?token={TOKEN}", "/evil.example/"),
        (f"///evil.example/x?a=1&token={TOKEN}", "/evil.example/x?a=1"),
        (f"/\\evil.example?token={TOKEN}", "/evil.example"),
        (f"/\\/evil.example?token={TOKEN}", "/evil.example"),
        (f"/static/app.js?a=1&token={TOKEN}&b=2", "/static/app.js?a=1&b=2"),
    ],
)
def test_the_first_visit_with_the_token_stays_on_this_server(
    tmp_path: Path, target: str, location: str
) -> None:
    """``/?token=`` answers 303 to the same address without it: for a path beginning ``//``
    (or ``/\\``) that was ``Location: ////evil.example/``, which a browser reads as the
    address of another site (an open redirect, carrying the cookie's owner along)."""

    async def scenario() -> None:
        async with served(tmp_path, token=TOKEN) as (_, port):
            head = await get_head(port, target)
            assert head.startswith(b"HTTP/1.1 303 "), head
            [found] = [
                line.split(b": ", 1)[1]
                for line in head.split(b"\r\n")
                if line.lower().startswith(b"location: ")
            ]
            assert found.decode() == location

    asyncio.run(scenario())


# --- Host and Origin ----------------------------------------------------------------------


async def exchange(port: int, raw: bytes) -> tuple[int, Any]:
    """Send ``raw``; the status and the reply's JSON, read strictly (no lone surrogate)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(raw)
        await writer.drain()
        data = await asyncio.wait_for(reader.read(), TIMEOUT_S)
    finally:
        writer.close()
    head, _, body = data.partition(b"\r\n\r\n")
    text = body.decode("utf-8")
    reply = json.loads(text)
    # json.loads reads "\udce9" as half of a pair: no text any UTF-8 decoder takes.
    json.dumps(reply, ensure_ascii=False).encode("utf-8")
    return int(head.split(b" ")[1]), reply


@pytest.mark.parametrize(
    "header",
    [
        b"Host: 127.0.0.1:" + b"9" * 5000,
        b"Host: 127.0.0.1:1\xe9",
        b"Host: 127.0.0.1:PORT\r\nOrigin: http://\xff\xfe.example",
        b"Host: 127.0.0.1:PORT\r\nContent-Type: text/\xe9",
    ],
)
def test_a_host_origin_or_type_no_server_could_be_is_refused_in_a_4xx(
    tmp_path: Path, header: bytes
) -> None:
    """A ``Host`` port of 5,000 digits reached ``int()``, which raises past 4,300: a 500.
    A header byte that is not UTF-8 came back in the refusal as ``\\udce9``, half of a
    surrogate pair, which strict JSON decoders refuse."""

    async def scenario() -> None:
        async with served(tmp_path) as (_, port):
            head = header.replace(b"PORT", str(port).encode())
            raw = b"POST /run/echo/say HTTP/1.1\r\n" + head + b"\r\nContent-Length: 2\r\n"
            status, reply = await exchange(port, raw + b"Connection: close\r\n\r\n{}")
            assert status in (403, 415), reply
            assert "refused" in reply["error"] or "Content-Type" in reply["error"]

    asyncio.run(scenario())


# --- compressed bodies --------------------------------------------------------------------


def gzip_of_zeros(size: int) -> bytes:
    """A gzip member holding ``size`` bytes of "0" (made piecewise: no ``size`` buffer)."""
    packer = zlib.compressobj(9, zlib.DEFLATED, 31)
    piece = b"0" * (1 << 20)
    out = [packer.compress(piece) for _ in range(size >> 20)]
    return b"".join([*out, packer.flush()])


def test_a_compressed_body_is_refused_and_never_inflated(tmp_path: Path) -> None:
    """aiohttp inflated a ``Content-Encoding: gzip`` body in its parser as it arrived,
    before any limit: 64 KB of gzip is 64 MB of JSON (1 MB made a peak of 350 MB); and a
    body that was no gzip at all was a 500 (RequestPayloadError)."""
    bomb = gzip_of_zeros(64 << 20)

    async def scenario() -> None:
        async with served(tmp_path) as (server, port):
            for body in (bomb, b"no gzip at all", zlib.compress(b'{"x": 1}')):
                head = (
                    f"POST /run/echo/say HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
                    "Content-Type: application/json\r\nContent-Encoding: gzip\r\n"
                    f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
                )
                tracemalloc.start()
                try:
                    status, reply = await exchange(port, head.encode() + body)
                    peak = tracemalloc.get_traced_memory()[1]
                finally:
                    tracemalloc.stop()
                assert status == 415, reply
                assert "send the body uncompressed" in reply["error"]
                assert peak < 16 << 20, f"{peak >> 20} MB"
            assert server.state.history.summaries() == []
            # identity is no compression, nor is an empty value or list element (RFC 9110)
            for coding in ("identity", "Identity", "", "identity, ", ","):
                head = (
                    f"POST /run/echo/say HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
                    f"Content-Type: application/json\r\nContent-Encoding: {coding}\r\n"
                    "Content-Length: 8\r\nConnection: close\r\n\r\n"
                )
                status, reply = await exchange(port, head.encode() + b'{"x": 1}')
                assert status == 200 and reply["status"] == "ok", (coding, reply)
            # a coding in a list, or in a second header, is one
            for headers in (
                "Content-Encoding: identity, gzip\r\n",
                "Content-Encoding: identity\r\nContent-Encoding: gzip\r\n",
            ):
                head = (
                    f"POST /run/echo/say HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
                    f"Content-Type: application/json\r\n{headers}"
                    "Content-Length: 8\r\nConnection: close\r\n\r\n"
                )
                status, reply = await exchange(port, head.encode() + b'{"x": 1}')
                assert status == 415, (headers, reply)

    asyncio.run(scenario())


# --- the history of runs ------------------------------------------------------------------


def test_the_history_weighs_a_runs_values_not_only_its_characters() -> None:
    """The history kept runs up to a weight counted in their strings' characters: inputs of
    500,000 ``{}`` (1.5 MB of JSON, 34 MB in memory) weighed nothing, and 200 such runs,
    kept (a failed run's record holds its inputs), took 8 GB."""
    history = RunHistory(max_bytes=1_000_000)
    ids = []
    for _ in range(3):
        inputs: dict[str, Any] = {"x": [{} for _ in range(20_000)]}  # 1.4 MB in memory
        record = RunRecord("echo", "say", inputs, VersionStamp(hash="abc"), status="failed")
        history.add(record, None)
        ids.append(record.id)
    assert [run["id"] for run in history.summaries()] == ids[-1:]
    # a text input still weighs about its characters
    history = RunHistory(max_bytes=1_000_000)
    for text in ("a" * 400_000, "b" * 400_000):
        history.add(RunRecord("echo", "say", {"x": text}, VersionStamp(hash="abc")), None)
    assert len(history.summaries()) == 2
