"""A run's record knows the environment's secrets as they are when the run starts, and its
id cannot be guessed."""

from __future__ import annotations

import asyncio
import json
import os
import re

import pytest

from openprogram_yaml.compile.project import compile_path
from openprogram_yaml.redaction import env_secrets
from openprogram_yaml.run.execute import execute_run
from openprogram_yaml.run.record import RunRecord, run_secrets
from openprogram_yaml.run.shared_runtimes import SharedRuntimes
from openprogram_yaml.run.version import VersionStamp

AGENT = """
version: 1
name: desk
model: test
methods:
  greet: {inputs: {who: {type: string}}, prompt: "Say hello to {{ who }}."}
"""


def test_a_secret_set_changed_or_removed_between_runs_is_known_to_the_next_run(  # type: ignore[no-untyped-def]
    write, monkeypatch: pytest.MonkeyPatch
) -> None:
    program = compile_path(write("desk.yaml", AGENT))
    agent = program.agent()
    stamp = VersionStamp(program.version)

    def run(who: str) -> str:
        record = asyncio.run(execute_run(program, stamp, None, None, {"who": who}))
        assert record.status == "ok", record.error
        # The reused walk and a fresh one agree, whatever changed in between.
        assert run_secrets(agent) == run_secrets(agent, dict(os.environ))
        return record.to_json()

    assert "sk-first-value-1234" in run("sk-first-value-1234")
    monkeypatch.setenv("DESK_API_KEY", "sk-first-value-1234")
    assert "sk-first-value-1234" not in run("sk-first-value-1234")
    monkeypatch.setenv("DESK_API_KEY", "sk-second-value-5678")
    line = run("sk-first-value-1234 sk-second-value-5678")
    assert "sk-second-value-5678" not in line and "sk-first-value-1234" in line
    monkeypatch.delenv("DESK_API_KEY")
    assert "sk-second-value-5678" in run("sk-second-value-5678")
    assert "sk-second-value-5678" not in env_secrets()


def test_run_ids_are_random_hex(write) -> None:  # type: ignore[no-untyped-def]
    program = compile_path(write("desk.yaml", AGENT))
    stamp = VersionStamp(program.version)

    async def runs() -> list[str]:
        return [(await execute_run(program, stamp, None, None, {"who": "x"})).id for _ in range(50)]

    ids = asyncio.run(runs())
    assert len(set(ids)) == 50
    assert all(re.fullmatch(r"[0-9a-f]{16}", i) for i in ids)


def test_runs_sharing_a_versions_runtimes_know_the_secrets_a_lone_run_knows(  # type: ignore[no-untyped-def]
    write, monkeypatch: pytest.MonkeyPatch
) -> None:
    program = compile_path(write("desk.yaml", AGENT))
    agent = program.agent()
    stamp = VersionStamp(program.version)
    runtimes = SharedRuntimes()
    shared = runtimes.acquire(program)

    async def both(who: str) -> tuple[RunRecord, RunRecord]:
        alone = await execute_run(program, stamp, None, None, {"who": who})
        kept = await execute_run(program, stamp, None, None, {"who": who}, shared=shared)
        return alone, kept

    def check(who: str) -> frozenset[str]:
        alone, kept = asyncio.run(both(who))
        assert kept.secrets == alone.secrets == run_secrets(agent, dict(os.environ))
        kept_shown, alone_shown = json.loads(kept.to_json()), json.loads(alone.to_json())
        for key in ("inputs", "output"):  # redacted alike
            assert kept_shown[key] == alone_shown[key]
        return kept.secrets

    assert "sk-shared-value-1234" not in check("sk-shared-value-1234")
    monkeypatch.setenv("DESK_TOKEN", "sk-shared-value-1234")
    assert "sk-shared-value-1234" in check("sk-shared-value-1234")
    monkeypatch.setenv("DESK_TOKEN", "sk-other-value-5678")
    found = check("sk-shared-value-1234 sk-other-value-5678")
    assert "sk-other-value-5678" in found and "sk-shared-value-1234" not in found
    monkeypatch.delenv("DESK_TOKEN")
    assert "sk-other-value-5678" not in check("sk-other-value-5678")
    asyncio.run(runtimes.release(shared))
    asyncio.run(runtimes.aclose())
