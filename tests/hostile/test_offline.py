"""Offline means offline: under the built-in `test` model no http or command tool runs for
real unless the run opts in; tests answer tools with doubles; replay never runs a tool."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import pytest
from loopback import LoopbackServer, json_reply

from openprogram_yaml.compile.project import compile_path
from openprogram_yaml.run.service import RunService
from openprogram_yaml.run.version import VersionStamp
from openprogram_yaml.runner.cli import main

SHOP_TOKEN = "shop-secret-token-0123456789"

# A command tool that leaves a file behind and an http tool that POSTs a refund with a
# secret header: the two things the offline model must never do by itself.
AGENT = """\
version: 1
name: shop
model: test
tools:
  make_file:
    description: Leaves a file behind.
    parameters:
      type: object
      properties: {name: {type: string, enum: [made.txt]}}
      required: [name]
    command: [%(python)s, -c, "import sys; open(sys.argv[1], 'w').write('x'); print('made')",
              "{{ name }}"]
  refund:
    description: Refund an order.
    parameters:
      type: object
      properties: {id: {type: string, enum: ["1042"]}}
      required: [id]
    http:
      method: POST
      url: "%(url)s/refund/{{ id }}"
      headers: {Authorization: "Bearer ${env:SHOP_TOKEN}"}
  helper:
    description: The only_file method, called as a tool.
    method: only_file
  count:
    description: Project code.
    python: shop_tools:count
methods:
  go:
    inputs: {ticket: {type: string}}
    prompt: "Handle: {{ ticket }}"
  only_file:
    inputs: {ticket: {type: string}}
    prompt: "Handle: {{ ticket }}"
    toolset: files
  delegate:
    inputs: {ticket: {type: string}}
    prompt: "Ask the helper: {{ ticket }}"
    toolset: helpers
toolsets:
  files: {tools: [make_file]}
  helpers: {tools: [helper, count]}
