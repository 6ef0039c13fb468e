"""What ``--watch`` tells the person: how many files it watches and how to stop, changes
without the editor's own files, and diagnostics named relative to the working folder."""

from __future__ import annotations

import asyncio
import json
import os
import pty
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from reload_helpers import EVENT_TIMEOUT_S, save, write_agent
from support import JANITOR_AGENT, JANITOR_TOOLS, read_until

from openprogram_yaml.runner.watch import is_editor_temp_file


@pytest.mark.parametrize(
    ("name", "temp"),
    [
        (".say.j2.swp", True),
        ("say.j2~", True),
        (".#say.j2", True),
        ("#say.j2#", True),
        ("4913", True),
        ("say.j2", False),
        ("agent.yaml", False),
    ],
)
def test_editor_temp_files_are_told_apart(name: str, temp: bool) -> None:
    assert is_editor_temp_file(Path("prompts") / name) is temp


def test_watch_says_what_it_watches_and_names_files_as_the_working_folder_does(
    tmp_path: Path,
) -> None:
    agent = write_agent(tmp_path, "first {{ x }}")
    prompt = tmp_path / "prompts" / "say.j2"

    async def scenario() -> str:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "openprogram_yaml",
            str(agent),  # absolute: the diagnostics still name files relative to cwd
            "say",
            "-i",
            "x=hi",
            "--watch",
            cwd=tmp_path,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        assert proc.stdout is not None and proc.stderr is not None
        seen = ""

        async def stderr_until(text: str) -> str:
            nonlocal seen
            start = len(seen)
            while text not in seen[start:]:
                line = await asyncio.wait_for(proc.stderr.readline(), EVENT_TIMEOUT_S)  # type: ignore[union-attr]
                assert line, seen
                seen += line.decode()
            return seen[start:]

        async def output() -> str:
            line = await asyncio.wait_for(proc.stdout.readline(), EVENT_TIMEOUT_S)  # type: ignore[union-attr]
            return line.decode().strip()

        try:
            assert "watching 2 files; Ctrl-C stops" in await stderr_until("Ctrl-C stops")
            assert await output() == "test reply to: first hi"
            save(prompt, "broken {{ nope }}")
            report = await stderr_until("still serving version")
            assert "\nprompts/say.j2:1:" in report, report
            (tmp_path / "prompts" / "4913").write_text("")  # vim's write test, while broken
            (tmp_path / "prompts" / "4913").unlink()
            save(prompt, "fixed {{ x }}")
            assert await output() == "test reply to: fixed hi"
        finally:
            proc.send_signal(signal.SIGINT)
            await asyncio.wait_for(proc.wait(), EVENT_TIMEOUT_S)
        return seen + (await proc.stderr.read()).decode()

    err = asyncio.run(scenario())
    assert "4913" not in err and ".tmp~" not in err, err
    assert str(tmp_path) not in err, err


def test_watch_shows_the_models_escape_sequences_on_a_terminal_as_text(tmp_path: Path) -> None:
    # The offline model echoes its prompt, so an input reaches the answer as a model's reply
    # would: an OSC 52 sequence there would set the clipboard of the person's terminal.
    agent = write_agent(tmp_path, "first {{ x }}")
    controller, terminal = pty.openpty()
    osc52 = "x=\x1b]52;c;aGk=\x07"
    proc = subprocess.Popen(
        [sys.executable, "-m", "openprogram_yaml", str(agent), "say", "-i", osc52, "--watch"],
        cwd=tmp_path,
        stdin=subprocess.DEVNULL,
        stdout=terminal,
        stderr=subprocess.DEVNULL,
    )
    os.close(terminal)
    seen = bytearray()
    try:
        shown = read_until(controller, b"\n", seen, EVENT_TIMEOUT_S)
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(EVENT_TIMEOUT_S)
        os.close(controller)
    assert shown.rstrip() == rb"test reply to: first \x1b]52;c;aGk=\x07", shown


def test_watch_with_yes_approves_the_confirmations_of_its_runs(tmp_path: Path) -> None:
    # --yes was accepted with --watch and not passed on: each run refused the tool as if
    # nobody had said yes.
    (tmp_path / "janitor.yaml").write_text(JANITOR_AGENT)
    (tmp_path / "janitor_tools.py").write_text(JANITOR_TOOLS)
    argv = ["janitor.yaml", "tidy", "--watch", "--yes", "--json"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "openprogram_yaml", *argv],
        cwd=tmp_path,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    assert proc.stdout is not None
    try:
        line = proc.stdout.readline()
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(EVENT_TIMEOUT_S)
        proc.stdout.close()
    record = json.loads(line)
    assert record["status"] == "ok", record
    assert record.get("tools_not_run", []) == [], record
    assert [(c["name"], c["by"]) for c in record["confirmations"]] == [("remove", "--yes")]
