"""``openprogram-run serve``: HTTP on 127.0.0.1 while files change; clean shutdown."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
import pytest
from reload_helpers import EVENT_TIMEOUT_S, Events, GateRuntime, save, write_agent

from openprogram_yaml.run.record import RecordLog
from openprogram_yaml.run.reload import ProgramHolder
from openprogram_yaml.run.service import RunService
from openprogram_yaml.runtimes.registry import register_runtime, unregister_runtime
from openprogram_yaml.serve.app import Server, ServeState


@pytest.fixture
def gate() -> Iterator[GateRuntime]:
    runtime = GateRuntime()
    register_runtime(runtime.runtime_id, runtime)
    yield runtime
    unregister_runtime(runtime.runtime_id)


class Served:
    def __init__(self, holder: ProgramHolder, server: Server, client: httpx.AsyncClient):
        self.holder = holder
        self.server = server
        self.client = client
        self.events = Events(holder)


@asynccontextmanager
async def served(agent: Path, records: Path | None = None) -> AsyncIterator[Served]:
    holder = ProgramHolder(agent, ignore=[records] if records else ())
    holder.load()
    service = RunService(holder.snapshot, RecordLog(records) if records else None)
    server = Server(ServeState(holder, service))
    stop = asyncio.Event()
    watcher = asyncio.create_task(holder.watch(stop))
    await asyncio.wait_for(holder.watching.wait(), EVENT_TIMEOUT_S)
    port = await server.start(0)
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=30) as client:
        try:
            yield Served(holder, server, client)
        finally:
            await server.close(grace_s=0)
            stop.set()
            await watcher


def test_edit_is_served_by_the_next_request(tmp_path: Path) -> None:
    agent = write_agent(tmp_path, "first {{ x }}")

    async def scenario() -> None:
        async with served(agent) as s:
            r1 = await s.client.post("/run/echo/say", json={"x": "hi"})
            assert r1.status_code == 200
            assert r1.json()["output"] == "test reply to: first hi"
            save(tmp_path / "prompts" / "say.j2", "second {{ x }}")
            loaded = await s.events.next("loaded")
            r2 = await s.client.post("/run/echo/say", json={"x": "hi"})
            assert r2.json()["output"] == "test reply to: second hi"
            assert r2.json()["version"]["hash"] == loaded.version != r1.json()["version"]["hash"]
            version = (await s.client.get("/version")).json()
            assert version["version"]["hash"] == loaded.version
            assert version["files"] == ["echo.yaml", "prompts/say.j2"]

    asyncio.run(scenario())


def test_broken_edit_is_reported_and_the_last_good_version_serves(tmp_path: Path) -> None:
    agent = write_agent(tmp_path, "good {{ x }}")

    async def scenario() -> None:
        async with served(agent) as s:
            good = (await s.client.get("/version")).json()["version"]["hash"]
            save(agent, agent.read_text().replace("inputs:", "inptus:"))
            assert (await s.events.next()).status == "failed"
            health = (await s.client.get("/health")).json()
            assert health["status"] == "reload_failed"
            report = (await s.client.get("/version")).json()["reload"]
            assert report["status"] == "failed"
            assert any("inptus" in d and "echo.yaml:" in d for d in report["diagnostics"])
            run = await s.client.post("/run/echo/say", json={"x": "hi"})
            assert run.status_code == 200
            assert run.json()["output"] == "test reply to: good hi"
            assert run.json()["version"]["hash"] == good
            save(agent, agent.read_text().replace("inptus:", "inputs:"))
            assert (await s.events.next()).status == "loaded"
            assert (await s.client.get("/health")).json()["status"] == "ok"

    asyncio.run(scenario())


def test_statuses_name_what_went_wrong(tmp_path: Path) -> None:
    agent = write_agent(tmp_path, "p {{ x }}")

    async def scenario() -> None:
        async with served(agent) as s:
            c = s.client
            assert (await c.post("/run/echo/nope", json={})).status_code == 404
            assert (await c.post("/run/other/say", json={})).status_code == 404
            assert (await c.get("/run/echo/say")).status_code == 405
            json_type = {"Content-Type": "application/json"}
            for body in (b"[1]", b"{not json"):
                r = await c.post("/run/echo/say", content=body, headers=json_type)
                assert r.status_code == 400
            bad = await c.post("/run/echo/say", json={"x": 3})
            assert bad.status_code == 400
            assert bad.json()["status"] == "failed"
            assert bad.json()["error"]["type"] == "InputValidationError"
            agents = (await c.get("/agents")).json()
            assert agents["echo"]["methods"]["say"]["inputs"] == {"x": {"type": "string"}}
            # keep-alive: several requests rode one connection without trouble
            assert (await c.get("/health")).json()["in_flight"] == 0

    asyncio.run(scenario())


def test_requests_in_flight_across_a_reload_and_a_shutdown(
    tmp_path: Path, gate: GateRuntime
) -> None:
    agent = write_agent(tmp_path, "old {{ x }}", model="gate:m", runtime=gate.runtime_id)
    records = tmp_path / "runs.jsonl"

    async def scenario() -> None:
        async with served(agent, records) as s:
            old = (await s.client.get("/version")).json()["version"]["hash"]
            finishing = asyncio.create_task(s.client.post("/run/echo/say", json={"x": "a"}))
            assert await gate.started.get() == "old a"
            save(tmp_path / "prompts" / "say.j2", "new {{ x }}")
            new = (await s.events.next("loaded")).version
            second = asyncio.create_task(s.client.post("/run/echo/say", json={"x": "b"}))
            assert await gate.started.get() == "new b"

            # Shut down with a grace period; release the gate: both runs finish.
            closing = asyncio.create_task(s.server.close(grace_s=3600))
            await asyncio.sleep(0)
            gate.release.set()
            await closing
            a, b = (await finishing), (await second)
            assert (a.status_code, b.status_code) == (200, 200)
            assert a.json()["version"]["hash"] == old
            assert a.json()["output"] == "gated reply to: old a"
            assert b.json()["version"]["hash"] == new

    asyncio.run(scenario())
    lines = [json.loads(line) for line in records.read_text().splitlines()]
    assert [(r["inputs"]["x"], r["status"]) for r in lines] == [("a", "ok"), ("b", "ok")]


def test_shutdown_past_the_grace_answers_503_with_an_interrupted_record(
    tmp_path: Path, gate: GateRuntime
) -> None:
    agent = write_agent(tmp_path, "hold {{ x }}", model="gate:m", runtime=gate.runtime_id)
    records = tmp_path / "runs.jsonl"

    async def scenario() -> None:
        async with served(agent, records) as s:
            pending = asyncio.create_task(s.client.post("/run/echo/say", json={"x": "a"}))
            await gate.started.get()
            await s.server.close(grace_s=0)
            response = await pending
            assert response.status_code == 503
            assert response.json()["status"] == "interrupted"

    asyncio.run(scenario())
    [line] = records.read_text().splitlines()
    assert json.loads(line)["status"] == "interrupted"


def test_serve_command_stops_cleanly_on_sigterm(tmp_path: Path) -> None:
    agent = write_agent(tmp_path, "p {{ x }}")
    records = tmp_path / "runs.jsonl"

    async def scenario() -> tuple[int, str]:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "openprogram_yaml",
            "serve",
            str(agent),
            "--port",
            "0",
            "--records",
            str(records),
            stderr=asyncio.subprocess.PIPE,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        assert proc.stderr is not None
        try:
            line = (await asyncio.wait_for(proc.stderr.readline(), EVENT_TIMEOUT_S)).decode()
            match = re.search(r"http://127\.0\.0\.1:(\d+)", line)
            assert match, line
            url = f"http://127.0.0.1:{match.group(1)}"
            async with httpx.AsyncClient(base_url=url) as client:
                run = await client.post("/run/echo/say", json={"x": "hi"})
                assert run.json()["output"] == "test reply to: p hi"
        finally:
            proc.send_signal(signal.SIGTERM)
            code = await asyncio.wait_for(proc.wait(), EVENT_TIMEOUT_S)
        return code, (await proc.stderr.read()).decode()

    code, rest = asyncio.run(scenario())
    assert code == 0, rest
    assert rest.rstrip().endswith("stopped")
    assert len(records.read_text().splitlines()) == 1
