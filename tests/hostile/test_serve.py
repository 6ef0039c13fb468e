"""``serve`` refuses what a browser page or a stranger sends, and a reload that crashes is
reported, never silent.

Every test speaks HTTP over a socket on 127.0.0.1 (raw bytes, so nothing but the wire is
assumed about the server). Timeouts are driven by the test: the server takes its deadline
factory as a parameter (``asyncio.timeout`` in use), and ``Deadlines`` below lets the test
decide when a deadline passes, so no test waits for a real clock.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import sys
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from support import ANY_INPUT_AGENT, loop_turns

from openprogram_yaml.run.record import RecordLog
from openprogram_yaml.run.reload import ProgramHolder, ReloadEvent
from openprogram_yaml.run.service import RunService
from openprogram_yaml.runner.cli import main
from openprogram_yaml.serve.app import MAX_BODY, Server, ServeState
from openprogram_yaml.serve.guard import MAX_JSON_ITEMS, ServeLimits
from openprogram_yaml.serve.served_run import PARSE_IN_WORKER, read_body_json

#: Generous: a child process starts Python and compiles; a watchfiles event takes ~10 ms.
EVENT_TIMEOUT_S = 30.0

AGENT = ANY_INPUT_AGENT

#: The same agent with a python tool whose module ends the process when imported: the
#: compile raises something that is not a ``ConfigError`` (not even an ``Exception``).
AGENT_WITH_EXITING_TOOL = AGENT.replace(
    "methods:", "tools:\n  boom:\n    python: exits_on_import:run\nmethods:"
)
EXITING_MODULE = "raise SystemExit(3)\n\n\ndef run() -> str:\n    return 'never'\n"

#: A template nesting 10,000 parentheses: Jinja's parser raises ``RecursionError``.
DEEP_TEMPLATE = AGENT.replace('"p {{ x }}"', '"{{ ' + "(" * 10_000 + "x" + ")" * 10_000 + ' }}"')


def write_agent(root: Path, text: str = AGENT) -> Path:
    (root / "exits_on_import.py").write_text(EXITING_MODULE, encoding="utf-8")
    path = root / "echo.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def save(path: Path, text: str) -> None:
    """Save as editors do: write a new file, then rename it over the old one."""
    tmp = path.with_name(path.name + ".tmp~")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)


class Deadlines:
    """Stands in for ``asyncio.timeout`` and the event loop's ``call_later`` (a connection's
    deadlines): a deadline passes when the test says so. Both kinds are counted together,
    in the order they start."""

    def __init__(self) -> None:
        self.active: list[tuple[float, asyncio.Timeout | Timer]] = []
        self.started: list[tuple[float, asyncio.Timeout | Timer]] = []
        self.changed = asyncio.Event()

    def __call__(self, seconds: float) -> AbstractAsyncContextManager[None]:
        return self._deadline(seconds)

    @asynccontextmanager
    async def _deadline(self, seconds: float) -> AsyncIterator[None]:
        async with asyncio.timeout(None) as timeout:
            entry = self._start(seconds, timeout)
            try:
                yield
            finally:
                self.active.remove(entry)

    def call_later(self, seconds: float, callback: Callable[[], None]) -> Timer:
        timer = Timer(self, callback)
        timer.entry = self._start(seconds, timer)
        return timer

    def _start(
        self, seconds: float, deadline: asyncio.Timeout | Timer
    ) -> tuple[float, asyncio.Timeout | Timer]:
        entry = (seconds, deadline)
        self.active.append(entry)
        self.started.append(entry)
        self.changed.set()
        return entry

    async def armed(self, seconds: float, count: int = 1) -> None:
        """Wait until ``count`` deadlines of ``seconds`` are running."""
        while len([t for s, t in self.active if s == seconds]) < count:
            self.changed.clear()
            await asyncio.wait_for(self.changed.wait(), EVENT_TIMEOUT_S)

    async def expire(self, seconds: float, nth: int) -> None:
        """Let the ``nth`` deadline of ``seconds`` (counted from 1) pass, once it runs."""
        while True:
            started = [e for e in self.started if e[0] == seconds]
            if len(started) >= nth and started[nth - 1] in self.active:
                deadline = started[nth - 1][1]
                if isinstance(deadline, Timer):
                    deadline.expire()
                else:
                    deadline.reschedule(asyncio.get_running_loop().time())
                return
            assert len(started) <= nth, f"deadline {nth} of {seconds} s has already ended"
            self.changed.clear()
            await asyncio.wait_for(self.changed.wait(), EVENT_TIMEOUT_S)


class Timer:
    """A deadline ``Deadlines.call_later`` set: its callback is called when it passes."""

    def __init__(self, owner: Deadlines, callback: Callable[[], None]) -> None:
        self.owner = owner
        self.callback = callback
        self.entry: tuple[float, asyncio.Timeout | Timer] = (0.0, self)

    def cancel(self) -> None:
        if self.entry in self.owner.active:
            self.owner.active.remove(self.entry)

    def expire(self) -> None:
        self.cancel()
        self.callback()


@asynccontextmanager
async def served(
    agent: Path, records: Path | None = None, **options: Any
) -> AsyncIterator[tuple[Server, int]]:
    holder = ProgramHolder(agent, ignore=[records] if records else ())
    holder.load()
    log = RecordLog(records) if records else None
    deadlines = options.get("deadline")
    if isinstance(deadlines, Deadlines):  # the connections' deadlines too
        options.setdefault("call_later", deadlines.call_later)
    server = Server(ServeState(holder, RunService(holder.snapshot, log), **options))
    port = await server.start(0)
    try:
        yield server, port
    finally:
        await server.close(grace_s=0)
        if log is not None:
            log.close()


async def exchange(port: int, raw: bytes) -> tuple[int, dict[str, Any]]:
    """Send ``raw``, read until the server closes; the status and the JSON body."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(raw)
        await writer.drain()
        data = await asyncio.wait_for(reader.read(), EVENT_TIMEOUT_S)
    finally:
        writer.close()
    return parse_response(data)