%(tests)s"""


@pytest.fixture(autouse=True)
def _shop_token(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SHOP_TOKEN", SHOP_TOKEN)


def _agent(tmp_path: Path, url: str = "http://127.0.0.1:9", tests: str = "") -> Path:
    # A python tool is project code: it runs offline (it leaves a file to show it ran).
    (tmp_path / "shop_tools.py").write_text(
        "from pathlib import Path\n\n\n"
        "def count(text: str) -> int:\n"
        '    """Count words."""\n'
        "    Path(__file__).with_name('counted.txt').write_text(text)\n"
        "    return len(text.split())\n"
    )
    path = tmp_path / "shop.yaml"
    path.write_text(
        AGENT % {"python": json.dumps(sys.executable), "url": url, "tests": tests},
        encoding="utf-8",
    )
    return path


def _trace_nodes(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _tool_messages(nodes: list[dict]) -> list[dict]:
    return [
        message
        for node in nodes
        if node["kind"] == "exec"
        for message in node["data"]["messages"]
        if message["role"] == "tool"
    ]


def test_a_command_tool_does_not_run_under_the_test_model(tmp_path, capsys) -> None:
    agent = _agent(tmp_path)
    trace = tmp_path / "trace.jsonl"
    code = main([str(agent), "only_file", "-i", "ticket=hi", "--json", "--trace", str(trace)])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert not (tmp_path / "made.txt").exists()
    record = json.loads(captured.out)
    assert record["tools_not_run"] == [{"name": "make_file", "reason": "offline"}]
    nodes = _trace_nodes(trace)
    [tool] = [n for n in nodes if n["kind"] == "tool"]
    assert tool["name"] == "make_file"
    assert tool["data"]["not_run"] == "offline"
    [message] = _tool_messages(nodes)
    assert message["is_error"] is True
    assert message["content"] == (
        "tool 'make_file' was not run: the offline test model does not run command tools; "
        "pass --live-tools to run them, or give the test a tool double"
    )
    [exec_node] = [n for n in nodes if n["kind"] == "exec"]
    assert exec_node["data"]["tool_calls"][0]["not_run"] == "offline"


def test_a_plain_run_says_on_stderr_which_tools_did_not_run(tmp_path, capsys) -> None:
    code = main([str(_agent(tmp_path)), "only_file", "-i", "ticket=hi"])
    captured = capsys.readouterr()
    assert code == 0
    assert "make_file" in captured.err and "--live-tools" in captured.err
    assert not (tmp_path / "made.txt").exists()


def test_a_command_tool_runs_with_live_tools(tmp_path, capsys) -> None:
    agent = _agent(tmp_path)
    code = main([str(agent), "only_file", "-i", "ticket=hi", "--json", "--live-tools"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert (tmp_path / "made.txt").read_text() == "x"
    record = json.loads(captured.out)
    assert "tools_not_run" not in record
    assert "make_file: made" in record["output"]


def test_an_http_tool_sends_no_request_under_the_test_model(tmp_path, capsys) -> None:
    trace = tmp_path / "trace.jsonl"
    with LoopbackServer() as server:
        server.add(json_reply({"refunded": True}))
        agent = _agent(tmp_path, server.url)
        code = main([str(agent), "go", "-i", "ticket=refund 1042", "--json", "--trace", str(trace)])
        captured = capsys.readouterr()
        assert server.requests == []
    assert code == 0, captured.err
    record = json.loads(captured.out)
    assert {"name": "refund", "reason": "offline"} in record["tools_not_run"]
    assert "tool 'refund' was not run" in record["output"]
    nodes = _trace_nodes(trace)
    refund = [n for n in nodes if n["kind"] == "tool" and n["name"] == "refund"]
    assert refund and refund[0]["data"]["not_run"] == "offline"
    assert SHOP_TOKEN not in trace.read_text() + captured.out + captured.err


def test_an_http_tool_runs_with_live_tools(tmp_path, capsys) -> None:
    with LoopbackServer() as server:
        server.add(json_reply({"refunded": True}))
        agent = _agent(tmp_path, server.url)
        code = main([str(agent), "go", "-i", "ticket=refund", "--json", "--live-tools"])
        captured = capsys.readouterr()
        [request] = server.requests
    assert code == 0, captured.err
    assert request.path == "/refund/1042"
    assert "refunded" in json.loads(captured.out)["output"]


def test_runs_started_by_serve_and_watch_are_offline_by_default(tmp_path) -> None:
    program = compile_path(_agent(tmp_path))

    async def go(service: RunService) -> list[dict]:
        record = await service.start("shop", "only_file", {"ticket": "hi"})
        return record.to_dict().get("tools_not_run", [])

    def current() -> tuple:
        return program, VersionStamp(program.version)

    assert asyncio.run(go(RunService(current))) == [{"name": "make_file", "reason": "offline"}]
    assert not (tmp_path / "made.txt").exists()
    assert asyncio.run(go(RunService(current, live_tools=True))) == []
    assert (tmp_path / "made.txt").exists()


def test_methods_called_as_tools_run_and_their_calls_are_gated_too(tmp_path, capsys) -> None:
    code = main([str(_agent(tmp_path)), "delegate", "-i", "ticket=hi", "--json"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    record = json.loads(captured.out)
    # The method ran (its own model turn called make_file), the python tool ran, and the
    # command tool the method was offered did not.
    assert record["tools_not_run"] == [{"name": "make_file", "reason": "offline"}]
    assert not (tmp_path / "made.txt").exists()
    assert (tmp_path / "counted.txt").exists()
    assert "count: 1" in record["output"]


# --- openprogram-run test ---------------------------------------------------------------


def test_openprogram_run_test_runs_no_tool(tmp_path, capsys) -> None:
    tests = """\
tests:
  - name: the model asks for both tools
    method: go
    inputs: {ticket: refund 1042}
    expect:
      tools_called: [make_file, refund]
      contains: ["was not run: the offline test model does not run http tools"]
"""
    with LoopbackServer() as server:
        server.add(json_reply({"refunded": True}))
        agent = _agent(tmp_path, server.url, tests)
        code = main(["test", str(agent)])
        captured = capsys.readouterr()
        assert server.requests == []
    assert code == 0, captured.out
    assert "1 passed, 0 failed" in captured.out
    assert not (tmp_path / "made.txt").exists()


def test_openprogram_run_test_live_tools_flag_and_per_test(tmp_path, capsys) -> None:
    tests = """\
tests:
  - name: offline
    method: only_file
    inputs: {ticket: hi}
    expect: {contains: "was not run"}
"""
    agent = _agent(tmp_path, tests=tests)
    assert main(["test", str(agent)]) == 0, capsys.readouterr().out
    assert not (tmp_path / "made.txt").exists()
    assert main(["test", str(agent), "--live-tools"]) == 1  # the tool ran: "was not run" is gone
    assert (tmp_path / "made.txt").exists()
    capsys.readouterr()

    (tmp_path / "made.txt").unlink()
    agent = _agent(
        tmp_path,
        tests="""\
