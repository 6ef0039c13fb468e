"""The ``mcp`` tool kind against real MCP servers (tests/tools/mcp_servers/notes_server.py,
written with the SDK's ``MCPServer``), started by the tests in subprocesses: over stdio, and
over streamable HTTP on 127.0.0.1."""

from __future__ import annotations

import asyncio
import contextlib
import os
import queue
import signal
import socket
import stat
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import pytest
from loopback import LoopbackServer, chat_completion, json_reply

from openprogram_yaml.compile.project import compile_path
from openprogram_yaml.errors import ConfigError, ToolError
from openprogram_yaml.run.execute import execute_run
from openprogram_yaml.run.record import RunRecord
from openprogram_yaml.run.version import VersionStamp
from openprogram_yaml.runtime.content import ToolContent
from openprogram_yaml.tools.mcp import STDERR_TAIL, STOP_WAIT_S, McpServer, McpTool

SERVERS = Path(__file__).parent / "mcp_servers"
NOTES = SERVERS / "notes_server.py"
REPO = Path(__file__).resolve().parents[2]


def _stdio_server(**options: object) -> McpServer:
    return McpServer("notes", command=[sys.executable, str(NOTES)], cwd=SERVERS, **options)  # type: ignore[arg-type]


def _by_name(tools: tuple[McpTool, ...]) -> dict[str, McpTool]:
    return {tool.name: tool for tool in tools}


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie still answers kill(0); its state in /proc says it is gone.
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except FileNotFoundError:
        return False


# --- the tool kind itself -----------------------------------------------------------------


def test_stdio_server_tools_are_discovered_and_called() -> None:
    async def go() -> dict[str, object]:
        server = _stdio_server()
        try:
            tools = _by_name(await server.tools())
            assert await server.tools() == tuple(tools.values())  # connected once
            return {
                "names": sorted(tools),
                "schema": tools["notes__add"].spec.parameters["required"],
                "read": await tools["notes__read_note"].execute(name="todo"),
                "add": await tools["notes__add"].execute(a=2, b=3),
                "picture": await tools["notes__picture"].execute(),
                "attachment": await tools["notes__attachment"].execute(),
            }
        finally:
            await server.aclose()

    seen = asyncio.run(go())
    assert "notes__read_note" in seen["names"] and "notes__delete_note" in seen["names"]
    assert seen["schema"] == ["a", "b"]
    assert seen["read"] == "buy milk"
    assert '"sum": 5' in str(seen["add"])
    # An image result reaches the model as an image block beside any text.
    assert seen["picture"] == ToolContent(
        ({"type": "image", "data": "iVBORw0KGgo=", "mime_type": "image/png"},)
    )
    assert seen["attachment"] == "[resource notes://todo]\nbuy milk"


def test_an_is_error_result_is_a_tool_failure_and_bad_arguments_never_reach_the_server() -> None:
    async def go() -> tuple[str, str]:
        server = _stdio_server()
        try:
            tools = _by_name(await server.tools())
            with pytest.raises(ToolError) as failed:
                await tools["notes__broken"].execute(reason="disk full")
            with pytest.raises(ToolError) as invalid:
                await tools["notes__add"].execute(a="two", b=3)
            return str(failed.value), str(invalid.value)
        finally:
            await server.aclose()

    failed, invalid = asyncio.run(go())
    assert "Error executing tool broken" in failed
    assert "invalid arguments for tool 'notes__add'" in invalid


def test_a_server_dying_mid_call_fails_that_call_naming_the_server_and_the_tool() -> None:
    async def go() -> tuple[str, str, object]:
        server = _stdio_server()
        try:
            tools = _by_name(await server.tools())
            with pytest.raises(ToolError) as crashed:
                await tools["notes__crash"].execute()
            with pytest.raises(ToolError) as after:
                await tools["notes__read_note"].execute(name="todo")
            # The next run starts it again.
            again = _by_name(await server.tools())
            return (
                str(crashed.value),
                str(after.value),
                await again["notes__read_note"].execute(name="todo"),
            )
        finally:
            await server.aclose()

    crashed, after, again = asyncio.run(go())
    assert "MCP server 'notes'" in crashed and "'notes__crash'" in crashed
    assert "stopped" in crashed
    assert "is not running" in after
    assert again == "buy milk"


