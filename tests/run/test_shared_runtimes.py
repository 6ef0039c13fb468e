"""Runtimes and their connection pools live as long as the program version they serve.

Against a real Chat Completions server on 127.0.0.1: its ``client_port`` shows which
connection each request came on, and ``connections_ended`` which connections were closed.
"""

from __future__ import annotations

import asyncio
import json
import os
import threading
from pathlib import Path

from loopback import LoopbackServer, Reply, Request, chat_completion, json_reply
from support import SHOP_AGENT

from openprogram_yaml.compile.build import Build
from openprogram_yaml.compile.program import Program
from openprogram_yaml.compile.project import compile_path
from openprogram_yaml.recording.record import RecordingSelector
from openprogram_yaml.recording.replay import ReplaySelector
from openprogram_yaml.run.execute import execute_run
from openprogram_yaml.run.record import RunRecord
from openprogram_yaml.run.service import RunService
from openprogram_yaml.run.shared_runtimes import SharedRuntimes
from openprogram_yaml.run.version import VersionStamp

AGENT = """
version: 1
name: desk
model: local:llama3
retry: {max_retries: 1}
runtimes:
  - {match: "local:*", runtime: openai, options: {base_url: "%s/v1"}}
methods:
  greet: {prompt: Say hello.}
"""


class Versions:
    """What a ``ProgramHolder`` gives a ``RunService``: the version serving now."""

    def __init__(self, program: Program) -> None:
        self.program = program

    def snapshot(self) -> tuple[Program, VersionStamp]:
        return self.program, VersionStamp(self.program.version)


def answer(text: str) -> Reply:
    return json_reply(chat_completion(text))


def tool_call_then_answer() -> list[Reply]:
    call = {
        "id": "call-1",
        "type": "function",
        "function": {"name": "lookup_order", "arguments": json.dumps({"id": "42"})},
    }
    return [
        json_reply(chat_completion(tool_calls=[call])),
        json_reply({"id": "42", "status": "shipped"}),
        answer("It shipped."),
    ]


def ports(server: LoopbackServer, path_prefix: str) -> list[int]:
    return [r.client_port for r in server.requests if r.path.startswith(path_prefix)]


def assert_ok(*records: RunRecord) -> None:
    for record in records:
        assert record.status == "ok", record.error


def test_sequential_runs_through_the_service_share_one_connection(write) -> None:  # type: ignore[no-untyped-def]
    with LoopbackServer() as server:
        server.add(*(answer(f"hello {i}") for i in range(10)))
        versions = Versions(compile_path(write("desk.yaml", AGENT % server.url)))

        async def main() -> list[RunRecord]:
            service = RunService(versions.snapshot)
            records = [await service.start(None, None, {}) for _ in range(10)]
            assert server.connections_ended == 0  # kept open between runs
            await service.shutdown(0)
            return records

        records = asyncio.run(main())
        assert_ok(*records)
        assert [r.output for r in records] == [f"hello {i}" for i in range(10)]
        assert len(set(ports(server, "/v1/"))) == 1
        assert server.wait_connections_ended(1)  # shutdown closed the pool


def test_concurrent_runs_share_the_versions_runtime(write) -> None:  # type: ignore[no-untyped-def]
    arrived = threading.Barrier(8, timeout=10)

    def together(request: Request) -> Reply:
        arrived.wait()  # all 8 requests are in flight at once
        return answer("hi")

    with LoopbackServer() as server:
        server.add(*([together] * 8), *(answer("again") for _ in range(8)))
        versions = Versions(compile_path(write("desk.yaml", AGENT % server.url)))

        async def main() -> tuple[list[RunRecord], list[RunRecord]]:
            service = RunService(versions.snapshot)
            first = await asyncio.gather(*(service.start(None, None, {}) for _ in range(8)))
            second = await asyncio.gather(*(service.start(None, None, {}) for _ in range(8)))
            await service.shutdown(0)
            return first, second

        first, second = asyncio.run(main())
        assert_ok(*first, *second)
        # One pool: the second wave reuses the connections the first one opened.
        assert len(set(ports(server, "/v1/"))) == 8
        assert server.wait_connections_ended(8)


def test_a_reload_closes_the_old_versions_pool_once_its_last_run_ends(write) -> None:  # type: ignore[no-untyped-def]
    arrived, release = threading.Event(), threading.Event()

    def slow(request: Request) -> Reply:
        arrived.set()
        release.wait(10)
        return answer("old")

    with LoopbackServer() as server:
        server.add(slow, answer("new"), answer("new again"))
        path = write("desk.yaml", AGENT % server.url)
        versions = Versions(compile_path(path))

        async def main() -> tuple[RunRecord, ...]:
            service = RunService(versions.snapshot)
            first = service.start(None, None, {})
            await asyncio.to_thread(arrived.wait, 10)
            versions.program = compile_path(path)  # a reload: the next run gets this one
            second = await service.start(None, None, {})
            # The run on the old version is still in flight: its pool stays open.
            assert len(service.runtimes.versions) == 2
            release.set()
            first_record = await first
            assert await asyncio.to_thread(server.wait_connections_ended, 1)
            assert [v.program for v in service.runtimes.versions] == [versions.program]
            third = await service.start(None, None, {})
            assert server.connections_ended == 1
            await service.shutdown(0)
            return first_record, second, third

        first, second, third = asyncio.run(main())
        assert_ok(first, second, third)
        assert (first.output, second.output, third.output) == ("old", "new", "new again")
        old, new, newer = ports(server, "/v1/")
        assert old != new and new == newer
        assert server.wait_connections_ended(2)