tests:
  - name: live
    method: only_file
    inputs: {ticket: hi}
    live_tools: true
    expect: {contains: "make_file: made"}
""",
    )
    assert main(["test", str(agent)]) == 0, capsys.readouterr().out
    assert (tmp_path / "made.txt").exists()


def test_a_test_file_can_opt_in_to_live_tools(tmp_path, capsys) -> None:
    agent = _agent(tmp_path)
    (tmp_path / "openprogram.yaml").write_text(
        "version: 1\nname: p\nagents: [shop.yaml]\ntests: [shop.tests.yaml]\n"
    )
    (tmp_path / "shop.tests.yaml").write_text(
        "version: 1\nagent: shop\nlive_tools: true\ntests:\n"
        "  - name: live\n    method: only_file\n    inputs: {ticket: hi}\n"
        "    expect: {contains: 'make_file: made'}\n"
    )
    assert agent.exists()
    assert main(["test", str(tmp_path)]) == 0, capsys.readouterr().out
    assert (tmp_path / "made.txt").exists()


# --- tool doubles -----------------------------------------------------------------------


def test_doubles_return_and_raise_and_tools_called_sees_them(tmp_path, capsys) -> None:
    tests = """\
tests:
  - name: a double answers for the given arguments
    method: go
    inputs: {ticket: refund 1042}
    live_tools: true            # even live, a doubled tool never runs
    tools:
      refund:
        - when: {id: "1042"}
          returns: {status: refunded-by-double}
      make_file:
        - raises: disk is full
    expect:
      contains: [refunded-by-double, "disk is full"]
      tools_called:
        - refund
        - {name: refund, arguments: {id: "1042"}}
        - {name: make_file, arguments: {name: made.txt}}
  - name: the arguments a call had are checked
    method: go
    inputs: {ticket: refund 1042}
    tools:
      refund: [{returns: ok}]
      make_file: [{returns: ok}]
    expect:
      tools_called:
        - {name: refund, arguments: {id: "9999"}}
"""
    with LoopbackServer() as server:
        agent = _agent(tmp_path, server.url, tests)
        code = main(["test", str(agent)])
        out = capsys.readouterr().out
        assert server.requests == []
    assert not (tmp_path / "made.txt").exists()
    assert code == 1
    assert "1 passed, 1 failed" in out
    assert "FAIL shop: the arguments a call had are checked" in out
    assert """expected tool 'refund' to be called with {"id": "9999"}""" in out
    assert 'called with: {"id": "1042"}' in out


def test_a_double_with_no_matching_entry_does_not_run_the_tool(tmp_path, capsys) -> None:
    tests = """\
tests:
  - name: no entry for these arguments
    method: only_file
    inputs: {ticket: hi}
    live_tools: true
    tools:
      make_file: [{when: {name: other.txt}, returns: ok}]
    expect:
      contains: ["no double of tool 'make_file' matches"]
"""
    agent = _agent(tmp_path, tests=tests)
    assert main(["test", str(agent)]) == 0, capsys.readouterr().out
    assert not (tmp_path / "made.txt").exists()


def test_case_doubles_win_over_test_file_doubles(tmp_path, capsys) -> None:
    _agent(tmp_path)
    (tmp_path / "openprogram.yaml").write_text(
        "version: 1\nname: p\nagents: [shop.yaml]\ntests: [shop.tests.yaml]\n"
    )
    (tmp_path / "shop.tests.yaml").write_text(
        """\
version: 1
agent: shop
tools:
  make_file: [{returns: from-the-file}]
  refund: [{returns: refund-from-the-file}]
tests:
  - name: the file's double
    method: go
    inputs: {ticket: hi}
    expect: {contains: [from-the-file, refund-from-the-file]}
  - name: the case's double
    method: go
    inputs: {ticket: hi}
    tools:
      make_file: [{returns: from-the-case}]
    expect:
      contains: [from-the-case, refund-from-the-file]
      not_contains: "make_file: from-the-file"
"""
    )
    assert main(["test", str(tmp_path)]) == 0, capsys.readouterr().out
    assert not (tmp_path / "made.txt").exists()


def test_doubles_are_checked_at_load_time(tmp_path, capsys) -> None:
    tests = """\
tests:
  - name: bad doubles
    method: go
    inputs: {ticket: hi}
    tools:
      refnud: [{returns: ok}]
      refund:
        - {when: {order: "1"}, returns: ok}
