"""Issue 12 §2: tools cannot be turned against their owner.

Each tool here is declared in YAML the way a user writes it, compiled, and then called with
the arguments a hostile model would send. HTTP tools talk to servers on 127.0.0.1 that the
test starts; the second server of a pair stands for "somewhere else" and must hear nothing.
"""

from __future__ import annotations

import asyncio
import re
import sys
import textwrap
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from loopback import LoopbackServer, Reply, json_reply

from openprogram_yaml.compile.project import compile_path
from openprogram_yaml.errors import ConfigError, ToolError
from openprogram_yaml.runner.cli import main

SECRET = "k-9f8e7d6c5b4a3210"


@pytest.fixture
def servers() -> Iterator[tuple[LoopbackServer, LoopbackServer]]:
    with LoopbackServer() as home, LoopbackServer() as elsewhere:
        yield home, elsewhere


def agent_file(folder: Path, tools: str, *, project: str | None = None) -> Path:
    """An agent file holding ``tools`` (YAML, indented under ``tools:``) in ``folder``."""
    if project is not None:
        (folder / "openprogram.yaml").write_text(
            "version: 1\nagents: [agent.yaml]\n" + textwrap.dedent(project), encoding="utf-8"
        )
    path = folder / "agent.yaml"
    path.write_text(
        "version: 1\nname: owner\nmodel: test\ntools:\n"
        + textwrap.indent(textwrap.dedent(tools).strip("\n"), "  ")
        + "\nmethods:\n  go: {prompt: go}\n",
        encoding="utf-8",
    )
    return path


def tool_of(path: Path, name: str) -> Any:
    agent = compile_path(path).agent()
    return next(tool for tool in agent.tools if tool.name == name)


def call(tool: Any, **arguments: Any) -> Any:
    async def go() -> Any:
        try:
            return await tool.execute(**arguments)
        finally:
            await tool.aclose()

    return asyncio.run(go())