def parse_response(data: bytes) -> tuple[int, dict[str, Any]]:
    head, _, body = data.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 "), data[:200]
    status = int(head.split(b" ")[1])
    payload: dict[str, Any] = json.loads(body) if body else {}
    return status, payload


def request(
    port: int,
    method: str,
    path: str,
    body: bytes = b"",
    headers: Mapping[str, str] | None = None,
    host: str | None = None,
) -> bytes:
    lines = [f"{method} {path} HTTP/1.1", f"Host: {host or f'127.0.0.1:{port}'}"]
    lines += [f"{k}: {v}" for k, v in (headers or {}).items()]
    lines += [f"Content-Length: {len(body)}", "Connection: close", "", ""]
    return "\r\n".join(lines).encode("latin-1") + body


JSON = {"Content-Type": "application/json"}


def run_request(port: int, body: bytes = b'{"x": "hi"}', **kwargs: Any) -> bytes:
    headers = {**JSON, **kwargs.pop("headers", {})}
    return request(port, "POST", "/run/echo/say", body, headers=headers, **kwargs)


# --- cross-site requests and DNS rebinding ---------------------------------------------


def test_a_cross_site_text_plain_post_runs_nothing(tmp_path: Path) -> None:
    """The reported attack: a page's form-like POST with its own Origin and Host."""
    agent = write_agent(tmp_path)
    records = tmp_path / "runs.jsonl"

    async def scenario() -> None:
        async with served(agent, records) as (_, port):
            status, body = await exchange(
                port,
                run_request(
                    port,
                    headers={"Content-Type": "text/plain", "Origin": "http://evil.example"},
                    host=f"evil.example:{port}",
                ),
            )
            assert status == 403
            assert "evil.example" in body["error"]

    asyncio.run(scenario())
    assert not records.exists() or records.read_text() == ""


@pytest.mark.parametrize(
    "host",
    ["evil.example:{port}", "evil.example", "localhost:1", "127.0.0.1", "127.0.0.2:{port}"],
)
def test_a_host_that_is_not_this_server_is_refused(tmp_path: Path, host: str) -> None:
    """DNS rebinding: a page on attacker.example whose name now points at 127.0.0.1."""
    agent = write_agent(tmp_path)

    async def scenario() -> None:
        async with served(agent) as (_, port):
            for raw in (
                run_request(port, host=host.format(port=port)),
                request(port, "GET", "/agents", host=host.format(port=port)),
            ):
                status, body = await exchange(port, raw)
                assert status == 403, body
                assert "Host" in body["error"] and "--allow-host" in body["error"]

    asyncio.run(scenario())


def test_loopback_names_of_this_server_are_served(tmp_path: Path) -> None:
    agent = write_agent(tmp_path)

    async def scenario() -> None:
        async with served(agent) as (_, port):
            for host in (f"127.0.0.1:{port}", f"localhost:{port}", f"[::1]:{port}"):
                status, body = await exchange(port, run_request(port, host=host))
                assert (status, body["output"]) == (200, "test reply to: p hi")

    asyncio.run(scenario())


def test_a_request_without_host_is_refused(tmp_path: Path) -> None:
    agent = write_agent(tmp_path)

    async def scenario() -> None:
        async with served(agent) as (_, port):
            raw = b"GET /health HTTP/1.1\r\nConnection: close\r\n\r\n"
            # aiohttp's parser refuses it before the app sees it, in plain text.
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(raw)
            data = await asyncio.wait_for(reader.read(), EVENT_TIMEOUT_S)
            writer.close()
            head, _, body = data.partition(b"\r\n\r\n")
            assert head.split(b" ")[1] == b"400"
            assert b"Host" in body

    asyncio.run(scenario())


