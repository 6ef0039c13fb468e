"""``command`` tools running real programs (the test's own Python interpreter)."""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from openprogram_yaml.errors import ToolError
from openprogram_yaml.providers.test import Reply
from openprogram_yaml.tools.base import ToolBuildError
from openprogram_yaml.tools.command import CommandTool

QUERY_PARAMS = {
    "type": "object",
    "properties": {"query": {"type": "string"}, "count": {"type": "integer"}},
    "required": ["query"],
}
#: Prints its arguments as JSON, and the folder it runs in.
SHOW_ARGS = "import json, os, sys; print(json.dumps({'argv': sys.argv[1:], 'cwd': os.getcwd()}))"

Make = Callable[..., CommandTool]


@pytest.fixture
def make(tmp_path: Path, compile_template: Callable[..., Any]) -> Make:
    """``make(*argv, **options)``: a command tool in the project ``tmp_path``."""

    def _make(*argv: str, **options: Any) -> CommandTool:
        templates = [compile_template(part, "query", "count") for part in argv]
        options.setdefault("project_root", tmp_path)
        params = options.pop("parameters", QUERY_PARAMS)
        return CommandTool("search", "Search", params, templates, **options)

    return _make


def run(tool: CommandTool, **arguments: Any) -> Any:
    return asyncio.run(tool.execute(**arguments))


def test_each_element_stays_one_argument_and_no_shell_is_involved(
    make: Make, tmp_path: Path
) -> None:
    tool = make(sys.executable, "-c", SHOW_ARGS, "--json", "{{ query }}", "n={{ count }}")
    hostile = "two words; rm -rf / $(reboot) `id` | cat > x"
    out = json.loads(run(tool, query=hostile, count=3))
    assert out["argv"] == ["--json", hostile, "n=3"]
    assert Path(out["cwd"]) == tmp_path.resolve()
    assert not (tmp_path / "x").exists()


def test_working_directory_inside_the_project_is_used(make: Make, tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    out = json.loads(run(make(sys.executable, "-c", SHOW_ARGS, cwd=Path("docs")), query="q"))
    assert Path(out["cwd"]) == (tmp_path / "docs").resolve()


def test_working_directory_outside_the_project_is_refused(make: Make, tmp_path: Path) -> None:
    with pytest.raises(ToolBuildError, match="outside the project root") as info:
        make(sys.executable, "-c", "pass", cwd=tmp_path.parent)
    assert info.value.field == "cwd"
    with pytest.raises(ToolBuildError, match="outside the project root"):
        make(sys.executable, "-c", "pass", cwd=Path("../.."))


def test_a_missing_program_is_a_build_error(make: Make) -> None:
    with pytest.raises(ToolBuildError, match="'no-such-program-xyz' was not found on PATH") as info:
        make("no-such-program-xyz", "{{ query }}")
    assert info.value.field == "command"


def test_a_templated_program_that_is_missing_is_a_tool_error_at_run_time(make: Make) -> None:
    tool = make("{{ query }}")
    with pytest.raises(ToolError, match="'no-such-program-xyz' was not found on PATH"):
        run(tool, query="no-such-program-xyz")


def test_non_zero_exit_is_a_tool_error_with_code_and_stderr(make: Make) -> None:
    code = "import sys; print('partial'); sys.stderr.write('boom: bad input\\n'); sys.exit(4)"
    with pytest.raises(ToolError, match=r"exited with code 4:\nboom: bad input"):
        run(make(sys.executable, "-c", code), query="q")


def test_output_over_the_cap_is_cut_with_a_marker(make: Make) -> None:
    tool = make(sys.executable, "-c", "print('x' * 100000)", max_output=1000)
    out = run(tool, query="q")
    assert out.startswith("x" * 1000)
    assert out.count("x") == 1000
    assert "[truncated: 99001 more bytes of output not shown]" in out


def test_timeout_kills_the_command(make: Make) -> None:
    # A program that would wait forever on a pipe nobody writes to (stdin is closed, so
    # block on one it opens itself).
    code = "import os; r, w = os.pipe(); os.read(r, 1)"
    tool = make(sys.executable, "-c", code, timeout_s=0.2)
    started = time.monotonic()
    with pytest.raises(ToolError, match=r"did not finish within 0\.2s"):
        run(tool, query="q")
    assert time.monotonic() - started < 2


def _gone(pid: int) -> bool:
    """Whether process ``pid`` has ended (exited, or a zombie nobody reaped yet)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z"
    except FileNotFoundError:
        return True


def test_a_program_that_exits_leaving_a_child_holding_its_output_is_done(make: Make) -> None:
    # The child inherits stdout and stderr and lives on: the call waited for the pipes to
    # close, failed as a timeout with the program's output lost, and left the child running.
    code = (
        "import subprocess, sys; "
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); "
        "print('started', child.pid)"
    )
    tool = make(sys.executable, "-c", code, timeout_s=5)
    started = time.monotonic()
    out = run(tool, query="q")
    assert time.monotonic() - started < 4
    word, pid = out.split()
    assert word == "started"
    deadline = time.monotonic() + 2  # a real process's death, once killed
    while not _gone(int(pid)) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert _gone(int(pid))


def test_values_that_would_read_as_options_are_refused(make: Make) -> None:
    tool = make(sys.executable, "-c", SHOW_ARGS, "{{ query }}")
    for value in ("--pre=sh", "-5"):  # a string parameter: "-5" is an option to many programs
        with pytest.raises(ToolError, match="would be read as an option"):
            run(tool, query=value)
    # The template's own dash is the author's, and after `--` values are never options.
    flagged = make(sys.executable, "-c", SHOW_ARGS, "--regexp={{ query }}", "--", "{{ query }}")
    assert json.loads(run(flagged, query="-x"))["argv"] == ["--regexp=-x", "--", "-x"]


def test_arguments_failing_the_schema_run_nothing(make: Make, tmp_path: Path) -> None:
    tool = make(sys.executable, "-c", "open('ran', 'w')", "{{ query }}")
    with pytest.raises(ToolError, match="invalid arguments"):
        run(tool, query=["not", "a", "string"])
    assert not (tmp_path / "ran").exists()


def test_the_model_sees_the_output_through_runtime_exec(
    make: Make, run_with_model: Callable[..., Any]
) -> None:
    tool = make(sys.executable, "-c", "import sys; print('found', sys.argv[1])", "{{ query }}")
    model = run_with_model(tool, [Reply.call("search", {"query": "refunds"}), "done"])
    result = model.requests[1].messages[-1]
    assert (result.text().strip(), result.is_error) == ("found refunds", False)