def check(path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    code = main(["check", str(path)])
    captured = capsys.readouterr()
    return code, captured.out + captured.err


def position_of(text: str, path: Path) -> tuple[int, int]:
    """Line and column (1-based) of the first ``text`` in the file."""
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if text in line:
            return number, line.index(text) + 1
    raise AssertionError(f"{text!r} not in {path}")


def http_tool(url: str, *, extra: str = "") -> str:
    return f"""
    fetch:
      description: Fetch something.
      parameters:
        type: object
        properties: {{path: {{type: string}}, name: {{type: string}}, q: {{type: string}}}}
      http:
        url: "{url}"
        headers: {{X-Api-Key: "{SECRET}"}}
        {extra}
    """


# --- http: the model cannot move the request --------------------------------------------


def test_a_value_right_after_the_host_is_refused_at_load_time_with_its_position(
    tmp_path: Path, servers: tuple[LoopbackServer, LoopbackServer], capsys: Any
) -> None:
    home, _ = servers
    path = agent_file(tmp_path, http_tool(home.url + "{{ path }}"))
    code, out = check(path, capsys)
    assert code == 2
    line, column = position_of("{{ path }}", path)
    assert re.search(rf"agent\.yaml:{line}:{column}: error: .*scheme, host and port", out), out
    assert "Traceback" not in out


def test_the_host_move_with_an_api_key_reaches_neither_server(
    tmp_path: Path, servers: tuple[LoopbackServer, LoopbackServer]
) -> None:
    home, elsewhere = servers
    home.add(json_reply({"ok": True}))
    port = home.url.rsplit(":", 1)[1]
    # With a declared host list the host part may be templated, but a value there cannot
    # add credentials, another host or a path: the request's origin must be a listed one.
    path = agent_file(
        tmp_path,
        http_tool(home.url + "{{ path }}", extra=f'hosts: ["127.0.0.1:{port}"]'),
    )
    tool = tool_of(path, "fetch")
    hostile = "@" + elsewhere.url.removeprefix("http://") + "/x"
    with pytest.raises(ToolError, match="refused"):
        call(tool, path=hostile)
    assert elsewhere.requests == []
    assert home.requests == []


def test_a_value_in_the_path_stays_one_segment_on_the_templates_host(
    tmp_path: Path, servers: tuple[LoopbackServer, LoopbackServer]
) -> None:
    home, elsewhere = servers
    home.add(json_reply({"ok": True}))
    path = agent_file(tmp_path, http_tool(home.url + "/files/{{ path }}"))
    hostile = "@" + elsewhere.url.removeprefix("http://") + "/x"
    assert call(tool_of(path, "fetch"), path=hostile) == {"ok": True}
    assert elsewhere.requests == []
    port = elsewhere.url.rsplit(":", 1)[1]
    assert home.requests[0].path == f"/files/%40127.0.0.1%3A{port}%2Fx"
    assert home.requests[0].headers["x-api-key"] == SECRET


@pytest.mark.parametrize(
    ("value", "sent"),
    [
        ("../admin", "/files/..%2Fadmin?v=1"),
        ("a?admin=1", "/files/a%3Fadmin%3D1?v=1"),
        ("a#frag", "/files/a%23frag?v=1"),
        ("a b%2F", "/files/a%20b%252F?v=1"),
    ],
)
def test_question_marks_hashes_and_slashes_in_a_path_value_are_encoded(
    tmp_path: Path, servers: tuple[LoopbackServer, LoopbackServer], value: str, sent: str
) -> None:
    home, _ = servers
    home.add(json_reply({"ok": True}))
    path = agent_file(tmp_path, http_tool(home.url + "/files/{{ name }}?v=1"))
    call(tool_of(path, "fetch"), name=value)
    assert home.requests[0].path == sent


@pytest.mark.parametrize("value", ["..", "."])
def test_a_dot_segment_from_a_value_is_refused(
    tmp_path: Path, servers: tuple[LoopbackServer, LoopbackServer], value: str
) -> None:
    home, _ = servers
    path = agent_file(tmp_path, http_tool(home.url + "/files/{{ name }}/raw"))
    with pytest.raises(ToolError, match="dot-segment"):
        call(tool_of(path, "fetch"), name=value)
    assert home.requests == []


def test_a_query_value_cannot_add_parameters(
    tmp_path: Path, servers: tuple[LoopbackServer, LoopbackServer]
) -> None:
    home, _ = servers
    home.add(json_reply({"ok": True}))
    path = agent_file(tmp_path, http_tool(home.url + "/search?q={{ q }}&limit=5"))
    call(tool_of(path, "fetch"), q="x&admin=1#top")
    assert home.requests[0].path == "/search?q=x%26admin%3D1%23top&limit=5"


def test_urlencode_is_not_applied_twice_and_the_path_filter_keeps_slashes(
    tmp_path: Path, servers: tuple[LoopbackServer, LoopbackServer]
) -> None:
    home, _ = servers
    home.add(json_reply({"ok": True}), json_reply({"ok": True}))
    encoded = agent_file(tmp_path, http_tool(home.url + "/files/{{ name | urlencode }}"))
    call(tool_of(encoded, "fetch"), name="a/b c")
    assert home.requests[0].path == "/files/a%2Fb%20c"
    whole = agent_file(tmp_path, http_tool(home.url + "/repos/{{ name | path }}/issues"))
    call(tool_of(whole, "fetch"), name="octo/hello world")
    assert home.requests[1].path == "/repos/octo/hello%20world/issues"
    with pytest.raises(ToolError, match="dot-segment"):
        call(tool_of(whole, "fetch"), name="octo/../../admin")
    assert len(home.requests) == 2


def test_a_redirect_to_another_origin_does_not_carry_the_secret_header(
    tmp_path: Path, servers: tuple[LoopbackServer, LoopbackServer]
) -> None:
    home, elsewhere = servers
    home.add(Reply(status=302, headers={"Location": elsewhere.url + "/steal"}))
    elsewhere.add(json_reply({"stolen": True}))
    path = agent_file(tmp_path, http_tool(home.url + "/files/{{ name }}"))
    with pytest.raises(ToolError, match="HTTP 302") as info:
        call(tool_of(path, "fetch"), name="x")
    assert SECRET not in str(info.value)
    assert elsewhere.requests == []


# --- python: an allow-list of modules ---------------------------------------------------


def test_a_library_function_that_spawns_processes_is_refused_by_check(
    tmp_path: Path, capsys: Any
) -> None:
    path = agent_file(tmp_path, "run:\n  python: setuptools._distutils.spawn:spawn\n")
    code, out = check(path, capsys)
    assert code == 2
    line, column = position_of("setuptools", path)
    expected = rf"agent\.yaml:{line}:{column}: error: .*module 'setuptools\..*python_packages"
    assert re.search(expected, out), out
    assert "Traceback" not in out


@pytest.fixture
def outside_package(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """An importable package that does not live in the project (as an installed one)."""
    name = f"extpkg_{uuid.uuid4().hex[:8]}"
    folder = tmp_path_factory.mktemp("site")
    (folder / name).mkdir()
    (folder / name / "__init__.py").write_text(
        "def shout(text: str) -> str:\n    return text.upper()\n", encoding="utf-8"
    )
    sys.path.append(str(folder))
    yield name
    sys.path.remove(str(folder))
    sys.modules.pop(name, None)


def test_a_package_outside_the_project_needs_its_name_in_the_project_file(
    tmp_path: Path, outside_package: str
) -> None:
    tools = f"shout:\n  python: {outside_package}:shout\n"
    with pytest.raises(ConfigError, match=f"python_packages: \\[{outside_package}\\]"):
        compile_path(agent_file(tmp_path, tools, project=""))
    path = agent_file(tmp_path, tools, project=f"python_packages: [{outside_package}]\n")
    assert path.parent == tmp_path
    assert call(tool_of(tmp_path, "shout"), text="hi") == "HI"


def test_a_project_module_is_allowed_but_a_library_function_it_re_exports_is_not(
    tmp_path: Path,
) -> None:
    name = f"owntools_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{name}.py").write_text(
        "from setuptools._distutils.spawn import spawn\n\n"
        "def shout(text: str) -> str:\n    return text.upper()\n",
        encoding="utf-8",
    )
    try:
        tools = f"shout: {{python: '{name}:shout'}}\n"
        assert call(tool_of(agent_file(tmp_path, tools), "shout"), text="hi") == "HI"
        with pytest.raises(ConfigError, match="defined in 'setuptools"):
            compile_path(agent_file(tmp_path, f"run: {{python: '{name}:spawn'}}\n"))
    finally:
        sys.modules.pop(name, None)


def test_a_package_inside_a_virtualenv_in_the_project_is_not_project_code(
    tmp_path: Path,
) -> None:
    name = f"venvpkg_{uuid.uuid4().hex[:8]}"
    site = tmp_path / ".venv" / "lib" / "python3" / "site-packages"
    (site / name).mkdir(parents=True)
    (site / name / "__init__.py").write_text("def f() -> str:\n    return 'x'\n")
    sys.path.append(str(site))
    try:
        with pytest.raises(ConfigError, match="python_packages"):
            compile_path(agent_file(tmp_path, f"f: {{python: '{name}:f'}}\n"))
    finally:
        sys.path.remove(str(site))
        sys.modules.pop(name, None)


# --- command: values are not options; exit codes the tool declares ----------------------

Make = Callable[..., Any]


@pytest.fixture
def command_tool(tmp_path: Path) -> Make:
    (tmp_path / "data.txt").write_text("one\ntwo\nthree\n", encoding="utf-8")

    def make(argv: str, params: str, extra: str = "") -> Any:
        tools = f"""
        t:
          description: A command.
          parameters: {{type: object, properties: {params}}}
          command: {argv}
          {extra}
        """
        return tool_of(agent_file(tmp_path, tools), "t")

    return make


def test_a_negative_number_in_a_string_value_is_not_an_option(
    command_tool: Make, tmp_path: Path
) -> None:
    tool = command_tool('[head, "{{ lines }}", data.txt]', "{lines: {type: string}}")
    with pytest.raises(ToolError, match="would be read as an option"):
        call(tool, lines="-1")


def test_a_dash_value_after_a_literal_double_dash_is_an_operand(
    command_tool: Make, tmp_path: Path
) -> None:
    (tmp_path / "-1").write_text("the file called -1\n", encoding="utf-8")
    tool = command_tool('[cat, --, "{{ name }}"]', "{name: {type: string}}")
    assert call(tool, name="-1") == "the file called -1\n"


def test_a_negative_number_for_an_integer_parameter_is_allowed(command_tool: Make) -> None:
    tool = command_tool('[seq, "{{ start }}", "1"]', "{start: {type: integer}}")
    assert call(tool, start=-1) == "-1\n0\n1\n"


def test_grep_finding_nothing_is_a_normal_result_when_exit_1_is_declared_ok(
    command_tool: Make,
) -> None:
    argv = '[grep, -il, --, "{{ query }}", data.txt]'
    params = "{query: {type: string}}"
    tool = command_tool(argv, params, extra="ok_exit_codes: [0, 1]")
    assert call(tool, query="two") == "data.txt\n"
    assert "exit code 1" in call(tool, query="absent")
    strict = command_tool(argv, params)
    with pytest.raises(ToolError, match="exited with code 1"):
        call(strict, query="absent")
    with pytest.raises(ToolError, match="exited with code 2"):
        call(tool, query="[")  # grep's own error is still a failure


def test_a_tool_module_that_exits_at_import_is_a_positioned_error(
    tmp_path: Path, capsys: Any
) -> None:
    name = f"quitter_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{name}.py").write_text("import sys\nsys.exit(3)\n", encoding="utf-8")
    path = agent_file(tmp_path, f"run:\n  python: {name}:run\n", project="")
    try:
        code, out = check(path, capsys)
    finally:
        sys.modules.pop(name, None)
    assert code == 2, out
    line, column = position_of(name, path)
    assert re.search(rf"agent\.yaml:{line}:{column}: error: .*SystemExit", out), out
    assert "Traceback" not in out
