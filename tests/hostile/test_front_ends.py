"""Hostile input to the front ends around a run: a session store a repository brought (or
another program wrote), recorded embeddings, a test file's expectations and the outputs
they judge, the Markdown of ``diff``, the model names of the OpenAI-compatible endpoint,
and names ending in a line break.

Each test failed before its fix: a store holding a recursive view hung ``sessions list``,
names in a store drove the terminal, a short list of recorded embeddings and a JSON path
index of 5,000 digits were tracebacks, an output of 0 passed for false, a '\\r' in a case
name started a Markdown heading, '.reply' ran a method /v1/models does not list, and an
agent named "bot\\n" loaded, and a key or a recording's name quoted in a problem drove the
terminal.
"""

from __future__ import annotations

import json
import os
import re
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from support import within_time

from openprogram_yaml.compile.project import compile_path
from openprogram_yaml.errors import UsageError
from openprogram_yaml.json_types import json_equal
from openprogram_yaml.run.sessions import SessionStore, sessions_path
from openprogram_yaml.runner.cli import main
from openprogram_yaml.runner.diff import (
    CaseChange,
    CaseResult,
    MethodChange,
    RenderChange,
    VersionDiff,
    to_markdown,
)
from openprogram_yaml.serve.openai_api import OpenAIError, find_method, model_table

#: A name that, printed raw, would set the terminal's title and clear its screen.
_ESCAPES = "s1\x1b]0;owned\x07\x1b[2J"


# --- the session store --------------------------------------------------------------------


def _planted_store(root: Path, *statements: str) -> Path:
    """A store the tool wrote in ``root`` (one session 's1'), then ``statements`` run on it
    as a repository could have."""
    path = sessions_path(root)
    with SessionStore(path) as store:
        store.open("s1", "bot", "talk")
        store.add_turn("s1", "hi", "hello", run_id=None, version=None)
    db = sqlite3.connect(path)
    with db:
        for statement in statements:
            db.execute(statement)
    db.close()
    return path


_ENDLESS = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c)"


@pytest.mark.parametrize(
    ("statements", "named"),
    [
        (
            # The store's own table swapped for a view that never ends.
            [
                "DROP TABLE messages",
                "DROP TABLE sessions",
                f"CREATE VIEW sessions AS {_ENDLESS} SELECT 'a' AS name, 'b' AS agent, "
                "'c' AS method, 'd' AS created_at, 'e' AS updated_at FROM c WHERE x < 0",
            ],
            "a view 'sessions'",
        ),
        (
            [f"CREATE VIEW extra AS {_ENDLESS} SELECT x FROM c"],
            "a view 'extra'",
        ),
        (
            [
                "CREATE TRIGGER t AFTER INSERT ON messages BEGIN "
                f"INSERT INTO messages (session, role, content, created_at) {_ENDLESS} "
                "SELECT 's1', 'user', 'x', 'y' FROM c; END"
            ],
            "a trigger 't'",
        ),
        (
            ["CREATE TABLE other (x TEXT)"],
            "a table 'other'",
        ),
    ],
    ids=["recursive-view", "extra-view", "trigger", "extra-table"],
)
def test_a_store_holding_what_the_tool_never_writes_is_refused_not_run(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    statements: list[str],
    named: str,
) -> None:
    path = _planted_store(tmp_path, *statements)
    monkeypatch.chdir(tmp_path)
    for argv in (["sessions", "list"], ["sessions", "show", "s1"], ["sessions", "delete", "s1"]):
        code = within_time(lambda argv=argv: main(argv))  # type: ignore[misc]
        err = capsys.readouterr().err
        assert code == 2, err
        assert f"the session store {path} holds {named} that openprogram-run did not write" in err
    with SessionStore(path) as store, pytest.raises(UsageError, match=named):
        store.begin_turn("s1", "bot", "talk")


def test_a_store_the_tool_wrote_is_read_as_before(tmp_path: Path) -> None:
    path = _planted_store(tmp_path)
    with SessionStore(path) as store:
        assert [m.content for m in store.messages("s1")] == ["hi", "hello"]
        store.add_turn("s1", "again", "sure", run_id="r", version="v")
    with SessionStore(path) as store:
        assert [s.messages for s in store.sessions()] == [4]


def _on_a_terminal(argv: list[str], cwd: Path) -> tuple[int, bytes, bytes]:
    """``openprogram-run ARGV`` with a pty as stdout: its exit status, what the terminal
    showed and what went to stderr."""
    controller, terminal = os.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "openprogram_yaml", *argv],
        stdin=subprocess.DEVNULL,
        stdout=terminal,
        stderr=subprocess.PIPE,
        cwd=cwd,
    )
    os.close(terminal)
    shown = bytearray()
    try:
        _, err = proc.communicate(timeout=60)
        while True:
            try:
                piece = os.read(controller, 4096)
            except OSError:
                break
            if not piece:
                break
            shown += piece
    finally:
        proc.kill()
        os.close(controller)
    return proc.returncode, bytes(shown), err