"""
    agent = _agent(tmp_path, tests=tests)
    assert main(["check", str(agent)]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    lines = [line for line in err.splitlines() if ": error: " in line]
    assert any("has no tool 'refnud'" in line and "did you mean 'refund'" in line for line in lines)
    assert any("tool 'refund' has no parameter 'order'" in line for line in lines)
    assert all(line.startswith(str(agent) + ":") for line in lines), lines

    agent = _agent(tmp_path, tests=tests.replace('{when: {order: "1"}, ', "{raises: boom, "))
    assert main(["check", str(agent)]) == 2
    err = capsys.readouterr().err
    line = agent.read_text().splitlines().index("        - {raises: boom, returns: ok}") + 1
    assert f"{agent}:{line}:11: error:" in err
    assert "a tool double gives either 'returns' or 'raises' (not both)" in err


# --- replay -----------------------------------------------------------------------------


def test_replay_never_runs_a_tool(tmp_path, capsys) -> None:
    agent = _agent(tmp_path)
    recordings = tmp_path / "recordings"
    args = [str(agent), "only_file", "-i", "ticket=hi", "--json"]
    assert main([*args, "--live-tools", "--record", str(recordings)]) == 0
    recorded = json.loads(capsys.readouterr().out)["output"]
    assert "make_file: made" in recorded
    (tmp_path / "made.txt").unlink()

    # Even with live tools asked for, the recording answers the tool call.
    trace = tmp_path / "trace.jsonl"
    code = main([*args, "--live-tools", "--replay", str(recordings), "--trace", str(trace)])
    captured = capsys.readouterr()
    assert code == 0, captured.out
    assert json.loads(captured.out)["output"] == recorded
    assert not (tmp_path / "made.txt").exists()
    [tool] = [n for n in _trace_nodes(trace) if n["kind"] == "tool"]
    assert tool["data"]["replayed"] is True

    # `openprogram-run test` replaying the same recordings runs no tool either.
    tests = """\
tests:
  - name: replayed
    method: only_file
    inputs: {ticket: hi}
    live_tools: true
    expect: {contains: "make_file: made"}
"""
    agent = _agent(tmp_path, tests=tests)
    assert main(["test", str(agent), "--replay", str(recordings)]) == 0, capsys.readouterr().out
    assert not (tmp_path / "made.txt").exists()


# --- MCP servers --------------------------------------------------------------------------

# An MCP server is a program of the repository's (or a server beyond it): starting it is
# running it, so the offline model starts none. This one leaves a file behind when it starts.
MCP_SERVER = """\
from pathlib import Path
from mcp.server import MCPServer

Path(__file__).with_name("started.txt").write_text("started")
server = MCPServer("notes")


@server.tool()
def read_note(name: str) -> str:
    \"\"\"Read a note.\"\"\"
    return "buy milk"


server.run()
"""

MCP_AGENT = """\
version: 1
name: notes
model: test
tools:
  files:
    mcp: {command: [%(python)s, notes_server.py]}
toolsets:
  reading: {tools: [files__read_note, "files__list_*"]}
methods:
  read:
    prompt: Read the todo note.
    toolset: reading
tests:
  - name: the note is doubled
    method: read
    tools:
      files__read_note: [{returns: buy bread}]
    expect:
      tools_called: [files__read_note]
      contains: [buy bread]
"""


def _mcp_agent(tmp_path: Path) -> Path:
    (tmp_path / "notes_server.py").write_text(MCP_SERVER)
    path = tmp_path / "notes.yaml"
    path.write_text(MCP_AGENT % {"python": json.dumps(sys.executable)}, encoding="utf-8")
    return path


def test_an_mcp_server_does_not_start_under_the_test_model(tmp_path, capsys) -> None:
    agent = _mcp_agent(tmp_path)
    code = main([str(agent), "read", "--json"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    # The tool the toolset names is offered, and answered "not run".
    assert json.loads(captured.out)["tools_not_run"] == [
        {"name": "files__read_note", "reason": "offline"}
    ]
    code = main(["test", str(agent)])
    captured = capsys.readouterr()
    assert code == 0, captured.out
    assert "1 passed, 0 failed" in captured.out
    assert not (tmp_path / "started.txt").exists()


def test_an_mcp_server_starts_with_live_tools(tmp_path, capsys) -> None:
    agent = _mcp_agent(tmp_path)
    code = main([str(agent), "read", "--json", "--live-tools"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert "files__read_note: buy milk" in json.loads(captured.out)["output"]
    assert (tmp_path / "started.txt").exists()