def test_allow_host_admits_a_configured_name(tmp_path: Path) -> None:
    agent = write_agent(tmp_path)

    async def scenario() -> None:
        async with served(agent, limits=ServeLimits(allowed_hosts=("dev.test",))) as (_, port):
            for host, origin in [
                ("dev.test", "https://dev.test"),
                ("dev.test:8443", "http://dev.test:8443"),
            ]:
                status, _ = await exchange(
                    port, run_request(port, host=host, headers={"Origin": origin})
                )
                assert status == 200
            status, _ = await exchange(port, run_request(port, host="other.test"))
            assert status == 403

    asyncio.run(scenario())


@pytest.mark.parametrize(
    "origin",
    ["http://evil.example", "null", "http://localhost:1", "https://127.0.0.1:{port}"],
)
def test_a_foreign_origin_is_refused(tmp_path: Path, origin: str) -> None:
    agent = write_agent(tmp_path)

    async def scenario() -> None:
        async with served(agent) as (_, port):
            foreign = {"Origin": origin.format(port=port)}
            for raw in (
                run_request(port, headers=foreign),
                request(port, "GET", "/agents", headers=foreign),
            ):
                status, body = await exchange(port, raw)
                assert status == 403, body
                assert "Origin" in body["error"]

    asyncio.run(scenario())


def test_this_servers_own_origin_is_served(tmp_path: Path) -> None:
    agent = write_agent(tmp_path)

    async def scenario() -> None:
        async with served(agent) as (_, port):
            for origin in (f"http://127.0.0.1:{port}", f"http://localhost:{port}"):
                status, _ = await exchange(port, run_request(port, headers={"Origin": origin}))
                assert status == 200

    asyncio.run(scenario())


@pytest.mark.parametrize(
    "content_type",
    [None, "text/plain", "application/x-www-form-urlencoded", "multipart/form-data; b=x"],
)
def test_a_body_that_is_not_declared_json_is_refused(
    tmp_path: Path, content_type: str | None
) -> None:
    agent = write_agent(tmp_path)

    async def scenario() -> None:
        async with served(agent) as (_, port):
            headers = {} if content_type is None else {"Content-Type": content_type}
            raw = request(port, "POST", "/run/echo/say", b'{"x": "hi"}', headers=headers)
            status, body = await exchange(port, raw)
            assert status == 415, body
            assert "application/json" in body["error"]

    asyncio.run(scenario())


def test_json_with_a_charset_is_served(tmp_path: Path) -> None:
    agent = write_agent(tmp_path)

    async def scenario() -> None:
        async with served(agent) as (_, port):
            headers = {"Content-Type": "Application/JSON; charset=utf-8"}
            status, _ = await exchange(port, run_request(port, headers=headers))
            assert status == 200

    asyncio.run(scenario())


# --- ?model= ------------------------------------------------------------------------------


def test_model_override_is_refused_by_default(tmp_path: Path) -> None:
    agent = write_agent(tmp_path)
    outside = tmp_path.parent / "elsewhere"
    records = tmp_path / "runs.jsonl"

    async def scenario() -> None:
        async with served(agent, records) as (_, port):
            status, body = await exchange(
                port,
                run_request(port).replace(
                    b"/run/echo/say", f"/run/echo/say?model=replay:{outside}".encode()
                ),
            )
            assert status == 403, body
            assert "--allow-model-override" in body["error"]
            assert str(outside) not in json.dumps(body)
            # A model the project itself names may still be asked for.
            status, body = await exchange(
                port, run_request(port).replace(b"/run/echo/say", b"/run/echo/say?model=test")
            )
            assert (status, body["model"]) == (200, "test")

    asyncio.run(scenario())
    [line] = records.read_text().splitlines()
    assert json.loads(line)["model"] == "test"


def test_allow_model_override_lets_a_client_pick_any_model(tmp_path: Path) -> None:
    agent = write_agent(tmp_path)

    async def scenario() -> None:
        async with served(agent, limits=ServeLimits(allow_model_override=True)) as (_, port):
            path = b"/run/echo/say?model=replay:recordings"
            status, body = await exchange(port, run_request(port).replace(b"/run/echo/say", path))
            assert status != 403
            assert body["model"] == "replay:recordings"

    asyncio.run(scenario())


# --- bodies that break a parser ----------------------------------------------------------