def test_what_the_model_sees_of_a_failure_names_the_entry_not_its_command() -> None:
    # The command line (or URL) may hold a ${env:...} secret: the model is sent the entry's
    # name only (start failures, which the person reads redacted, show the command).
    async def go() -> str:
        server = McpServer(
            "notes", command=[sys.executable, str(NOTES), "--key=s3cret-arg"], cwd=SERVERS
        )
        try:
            tools = _by_name(await server.tools())
            with pytest.raises(ToolError) as crashed:
                await tools["notes__crash"].execute()
            with pytest.raises(ToolError) as after:
                await tools["notes__read_note"].execute(name="todo")
            return str(crashed.value) + str(after.value)
        finally:
            await server.aclose()

    seen = asyncio.run(go())
    assert "MCP server 'notes'" in seen
    assert "s3cret-arg" not in seen and str(NOTES) not in seen


def test_a_slow_call_hits_its_timeout_and_the_server_keeps_answering() -> None:
    async def go() -> tuple[str, object]:
        server = _stdio_server(timeout_s=0.5)  # the server waits on an event that never comes
        try:
            tools = _by_name(await server.tools())
            with pytest.raises(ToolError) as slow:
                await tools["notes__wait_forever"].execute()
            return str(slow.value), await tools["notes__read_note"].execute(name="todo")
        finally:
            await server.aclose()

    slow, after = asyncio.run(go())
    assert "did not answer tool 'notes__wait_forever' within 0.5s" in slow
    assert after == "buy milk"


def test_closing_stops_the_server_process() -> None:
    async def go() -> int:
        server = _stdio_server()
        try:
            tools = _by_name(await server.tools())
            return int(str(await tools["notes__whoami"].execute()))
        finally:
            await server.aclose()

    pid = asyncio.run(go())
    assert not _alive(pid)


def test_a_server_that_cannot_start_says_so_with_its_stderr(tmp_path: Path) -> None:
    script = tmp_path / "bad.py"
    script.write_text(
        "import sys\nprint('cannot open the database', file=sys.stderr)\nsys.exit(2)\n"
    )
    server = McpServer("db", command=[sys.executable, str(script)], cwd=tmp_path, timeout_s=20)
    with pytest.raises(ToolError) as failed:
        asyncio.run(server.tools())
    message = str(failed.value)
    assert message.startswith("MCP server 'db'") and "failed to start" in message
    assert "closed the connection before answering (did it exit?)" in message
    assert "cannot open the database" in message


def test_a_chatty_servers_stderr_is_kept_in_memory_up_to_its_tail_not_in_a_growing_file() -> None:
    # A server that logs for days must not fill the disk: its stderr was a temporary file
    # (unlinked, so invisible) that grew with every line. Now only its end is kept.
    def big_files() -> list[int]:
        sizes = []
        for fd in os.listdir("/proc/self/fd"):
            with contextlib.suppress(OSError):
                info = os.stat(f"/proc/self/fd/{fd}")
                if stat.S_ISREG(info.st_mode) and info.st_size >= 1_000_000:
                    sizes.append(info.st_size)
        return sizes

    async def go() -> tuple[object, list[int]]:
        env = {**os.environ, "NOTES_STDERR_BYTES": str(3_000_000)}
        server = McpServer("notes", command=[sys.executable, str(NOTES)], cwd=SERVERS, env=env)
        try:
            tools = _by_name(await server.tools())
            return await tools["notes__add"].execute(a=2, b=3), big_files()
        finally:
            await server.aclose()

    if not os.path.isdir("/proc/self/fd"):
        pytest.skip("needs /proc")
    added, sizes = asyncio.run(go())
    assert "5" in str(added)
    assert sizes == []