@pytest.mark.skipif(not hasattr(os, "openpty"), reason="no ptys")
def test_names_in_a_store_never_drive_the_terminal(tmp_path: Path) -> None:
    _planted_store(
        tmp_path,
        f"UPDATE sessions SET name = '{_ESCAPES}', agent = 'bot\x1b[31m'",
        f"UPDATE messages SET session = '{_ESCAPES}'",
    )
    for argv in (["sessions", "list"], ["sessions", "show", _ESCAPES]):
        code, shown, err = _on_a_terminal(argv, tmp_path)
        assert code == 0, err
        assert b"\x1b" not in shown and b"\x07" not in shown, shown
        assert b"s1\\x1b]0;owned\\x07\\x1b[2J" in shown
    # Its errors list the names on stderr: shown too, never obeyed.
    code, _, err = _on_a_terminal(["sessions", "show", "nope"], tmp_path)
    assert code == 2
    assert b"\x1b" not in err and b"sessions: s1\\x1b]0;owned" in err


def test_an_exported_session_escapes_what_would_drive_a_terminal(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # A model's answer: a C1 CSI (as ESC [ is) and a bidi override, which JSON keeps raw.
    answer = "fine \u009b2J and \u202etxt.exe"
    with SessionStore(sessions_path(tmp_path)) as store:
        store.open("s1", "bot", "talk")
        store.add_turn("s1", "hi", answer, run_id=None, version=None)
    monkeypatch.chdir(tmp_path)
    assert main(["sessions", "export", "s1"]) == 0
    out = capsys.readouterr().out
    assert "\u009b" not in out and "\u202e" not in out
    assert "\\u009b2J and \\u202etxt.exe" in out
    assert json.loads(out.splitlines()[-1])["content"] == answer


# --- graded expectations ------------------------------------------------------------------

_EVALS_PROJECT = {
    "openprogram.yaml": "version: 1\nname: evals\nagents: [agents/*.yaml]\ntests: [tests/*.yaml]\n",
    "agents/desk.yaml": """\
version: 1
name: desk
model: test
methods:
  reply:
    inputs: {ticket: {type: string}}
    prompt: "Answer the ticket: {{ ticket }}"
""",
    "tests/desk.tests.yaml": """\
version: 1
agent: desk
tests:
  - name: close
    method: reply
    inputs: {ticket: "Where is my refund?"}
    expect:
      similar: {to: "refund ticket answer", at_least: 0.0}
""",
}


def _write(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text, encoding="utf-8")
    return root


@pytest.mark.parametrize(
    ("vectors", "said"),
    [
        ("[[1.0]]", "answered 1 vector(s) for 2 texts"),
        ("[]", "answered 0 vector(s) for 2 texts"),
        ("[[1.0, 2.0], [3.0]]", "answered vectors of 2 and 1 numbers"),
        ("[[], []]", "answered vectors of 0 and 0 numbers"),
        ('[["nan"], [1.0]]', "not finite, or too large to compare"),
        ("[[1e308, 1e308], [1e308, 1e308]]", "not finite, or too large to compare"),
    ],
)
def test_recorded_embeddings_that_are_not_two_vectors_fail_the_test_with_a_reason(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], vectors: str, said: str
) -> None:
    root = _write(tmp_path, _EVALS_PROJECT)
    recordings = root / "rec"
    assert main(["test", str(root), "--record", str(recordings)]) == 0
    capsys.readouterr()
    (recording,) = (recordings / "embeddings").glob("*.yaml")
    text = recording.read_text(encoding="utf-8")
    start = text.index("  content: '")
    end = text.index("\n", start)
    recording.write_text(f"{text[:start]}  content: '{vectors}'{text[end:]}", encoding="utf-8")
    code = main(["test", str(root), "--replay", str(recordings)])
    report = "".join(capsys.readouterr())
    assert code == 1, report
    assert "Traceback" not in report
    assert "could not grade (similar, test): the embeddings" in report and said in report


def test_a_json_path_index_of_thousands_of_digits_is_a_positioned_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    index = "9" * 5000  # past the 4,300 digits int() reads
    tests = _EVALS_PROJECT["tests/desk.tests.yaml"].replace(
        '      similar: {to: "refund ticket answer", at_least: 0.0}\n',
        f'      json_path:\n        ? "$[{index}]"\n        : 1\n',
    )
    root = _write(tmp_path, {**_EVALS_PROJECT, "tests/desk.tests.yaml": tests})
    code = main(["test", str(root)])
    err = capsys.readouterr().err
    assert code == 2, err
    assert "Traceback" not in err
    assert f"desk.tests.yaml:10:11: error: '$[{index}]' is not a JSON path" in err