def test_shutdown_closes_the_tools_clients_too_and_runs_share_them(write) -> None:  # type: ignore[no-untyped-def]
    with LoopbackServer() as server:
        server.add(*tool_call_then_answer(), *tool_call_then_answer())
        versions = Versions(compile_path(write("shop.yaml", SHOP_AGENT % {"url": server.url})))

        async def main() -> list[RunRecord]:
            service = RunService(versions.snapshot)
            records = [await service.start(None, None, {}) for _ in range(2)]
            assert server.connections_ended == 0
            await service.shutdown(0)
            return records

        records = asyncio.run(main())
        assert_ok(*records)
        assert [r.output for r in records] == ["It shipped."] * 2
        assert len(set(ports(server, "/v1/"))) == 1
        assert len(set(ports(server, "/orders/"))) == 1
        assert server.wait_connections_ended(2)
        assert server.connections_ended == 2


def test_tools_of_an_agent_a_reload_kept_stay_open_with_the_new_version(write) -> None:  # type: ignore[no-untyped-def]
    with LoopbackServer() as server:
        server.add(*tool_call_then_answer(), *tool_call_then_answer(), *tool_call_then_answer())
        path = write("shop.yaml", SHOP_AGENT % {"url": server.url})
        os.utime(path, (1_700_000_000, 1_700_000_000))  # not "racy": its stamp vouches for it
        build = Build()
        versions = Versions(compile_path(path, build=build))

        async def main() -> list[RunRecord]:
            service = RunService(versions.snapshot)
            records = [await service.start(None, None, {})]
            old = versions.program
            versions.program = compile_path(path, build=build)  # nothing changed ...
            assert versions.program is not old
            assert versions.program.agent("shop") is old.agent("shop")  # ... agent kept
            records += [await service.start(None, None, {}) for _ in range(2)]
            # The old version's model pool closed after the first run on the new one;
            # the tool it shares with the new version did not.
            assert await asyncio.to_thread(server.wait_connections_ended, 1)
            assert server.connections_ended == 1
            await service.shutdown(0)
            return records

        records = asyncio.run(main())
        assert_ok(*records)
        model = ports(server, "/v1/")
        assert model[0] != model[2] and len(set(model[2:])) == 1
        assert len(set(ports(server, "/orders/"))) == 1
        assert server.wait_connections_ended(3)


def test_record_and_replay_runs_leave_the_shared_selector_open(write, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    recordings = tmp_path / "recordings"
    with LoopbackServer() as server:
        server.add(answer("recorded"), answer("live"))
        program = compile_path(write("desk.yaml", AGENT % server.url))
        stamp = VersionStamp(program.version)

        async def main() -> list[RunRecord]:
            runtimes = SharedRuntimes()
            shared = runtimes.acquire(program)
            records = [
                await execute_run(
                    program,
                    stamp,
                    None,
                    None,
                    {},
                    shared=shared,
                    wrap_selector=lambda inner: RecordingSelector(inner, recordings),
                ),
                await execute_run(
                    program,
                    stamp,
                    None,
                    None,
                    {},
                    shared=shared,
                    wrap_selector=lambda _inner: ReplaySelector(recordings),
                ),
                await execute_run(program, stamp, None, None, {}, shared=shared),
            ]
            assert server.connections_ended == 0
            await runtimes.release(shared)
            await runtimes.aclose()
            return records

        records = asyncio.run(main())
        assert_ok(*records)
        assert [r.output for r in records] == ["recorded", "recorded", "live"]
        assert len(server.requests) == 2  # the replay asked no server
        assert len(set(ports(server, "/v1/"))) == 1
        assert server.wait_connections_ended(1)


def test_runs_sharing_a_version_offer_the_tools_a_lone_run_offers(write) -> None:  # type: ignore[no-untyped-def]
    # The version makes each agent's Tools once (VersionRuntimes.tools); a run opening its
    # own runtimes makes them from the agent's tools: the model must be sent the same.
    with LoopbackServer() as server:
        server.add(*tool_call_then_answer(), *tool_call_then_answer(), *tool_call_then_answer())
        program = compile_path(write("shop.yaml", SHOP_AGENT % {"url": server.url}))
        stamp = VersionStamp(program.version)

        async def main() -> list[RunRecord]:
            runtimes = SharedRuntimes()
            shared = runtimes.acquire(program)
            agent = program.agent("shop")
            made = shared.tools(agent)
            assert shared.tools(agent) is made
            assert [t.spec for t in made] == [t.spec for t in agent.tools]  # type: ignore[attr-defined]
            records = [await execute_run(program, stamp, None, None, {})]
            records += [await execute_run(program, stamp, None, None, {}, shared=shared)]
            records += [await execute_run(program, stamp, None, None, {}, shared=shared)]
            await runtimes.release(shared)
            await runtimes.aclose()
            return records

        records = asyncio.run(main())
        assert_ok(*records)
        assert [r.output for r in records] == ["It shipped."] * 3
        bodies = [r.json for r in server.requests if r.path.startswith("/v1/")]
        assert len(bodies) == 6
        assert all(b["tools"] == bodies[0]["tools"] for b in bodies) and bodies[0]["tools"]
        assert [b["messages"] for b in bodies[2:4]] == [b["messages"] for b in bodies[0:2]]