def test_a_server_that_floods_stderr_and_exits_shows_the_end_of_it(tmp_path: Path) -> None:
    script = tmp_path / "loud.py"
    script.write_text(
        "import sys\n"
        "for n in range(40_000): sys.stderr.write(f'noise {n}\\n')\n"
        "print('the last words', file=sys.stderr)\nsys.exit(3)\n"
    )
    server = McpServer("loud", command=[sys.executable, str(script)], cwd=tmp_path, timeout_s=20)
    with pytest.raises(ToolError) as failed:
        asyncio.run(server.tools())
    message = str(failed.value)
    assert message.rstrip().endswith("the last words"), message[-200:]
    assert "noise 0\n" not in message and len(message) < STDERR_TAIL + 500


def test_a_server_that_does_not_answer_in_time_is_stopped_without_waiting_for_it() -> None:
    # It never answers the handshake: the start fails after start_timeout_s and the
    # process is stopped at once (it waited STOP_WAIT_S for a connection that never was).
    marker = "mcp-test-hung-server"
    hung = f"import time; time.sleep(600)  # {marker}"
    server = McpServer("hung", command=[sys.executable, "-c", hung], start_timeout_s=0.5)
    started = time.monotonic()
    with pytest.raises(ToolError) as failed:
        asyncio.run(server.tools())
    took = time.monotonic() - started
    assert "did not start within 0.5s" in str(failed.value)
    assert took < STOP_WAIT_S, took
    assert _running(marker) == []


def _running(marker: str) -> list[int]:
    """The processes alive (not zombies) whose command line holds ``marker``."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                if marker.encode() in (entry / "cmdline").read_bytes() and _alive(int(entry.name)):
                    found.append(int(entry.name))
    return found


def test_env_values_reach_the_server_and_only_safe_variables_besides(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async def go(env: dict[str, str] | None) -> object:
        server = _stdio_server(env=env)
        try:
            tools = _by_name(await server.tools())
            return await tools["notes__secret"].execute()
        finally:
            await server.aclose()

    # The runner's own variables stay behind: the server sees only what its entry gives.
    monkeypatch.setenv("NOTES_TOKEN", "the-runners-own")
    assert asyncio.run(go(None)) == "(unset)"
    # The value arrives (its length comes back), but what the server echoes of it never
    # reaches the model, as for an http tool's credentials.
    assert asyncio.run(go({"NOTES_TOKEN": "s3cret-token"})) == "*** (12 characters)"


# --- streamable HTTP ------------------------------------------------------------------------


@pytest.fixture
def http_server() -> Iterator[str]:
    """The notes server over streamable HTTP on 127.0.0.1, requiring a bearer token."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    process = subprocess.Popen(
        [sys.executable, str(NOTES), "--http", str(port)],
        env={**os.environ, "NOTES_TOKEN": "http-s3cret"},
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stderr is not None
    # Its stderr read by a thread (its request log must not fill the pipe: the server would
    # stall); the test waits for uvicorn's "running" line at most 60 s.
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=_lines_to, args=(process.stderr, lines), daemon=True).start()
    try:
        while "Uvicorn running on" not in (line := lines.get(timeout=60)):
            if not line:
                pytest.fail("the HTTP MCP server exited before it listened")
    except queue.Empty:
        process.kill()
        process.wait()
        pytest.fail("the HTTP MCP server did not start within 60 s")
    try:
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        process.send_signal(signal.SIGINT)
        process.wait(timeout=30)


def _lines_to(stream: IO[str], lines: queue.Queue[str]) -> None:
    """Each line of ``stream`` into ``lines``, then "" at its end."""
    for line in stream:
        lines.put(line)
    lines.put("")


def test_http_server_with_headers(http_server: str) -> None:
    async def go(token: str) -> object:
        server = McpServer(
            "tickets", url=http_server, headers={"Authorization": f"Bearer {token}"}, timeout_s=20
        )
        try:
            tools = _by_name(await server.tools())
            return await tools["tickets__add"].execute(a=40, b=2)
        finally:
            await server.aclose()

    assert '"sum": 42' in str(asyncio.run(go("http-s3cret")))
    with pytest.raises(ToolError) as refused:
        asyncio.run(go("wrong-s3cret"))
    message = str(refused.value)
    assert "MCP server 'tickets'" in message and "failed to start" in message
    assert "s3cret" not in message


