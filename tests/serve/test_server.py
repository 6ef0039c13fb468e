"""``serve`` on aiohttp.web: the token rule, runs as server-sent events, reload notices on
``/events``, and the history of runs. Each test talks to a real server on 127.0.0.1."""

from __future__ import annotations

import asyncio
import io
import json
import os
import sys
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from support import JANITOR_AGENT, JANITOR_TOOLS

from openprogram_yaml.run.questions import PendingQuestions
from openprogram_yaml.run.record import RecordLog
from openprogram_yaml.run.reload import ProgramHolder
from openprogram_yaml.run.service import RunService
from openprogram_yaml.runner.cli import main
from openprogram_yaml.serve.app import Server, ServeState
from openprogram_yaml.serve.driver import serve
from openprogram_yaml.serve.guard import origin_refusal
from openprogram_yaml.serve.history import RunHistory
from openprogram_yaml.serve.runs import KEEPALIVE_S

#: Generous: a watchfiles event takes ~10 ms, a compile a few.
EVENT_TIMEOUT_S = 30.0

TOKEN = "tok-3f9a7c21e5d84b60"
SECRET = "hunter2-secret-value"

AGENT = """\
version: 1
name: echo
model: test
methods:
  say:
    inputs: {x: {type: string}}
    prompt: "p {{ x }}"
"""

#: The prompt holds a secret: the offline model echoes it, split across its text pieces.
SECRET_AGENT = AGENT.replace('"p {{ x }}"', '"p {{ x }} ${env:SERVE_TEST_SECRET}"')


def write_agent(root: Path, text: str = AGENT) -> Path:
    path = root / "echo.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def save(path: Path, text: str) -> None:
    """Save as editors do: write a new file, then rename it over the old one."""
    tmp = path.with_name(path.name + ".tmp~")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)


@asynccontextmanager
async def served(
    agent: Path, *, watch: bool = False, records: Path | None = None, **options: Any
) -> AsyncIterator[tuple[ServeState, httpx.AsyncClient]]:
    holder = ProgramHolder(agent, ignore=[records] if records else ())
    holder.load()
    log = RecordLog(records) if records else None
    service = RunService(holder.snapshot, log, asker=PendingQuestions())
    options.setdefault("history", RunHistory(records=records))
    state = ServeState(holder, service, **options)
    server = Server(state)
    stop = asyncio.Event()
    watcher = asyncio.create_task(holder.watch(stop)) if watch else None
    if watcher is not None:
        await asyncio.wait_for(holder.watching.wait(), EVENT_TIMEOUT_S)
    port = await server.start(0)
    url = f"http://127.0.0.1:{port}"
    async with httpx.AsyncClient(base_url=url, timeout=EVENT_TIMEOUT_S) as client:
        try:
            yield state, client
        finally:
            await server.close(grace_s=0)
            stop.set()
            if watcher is not None:
                await watcher


async def sse_events(response: httpx.Response) -> AsyncIterator[tuple[str, Any]]:
    """``(event, data)`` of a server-sent events reply, as they come."""
    kind, data = "message", ""
    async for line in response.aiter_lines():
        if line.startswith("event: "):
            kind = line[len("event: ") :]
        elif line.startswith("data: "):
            data += line[len("data: ") :]
        elif line == "" and data:
            yield kind, json.loads(data)
            kind, data = "message", ""


# --- the token ----------------------------------------------------------------------------


