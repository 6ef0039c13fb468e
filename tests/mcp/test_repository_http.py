"""``openprogram-run mcp PATH --http``: streamable HTTP on 127.0.0.1, driven by the official
SDK's client against the server in a subprocess, with ``serve``'s token rule and the SDK's
DNS-rebinding protection."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path
from typing import Any

import anyio
import httpx
import httpx2
import mcp_types as types
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.client.subscriptions import ToolsListChanged
from mcp_repository import AGENT, TIMEOUT_S, http_server, save, write_agent

from openprogram_yaml.mcp.driver import _bind
from openprogram_yaml.mcp.http import TokenGuard
from openprogram_yaml.runner.cli import main

TOKEN = "tok-5b1e9c0d7a2f4e68"

INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "test", "version": "1"},
    },
}
JSON_HEADERS = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}


@pytest.mark.parametrize("mode", ["auto", "legacy"])
def test_a_client_lists_and_calls_over_http_in_either_protocol_era(
    tmp_path: Path, mode: str
) -> None:
    agent = write_agent(tmp_path)

    async def scenario(url: str) -> tuple[str, list[str], Any]:
        async with Client(url, mode=mode) as client:
            tools = [t.name for t in (await client.list_tools()).tools]
            result = await client.call_tool("desk.classify", {"ticket": "It crashes"})
            return client.protocol_version, tools, result

    with http_server(agent, tmp_path / "server.log") as url:
        assert url.startswith("http://127.0.0.1:")
        version, tools, result = asyncio.run(scenario(url))
    assert version == ("2026-07-28" if mode == "auto" else "2025-11-25")
    assert tools == ["desk.classify", "desk.reply"]
    assert not result.is_error and result.structured_content["label"] in ("bug", "billing")
    assert "stopped" in (tmp_path / "server.log").read_text()  # SIGTERM: a clean stop


def test_a_reload_reaches_a_listening_http_client(tmp_path: Path) -> None:
    agent = write_agent(tmp_path)
    renamed = AGENT.replace("  reply:", "  answer:")

    async def scenario(url: str) -> list[str]:
        async with Client(url) as client:
            async with client.listen(tools_list_changed=True) as sub:
                save(agent, renamed)
                with anyio.fail_after(TIMEOUT_S):
                    event = await sub.__anext__()
                assert isinstance(event, ToolsListChanged)
            return [t.name for t in (await client.list_tools()).tools]

    with http_server(agent, tmp_path / "server.log") as url:
        tools = asyncio.run(scenario(url))
    assert tools == ["desk.answer", "desk.classify"]


def test_a_reload_reaches_a_handshake_era_http_client_on_its_session(tmp_path: Path) -> None:
    agent = write_agent(tmp_path)
    changed = anyio.Event()

    async def on_message(message: object) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            changed.set()

    async def scenario(url: str) -> list[str]:
        async with Client(url, mode="legacy", message_handler=on_message) as client:
            # The handshake says the lists change, as they do (it said they did not).
            capabilities = client.server_capabilities
            assert capabilities.tools is not None and capabilities.tools.list_changed
            assert capabilities.prompts is not None and capabilities.prompts.list_changed
            await client.list_tools()
            save(agent, AGENT.replace("  reply:", "  answer:"))
            with anyio.fail_after(TIMEOUT_S):
                await changed.wait()
            return [t.name for t in (await client.list_tools()).tools]

    with http_server(agent, tmp_path / "server.log") as url:
        tools = asyncio.run(scenario(url))
    assert tools == ["desk.answer", "desk.classify"]


def test_with_a_token_every_request_must_show_it(tmp_path: Path) -> None:
    agent = write_agent(tmp_path)

    async def with_token(url: str) -> list[str]:
        headers = {"Authorization": f"Bearer {TOKEN}"}
        async with (
            httpx2.AsyncClient(headers=headers) as http,
            Client(streamable_http_client(url, http_client=http)) as client,
        ):
            return [t.name for t in (await client.list_tools()).tools]

    with http_server(agent, tmp_path / "server.log", "--token", TOKEN) as url:
        tools = asyncio.run(with_token(url))
        missing = httpx.post(url, json=INITIALIZE, headers=JSON_HEADERS)
        wrong = httpx.post(
            url, json=INITIALIZE, headers={**JSON_HEADERS, "Authorization": "Bearer nope"}
        )
    assert tools == ["desk.classify", "desk.reply"]
    for refused in (missing, wrong):
        assert refused.status_code == 401
        assert refused.headers["WWW-Authenticate"].startswith("Bearer")
        assert "needs its token" in refused.json()["error"]
    log = (tmp_path / "server.log").read_text()
    assert "token required" in log and TOKEN not in log


def test_a_host_beyond_loopback_without_a_token_refuses_to_start(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    agent = write_agent(tmp_path)
    assert main(["mcp", str(agent), "--http", "--host", "0.0.0.0"]) == 2
    err = capsys.readouterr().err
    assert "needs a token" in err and "OPENPROGRAM_SERVE_TOKEN" in err


def test_a_rebound_host_name_or_another_site_is_refused(tmp_path: Path) -> None:
    agent = write_agent(tmp_path)
    with http_server(agent, tmp_path / "server.log") as url:
        port = url.split(":")[2].split("/")[0]
        rebound = httpx.post(url, json=INITIALIZE, headers={**JSON_HEADERS, "Host": "evil.test"})
        page = httpx.post(
            url, json=INITIALIZE, headers={**JSON_HEADERS, "Origin": "http://evil.test"}
        )
        own = httpx.post(
            url,
            json=INITIALIZE,
            headers={
                **JSON_HEADERS,
                "Host": f"localhost:{port}",
                "Origin": f"http://localhost:{port}",
            },
        )
    assert rebound.status_code == 421
    assert page.status_code == 403
    assert own.status_code == 200


def test_beyond_loopback_any_host_is_served_but_only_its_own_origin() -> None:
    """Bound beyond loopback, the token guard serves any Host but refuses an Origin that is
    not that Host (a page of another site), before the token is even looked at."""

    async def ok(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 204, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    async def calls() -> list[httpx.Response]:
        guard = TokenGuard(ok, TOKEN, any_host=True)
        auth = {"Authorization": f"Bearer {TOKEN}"}
        transport = httpx.ASGITransport(app=guard)
        async with httpx.AsyncClient(transport=transport, base_url="http://box.lan:8766") as c:
            return [
                await c.post("/mcp", headers=auth),
                await c.post("/mcp", headers={**auth, "Origin": "https://box.lan:8766"}),
                await c.post("/mcp", headers={**auth, "Origin": "http://evil.test"}),
                await c.post("/mcp", headers={"Origin": "http://box.lan:8766"}),
            ]

    bare, own, foreign, no_token = asyncio.run(calls())
    assert bare.status_code == 204 and own.status_code == 204
    assert foreign.status_code == 403 and "another site" in foreign.json()["error"]
    assert no_token.status_code == 401


def test_connections_to_the_http_server_send_without_delay() -> None:
    """TCP_NODELAY on every connection: without it a JSON reply (written as headers, then
    body) waited about 40 ms for the client's delayed ACK (6 ms a call instead of 52)."""

    async def scenario() -> int:
        accepted: asyncio.Future[int] = asyncio.get_running_loop().create_future()

        class Probe(asyncio.Protocol):
            def connection_made(self, transport: asyncio.BaseTransport) -> None:
                sock = transport.get_extra_info("socket")
                accepted.set_result(sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
                transport.close()

        listening = _bind("127.0.0.1", 0)
        server = await asyncio.get_running_loop().create_server(Probe, sock=listening)
        _, writer = await asyncio.open_connection(*listening.getsockname())
        nodelay = await asyncio.wait_for(accepted, TIMEOUT_S)
        writer.close()
        server.close()
        await server.wait_closed()
        return nodelay

    assert asyncio.run(scenario()) == 1


def test_a_port_in_use_or_http_flags_without_http_are_usage_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    agent = write_agent(tmp_path)
    taken = _bind("127.0.0.1", 0)
    try:
        port = str(taken.getsockname()[1])
        assert main(["mcp", str(agent), "--http", "--port", port, "--no-watch"]) == 2
        assert f"cannot listen on 127.0.0.1:{port}" in capsys.readouterr().err
    finally:
        taken.close()
    assert main(["mcp", str(agent), "--token", TOKEN]) == 2
    assert "apply to --http" in capsys.readouterr().err