@pytest.mark.parametrize("depth", [101, 990, 100_000])
def test_deeply_nested_json_gets_400(tmp_path: Path, depth: int) -> None:
    agent = write_agent(tmp_path)

    async def scenario() -> None:
        async with served(agent) as (_, port):
            body = b'{"x": ' + b"[" * depth + b"]" * depth + b"}"
            status, reply = await exchange(port, run_request(port, body))
            assert status == 400, reply
            assert "nest" in reply["error"]
            # The server still answers.
            status, _ = await exchange(port, run_request(port))
            assert status == 200

    asyncio.run(scenario())


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/run/echo/say", b'{"x": "\\ud800"}'),
        ("/run/echo/say", b'{"\\udfff": "hi"}'),
        ("/api/render/echo/say", b'{"x": "a \\ud83d b"}'),
        ("/questions/q1/answer", b'{"answer": "\\ud800"}'),
        (
            "/v1/chat/completions",
            b'{"model": "echo.say", "messages": [{"role": "user", "content": "\\ud800"}]}',
        ),
    ],
)
def test_a_lone_surrogate_in_json_gets_400(tmp_path: Path, path: str, body: bytes) -> None:
    """JSON may escape half of a UTF-16 pair (``\\ud800``): no text, and no UTF-8 for the
    record or the model. It was a 500 from deep inside the run; a pair is text (an emoji)."""
    agent = write_agent(tmp_path)

    async def scenario() -> None:
        async with served(agent) as (_, port):
            raw = request(port, "POST", path, body, headers=JSON)
            status, reply = await exchange(port, raw)
            assert status == 400, reply
            assert "surrogate" in json.dumps(reply)
            status, reply = await exchange(port, run_request(port, b'{"x": "\\ud83d\\ude00"}'))
            assert (status, reply["output"]) == (200, "test reply to: p \U0001f600")

    asyncio.run(scenario())


def test_json_of_more_items_than_the_bound_gets_400_at_once(tmp_path: Path) -> None:
    """At serve's body cap, ``[{},{},…]`` was 830 MB once parsed and 12 s of CPU on the
    event loop before the run was refused; now its items are counted before it is parsed."""
    agent = write_agent(tmp_path)

    async def scenario() -> None:
        async with served(agent) as (_, port):
            body = b'{"x": [' + b"{}," * MAX_JSON_ITEMS + b"{}]}"
            status, reply = await exchange(port, run_request(port, body))
            assert status == 400, reply
            assert f"more than {MAX_JSON_ITEMS:,} items" in reply["error"]
            status, _ = await exchange(port, run_request(port))
            assert status == 200

    asyncio.run(scenario())


def test_a_long_body_is_parsed_while_the_event_loop_serves_others() -> None:
    """A body past ``PARSE_IN_WORKER`` (a file input near ``MAX_BODY``) is checked and
    parsed in a worker thread: one at the cap held the event loop, and every other client,
    for 0.15 s. Here the loop turns while it is parsed; a parse on the loop would end in
    the first turn."""
    text = "a" * PARSE_IN_WORKER
    body = json.dumps({"x": text}).encode()

    value, turns = loop_turns(read_body_json(body))
    assert value == {"x": text}
    assert turns > 1
    with pytest.raises(ValueError, match="not JSON"):
        asyncio.run(read_body_json(body[:-1]))


def test_json_nested_to_the_bound_is_served(tmp_path: Path) -> None:
    agent = write_agent(tmp_path)

    async def scenario() -> None:
        async with served(agent) as (_, port):
            body = b'{"x": ' + b"[" * 99 + b"]" * 99 + b"}"
            status, _ = await exchange(port, run_request(port, body))
            assert status == 200

    asyncio.run(scenario())


# --- slow and idle clients; too many connections -----------------------------------------


def test_headers_that_do_not_arrive_in_time_get_408(tmp_path: Path) -> None:
    agent = write_agent(tmp_path)

    async def scenario() -> None:
        deadlines = Deadlines()
        limits = ServeLimits(header_timeout_s=7.0, body_timeout_s=9.0)
        async with served(agent, limits=limits, deadline=deadlines) as (_, port):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(f"POST /run/echo/say HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n".encode())
            await writer.drain()
            # The first deadline waits for the request to start; the second for its headers.
            await deadlines.expire(7.0, nth=2)
            status, body = parse_response(await asyncio.wait_for(reader.read(), EVENT_TIMEOUT_S))
            writer.close()
            assert status == 408
            assert "headers" in body["error"]

    asyncio.run(scenario())


def test_a_body_that_does_not_arrive_in_time_gets_408(tmp_path: Path) -> None:
    agent = write_agent(tmp_path)
    records = tmp_path / "runs.jsonl"

    async def scenario() -> None:
        deadlines = Deadlines()
        limits = ServeLimits(header_timeout_s=7.0, body_timeout_s=9.0)
        async with served(agent, records, limits=limits, deadline=deadlines) as (_, port):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            raw = run_request(port, b'{"x": "hi"}')
            writer.write(raw[:-4])  # all but the last bytes of the body
            await writer.drain()
            await deadlines.expire(9.0, nth=1)
            status, body = parse_response(await asyncio.wait_for(reader.read(), EVENT_TIMEOUT_S))
            writer.close()
            assert status == 408
            assert "body" in body["error"]

    asyncio.run(scenario())
    assert not records.exists() or records.read_text() == ""