def test_over_http_a_crash_mid_call_and_a_slow_call_fail_that_call(http_server: str) -> None:
    async def go() -> tuple[str, object, str]:
        headers = {"Authorization": "Bearer http-s3cret"}
        server = McpServer("tickets", url=http_server, headers=headers, timeout_s=0.5)
        try:
            tools = _by_name(await server.tools())
            with pytest.raises(ToolError) as slow:
                await tools["tickets__wait_forever"].execute()
            after = await tools["tickets__read_note"].execute(name="todo")
            with pytest.raises(ToolError) as crashed:
                await tools["tickets__crash"].execute()
            return str(slow.value), after, str(crashed.value)
        finally:
            await server.aclose()

    slow, after, crashed = asyncio.run(go())
    assert "did not answer tool 'tickets__wait_forever' within 0.5s" in slow
    assert after == "buy milk"
    assert (
        "MCP server 'tickets'" in crashed
        and "stopped while running tool 'tickets__crash'" in crashed
    )
    assert "s3cret" not in slow + crashed


# --- as part of an agent ----------------------------------------------------------------------


def _agent(tmp_path: Path, extra: str = "", server_options: str = "") -> Path:
    server = tmp_path / "servers"
    server.mkdir(exist_ok=True)
    (server / "notes_server.py").write_text(NOTES.read_text())
    path = tmp_path / "notes.yaml"
    path.write_text(
        textwrap.dedent(
            f"""\
            version: 1
            name: notes
            model: test
            tools:
              files:
                mcp:
                  command: [{sys.executable}, servers/notes_server.py]
                  env: {{NOTES_TOKEN: "${{env:OPENPROGRAM_NOTES_TOKEN}}"}}
                  {server_options}
            toolsets:
              reading: {{tools: ["files__read_*"], deny: ["*__delete_*"]}}
            methods:
              read:
                prompt: Read the todo note.
                toolset: reading
              secret:
                prompt: Tell me the secret.
                tools_allow: [files__secret]
            """
        )
        + extra
    )
    return path


def _run(path: Path, method: str, **options: object) -> RunRecord:
    program = compile_path(path, environ={**os.environ, "OPENPROGRAM_NOTES_TOKEN": "tok-s3cret"})
    return asyncio.run(
        execute_run(program, VersionStamp(hash="v"), None, method, {}, **options)  # type: ignore[arg-type]
    )


def test_the_offline_model_runs_mcp_tools_only_with_live_tools(tmp_path: Path) -> None:
    path = _agent(tmp_path)
    # Offline no server starts: the tools the agent names are offered, and not run
    # (tests/hostile/test_offline.py shows the server's program never ran).
    offline = _run(path, "secret")
    assert offline.status == "ok", offline.error
    assert offline.tools_not_run == [{"name": "files__secret", "reason": "offline"}]
    assert _run(path, "read").tools_not_run == []  # a glob names no tool of its own
    live = _run(path, "read", live_tools=True)
    assert live.status == "ok", live.error
    assert "files__read_note: no note 'test'" in str(live.output)
    assert not live.tools_not_run


def test_toolsets_and_allow_lists_choose_among_the_servers_tools(tmp_path: Path) -> None:
    record = _run(_agent(tmp_path), "read", live_tools=True)
    # "files__read_*" offers read_note only; delete_note is denied, the rest not named.
    assert "files__read_note" in str(record.output)
    assert "files__delete_note" not in str(record.output)
    assert "files__whoami" not in str(record.output)


def test_secrets_in_env_reach_the_server_but_never_the_record(tmp_path: Path) -> None:
    record = _run(_agent(tmp_path), "secret", live_tools=True)
    assert record.status == "ok", record.error
    assert "files__secret" in str(record.output)
    assert "tok-s3cret" not in record.to_json()


def test_confirm_names_the_tools_that_need_the_persons_approval(tmp_path: Path) -> None:
    path = _agent(tmp_path, server_options="confirm: [read_*]")
    refused = _run(path, "read", live_tools=True)
    assert {"name": "files__read_note", "reason": "unconfirmed"} in refused.tools_not_run
    approved = _run(path, "read", live_tools=True, approve_all=True)
    assert approved.confirmations[0]["name"] == "files__read_note"
    assert "no note 'test'" in str(approved.output)


