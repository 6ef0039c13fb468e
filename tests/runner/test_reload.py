"""Hot reload: edits are served at once, broken edits never are, runs in flight keep theirs."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from reload_helpers import (
    EVENT_TIMEOUT_S,
    Events,
    GateRuntime,
    agent_yaml,
    save,
    start_watching,
    write_agent,
)

from openprogram_yaml.run.record import RecordLog, RunRecord
from openprogram_yaml.run.reload import ProgramHolder, ReloadEvent
from openprogram_yaml.run.service import RunService
from openprogram_yaml.runtimes.registry import register_runtime, unregister_runtime


@pytest.fixture
def gate() -> Iterator[GateRuntime]:
    runtime = GateRuntime()
    register_runtime(runtime.runtime_id, runtime)
    yield runtime
    unregister_runtime(runtime.runtime_id)


def _served_around(
    agent: Path, change: Callable[[], object]
) -> tuple[RunRecord, ReloadEvent, RunRecord]:
    """While the agent is watched: a run of ``say``, ``change()``, the reload it causes, and
    a run of ``say`` after it."""

    async def scenario() -> tuple[RunRecord, ReloadEvent, RunRecord]:
        holder = ProgramHolder(agent)
        holder.load()
        events = Events(holder)
        service = RunService(holder.snapshot)
        watcher, stop = await start_watching(holder)
        before = await service.start(None, "say", {"x": "hi"})
        change()
        loaded = await events.next("loaded")
        after = await service.start(None, "say", {"x": "hi"})
        stop.set()
        await watcher
        return before, loaded, after

    return asyncio.run(scenario())


def test_edited_prompt_is_used_by_the_next_run(tmp_path: Path) -> None:
    agent = write_agent(tmp_path, "first {{ x }}")
    prompt = tmp_path / "prompts" / "say.j2"
    before, loaded, after = _served_around(agent, lambda: save(prompt, "second {{ x }}"))
    assert loaded.changed == (tmp_path.resolve() / "prompts" / "say.j2",)
    assert after.version.hash == loaded.version != before.version.hash
    assert [before.output, after.output] == ["test reply to: first hi", "test reply to: second hi"]


def _relink(link: Path, target: str) -> None:
    """Point ``link`` elsewhere as ``ln -sfn`` does: a new link renamed over the old one."""
    fresh = link.with_name(link.name + ".new")
    fresh.symlink_to(target)
    fresh.replace(link)


def _relinked_outputs(agent: Path, link: Path, target: str) -> list[str]:
    """What ``say`` answers before ``_relink(link, target)`` and after its reload."""
    before, _, after = _served_around(agent, lambda: _relink(link, target))
    return [before.output, after.output]


def _releases(root: Path) -> Path:
    """``root/releases/v1`` and ``v2``, each a ``say.j2`` of its own and an empty
    ``prompts`` folder; ``root/prompts`` removed (a test puts a link there)."""
    shutil.rmtree(root / "prompts")
    releases = root / "releases"
    for version in ("v1", "v2"):
        (releases / version / "prompts").mkdir(parents=True)
        (releases / version / "say.j2").write_text(f"{version} {{{{ x }}}}", encoding="utf-8")
    return releases


V1_THEN_V2 = ["test reply to: v1 hi", "test reply to: v2 hi"]


@pytest.mark.parametrize("linked", ["file", "folder"])
def test_a_retargeted_link_to_the_prompt_reloads(tmp_path: Path, linked: str) -> None:
    # A deploy points a link at the next prompt (current.j2 -> v2.j2, or a folder link
    # prompts -> releases/v2). The link lies in a folder no file read lies in: it was not
    # watched, and the server kept the old prompt until something else changed.
    agent = write_agent(tmp_path / "agent", "unused")
    releases = _releases(tmp_path / "agent")
    prompts = tmp_path / "agent" / "prompts"
    if linked == "file":
        prompts.mkdir()
        link = prompts / "say.j2"
        link.symlink_to(releases / "v1" / "say.j2")
        target = str(releases / "v2" / "say.j2")
    else:
        link = prompts
        link.symlink_to(releases / "v1")
        target = str(releases / "v2")
    assert _relinked_outputs(agent, link, target) == V1_THEN_V2


def test_a_retargeted_link_a_path_goes_up_from_reloads(tmp_path: Path) -> None:
    # prompt_file: current/../say.j2 with current -> releases/v1/prompts reads
    # releases/v1/say.j2: the lookup follows the link before going up, so retargeting it
    # changes the prompt (the link was not seen: the path was shortened to say.j2 first).
    agent = write_agent(tmp_path, "unused")
    agent.write_text(agent_yaml().replace("prompts/say.j2", "current/../say.j2"), "utf-8")
    releases = _releases(tmp_path)
    link = tmp_path / "current"
    link.symlink_to(releases / "v1" / "prompts")
    assert _relinked_outputs(agent, link, str(releases / "v2" / "prompts")) == V1_THEN_V2


def test_a_retargeted_link_a_link_leads_to_reloads(tmp_path: Path) -> None:
    # prompts -> deploy/live -> releases/v1: a deploy flips live, the link the lookup
    # reaches through the first one (only the first was seen).
    agent = write_agent(tmp_path, "unused")
    _releases(tmp_path)
    (tmp_path / "deploy").mkdir()
    (tmp_path / "prompts").symlink_to("deploy/live")
    live = tmp_path / "deploy" / "live"
    live.symlink_to("../releases/v1")
    assert _relinked_outputs(agent, live, "../releases/v2") == V1_THEN_V2


def test_invalid_edit_keeps_the_last_good_version_until_fixed(tmp_path: Path) -> None:
    agent = write_agent(tmp_path, "good {{ x }}")
    prompt = tmp_path / "prompts" / "say.j2"

    async def scenario() -> None:
        holder = ProgramHolder(agent)
        good = holder.load()
        events = Events(holder)
        service = RunService(holder.snapshot)
        watcher, stop = await start_watching(holder)

        save(prompt, "broken {{ y }}")  # reads an input the method does not declare
        failed = await events.next()
        assert failed.status == "failed"
        assert failed.version == good.version
        [diag] = failed.diagnostics
        assert "say.j2:1:" in str(diag)
        assert "'y'" in diag.message

        still = await service.start(None, "say", {"x": "hi"})
        assert still.status == "ok"
        assert still.output == "test reply to: good hi"
        assert still.version.hash == good.version

        save(prompt, "fixed {{ x }}")
        fixed = await events.next()
        assert fixed.status == "loaded"
        assert holder.failure is None
        now = await service.start(None, "say", {"x": "hi"})
        assert now.output == "test reply to: fixed hi"
        assert now.version.hash == fixed.version != good.version
        stop.set()
        await watcher

    asyncio.run(scenario())


def test_runs_in_flight_finish_on_the_version_they_started_with(
    tmp_path: Path, gate: GateRuntime
) -> None:
    agent = write_agent(tmp_path, "old {{ x }}", model="gate:slow", runtime=gate.runtime_id)
    records = tmp_path / "records.jsonl"

    async def scenario() -> None:
        holder = ProgramHolder(agent, ignore=[records])
        old = holder.load()
        events = Events(holder)
        service = RunService(holder.snapshot, RecordLog(records))
        watcher, stop = await start_watching(holder)

        first = service.start(None, "say", {"x": "a"})
        second = service.start(None, "say", {"x": "b"})
        assert {await gate.started.get(), await gate.started.get()} == {"old a", "old b"}

        save(tmp_path / "prompts" / "say.j2", "new {{ x }}")
        new = (await events.next("loaded")).version
        third = service.start(None, "say", {"x": "c"})
        assert await gate.started.get() == "new c"
        assert not first.done() and not second.done()

        gate.release.set()
        done = [await first, await second, await third]
        assert [r.status for r in done] == ["ok", "ok", "ok"]
        assert [r.output for r in done] == [
            "gated reply to: old a",
            "gated reply to: old b",
            "gated reply to: new c",
        ]
        assert [r.version.hash for r in done] == [old.version, old.version, new]
        stop.set()
        await watcher

    asyncio.run(scenario())
    lines = [json.loads(line) for line in records.read_text().splitlines()]
    by_input = {rec["inputs"]["x"]: rec["version"]["hash"] for rec in lines}
    assert by_input["a"] == by_input["b"] != by_input["c"]


def test_shutdown_interrupts_runs_past_the_grace_period_and_records_them(
    tmp_path: Path, gate: GateRuntime
) -> None:
    agent = write_agent(tmp_path, "hold {{ x }}", model="gate:slow", runtime=gate.runtime_id)
    records = tmp_path / "records.jsonl"

    async def scenario() -> None:
        holder = ProgramHolder(agent)
        holder.load()
        service = RunService(holder.snapshot, RecordLog(records))
        quick = service.start(None, "say", {"x": "quick"})
        stuck = service.start(None, "say", {"x": "stuck"})
        await gate.started.get()
        await gate.started.get()
        force = asyncio.Event()
        closing = asyncio.create_task(service.shutdown(grace_s=3600, force=force))
        await asyncio.sleep(0)  # let shutdown begin waiting
        with pytest.raises(RuntimeError):
            service.start(None, "say", {"x": "late"})
        force.set()  # a second Ctrl-C
        await closing
        assert (await quick).status == "interrupted"
        assert (await stuck).status == "interrupted"

    asyncio.run(scenario())
    lines = [json.loads(line) for line in records.read_text().splitlines()]
    assert sorted(rec["inputs"]["x"] for rec in lines) == ["quick", "stuck"]
    assert {rec["status"] for rec in lines} == {"interrupted"}


def test_shutdown_lets_runs_in_flight_finish(tmp_path: Path, gate: GateRuntime) -> None:
    agent = write_agent(tmp_path, "hold {{ x }}", model="gate:slow", runtime=gate.runtime_id)

    async def scenario() -> str:
        holder = ProgramHolder(agent)
        holder.load()
        service = RunService(holder.snapshot)
        run = service.start(None, "say", {"x": "y"})
        await gate.started.get()
        closing = asyncio.create_task(service.shutdown(grace_s=3600))
        await asyncio.sleep(0)
        assert not closing.done()
        gate.release.set()
        await closing
        return (await run).status

    assert asyncio.run(scenario()) == "ok"


def test_a_new_file_fixes_a_config_that_needs_it(tmp_path: Path) -> None:
    agent = write_agent(tmp_path, "one {{ x }}")
    holder_text = agent.read_text().replace("prompts/say.j2", "prompts/other.j2")

    async def scenario() -> None:
        holder = ProgramHolder(agent)
        holder.load()
        events = Events(holder)
        watcher, stop = await start_watching(holder)
        save(agent, holder_text)
        assert (await events.next()).status == "failed"  # other.j2 does not exist yet
        save(tmp_path / "prompts" / "other.j2", "other {{ x }}")
        loaded = await events.next()
        assert loaded.status == "loaded"
        assert holder.program is not None
        assert tmp_path.resolve() / "prompts" / "other.j2" in holder.program.files
        stop.set()
        await watcher

    asyncio.run(scenario())


def test_records_never_hold_secrets(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENPROGRAM_TEST_SECRET", "s3cr3t-value")
    agent = write_agent(tmp_path, "key ${env:OPENPROGRAM_TEST_SECRET} {{ x }}")
    agent.write_text(
        agent.read_text().replace(
            "prompt_file: prompts/say.j2", 'prompt: "key ${env:OPENPROGRAM_TEST_SECRET} {{ x }}"'
        )
    )
    records = tmp_path / "records.jsonl"

    async def scenario() -> str:
        holder = ProgramHolder(agent)
        holder.load()
        service = RunService(holder.snapshot, RecordLog(records))
        return (await service.start(None, "say", {"x": "hi"})).to_json()

    line = asyncio.run(scenario())
    assert "s3cr3t-value" not in line and "***" in line
    assert "s3cr3t-value" not in records.read_text()


# --- the command line: --watch ---------------------------------------------------------


def test_watch_reruns_on_each_save_and_reports_broken_edits(tmp_path: Path) -> None:
    agent = write_agent(tmp_path, "first {{ x }}")
    prompt = tmp_path / "prompts" / "say.j2"
    records = tmp_path / "runs.jsonl"

    async def scenario() -> tuple[int, str]:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "openprogram_yaml",
            str(agent),
            "say",
            "-i",
            "x=hi",
            "--watch",
            "--json",
            "--records",
            str(records),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        assert proc.stdout is not None and proc.stderr is not None

        async def record() -> dict[str, object]:
            line = await asyncio.wait_for(proc.stdout.readline(), EVENT_TIMEOUT_S)  # type: ignore[union-attr]
            return json.loads(line)  # type: ignore[no-any-return]

        async def stderr_until(text: str) -> str:
            seen = ""
            while text not in seen:
                line = await asyncio.wait_for(proc.stderr.readline(), EVENT_TIMEOUT_S)  # type: ignore[union-attr]
                assert line, seen
                seen += line.decode()
            return seen

        try:
            first = await record()
            assert first["output"] == "test reply to: first hi"
            save(prompt, "second {{ x }}")
            second = await record()
            assert second["output"] == "test reply to: second hi"
            save(prompt, "broken {{ nope }}")
            report = await stderr_until("still serving version")
            assert "say.j2:1:" in report and "'nope'" in report
            save(prompt, "third {{ x }}")
            third = await record()
            assert third["output"] == "test reply to: third hi"
            assert len({str(r["version"]) for r in (first, second, third)}) == 3
        finally:
            proc.send_signal(signal.SIGINT)
            code = await asyncio.wait_for(proc.wait(), EVENT_TIMEOUT_S)
        rest = (await proc.stderr.read()).decode()
        return code, rest

    code, rest = asyncio.run(scenario())
    assert code == 0, rest
    assert "Traceback" not in rest
    assert len(records.read_text().splitlines()) == 3