# --- the OpenAI-compatible endpoint's model names ----------------------------------------


def _agent(name: str, *methods: str) -> str:
    body = "".join(f"  {m}:\n    prompt: hi\n" for m in methods)
    return f"version: 1\nname: {name}\nmodel: test\nmethods:\n{body}"


@pytest.mark.parametrize("agents", [["bot"], ["bot", "pal"]])
def test_a_model_name_runs_a_method_exactly_when_v1_models_lists_it(
    tmp_path: Path, agents: list[str]
) -> None:
    files = {"openprogram.yaml": "version: 1\nname: p\nagents: [agents/*.yaml]\n"}
    for agent in agents:
        files[f"agents/{agent}.yaml"] = _agent(agent, "reply", "sum")
    program = compile_path(_write(tmp_path, files))
    table = model_table(program)
    names = {*table, "", ".", "..", "reply.", ".reply", "bot.", ".bot.reply", "bot..reply"}
    names |= {f"{n}." for n in table} | {f".{n}" for n in table} | {f"x.{n}" for n in table}
    for name in sorted(names):
        if name in table:
            assert find_method(program, name) is table[name], name
        else:
            with pytest.raises(OpenAIError) as refused:
                find_method(program, name)
            assert refused.value.status == 404, name


# --- expectations: JSON values, not Python's equality --------------------------------------


@pytest.mark.parametrize(
    ("a", "b", "same"),
    [
        (True, 1, False),
        (False, 0, False),
        (0.0, False, False),
        ({"urgent": 0}, {"urgent": False}, False),
        ([1, True], [1, 1], False),
        ([[[True]]], [[[1]]], False),
        (True, True, True),
        (1, 1.0, True),
        ({"a": [1, {"b": None}]}, {"a": [1.0, {"b": None}]}, True),
        ({"a": 1}, {"a": 1, "b": 2}, False),
        ([1], [1, 1], False),
        ("1", 1, False),
        (None, False, False),
    ],
)
def test_json_equal_tells_booleans_from_numbers_and_else_agrees_with_equality(
    a: object, b: object, same: bool
) -> None:
    assert json_equal(a, b) is same
    assert json_equal(b, a) is same


def test_json_equal_walks_any_depth() -> None:
    deep_a: object = 1
    deep_b: object = True
    for _ in range(100_000):
        deep_a, deep_b = [deep_a], [deep_b]
    assert json_equal(deep_a, deep_a) and not json_equal(deep_a, deep_b)


_FLAG_AGENT = """\
version: 1
name: desk
model: test
methods:
  flag:
    inputs: {ticket: {type: string}}
    prompt: "Flag {{ ticket }}"
    response_schema:
      type: object
      properties: {urgent: {type: integer}}
      required: [urgent]
"""


def _failing_tests(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    agent: str,
    tests: str,
    more: dict[str, str] | None = None,
) -> str:
    """The report of ``openprogram-run test`` on a project of ``agent`` and ``tests``
    (and ``more`` files), which fails."""
    files = {**_EVALS_PROJECT, "agents/desk.yaml": agent, "tests/desk.tests.yaml": tests}
    root = _write(tmp_path, {**files, **(more or {})})
    assert main(["test", str(root)]) == 1
    return capsys.readouterr().out