def test_a_body_declared_past_the_limit_gets_413_before_it_is_read(tmp_path: Path) -> None:
    """A ``Content-Length`` above ``MAX_BODY`` is refused from the headers, at once: it was
    waited for under the body deadline, and answered 408 when that passed (30 s)."""
    agent = write_agent(tmp_path)
    records = tmp_path / "runs.jsonl"

    async def scenario() -> None:
        deadlines = Deadlines()  # no deadline passes unless the test says so: none does
        limits = ServeLimits(body_timeout_s=9.0)
        async with served(agent, records, limits=limits, deadline=deadlines) as (_, port):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            head = run_request(port, b"").replace(
                b"Content-Length: 0", f"Content-Length: {MAX_BODY * 4}".encode()
            )
            writer.write(head)  # the headers; none of the body
            await writer.drain()
            status, body = parse_response(await asyncio.wait_for(reader.read(), EVENT_TIMEOUT_S))
            writer.close()
            assert status == 413
            assert str(MAX_BODY) in body["error"]
            assert not [d for d in deadlines.started if d[0] == 9.0]

    asyncio.run(scenario())
    assert not records.exists() or records.read_text() == ""


@pytest.mark.parametrize("refused", ["no token", "foreign page", "compressed"])
def test_a_refused_body_declared_past_the_limit_is_not_waited_for(
    tmp_path: Path, refused: str
) -> None:
    """A request the server refuses before reading its body (401 without the token, 403
    from a foreign page, 415 compressed), whose ``Content-Length`` is past ``MAX_BODY``,
    gets its refusal at once: its body was waited for under the body deadline (30 s), and
    the refusal sent when that passed."""
    agent = write_agent(tmp_path)
    headers = {
        "no token": {},
        "foreign page": {"Origin": "http://evil.example"},
        "compressed": {"Content-Encoding": "gzip"},
    }[refused]
    status_of = {"no token": 401, "foreign page": 403, "compressed": 415}

    async def scenario() -> None:
        deadlines = Deadlines()  # no deadline passes unless the test says so: none does
        limits = ServeLimits(body_timeout_s=9.0)
        token = "t0ken-0f-the-server-9c1d" if refused == "no token" else None
        async with served(agent, limits=limits, deadline=deadlines, token=token) as (_, port):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            head = run_request(port, b"", headers=headers).replace(
                b"Content-Length: 0", f"Content-Length: {MAX_BODY * 4}".encode()
            )
            writer.write(head)  # the headers; none of the body
            await writer.drain()
            status, _ = parse_response(await asyncio.wait_for(reader.read(), EVENT_TIMEOUT_S))
            writer.close()
            assert status == status_of[refused]
            assert not [d for d in deadlines.started if d[0] == 9.0]

    asyncio.run(scenario())


def test_a_client_sending_a_body_past_the_limit_reads_its_413(tmp_path: Path) -> None:
    """A client that sends its whole body, as most do, before reading the reply gets the 413
    too: the connection was closed with the body arriving unread, which resets it (RST),
    and the client lost the reply it had not read yet."""
    agent = write_agent(tmp_path)

    async def scenario() -> tuple[int, dict[str, Any]]:
        async with served(agent, deadline=Deadlines()) as (_, port):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            body = b'{"x": "' + b"a" * MAX_BODY + b'"}'
            writer.write(run_request(port, body))
            await writer.drain()
            reply = parse_response(await asyncio.wait_for(reader.read(), EVENT_TIMEOUT_S))
            writer.close()
            return reply

    status, reply = asyncio.run(scenario())
    assert status == 413
    assert str(MAX_BODY) in reply["error"]


def test_the_body_still_coming_after_a_413_is_no_request(tmp_path: Path) -> None:
    """After the 413 of a body left unread, the connection only reads what still comes and
    closes at the idle deadline: the body's bytes were taken for a next request's start,
    whose header deadline then wrote a 408 on the half-closed connection (an error)."""
    agent = write_agent(tmp_path)

    async def scenario() -> None:
        deadlines = Deadlines()
        limits = ServeLimits(header_timeout_s=7.0)
        async with served(agent, limits=limits, deadline=deadlines) as (_, port):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(
                run_request(port, b"").replace(
                    b"Content-Length: 0", f"Content-Length: {MAX_BODY + 1}".encode()
                )
            )
            await writer.drain()
            reply = await asyncio.wait_for(reader.read(), EVENT_TIMEOUT_S)
            assert parse_response(reply)[0] == 413
            writer.write(b"a" * 1000)  # the body, sent on
            await writer.drain()
            # A whole exchange on another connection: the server has read those bytes.
            assert (await exchange(port, request(port, "GET", "/health")))[0] == 200
            # Deadlines 1 and 2 were the request's; 3 is the idle one, still running.
            await deadlines.expire(7.0, nth=3)
            writer.close()

    asyncio.run(scenario())