def test_a_server_that_cannot_start_fails_the_run_clearly(tmp_path: Path) -> None:
    (tmp_path / "servers").mkdir()
    (tmp_path / "servers" / "notes_server.py").write_text("raise SystemExit(1)\n")
    path = tmp_path / "notes.yaml"
    path.write_text(
        "version: 1\nname: notes\nmodel: test\n"
        f"tools:\n  files:\n    mcp: {{command: [{sys.executable}, servers/notes_server.py]}}\n"
        "methods:\n  read: {prompt: Read.}\n"
    )
    record = _run(path, "read", live_tools=True)
    assert record.status == "failed"
    assert record.error is not None
    assert "MCP server 'files'" in record.error["message"]
    assert "failed to start" in record.error["message"]


@pytest.mark.parametrize(
    ("mcp", "message"),
    [
        ("{command: python}", "expected a list"),
        ("{command: [python], url: 'http://127.0.0.1:1/mcp'}", "exactly one of 'command' or 'url'"),
        ("{url: 'ftp://example.com/mcp'}", "must be an http:// or https:// URL"),
        ("{command: [python], comand: 1}", "comand"),
        ("{command: [no-such-program-here]}", "was not found on PATH"),
        ("{command: [python], env: {K: 3}}", "expected a string"),
        ("{url: 'http://127.0.0.1:1/mcp', env: {K: v}}", "'env' and 'cwd' apply to a 'command'"),
    ],
)
def test_bad_server_config_is_a_positioned_error(tmp_path: Path, mcp: str, message: str) -> None:
    path = tmp_path / "agent.yaml"
    path.write_text(
        f"version: 1\nname: a\nmodel: test\ntools:\n  files:\n    mcp: {mcp}\n"
        "methods:\n  m: {prompt: Hi.}\n"
    )
    with pytest.raises(ConfigError) as failed:
        compile_path(path)
    text = str(failed.value)
    assert message in text
    assert f"{path}:6:" in text or f"{path}:5:" in text


def test_a_toolset_naming_a_server_tool_compiles_without_starting_the_server(
    tmp_path: Path,
) -> None:
    path = _agent(tmp_path, extra="")
    program = compile_path(path, environ={**os.environ, "OPENPROGRAM_NOTES_TOKEN": "x"})
    server = program.agents["notes"].tool_servers[0]
    assert server._connection is None  # nothing started by compiling
    assert [name for name, _ in server.expected] == ["files__secret"]


def test_check_connect_reports_a_tool_the_server_does_not_offer(tmp_path: Path) -> None:
    path = _agent(tmp_path, extra="")
    text = path.read_text().replace("tools_allow: [files__secret]", "tools_allow: [files__secrets]")
    path.write_text(text)
    env = {**os.environ, "OPENPROGRAM_NOTES_TOKEN": "tok-s3cret"}
    cli = [sys.executable, "-m", "openprogram_yaml", "check"]
    plain = subprocess.run([*cli, str(path)], capture_output=True, text=True, env=env, cwd=REPO)
    assert plain.returncode == 0, plain.stderr
    connected = subprocess.run(
        [*cli, "--connect", str(path)], capture_output=True, text=True, env=env, cwd=REPO
    )
    assert connected.returncode == 2, connected.stdout + connected.stderr
    out = connected.stdout + connected.stderr
    assert f"{path}:18:19:" in out
    assert "'files__secrets'" in out and "did you mean 'files__secret'" in out
    assert "tok-s3cret" not in out


# --- the command line ---------------------------------------------------------------------------


EXAMPLE = REPO / "examples" / "mcp_notes.yaml"


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "openprogram_yaml", *args]
    return subprocess.run(command, capture_output=True, text=True, cwd=REPO, timeout=120)


def test_the_example_runs_offline_with_live_tools_and_its_tests_pass() -> None:
    run = _cli(str(EXAMPLE), "summarize", "-i", "name=release", "--live-tools", "--json")
    assert run.returncode == 0, run.stderr
    assert "notes__read_note: there is no note called 'test'" in run.stdout
    assert "notes__list_notes: groceries" in run.stdout
    tests = _cli("test", str(EXAMPLE))
    assert tests.returncode == 0, tests.stdout + tests.stderr
    connect = _cli("check", "--connect", str(EXAMPLE))
    assert connect.returncode == 0, connect.stderr


