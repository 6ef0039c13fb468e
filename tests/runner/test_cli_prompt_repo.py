"""Prompt repositories in CI: `test`, `render`, `lock`, and versions in traces."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from support import EXAMPLES

from openprogram_yaml.runner.cli import main

REPO = EXAMPLES / "support_repo"


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    target = tmp_path / "repo"
    shutil.copytree(REPO, target)
    return target


def test_example_repository_tests_pass_offline(capsys) -> None:
    code = main(["test", str(REPO)])
    out = capsys.readouterr().out
    assert code == 0, out
    assert out.splitlines()[-1] == "4 passed, 0 failed"


def test_a_failing_expectation_shows_what_came_and_the_prompt(repo: Path, capsys) -> None:
    tests = repo / "tests" / "replies.tests.yaml"
    tests.write_text(tests.read_text().replace("[Acme Mail, export my contacts]", "[refund]"))
    code = main(["test", str(repo)])
    out = capsys.readouterr().out
    assert code == 1
    assert "FAIL replies: replies are signed in the house style" in out
    assert "tests/replies.tests.yaml:5:11" in out
    assert "expected output to contain 'refund'" in out
    assert "rendered prompt:" in out and "How do I export my contacts?" in out
    assert out.splitlines()[-1] == "3 passed, 1 failed"


def test_k_selects_tests_by_name(capsys) -> None:
    assert main(["test", str(REPO), "-k", "house style"]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "1 passed, 0 failed"


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        ("choice: investigate", "choice: investgate",
         "has no choice 'investgate'; did you mean 'investigate'?"),
        ("tools_called: [search_docs]", "tools_called: [serch_docs]",
         "has no tool 'serch_docs'; did you mean 'search_docs'?"),
        ("choice: investigate", "regex: '(['", "invalid regular expression"),
        ("choice: investigate", "json_path: {'category': x}", "is not a JSON path"),
        ("method: assess\n    inputs: {ticket:", "method: assess\n    inputs: {tickt:",
         "has no input 'tickt'; did you mean 'ticket'?"),
    ],
)  # fmt: skip
def test_bad_tests_are_config_errors(repo: Path, capsys, old: str, new: str, message: str) -> None:
    desk = repo / "agents" / "desk.yaml"
    text = desk.read_text()
    assert old in text
    desk.write_text(text.replace(old, new, 1))
    assert main(["test", str(repo)]) == 2
    err = capsys.readouterr().err
    assert message in err
    assert "agents/desk.yaml:" in err


def test_render_prints_what_would_be_sent_without_a_model(capsys) -> None:
    code = main(["render", str(REPO), "desk.investigate", "-i", "ticket=Charged twice", "--json"])
    data = json.loads(capsys.readouterr().out)
    assert code == 0
    assert data["model"] == "test"
    assert [m["role"] for m in data["messages"]] == ["user"]
    assert "Charged twice" in data["messages"][0]["content"]
    assert "You are a support engineer for Acme Mail." in data["system"]
    assert sorted(t["name"] for t in data["tools"]) == ["count_words", "search_docs"]
    assert data["response_format"]["name"] == "decision"  # the choices, constrained


def test_render_for_a_real_model_calls_nothing(capsys) -> None:
    # No key, no server: rendering must not need either.
    code = main(
        ["render", str(EXAMPLES / "triage.yaml"), "classify", "-i", "ticket=hi",
         "--model", "openai:gpt-4o-mini"]
    )  # fmt: skip
    out = capsys.readouterr().out
    assert code == 0
    assert out.startswith("model: openai:gpt-4o-mini")
    assert '"strict": true' in out


def test_lock_is_written_and_checked(repo: Path, capsys) -> None:
    assert main(["lock", "--check", str(repo)]) == 0  # the example ships its lock
    prompt = repo / "prompts" / "_ticket.j2"
    prompt.write_text(prompt.read_text().replace("Ticket:", "Customer ticket:"))
    capsys.readouterr()
    assert main(["lock", "--check", str(repo)]) == 1
    err = capsys.readouterr().err
    # The shared partial is included by four prompts: each is named.
    for name in ("desk.answer", "desk.assess", "desk.investigate", "replies.draft"):
        assert f"{name}: prompt changed" in err
    assert "desk.classify: prompt changed" in err
    assert main(["lock", str(repo)]) == 0
    assert main(["lock", "--check", str(repo)]) == 0


def test_trace_names_the_version_of_each_prompt(tmp_path: Path, capsys) -> None:
    trace = tmp_path / "trace.jsonl"
    code = main(
        [str(REPO), "desk.assess", "-i", "ticket=Charged twice", "--trace", str(trace), "--json"]
    )
    record = json.loads(capsys.readouterr().out)
    assert code == 0
    nodes = [json.loads(line) for line in trace.read_text().splitlines()]
    [run] = [n for n in nodes if n["kind"] == "run"]
    assert run["data"]["version"]["hash"] == record["version"]["hash"]
    methods = {n["name"]: n["data"]["prompt_version"] for n in nodes if n["kind"] == "method"}
    assert set(methods) == {"desk.assess", "desk.investigate", "desk.answer"}
    assert [s["prompt_version"] for s in record["path"]] == [
        methods["desk.assess"],
        methods["desk.investigate"],
        methods["desk.answer"],
    ]


@pytest.mark.parametrize(
    ("data", "said"),
    [
        (b"[" * 100_000 + b"]" * 100_000, ":1:1: error: not valid JSON: nested deeper than"),
        (b'{"version": 1, "prompts": 3}', ': error: not a lock: it holds {"version": 1,'),
        (b'{"version": 1, "prompts": {"a.b": 3}}', ": error: not a lock: it holds"),
        (b'{"version": 1,\n "prompts": {,}}', ":2:14: error: not valid JSON: Expecting"),
        (b'{"version": 1, "prompts": {"caf\xe9": "x"}}', ":1:32: error: byte 0xe9 is not valid"),
    ],
)
def test_a_lock_that_does_not_read_is_bad_input_named_not_a_difference(
    repo: Path, capsys, data: bytes, said: str
) -> None:
    # It was exit 1, as prompts that differ from the lock: now 2, with where it breaks.
    lock = repo / "openprogram.lock"
    lock.write_bytes(data)
    assert main(["lock", "--check", str(repo)]) == 2
    err = capsys.readouterr().err
    assert f"{lock}{said}" in err
    assert "write it again with `openprogram-run lock`" in err
    assert "Traceback" not in err


def test_the_names_a_lock_holds_are_shown_as_text(repo: Path, capsys) -> None:
    # A lock is the repository's: a name or version holding an escape sequence was printed
    # to the terminal as it was, and drove it.
    lock = repo / "openprogram.lock"
    data = json.loads(lock.read_text())
    name = next(iter(data["prompts"]))
    data["prompts"][name] = "\x1b]52;c;aGk=\x07"
    data["prompts"]["gone\x1b[2J.method"] = "abc"
    lock.write_text(json.dumps(data))
    assert main(["lock", "--check", str(repo)]) == 1
    err = capsys.readouterr().err
    assert "\x1b" not in err
    assert r"gone\x1b[2J.method: in the lock, but no longer in the project" in err
    assert rf"{name}: prompt changed (\x1b]52;c;aGk=\x07 -> " in err