@pytest.mark.parametrize("late", [True, False], ids=["408", "413"])
def test_v1_refusals_of_an_unread_body_are_in_openais_shape(tmp_path: Path, late: bool) -> None:
    """A ``/v1/`` request whose body does not arrive in time (408), or is declared past
    ``MAX_BODY`` (413), is refused in OpenAI's error shape, which its clients read, and the
    connection closed. (The 408 was sent before the shape was given: ``{"error": "..."}``.)"""
    agent = write_agent(tmp_path)

    async def scenario() -> tuple[int, dict[str, Any]]:
        deadlines = Deadlines()
        limits = ServeLimits(body_timeout_s=9.0)
        async with served(agent, limits=limits, deadline=deadlines) as (_, port):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            body = b'{"model": "echo.say", "messages": []}'
            raw = request(port, "POST", "/v1/chat/completions", body, headers=JSON)
            if late:
                writer.write(raw[:-4])  # all but the last bytes of the body
            else:
                length = f"Content-Length: {len(body)}".encode()
                writer.write(raw.replace(length, f"Content-Length: {MAX_BODY + 1}".encode()))
            await writer.drain()
            if late:
                await deadlines.expire(9.0, nth=1)
            reply = parse_response(await asyncio.wait_for(reader.read(), EVENT_TIMEOUT_S))
            writer.close()
            return reply

    status, reply = asyncio.run(scenario())
    assert status == (408 if late else 413)
    error = reply["error"]
    assert isinstance(error, dict), reply
    assert ("did not arrive" if late else str(MAX_BODY)) in error["message"]
    assert error["type"] == ("timeout" if late else "invalid_request_error")


def test_an_idle_connection_is_closed(tmp_path: Path) -> None:
    agent = write_agent(tmp_path)

    async def scenario() -> None:
        deadlines = Deadlines()
        limits = ServeLimits(header_timeout_s=7.0)
        async with served(agent, limits=limits, deadline=deadlines) as (_, port):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            # One request on a keep-alive connection, then nothing.
            writer.write(
                f"GET /health HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode("latin-1")
            )
            await writer.drain()
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), EVENT_TIMEOUT_S)
            length = int(re.search(rb"Content-Length: (\d+)", head).group(1))  # type: ignore[union-attr]
            await reader.readexactly(length)
            # Deadlines 1 and 2 were the first request's; 3 waits for the next one to start.
            await deadlines.expire(7.0, nth=3)
            # Closed without a word: nothing of a next request had arrived.
            assert await asyncio.wait_for(reader.read(), EVENT_TIMEOUT_S) == b""
            writer.close()

    asyncio.run(scenario())


def test_connections_past_the_cap_get_503_and_are_closed(tmp_path: Path) -> None:
    agent = write_agent(tmp_path)

    async def scenario() -> None:
        deadlines = Deadlines()
        limits = ServeLimits(header_timeout_s=7.0, max_connections=2)
        async with served(agent, limits=limits, deadline=deadlines) as (_, port):
            held = [await asyncio.open_connection("127.0.0.1", port) for _ in range(2)]
            await deadlines.armed(7.0, count=2)  # both are being served (waiting for headers)
            status, body = await exchange(port, request(port, "GET", "/health"))
            assert status == 503
            assert "connections" in body["error"]
            # A held connection still works; once one closes, a new one is served again.
            reader, writer = held[0]
            writer.write(request(port, "GET", "/health"))
            assert parse_response(await asyncio.wait_for(reader.read(), EVENT_TIMEOUT_S))[0] == 200
            writer.close()
            status, _ = await exchange(port, request(port, "GET", "/health"))
            assert status == 200
            for _, w in held[1:]:
                w.close()

    asyncio.run(scenario())


# --- a reload that crashes is a failed reload ----------------------------------------------


class Events:
    def __init__(self, holder: ProgramHolder) -> None:
        self.queue: asyncio.Queue[ReloadEvent] = asyncio.Queue()
        holder.listeners.append(self.queue.put_nowait)

    async def next(self, status: str) -> ReloadEvent:
        while True:
            event = await asyncio.wait_for(self.queue.get(), EVENT_TIMEOUT_S)
            if event.status == status:
                return event