def test_ctrl_c_during_a_call_leaves_no_server_process(tmp_path: Path) -> None:
    # The server tells its pid over a socket on 127.0.0.1 the test listens on: accepting
    # waits at most 60 s (a server that never starts fails the test, it does not hang it).
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(60)
    port = listener.getsockname()[1]
    server = tmp_path / "slow.py"
    server.write_text(
        textwrap.dedent(
            f"""\
            import asyncio, os, socket
            from mcp.server import MCPServer
            server = MCPServer("slow")

            @server.tool()
            async def wait_forever() -> str:
                \"\"\"Never answers.\"\"\"
                await asyncio.Event().wait()
                return ""

            with socket.create_connection(("127.0.0.1", {port})) as tell:
                tell.sendall(str(os.getpid()).encode())
            server.run()
            """
        )
    )
    agent = tmp_path / "agent.yaml"
    agent.write_text(
        "version: 1\nname: a\nmodel: test\n"
        f"tools:\n  slow:\n    mcp: {{command: [{sys.executable}, slow.py]}}\n"
        "methods:\n  m: {prompt: Wait.}\n"
    )
    cli = subprocess.Popen(
        [sys.executable, "-m", "openprogram_yaml", str(agent), "m", "--live-tools"],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        with listener:
            told, _ = listener.accept()  # the server has started
        with told:
            told.settimeout(60)
            pid = int(told.makefile("rb").read())  # to the server's close
        assert _alive(pid)
        cli.send_signal(signal.SIGINT)
        cli.communicate(timeout=60)
    finally:
        if cli.poll() is None:
            cli.kill()
            cli.communicate()
    assert cli.returncode != 0
    assert not _alive(pid)


def test_concurrent_served_runs_share_one_server_which_stops_with_the_service(
    tmp_path: Path,
) -> None:
    from openprogram_yaml.run.service import RunService

    path = _agent(
        tmp_path,
        extra="  pid:\n    prompt: Who are you?\n    tools_allow: [files__whoami]\n",
    )
    program = compile_path(path, environ={**os.environ, "OPENPROGRAM_NOTES_TOKEN": "x"})

    async def go() -> list[RunRecord]:
        service = RunService(lambda: (program, VersionStamp(program.version)), live_tools=True)
        runs = [service.start(None, "pid", {}) for _ in range(4)]
        records = list(await asyncio.gather(*runs))
        await service.shutdown(5)
        return records

    records = asyncio.run(go())
    assert all(r.status == "ok" for r in records), [r.error for r in records]
    pids = {str(r.output).rsplit("files__whoami: ", 1)[1] for r in records}
    assert len(pids) == 1  # one server for the four runs
    assert not _alive(int(pids.pop()))


def test_a_reload_stops_the_old_versions_server_once_its_runs_end(tmp_path: Path) -> None:
    from openprogram_yaml.run.service import RunService

    path = _agent(
        tmp_path, extra="  pid:\n    prompt: Who are you?\n    tools_allow: [files__whoami]\n"
    )
    environ = {**os.environ, "OPENPROGRAM_NOTES_TOKEN": "x"}
    versions = [compile_path(path, environ=environ)]

    async def go() -> tuple[int, int, bool]:
        service = RunService(
            lambda: (versions[-1], VersionStamp(versions[-1].version)), live_tools=True
        )
        first = await service.start(None, "pid", {})
        path.write_text(path.read_text().replace("Who are you?", "Who are you now?"))
        versions.append(compile_path(path, environ=environ))  # the reload's new version
        second = await service.start(None, "pid", {})
        old, new = (int(str(r.output).rsplit("files__whoami: ", 1)[1]) for r in (first, second))
        new_alive = _alive(new)
        await service.shutdown(5)
        return old, new, new_alive

    old, new, new_alive = asyncio.run(go())
    assert old != new
    assert not _alive(old) and new_alive  # the old one stopped when the new version ran
    assert not _alive(new)  # and the new one with the service


def test_every_env_value_of_a_server_is_kept_secret_whatever_the_variable_is_called(
    tmp_path: Path,
) -> None:
    path = _agent(tmp_path)
    path.write_text(path.read_text().replace("OPENPROGRAM_NOTES_TOKEN", "OPENPROGRAM_NOTES_DB"))
    program = compile_path(path, environ={**os.environ, "OPENPROGRAM_NOTES_DB": "db-passphrase"})
    record = asyncio.run(
        execute_run(program, VersionStamp(hash="v"), None, "secret", {}, live_tools=True)
    )
    assert record.status == "ok", record.error
    assert "files__secret" in record.to_json()
    assert "db-passphrase" not in record.to_json()


def test_a_replay_answers_from_the_recording_and_starts_no_server(tmp_path: Path) -> None:
    path = _agent(tmp_path)
    recordings = tmp_path / "recordings"
    env = {**os.environ, "OPENPROGRAM_NOTES_TOKEN": "tok-s3cret"}
    cli = [sys.executable, "-m", "openprogram_yaml", str(path), "read", "--live-tools", "--json"]
    recorded = subprocess.run(
        [*cli, "--record", str(recordings)], capture_output=True, text=True, env=env, cwd=REPO
    )
    assert recorded.returncode == 0, recorded.stderr
    # The server cannot start any more: a replay that tried would fail.
    (tmp_path / "servers" / "notes_server.py").write_text("raise SystemExit('started!')\n")
    replayed = subprocess.run(
        [*cli, "--replay", str(recordings)], capture_output=True, text=True, env=env, cwd=REPO
    )
    assert replayed.returncode == 0, replayed.stderr
    assert "files__read_note: no note 'test'" in replayed.stdout
    assert "started!" not in replayed.stdout + replayed.stderr


def test_an_image_a_tool_returns_reaches_the_provider(tmp_path: Path) -> None:
    # The model (a Chat Completions server on 127.0.0.1) calls the server's picture tool;
    # the next request shows it the image (after the text-only tool message).
    function = {"name": "files__picture", "arguments": "{}"}
    call = {"id": "call_1", "type": "function", "function": function}
    with LoopbackServer() as model:
        model.add(json_reply(chat_completion(tool_calls=[call])))
        model.add(json_reply(chat_completion("A tiny PNG.")))
        extra = textwrap.dedent(
            f"""\
              look:
                prompt: Look at the picture.
                model: local:llama3
                tools_allow: [files__picture]
            runtimes:
              - {{match: "local:*", runtime: openai, options: {{base_url: "{model.url}/v1"}}}}
            """
        )
        record = _run(_agent(tmp_path, extra), "look", live_tools=True)
        requests = model.requests
    assert record.status == "ok", record.error
    assert record.output == "A tiny PNG."
    messages = requests[1].json["messages"]
    assert messages[-2] == {
        "role": "tool",
        "tool_call_id": "call_1",
        "content": "(shown in the next message)",
    }
    assert messages[-1]["content"][1] == {
        "type": "image_url",
        "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="},
    }


@pytest.mark.parametrize(
    ("tools", "name"),
    [
        # The agent's own tool: the server's tool 'read' would take its place at the run.
        ("  files__read:\n    python: tools:read\n    confirm: true\n", "files__read"),
        # Another MCP entry: its tool 'y' and files' tool 'x__y' would meet.
        ("  files__x:\n    mcp: {command: [python, s.py]}\n", "files__x"),
    ],
)
def test_a_tool_named_as_a_servers_tool_would_be_is_a_positioned_error(
    tmp_path: Path, tools: str, name: str
) -> None:
    (tmp_path / "tools.py").write_text("def read() -> str:\n    return 'own'\n")
    path = tmp_path / "agent.yaml"
    path.write_text(
        "version: 1\nname: a\nmodel: test\ntools:\n  files:\n    mcp: {command: [python, s.py]}\n"
        + tools
        + "methods:\n  m: {prompt: Hi.}\n"
    )
    with pytest.raises(ConfigError) as failed:
        compile_path(path)
    text = str(failed.value)
    assert f"{path}:7:" in text or f"{path}:8:" in text, text
    assert f"'{name}' is the name a tool of the MCP server 'files' gets" in text