def test_an_output_of_0_does_not_pass_for_false(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The offline model answers {"urgent": 0}.
    tests = """\
version: 1
agent: desk
tests:
  - name: equals
    method: flag
    inputs: {ticket: x}
    expect: {equals: {urgent: false}}
  - name: path
    method: flag
    inputs: {ticket: x}
    expect: {json_path: {"$.urgent": false}}
  - name: zero
    method: flag
    inputs: {ticket: x}
    expect: {equals: {urgent: 0.0}, json_path: {"$.urgent": 0}}
"""
    report = _failing_tests(tmp_path, capsys, _FLAG_AGENT, tests)
    assert "FAIL desk: equals" in report and "expected output to equal" in report
    assert "FAIL desk: path" in report and "expected $.urgent to be false, got 0" in report
    assert "FAIL desk: zero" not in report and "1 passed, 2 failed" in report


def test_a_tool_called_with_0_does_not_pass_for_false(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    agent = """\
version: 1
name: desk
model: test
tools:
  page:
    python: front_end_pager:page
methods:
  reply:
    inputs: {ticket: {type: string}}
    prompt: "Answer {{ ticket }}"
"""
    tools = 'def page(level: int) -> str:\n    """Page someone."""\n    return "paged"\n'
    tests = """\
version: 1
agent: desk
tests:
  - name: called with false
    method: reply
    inputs: {ticket: x}
    expect: {tools_called: [{name: page, arguments: {level: false}}]}
  - name: called with 0
    method: reply
    inputs: {ticket: x}
    expect: {tools_called: [{name: page, arguments: {level: 0}}]}
"""
    report = _failing_tests(tmp_path, capsys, agent, tests, {"front_end_pager.py": tools})
    assert "FAIL desk: called with false" in report
    assert "expected tool 'page' to be called with" in report
    assert "FAIL desk: called with 0" not in report


# --- diff --format markdown: a pull request's text stays in its cell ----------------------


def test_line_breaks_in_case_names_and_problems_start_no_markdown_line() -> None:
    spoof = "### All prompts reviewed, merge away"
    diff = VersionDiff(
        project="p",
        before="HEAD",
        after="work tree",
        problems={},
        methods=[
            MethodChange("desk.reply", "a" * 12, "b" * 12, [RenderChange(f"x\n\n{spoof}", ["-a"])])
        ],
        unchanged_methods=0,
        lock_problems=[],
        cases=[
            CaseChange(
                f"desk: t\r{spoof}",
                CaseResult(passed=True, score=None),
                CaseResult(passed=False, score=None, problem=f"got x\r\n{spoof}"),
            )
        ],
    )
    markdown = to_markdown(diff)
    lines = re.split(r"\r\n?|\n", markdown)
    headings = [line for line in lines if line.lstrip().startswith("#")]
    assert headings == ["### Prompt changes in p: HEAD → work tree", "#### tests: 1 worse"], (
        markdown
    )
    (summary,) = [line for line in lines if line.startswith("<summary>")]
    assert summary.endswith("</summary>") and spoof in summary


# --- names: a trailing line break is no part of a name ------------------------------------


@pytest.mark.parametrize(
    ("agent", "said"),
    [
        (
            'version: 1\nname: "bot\\n"\nmodel: test\nmethods:\n  go:\n    prompt: hi\n',
            "a.yaml:2:7: error: 'name': agent name 'bot\\n' must start with a letter",
        ),
        (
            'version: 1\nname: bot\nmodel: test\nmethods:\n  "go\\n":\n    prompt: hi\n',
            "a.yaml:6:5: error: the name 'go\\n' must start with a letter",
        ),
        (
            "version: 1\nname: bot\nmodel: test\nmethods:\n  go:\n"
            '    inputs: {"m\\n": {type: string}}\n    prompt: hi\n',
            "input name 'm\\n' must be an identifier",
        ),
        (
            'version: 1\nname: bot\nmodel: test\ninstructions: "${env:HOME\\n:-none}"\n'
            "methods:\n  go:\n    prompt: hi\n",
            "does not name a valid environment variable",
        ),
    ],
    ids=["agent", "method", "input", "env"],
)
def test_a_name_ending_in_a_line_break_is_refused_at_its_position(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], agent: str, said: str
) -> None:
    # re.match with ^…$ let "bot\n" through ($ matches before a last "\n"): an agent
    # "bot\n" was served as the model "bot\n.go", kept in sessions and recordings.
    path = tmp_path / "a.yaml"
    path.write_text(agent, encoding="utf-8")
    assert main(["check", str(path)]) == 2
    err = capsys.readouterr().err
    assert said in err, err


# --- problems that quote the repository ---------------------------------------------------


@pytest.mark.parametrize("command", [["check"], [], ["serve"], ["mcp"]])
def test_a_problem_quoting_a_file_is_shown_never_obeyed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: list[str]
) -> None:
    # A key of an agent file, quoted in its problem, was printed as it is: its escape
    # sequence set the terminal's title and cleared its screen.
    key = _ESCAPES.replace("\x1b", "\\e").replace("\x07", "\\a")  # YAML's escapes
    path = tmp_path / "a.yaml"
    path.write_text(f'version: 1\nname: bot\nmodel: test\n"{key}": 1\nmethods: {{}}\n')
    assert within_time(lambda: main([*command, str(path)])) == 2
    err = capsys.readouterr().err
    assert "unknown key 's1\\x1b]0;owned\\x07\\x1b[2J'" in err, err
    assert "\x1b" not in err and "\x07" not in err


def test_a_broken_recordings_name_is_shown_never_obeyed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The recordings --replay reads before a run are named in its problems.
    path = tmp_path / "a.yaml"
    path.write_text("version: 1\nname: bot\nmodel: test\nmethods:\n  go:\n    prompt: hi\n")
    folder = tmp_path / "rec" / "bot.go"
    folder.mkdir(parents=True)
    (folder / f"{_ESCAPES}.yaml").write_text("request: {}\nresponse: {content: 5}\n")
    assert main([str(path), "--replay", str(tmp_path / "rec")]) == 2
    err = capsys.readouterr().err
    assert "s1\\x1b]0;owned\\x07\\x1b[2J.yaml:2:21: error" in err, err
    assert "\x1b" not in err and "\x07" not in err