def test_a_host_beyond_loopback_without_a_token_refuses_to_start(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OPENPROGRAM_SERVE_TOKEN", raising=False)
    agent = write_agent(tmp_path)
    assert main(["serve", str(agent), "--host", "0.0.0.0", "--port", "0"]) == 2
    err = capsys.readouterr().err
    assert "--token" in err and "OPENPROGRAM_SERVE_TOKEN" in err and "Traceback" not in err
    assert main(["serve", str(agent), "--host", "192.0.2.1", "--token", " "]) == 2
    assert "token is empty" in capsys.readouterr().err


def test_a_token_that_is_not_ascii_refuses_to_start(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A header is ASCII: a token beyond it never matched (mcp --http reads headers as
    Latin-1), and one from an environment that is not UTF-8 failed on every request."""
    agent = write_agent(tmp_path)
    assert main(["serve", str(agent), "--host", "192.0.2.1", "--token", "tök-long-enough"]) == 2
    assert "must be ASCII" in capsys.readouterr().err
    monkeypatch.setenv("OPENPROGRAM_SERVE_TOKEN", "tok-\udcff-bytes")  # b"\xff" in the environment
    assert main(["mcp", str(agent), "--http", "--host", "192.0.2.1", "--port", "0"]) == 2
    err = capsys.readouterr().err
    assert "must be ASCII" in err and "Traceback" not in err


def test_every_route_needs_the_token_once_one_is_set(tmp_path: Path) -> None:
    agent = write_agent(tmp_path)
    log = io.StringIO()

    async def scenario() -> None:
        async with served(agent, token=TOKEN, log=log) as (_, client):
            for path in ("/health", "/agents", "/runs", "/questions", "/events"):
                missing = await client.get(path)
                assert missing.status_code == 401, path
                assert missing.headers["WWW-Authenticate"].startswith("Bearer")
            wrong = {"Authorization": "Bearer " + TOKEN[:-1] + "x"}
            assert (await client.get("/health", headers=wrong)).status_code == 401
            run = await client.post("/run/echo/say", json={"x": "hi"})
            assert run.status_code == 401
            bearer = {"Authorization": f"Bearer {TOKEN}"}
            assert (await client.get("/health", headers=bearer)).status_code == 200
            ran = await client.post("/run/echo/say", json={"x": "hi"}, headers=bearer)
            assert (ran.status_code, ran.json()["output"]) == (200, "test reply to: p hi")

    asyncio.run(scenario())
    assert TOKEN not in log.getvalue()


def test_a_browser_shows_the_token_once_and_keeps_it_in_a_strict_cookie(tmp_path: Path) -> None:
    agent = write_agent(tmp_path)

    async def scenario() -> None:
        async with served(agent, token=TOKEN) as (state, client):
            assert (await client.get(f"/agents?token={TOKEN}x")).status_code == 401
            first = await client.get(f"/agents?token={TOKEN}")
            assert first.status_code == 303
            assert first.headers["Location"] == "/agents"  # the token leaves the address
            cookie = first.headers["Set-Cookie"]
            assert cookie.startswith(f"openprogram_token_{state.port}=")
            assert "HttpOnly" in cookie and "SameSite=Strict" in cookie
            assert TOKEN not in first.text
            # httpx kept the cookie, as a browser does: the page's own requests carry it.
            assert (await client.get("/agents")).status_code == 200
            assert (await client.post("/run/echo/say", json={"x": "a"})).status_code == 200

    asyncio.run(scenario())


def test_beyond_loopback_any_host_is_served_but_only_its_own_origin() -> None:
    """Bound to every address behind a token: the names others use cannot be known, and a
    rebound page can send neither the header nor the cookie; a foreign page is still refused."""
    headers = {"host": "box.lan:8765"}
    assert origin_refusal(headers, 8765, (), any_host=True) is None
    own = {**headers, "origin": "http://box.lan:8765"}
    assert origin_refusal(own, 8765, (), any_host=True) is None
    foreign = {**headers, "origin": "http://evil.example"}
    refused = origin_refusal(foreign, 8765, (), any_host=True)
    assert refused is not None and refused[0] == 403
    assert origin_refusal(headers, 8765, ()) is not None  # on loopback, the Host is checked


# --- runs as server-sent events -----------------------------------------------------------


def test_a_run_streams_its_events_then_its_record(tmp_path: Path) -> None:
    agent = write_agent(tmp_path)

    async def scenario() -> list[tuple[str, Any]]:
        async with served(agent) as (_, client):
            headers = {"Accept": "text/event-stream"}
            async with client.stream(
                "POST", "/run/echo/say", json={"x": "hi"}, headers=headers
            ) as response:
                assert response.status_code == 200
                assert response.headers["Content-Type"].startswith("text/event-stream")
                return [e async for e in sse_events(response)]

    events = asyncio.run(scenario())
    kinds = [kind for kind, _ in events]
    assert kinds[0] == "method" and kinds[-1] == "record"
    assert set(kinds[1:-1]) == {"text"}
    assert events[0][1] == {"type": "method", "agent": "echo", "method": "say"}
    text = "".join(data["text"] for kind, data in events if kind == "text")
    record = events[-1][1]
    assert text == record["output"] == "test reply to: p hi"
    assert record["status"] == "ok"


def test_a_secret_split_across_streamed_pieces_is_redacted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SERVE_TEST_SECRET", SECRET)
    agent = write_agent(tmp_path, SECRET_AGENT)

    async def scenario() -> tuple[str, str]:
        async with served(agent) as (_, client):
            headers = {"Accept": "text/event-stream"}
            async with client.stream(
                "POST", "/run/echo/say", json={"x": "hi"}, headers=headers
            ) as response:
                raw = (await response.aread()).decode()
            runs = (await client.get("/runs")).json()["runs"]
            one = (await client.get(f"/runs/{runs[0]['id']}")).text
            return raw, one

    raw, one = asyncio.run(scenario())
    assert SECRET not in raw and SECRET not in one
    pieces = [json.loads(line[6:]) for line in raw.splitlines() if line.startswith("data: ")]
    text = "".join(p["text"] for p in pieces if p.get("type") == "text")
    assert text == "test reply to: p hi ***"


def test_a_client_that_leaves_a_stream_does_not_stop_the_run_which_is_kept_and_logged(
    tmp_path: Path,
) -> None:
    (tmp_path / "janitor_tools.py").write_text(JANITOR_TOOLS, encoding="utf-8")
    agent = write_agent(tmp_path, JANITOR_AGENT)
    log = io.StringIO()

    async def scenario() -> None:
        async with served(agent, log=log) as (state, client):
            headers = {"Accept": "text/event-stream"}
            async with client.stream(
                "POST", "/run/janitor/tidy", json={}, headers=headers
            ) as response:
                async for kind, _ in sse_events(response):
                    if kind == "tool_use":
                        break  # the run now waits for its confirmation; the client leaves
            for _ in range(2000):  # polled over HTTP, bounded, no sleep
                listed = (await client.get("/questions")).json()["questions"]
                if listed:
                    break
            [question] = listed
            answered = await client.post(
                f"/questions/{question['id']}/answer", json={"answer": True}
            )
            assert answered.status_code == 200
            # The run goes on without its client: its end puts it in the history.
            await asyncio.wait_for(asyncio.gather(*state.service.in_flight), EVENT_TIMEOUT_S)
            runs = (await client.get("/runs")).json()["runs"]
            assert [(r["method"], r["status"]) for r in runs] == [("tidy", "ok")]

    asyncio.run(scenario())
    assert "200 janitor.tidy ok" in log.getvalue()


# --- reload notices -----------------------------------------------------------------------


def test_serve_prints_a_failed_reload_with_the_secret_it_quotes_hidden(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A diagnostic may quote a value read with ``${env:…}``: ``/events`` hides it, and so
    does the line ``serve`` prints on stderr."""
    monkeypatch.setenv("ECHO_API_KEY", SECRET)
    agent = write_agent(tmp_path)
    broken = AGENT.replace("    prompt:", '    temperature: "${env:ECHO_API_KEY}"\n    prompt:')

    async def scenario() -> None:
        holder = ProgramHolder(agent)
        holder.load()
        state = ServeState(holder, RunService(holder.snapshot))
        stop, force, failed = asyncio.Event(), asyncio.Event(), asyncio.Event()
        holder.listeners.append(lambda event: failed.set() if event.status == "failed" else None)
        running = asyncio.create_task(
            serve(
                state,
                port=0,
                grace_s=0,
                watch=True,
                stop=stop,
                force=force,
                on_listening=lambda _: save(agent, broken),
            )
        )
        await asyncio.wait_for(failed.wait(), EVENT_TIMEOUT_S)
        stop.set()
        await running

    asyncio.run(scenario())
    err = capsys.readouterr().err
    assert "expected a number, got '***'" in err and SECRET not in err


def test_events_tell_of_a_reload_and_of_a_failed_one(tmp_path: Path) -> None:
    agent = write_agent(tmp_path)

    async def scenario() -> list[tuple[str, Any]]:
        seen: list[tuple[str, Any]] = []
        async with (
            served(agent, watch=True) as (_, client),
            client.stream("GET", "/events") as response,
        ):
            assert response.headers["Content-Type"].startswith("text/event-stream")
            stream = sse_events(response)
            seen.append(await anext(stream))
            save(agent, AGENT.replace('"p {{ x }}"', '"q {{ x }}"'))
            seen.append(await asyncio.wait_for(anext(stream), EVENT_TIMEOUT_S))
            save(agent, AGENT.replace("inputs:", "inptus:"))
            seen.append(await asyncio.wait_for(anext(stream), EVENT_TIMEOUT_S))
        return seen

    (kind0, first), (kind1, loaded), (kind2, failed) = asyncio.run(scenario())
    assert kind0 == "version" and first["reload"]["status"] == "ok"
    assert kind1 == kind2 == "reload"
    assert loaded["status"] == "loaded" and loaded["version"] != first["version"]["hash"]
    assert loaded["previous"] == first["version"]["hash"]
    assert failed["status"] == "failed" and failed["version"] == loaded["version"]
    [diagnostic] = [d for d in failed["diagnostics"] if "inptus" in d]
    assert diagnostic.startswith(str(agent) + ":") or diagnostic.startswith("echo.yaml:")
    assert "still serving version" in failed["message"]


def test_events_end_when_the_server_stops(tmp_path: Path) -> None:
    agent = write_agent(tmp_path)

    async def scenario() -> None:
        holder = ProgramHolder(agent)
        holder.load()
        server = Server(ServeState(holder, RunService(holder.snapshot)))
        port = await server.start(0)
        async with (
            httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client,
            client.stream("GET", "/events") as response,
        ):
            stream = sse_events(response)
            assert (await anext(stream))[0] == "version"
            closing = asyncio.create_task(server.close(grace_s=0))
            rest = [e async for e in stream]
            await asyncio.wait_for(closing, EVENT_TIMEOUT_S)
        assert rest == []

    asyncio.run(scenario())


def test_an_idle_event_stream_gets_keep_alive_comments(tmp_path: Path) -> None:
    agent = write_agent(tmp_path)
    expired: list[float] = []

    def deadline(seconds: float) -> AbstractAsyncContextManager[object]:
        """The first keep-alive wait ends at once; every other deadline never passes."""
        if seconds == KEEPALIVE_S and not expired:
            expired.append(seconds)
            return asyncio.timeout(0)
        return asyncio.timeout(None)

    async def scenario() -> list[str]:
        lines: list[str] = []
        async with (
            served(agent, deadline=deadline) as (_, client),
            client.stream("GET", "/events") as response,
        ):
            async for line in response.aiter_lines():
                lines.append(line)
                if line.startswith(":"):
                    break
        return lines

    lines = asyncio.run(scenario())
    assert lines[0] == "event: version" and lines[-1] == ": keep-alive"


# --- history ------------------------------------------------------------------------------


def test_runs_lists_the_runs_newest_first_with_their_traces(tmp_path: Path) -> None:
    agent = write_agent(tmp_path)
    records = tmp_path / "runs.jsonl"
    older = {"id": "older0000000001", "agent": "echo", "method": "say", "status": "ok"}
    records.write_text(json.dumps(older) + "\nnot json\n", encoding="utf-8")

    async def scenario() -> None:
        async with served(agent, records=records) as (_, client):
            a = (await client.post("/run/echo/say", json={"x": "a"})).json()
            b = (await client.post("/run/echo/say", json={"x": "b"})).json()
            runs = (await client.get("/runs")).json()["runs"]
            assert [r["id"] for r in runs] == [b["id"], a["id"], older["id"]]
            assert [r["source"] for r in runs] == ["memory", "memory", "records"]
            assert runs[0]["status"] == "ok" and runs[0]["version"] == b["version"]["hash"]
            one = (await client.get(f"/runs/{a['id']}")).json()
            assert one["record"] == a
            kinds = [node["kind"] for node in one["trace"]]
            assert kinds[0] == "run" and "method" in kinds and "exec" in kinds
            from_file = (await client.get(f"/runs/{older['id']}")).json()
            assert from_file == {"record": older, "trace": None}
            missing = await client.get("/runs/nope")
            assert missing.status_code == 404 and "GET /runs" in missing.json()["error"]

    asyncio.run(scenario())


def test_history_keeps_only_the_newest_runs(tmp_path: Path) -> None:
    agent = write_agent(tmp_path)

    async def scenario() -> None:
        async with served(agent, history=RunHistory(size=2)) as (_, client):
            ids = [(await client.post("/run/echo/say", json={"x": x})).json()["id"] for x in "abc"]
            runs = (await client.get("/runs")).json()["runs"]
            assert [r["id"] for r in runs] == ids[:0:-1]
            assert (await client.get(f"/runs/{ids[0]}")).status_code == 404

    asyncio.run(scenario())


def test_history_keeps_fewer_runs_when_they_weigh_more_than_its_budget(tmp_path: Path) -> None:
    """Each run's input is 600 characters (a file input may be 20 MiB): a budget of 1,000
    keeps the newest only; a run over the budget on its own is still kept."""
    agent = write_agent(tmp_path)

    async def scenario() -> None:
        history = RunHistory(max_bytes=1000)
        async with served(agent, history=history) as (_, client):
            ids = []
            for x in ("a" * 600, "b" * 600, "c" * 2000):
                ids.append((await client.post("/run/echo/say", json={"x": x})).json()["id"])
                runs = (await client.get("/runs")).json()["runs"]
                assert [r["id"] for r in runs] == [ids[-1]]
            assert (await client.get(f"/runs/{ids[0]}")).status_code == 404

    asyncio.run(scenario())


def test_serve_prints_the_address_of_its_page(tmp_path: Path) -> None:
    agent = write_agent(tmp_path)

    async def scenario() -> str:
        proc = await asyncio.create_subprocess_exec(
            *(sys.executable, "-m", "openprogram_yaml", "serve"),
            *(str(agent), "--port", "0", "--token", TOKEN, "--no-watch"),
            stderr=asyncio.subprocess.PIPE,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        assert proc.stderr is not None
        try:
            line = (await asyncio.wait_for(proc.stderr.readline(), EVENT_TIMEOUT_S)).decode()
        finally:
            proc.terminate()
            rest = (await proc.stderr.read()).decode()
            await proc.wait()
        return line + rest

    out = asyncio.run(scenario())
    assert "http://127.0.0.1:" in out and "/ (version" in out and "token required" in out
    assert TOKEN not in out


def test_runs_reads_only_the_end_of_a_long_records_file(tmp_path: Path) -> None:
    records = tmp_path / "runs.jsonl"
    line = {"id": "", "agent": "echo", "method": "say", "status": "ok", "pad": "x" * 200}
    with records.open("w", encoding="utf-8") as file:
        for n in range(50_000):  # about 13 MB, past the part read
            file.write(json.dumps({**line, "id": f"run{n:06d}"}) + "\n")
    runs = RunHistory(records=records).summaries()
    assert len(runs) == 1000
    assert runs[0]["id"] == "run049999" and runs[-1]["id"] == "run049000"


def test_runs_skips_lines_of_the_records_file_the_decoder_cannot_read(tmp_path: Path) -> None:
    # A line with a 5,000-digit number made GET /runs fail (a ValueError from int()).
    records = tmp_path / "runs.jsonl"
    good = {"id": "run1", "agent": "echo", "method": "say", "status": "ok"}
    records.write_text(
        json.dumps(good)
        + "\n"
        + '{"id": "run2", "n": '
        + "7" * 5_000
        + "}\n"
        + '{"id": "run3", "n": '
        + "[" * 100_000
        + "]" * 100_000
        + "}\n",
        encoding="utf-8",
    )
    assert [run["id"] for run in RunHistory(records=records).summaries()] == ["run1"]


def test_a_secret_a_reload_brings_is_redacted_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The agents' secrets are worked out once per version: a new version's are known as
    soon as it serves. (A key given to a runtime rule is secret whatever its variable is
    called, so the environment's secret-looking names do not hide it too.)"""
    monkeypatch.setenv("SERVE_PLAIN_VALUE", SECRET)
    agent = write_agent(tmp_path)
    keyed = AGENT.replace(
        "model: test",
        "model: test\n"
        "description: uses ${env:SERVE_PLAIN_VALUE}\n"
        "runtimes:\n"
        '  - {match: "local:*", runtime: openai,\n'
        '     options: {base_url: "http://127.0.0.1:9/v1", api_key: "${env:SERVE_PLAIN_VALUE}"}}',
    )

    async def scenario() -> dict[str, Any]:
        async with (
            served(agent, watch=True) as (_, client),
            client.stream("GET", "/events") as response,
        ):
            stream = sse_events(response)
            await anext(stream)
            assert (await client.get("/agents")).status_code == 200  # the old version's
            save(agent, keyed)
            kind, loaded = await asyncio.wait_for(anext(stream), EVENT_TIMEOUT_S)
            assert (kind, loaded["status"]) == ("reload", "loaded"), loaded
            agents: dict[str, Any] = (await client.get("/agents")).json()
            return agents

    agents = asyncio.run(scenario())
    assert agents["echo"]["description"] == "uses ***"


def test_a_run_asked_for_while_the_server_shuts_down_is_refused_in_each_routes_shape(
    tmp_path: Path,
) -> None:
    agent = write_agent(tmp_path)
    chat = {"model": "echo.say", "messages": [{"role": "user", "content": "hi"}]}

    async def scenario() -> tuple[httpx.Response, httpx.Response, httpx.Response]:
        async with served(agent) as (state, client):
            await state.service.shutdown(0)  # what Server.close does first
            return (
                await client.post("/run/echo/say", json={"x": "hi"}),
                await client.post(
                    "/run/echo/say", json={"x": "hi"}, headers={"Accept": "text/event-stream"}
                ),
                await client.post("/v1/chat/completions", json=chat),
            )

    plain, streamed, openai = asyncio.run(scenario())
    for reply in (plain, streamed):
        assert (reply.status_code, reply.json()) == (
            503,
            {"error": "the server is shutting down"},
        )
    assert openai.status_code == 503
    assert openai.json()["error"]["message"] == "the server is shutting down"
    assert openai.json()["error"]["type"] == "server_error"


CALC_AGENT = """\
version: 1
name: calc
model: test
methods:
  div:
    inputs: {n: {type: integer}}
    prompt: "{{ 10 / n }}"
"""


def test_inputs_the_template_cannot_render_are_the_requests_fault_not_the_servers(
    tmp_path: Path,
) -> None:
    # n = 0 passes the inputs schema and fails the template (ZeroDivisionError): each route
    # answered 500, a server error, for what the request's inputs decide.
    agent = tmp_path / "calc.yaml"
    agent.write_text(CALC_AGENT, encoding="utf-8")

    async def scenario() -> dict[str, httpx.Response]:
        async with served(agent) as (_, client):
            chat = {"model": "div", "messages": [{"role": "user", "content": "0"}]}
            return {
                "run": await client.post("/run/calc/div", json={"n": 0}),
                "render": await client.post("/api/render/calc/div", json={"n": 0}),
                "v1": await client.post("/v1/chat/completions", json=chat),
                "ok": await client.post("/run/calc/div", json={"n": 5}),
            }

    replies = asyncio.run(scenario())
    assert replies["ok"].status_code == 200
    for name in ("run", "render", "v1"):
        assert replies[name].status_code == 422, (name, replies[name].text)
        assert "division by zero" in replies[name].text
    assert replies["run"].json()["error"]["type"] == "TemplateRenderError"
    assert replies["v1"].json()["error"]["code"] == "invalid_inputs"


def test_a_run_holding_unicode_line_separators_is_listed_and_shown(tmp_path: Path) -> None:
    # JSON written with ensure_ascii=False holds U+2028, U+2029 and U+0085 raw; splitlines()
    # broke its lines there: GET /runs/{id} answered 500 and the records file lost the run.
    agent = write_agent(tmp_path)
    records = tmp_path / "runs.jsonl"
    text = "a\u2028b\u2029c\x85d"

    async def scenario() -> None:
        async with served(agent, records=records) as (_, client):
            run = (await client.post("/run/echo/say", json={"x": text})).json()
            one = await client.get(f"/runs/{run['id']}")
            assert one.status_code == 200, one.text
            assert one.json()["record"]["inputs"] == {"x": text}
        # A server started later finds it in the records file.
        async with served(agent, records=records) as (_, client):
            listed = (await client.get("/runs")).json()["runs"]
            assert [r["id"] for r in listed] == [run["id"]]

    asyncio.run(scenario())


def test_a_trace_holding_unicode_line_separators_reads_back(tmp_path: Path) -> None:
    from openprogram_yaml.runtime.trace import SessionTrace

    trace = SessionTrace()
    with trace.span("run", "a\u2028b", {"x": "c\x85d"}) as node:
        node.output = "e\u2029f"
    path = tmp_path / "trace.jsonl"
    trace.write_jsonl(path)
    assert SessionTrace.read_jsonl(path).nodes == trace.nodes