@pytest.mark.parametrize("broken", [AGENT_WITH_EXITING_TOOL, DEEP_TEMPLATE], ids=["exit", "deep"])
def test_a_reload_that_crashes_is_reported_and_watching_goes_on(
    tmp_path: Path, broken: str
) -> None:
    agent = write_agent(tmp_path)

    async def scenario() -> None:
        holder = ProgramHolder(agent)
        holder.load()
        events = Events(holder)
        server = Server(ServeState(holder, RunService(holder.snapshot, None)))
        port = await server.start(0)
        stop = asyncio.Event()
        watcher = asyncio.create_task(holder.watch(stop))
        try:
            await asyncio.wait_for(holder.watching.wait(), EVENT_TIMEOUT_S)
            _, health = await exchange(port, request(port, "GET", "/health"))
            assert health["reload"]["status"] == "ok" and health["reload"]["at"]
            save(agent, broken)
            failed = await events.next("failed")
            assert failed.diagnostics and "echo.yaml" in str(failed.diagnostics[0])
            _, health = await exchange(port, request(port, "GET", "/health"))
            assert health["status"] == "reload_failed"
            assert health["reload"]["status"] == "failed"
            assert health["reload"]["at"] and health["reload"]["message"]
            _, version = await exchange(port, request(port, "GET", "/version"))
            assert version["reload"]["status"] == "failed"
            assert version["reload"]["diagnostics"]
            status, body = await exchange(port, run_request(port))
            assert (status, body["output"]) == (200, "test reply to: p hi")
            # The watch goes on: the next good edit is served.
            save(agent, AGENT.replace('"p {{ x }}"', '"fixed {{ x }}"'))
            await events.next("loaded")
            _, health = await exchange(port, request(port, "GET", "/health"))
            assert (health["status"], health["reload"]["status"]) == ("ok", "ok")
            status, body = await exchange(port, run_request(port))
            assert (status, body["output"]) == (200, "test reply to: fixed hi")
        finally:
            stop.set()
            await server.close(grace_s=0)
            await watcher

    asyncio.run(scenario())


async def _child(*args: str) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "openprogram_yaml",
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )


async def _stderr_until(proc: asyncio.subprocess.Process, text: str) -> str:
    assert proc.stderr is not None
    seen = ""
    while text not in seen:
        line = await asyncio.wait_for(proc.stderr.readline(), EVENT_TIMEOUT_S)
        assert line, seen
        seen += line.decode()
    return seen


def test_serve_prints_a_crashed_reload_and_serves_the_next_good_edit(tmp_path: Path) -> None:
    agent = write_agent(tmp_path)

    async def scenario() -> str:
        proc = await _child("serve", str(agent), "--port", "0")
        try:
            line = await _stderr_until(proc, "serving")
            port = int(re.search(r"127\.0\.0\.1:(\d+)", line).group(1))  # type: ignore[union-attr]
            save(agent, AGENT_WITH_EXITING_TOOL)
            report = await _stderr_until(proc, "still serving version")
            assert "SystemExit" in report and "echo.yaml" in report
            save(agent, AGENT.replace('"p {{ x }}"', '"fixed {{ x }}"'))
            await _stderr_until(proc, "reloaded")
            status, body = await exchange(port, run_request(port))
            assert (status, body["output"]) == (200, "test reply to: fixed hi")
        finally:
            proc.send_signal(signal.SIGTERM)
            assert await asyncio.wait_for(proc.wait(), EVENT_TIMEOUT_S) == 0
        assert proc.stderr is not None
        return (await proc.stderr.read()).decode()

    assert "Traceback" not in asyncio.run(scenario())


def test_watch_prints_a_crashed_reload_and_runs_the_next_good_edit(tmp_path: Path) -> None:
    agent = write_agent(tmp_path)

    async def scenario() -> str:
        proc = await _child(str(agent), "say", "-i", "x=hi", "--watch")
        assert proc.stdout is not None
        try:
            first = await asyncio.wait_for(proc.stdout.readline(), EVENT_TIMEOUT_S)
            assert first.decode().strip() == "test reply to: p hi"
            await _stderr_until(proc, "── echo.say")
            save(agent, AGENT_WITH_EXITING_TOOL)
            report = await _stderr_until(proc, "still serving version")
            assert "SystemExit" in report
            save(agent, AGENT.replace('"p {{ x }}"', '"fixed {{ x }}"'))
            second = await asyncio.wait_for(proc.stdout.readline(), EVENT_TIMEOUT_S)
            assert second.decode().strip() == "test reply to: fixed hi"
        finally:
            proc.send_signal(signal.SIGINT)
            assert await asyncio.wait_for(proc.wait(), EVENT_TIMEOUT_S) == 0
        assert proc.stderr is not None
        return (await proc.stderr.read()).decode()

    assert "Traceback" not in asyncio.run(scenario())


def test_serve_reports_a_first_compile_that_crashes_as_a_config_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    agent = write_agent(tmp_path, AGENT_WITH_EXITING_TOOL)
    assert main(["serve", str(agent), "--port", "0"]) == 2
    err = capsys.readouterr().err
    assert "echo.yaml" in err and "SystemExit" in err and "Nothing to serve" in err


# --- the command line -----------------------------------------------------------------------


