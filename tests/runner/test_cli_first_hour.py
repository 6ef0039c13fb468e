"""What a new user meets in the first hour: --version, check on several paths and on any
folder, help that lists only what a command reads, counts that read well, and ``test``'s
-v, its no-tests status and hints, and error expectations on invalid inputs."""

from __future__ import annotations

from pathlib import Path

import pytest

from openprogram_yaml import __version__
from openprogram_yaml.runner.cli import NO_TESTS, main

ONE_METHOD = """\
version: 1
name: {name}
model: test
methods:
  m:
    prompt: hi
"""

TWO_METHODS = (
    ONE_METHOD
    + """\
  n:
    prompt: yo
"""
)

WITH_TESTS = """\
version: 1
name: counter
model: test
methods:
  count:
    inputs: {n: {type: integer}}
    prompt: "Count to {{ n }}."
tests:
  - name: counts to three
    method: count
    inputs: {n: 3}
    expect: {contains: ""}
  - name: refuses a word
    method: count
    inputs: {n: three}
    expect: {error: "not of type 'integer'"}
"""


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--version"]) == 0
    assert capsys.readouterr().out == f"openprogram-run {__version__}\n"


def test_check_takes_several_paths_and_counts_read_well(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "a.yaml").write_text(ONE_METHOD.format(name="a"))
    (tmp_path / "b.yaml").write_text(TWO_METHODS.format(name="b"))
    assert main(["check", str(tmp_path / "a.yaml")]) == 0
    assert capsys.readouterr().out == "ok: 1 agent, 1 method checked\n"
    assert main(["check", str(tmp_path / "a.yaml"), str(tmp_path / "b.yaml")]) == 0
    assert capsys.readouterr().out == "ok: 2 agents, 3 methods checked\n"


def test_check_on_a_folder_without_a_project_checks_every_agent_file_under_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "a.yaml").write_text(ONE_METHOD.format(name="a"))
    (tmp_path / "nested").mkdir()
    (tmp_path / "nested" / "b.yml").write_text(TWO_METHODS.format(name="b"))
    (tmp_path / "nested" / "broken.yaml").write_text("version: 1\nname: c\nmethods: {m: {}}\n")
    (tmp_path / "ci.yaml").write_text("name: ci\non: push\n")  # not an agent file: skipped
    (tmp_path / ".venv").mkdir()
    (tmp_path / ".venv" / "x.yaml").write_text("methods: [\n")  # hidden folders: skipped
    assert main(["check", "."]) == 2
    err = capsys.readouterr().err
    assert err.startswith("nested/broken.yaml:") and err.endswith("\n1 error found.\n")
    (tmp_path / "nested" / "broken.yaml").unlink()
    assert main(["check", "."]) == 0
    assert capsys.readouterr().out == "ok: 2 agents, 3 methods checked\n"


def test_check_on_a_folder_with_no_agent_file_says_what_one_is(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["check", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "no agent files here: an agent file is a YAML file with 'methods:'" in err


def test_check_help_explains_path(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", "--help"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "PATH an agent file, a project folder (with openprogram.yaml" in out
    assert "every agent file under it" in out


def test_render_help_lists_only_what_render_reads(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["render", "--help"]) == 0
    out = capsys.readouterr().out
    for gone in ("--watch", "--record", "--trace", "--replay", "--live-tools", "--no-stream"):
        assert gone not in out
    for kept in ("--input", "--input-json", "--agent", "--model", "--json"):
        assert kept in out
    assert main(["render", "agent.yaml", "--watch"]) == 2
    assert "unrecognized arguments: --watch" in capsys.readouterr().err


def test_test_verbose_lists_passes_and_an_error_expectation_may_cover_invalid_inputs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "agent.yaml"
    path.write_text(WITH_TESTS)
    assert main(["test", str(path)]) == 0
    assert "PASS" not in capsys.readouterr().out
    assert main(["test", str(path), "-v"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[:2] == ["PASS counter: counts to three", "PASS counter: refuses a word"]
    assert out[-1] == "2 passed, 0 failed"


def test_no_tests_is_one_exit_status_with_a_hint_that_fits(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bare = tmp_path / "bare.yaml"
    bare.write_text(ONE_METHOD.format(name="bare"))
    assert main(["test", str(bare)]) == NO_TESTS
    err = capsys.readouterr().err
    assert err.startswith(f"no tests in {bare}: add 'tests:' to an agent file")
    path = tmp_path / "agent.yaml"
    path.write_text(WITH_TESTS)
    assert main(["test", str(path), "-k", "zzz"]) == NO_TESTS
    err = capsys.readouterr().err
    assert err.startswith("no test name contains 'zzz' (2 tests in ")
    assert "counter: counts to three, counter: refuses a word" in err


def test_an_api_key_env_that_is_named_but_unset_is_an_error_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from loopback import LoopbackServer

    monkeypatch.delenv("LOCAL_LLM_KEY", raising=False)
    with LoopbackServer() as server:
        path = tmp_path / "agent.yaml"
        path.write_text(
            "version: 1\nname: local\nmodel: local:llama3\nruntimes:\n"
            f'  - {{match: "local:*", runtime: openai, options: {{base_url: "{server.url}/v1", '
            "api_key_env: LOCAL_LLM_KEY}}\n"
            "methods:\n  m:\n    prompt: hi\n"
        )
        assert main([str(path), "m"]) == 1
        assert server.requests == []  # refused before any request, and not retried
    err = capsys.readouterr().err
    assert "no API key: set LOCAL_LLM_KEY" in err and "after 1 attempt" in err


def test_the_test_summary_counts_one_test_as_one(tmp_path: Path) -> None:
    import asyncio
    import io

    from openprogram_yaml.compile.project import compile_path
    from openprogram_yaml.runner.testing import run_tests

    path = tmp_path / "agent.yaml"
    path.write_text(WITH_TESTS)
    program = compile_path(path)
    progress, out = io.StringIO(), io.StringIO()
    asyncio.run(run_tests(program, program.tests[:1], model="test", stream=out, progress=progress))
    assert "(1 test in " in progress.getvalue()


def test_check_on_a_folder_looks_for_methods_without_reading_a_large_file_whole(
    tmp_path: Path,
) -> None:
    # A folder may hold large YAML data beside its agents: it is scanned line by line
    # (it was read whole into memory to look for 'methods:').
    import tracemalloc

    from openprogram_yaml.runner.agent_files import agent_files

    (tmp_path / "a.yaml").write_text(ONE_METHOD.format(name="a"))
    row = b"- {id: 1, text: some data}\n"
    (tmp_path / "data.yaml").write_bytes(row * (20 * 1024 * 1024 // len(row)))
    tracemalloc.start()
    try:
        found = agent_files(tmp_path)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert found == [tmp_path / "a.yaml"]
    assert peak < 1024 * 1024
