"""Tools declared `confirm`, from the command line: asked on the terminal (driven here
through a pseudo-terminal), approved for the whole run with --yes, refused with nobody to
ask; every confirmation is in the run's record."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from support import read_until

from openprogram_yaml.runner.cli import main

TOOLS = '''
def archive(path: str) -> str:
    """Archive a file."""
    with open("archived.log", "a") as f:
        f.write(path + "\\n")
    return f"archived {path}"


def remove(path: str) -> str:
    """Remove a file."""
    with open("removed.log", "a") as f:
        f.write(path + "\\n")
    return f"removed {path}"
'''

AGENT = """\
version: 1
name: janitor
model: test
tools:
  archive:
    python: janitor_tools:archive
    confirm: "Archive {{ path }}?"
  remove:
    python: janitor_tools:remove
    confirm: true
methods:
  tidy:
    prompt: Tidy up.
"""


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "janitor_tools.py").write_text(TOOLS)
    (tmp_path / "agent.yaml").write_text(AGENT)
    monkeypatch.chdir(tmp_path)  # the tools write their logs in the working folder
    return tmp_path


def test_a_terminal_session_approves_one_confirmed_tool_and_declines_another(
    project: Path,
) -> None:
    records = project / "records.jsonl"
    controller, terminal = os.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "openprogram_yaml", "agent.yaml", "tidy", "--records", records],
        stdin=terminal,
        stdout=terminal,
        stderr=subprocess.PIPE,
        cwd=project,
    )
    os.close(terminal)
    seen = bytearray()
    asked = []
    try:
        for _ in range(2):
            prompt = read_until(controller, b"[y/N] ", seen).decode()
            asked.append(prompt.strip().splitlines()[-1])
            os.write(controller, b"y\n" if "Archive" in prompt else b"n\n")
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
        os.close(controller)
    assert proc.returncode == 0, err
    assert sorted(asked) == [
        "Archive test? [y/N]",
        'Run tool \'remove\' with {"path": "test"}? [y/N]',
    ]
    assert (project / "archived.log").read_text() == "test\n"
    assert not (project / "removed.log").exists()
    record = json.loads(records.read_text())
    answers = {c["name"]: (c["answer"], c["by"]) for c in record["confirmations"]}
    assert answers == {"archive": ("approved", "user"), "remove": ("declined", "user")}
    assert "declined by the user" in record["output"]


def test_with_nobody_to_ask_confirmed_tools_are_refused(project: Path, capsys) -> None:
    records = project / "records.jsonl"
    assert main(["agent.yaml", "tidy", "--records", str(records)]) == 0
    assert not (project / "archived.log").exists()
    assert not (project / "removed.log").exists()
    record = json.loads(records.read_text())
    assert record["tools_not_run"] == [
        {"name": "archive", "reason": "unconfirmed"},
        {"name": "remove", "reason": "unconfirmed"},
    ]
    assert "pass --yes" in capsys.readouterr().err


def test_yes_approves_every_confirmation_of_the_run(project: Path, capsys) -> None:
    # Twice: the second run loads the compiled program from the cache, confirm and all.
    for _ in range(2):
        assert main(["agent.yaml", "tidy", "--yes", "--json"]) == 0
        record = json.loads(capsys.readouterr().out)
        assert [(c["name"], c["by"]) for c in record["confirmations"]] == [
            ("archive", "--yes"),
            ("remove", "--yes"),
        ]
    assert (project / "removed.log").read_text() == "test\ntest\n"


def test_confirm_on_a_method_tool_is_a_positioned_error(tmp_path: Path, capsys) -> None:
    path = tmp_path / "agent.yaml"
    path.write_text(
        "version: 1\nname: a\nmodel: test\ntools:\n  t:\n    method: m\n    confirm: true\n"
        "methods:\n  m:\n    prompt: hi\n"
    )
    assert main(["check", str(path)]) == 2
    err = capsys.readouterr().err
    assert f"{path}:6:5:" in err and "'confirm' applies to python, http and command tools" in err


ASKING_AGENT = """\
version: 1
name: janitor
model: test
ask_user: true
tools:
  remove:
    python: janitor_tools:remove
    confirm: "Remove {{ path }}?"
methods:
  tidy:
    prompt: Tidy up.
tests:
  - name: the person approves and answers
    method: tidy
    # In the order asked: the offline model calls remove, then ask_user (with the options
    # ["test"], as it fills every argument).
    answers: [yes, "test"]
    expect: {contains: ["ask_user: test", "remove: removed test"]}
  - name: the person declines
    method: tidy
    answers: [no, "test"]
    expect: {contains: "declined by the user", tools_called: [remove]}
  - name: nobody to ask
    method: tidy
    expect: {contains: ["Nobody is there to answer", "nobody is there to answer"]}
"""


def test_prompt_tests_script_the_persons_answers(project: Path, capsys) -> None:
    (project / "agent.yaml").write_text(ASKING_AGENT)
    code = main(["test", "agent.yaml"])
    out = capsys.readouterr()
    assert code == 0, out.out + out.err
    assert (project / "removed.log").read_text() == "test\n"  # only the approved call ran


def test_a_question_holding_a_secret_is_shown_redacted_on_the_terminal(project: Path) -> None:
    secret = "tok-s3cret-value-123"
    (project / "agent.yaml").write_text(
        AGENT.replace('"Archive {{ path }}?"', '"Archive {{ path }} as ${env:JANITOR_TOKEN}?"')
    )
    controller, terminal = os.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "openprogram_yaml", "agent.yaml", "tidy"],
        stdin=terminal,
        stdout=terminal,
        stderr=subprocess.PIPE,
        cwd=project,
        env={**os.environ, "JANITOR_TOKEN": secret},
    )
    os.close(terminal)
    seen = bytearray()
    shown = b""
    try:
        for _ in range(2):
            shown += read_until(controller, b"[y/N] ", seen)
            os.write(controller, b"n\n")
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
        os.close(controller)
    assert proc.returncode == 0, err
    assert b"Archive test as ***? [y/N]" in shown
    assert secret.encode() not in shown + bytes(seen)