def test_serve_flags_admit_a_host_and_model_overrides(tmp_path: Path) -> None:
    agent = write_agent(tmp_path)

    async def scenario() -> None:
        proc = await _child(
            "serve", str(agent), "--port", "0", "--allow-host", "dev.test", "--no-watch"
        )
        try:
            line = await _stderr_until(proc, "serving")
            port = int(re.search(r"127\.0\.0\.1:(\d+)", line).group(1))  # type: ignore[union-attr]
            status, _ = await exchange(port, run_request(port, host="dev.test"))
            assert status == 200
            status, _ = await exchange(port, run_request(port, host="other.test"))
            assert status == 403
            path = b"/run/echo/say?model=test:other"
            status, _ = await exchange(port, run_request(port).replace(b"/run/echo/say", path))
            assert status == 403
        finally:
            proc.send_signal(signal.SIGTERM)
            assert await asyncio.wait_for(proc.wait(), EVENT_TIMEOUT_S) == 0

    asyncio.run(scenario())


@pytest.mark.parametrize(
    "flag", ["--max-connections=0", "--header-timeout=-1", "--body-timeout=soon"]
)
def test_serve_limits_must_be_positive_numbers(
    tmp_path: Path, flag: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["serve", str(write_agent(tmp_path)), flag]) == 2
    err = capsys.readouterr().err
    assert flag.split("=")[0] in err and "Traceback" not in err


# --- the token ------------------------------------------------------------------------------


def test_with_a_token_a_request_without_it_runs_nothing(tmp_path: Path) -> None:
    agent = write_agent(tmp_path)
    records = tmp_path / "runs.jsonl"
    token = "t0ken-0f-the-server-9c1d"

    async def scenario() -> None:
        async with served(agent, records, token=token) as (_, port):
            for headers in (
                {},
                {"Authorization": f"Bearer {token[:-1]}"},
                {"Authorization": f"Basic {token}"},
                {"Cookie": f"openprogram_token_{port}={token}x"},
                # Bytes that are not UTF-8 (sent as Latin-1): a 401, not a 500.
                {"Authorization": "Bearer \xff\xfe"},
                {"Cookie": f"openprogram_token_{port}=\xff"},
            ):
                status, body = await exchange(port, run_request(port, headers=headers))
                assert status == 401, headers
                assert token not in json.dumps(body)
            # ?token= only sets the cookie of a page's first visit: it never runs anything.
            raw = run_request(port).replace(
                b"/run/echo/say", f"/run/echo/say?token={token}".encode()
            )
            status, _ = await exchange(port, raw)
            assert status == 401
            bearer = {"Authorization": f"Bearer {token}"}
            status, body = await exchange(port, run_request(port, headers=bearer))
            assert (status, body["output"]) == (200, "test reply to: p hi")

    asyncio.run(scenario())
    [line] = records.read_text().splitlines()
    assert json.loads(line)["inputs"] == {"x": "hi"}


def test_a_caller_without_the_token_is_refused_before_its_body_is_kept(tmp_path: Path) -> None:
    """A body larger than the server holds: refused for the missing token (401), read and
    dropped, not held (a stranger's 100 connections must not make it keep 28 MiB each). It
    was read whole first, and refused as too large (413). So is a foreign page's (403)."""
    agent = write_agent(tmp_path)
    token = "t0ken-0f-the-server-9c1d"
    big = b'{"x": "' + b"a" * (MAX_BODY + 1024) + b'"}'

    async def scenario() -> None:
        async with served(agent, token=token) as (_, port):
            status, body = await exchange(port, run_request(port, big))
            assert status == 401, body
            foreign = {"Origin": "http://evil.example"}
            status, body = await exchange(port, run_request(port, big, headers=foreign))
            assert status == 403, body

    asyncio.run(scenario())


def test_a_refused_body_that_does_not_arrive_closes_the_connection(tmp_path: Path) -> None:
    agent = write_agent(tmp_path)

    async def scenario() -> None:
        deadlines = Deadlines()
        limits = ServeLimits(body_timeout_s=9.0)
        options: dict[str, Any] = {
            "limits": limits,
            "deadline": deadlines,
            "token": "t0ken-0f-the-server",
        }
        async with served(agent, **options) as (_, port):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(run_request(port)[:-4])  # all but the last bytes of the body
            await writer.drain()
            await deadlines.expire(9.0, nth=1)
            status, _ = parse_response(await asyncio.wait_for(reader.read(), EVENT_TIMEOUT_S))
            writer.close()
            assert status == 401

    asyncio.run(scenario())


def test_serve_beyond_loopback_refuses_to_start_without_a_token(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OPENPROGRAM_SERVE_TOKEN", raising=False)
    for host in ("0.0.0.0", "::", "192.0.2.7", "example.com"):
        assert main(["serve", str(write_agent(tmp_path)), "--host", host, "--port", "0"]) == 2
        err = capsys.readouterr().err
        assert "needs a token" in err and "Traceback" not in err
