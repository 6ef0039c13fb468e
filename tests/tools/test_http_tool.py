"""``http`` tools against a real HTTP server on 127.0.0.1 started by each test."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
from collections.abc import Callable
from typing import Any

import pytest
from loopback import LoopbackServer, Reply, Request, json_reply, status_reply

from openprogram_yaml.compile.url_templates import UrlTemplate
from openprogram_yaml.errors import ToolError
from openprogram_yaml.providers.test import Reply as ModelReply
from openprogram_yaml.tools.base import ToolBuildError
from openprogram_yaml.tools.http import HttpTool

SECRET = "sk-live-0123456789abcdef"
ORDER_PARAMS = {
    "type": "object",
    "properties": {"order_id": {"type": "string"}, "qty": {"type": "integer"}},
    "required": ["order_id"],
}


def run(tool: HttpTool, **arguments: Any) -> Any:
    async def go() -> Any:
        try:
            return await tool.execute(**arguments)
        finally:
            await tool.aclose()

    return asyncio.run(go())


@pytest.fixture
def make(compile_template: Callable[..., Any]) -> Callable[..., HttpTool]:
    """``make(url, method=…, headers={…}, query={…}, body=…, **options)`` with templates."""
    names = ("order_id", "qty", "target")

    def _make(url: str, *, method: str = "GET", **options: Any) -> HttpTool:
        for key in ("headers", "query"):
            if key in options:
                options[key] = {k: compile_template(v, *names) for k, v in options[key].items()}
        body = options.pop("body", None)
        if isinstance(body, str):
            body = compile_template(body, *names)
        elif isinstance(body, dict):
            body = {k: compile_template(v, *names) for k, v in body.items()}
        params = options.pop("parameters", ORDER_PARAMS)
        return HttpTool(
            "lookup_order",
            "Fetch an order",
            params,
            method,
            UrlTemplate(compile_template(url, *names)),
            body=body,
            **options,
        )

    return _make


def test_get_with_templated_url_query_and_headers_returns_parsed_json(
    server: LoopbackServer, make: Callable[..., HttpTool]
) -> None:
    server.add(json_reply({"id": "A-1", "status": "shipped"}))
    tool = make(
        server.url + "/orders/{{ order_id }}",
        headers={"Authorization": f"Bearer {SECRET}"},
        query={"fields": "status", "q": "{{ order_id }} & more"},
    )
    assert run(tool, order_id="A-1") == {"id": "A-1", "status": "shipped"}
    request = server.requests[0]
    assert request.method == "GET"
    assert request.path == "/orders/A-1?fields=status&q=A-1+%26+more"
    assert request.headers["authorization"] == f"Bearer {SECRET}"


def test_post_json_body_keeps_argument_types_and_text_body_is_sent_as_is(
    server: LoopbackServer, make: Callable[..., HttpTool]
) -> None:
    server.add(json_reply({"ok": True}), Reply(200, b"created", {"content-type": "text/plain"}))
    tool = make(
        server.url + "/orders",
        method="post",
        body={"id": "{{ order_id }}", "qty": "{{ qty }}", "note": "order {{ order_id }}"},
    )
    assert run(tool, order_id="A-1", qty=3) == {"ok": True}
    assert server.requests[0].json == {"id": "A-1", "qty": 3, "note": "order A-1"}
    assert server.requests[0].headers["content-type"] == "application/json"

    text_tool = make(server.url + "/notes", method="PUT", body="qty={{ qty }}")
    assert run(text_tool, order_id="A-1", qty=2) == "created"
    assert (server.requests[1].method, server.requests[1].body) == ("PUT", b"qty=2")
    # A text body is sent with no Content-Type the tool did not declare (aiohttp, the shared
    # client's library, would otherwise label it application/octet-stream).
    assert "content-type" not in {name.lower() for name in server.requests[1].headers}


def test_query_values_join_a_query_the_url_already_has(
    server: LoopbackServer, make: Callable[..., HttpTool]
) -> None:
    server.add(json_reply({"ok": True}))
    tool = make(server.url + "/orders?v=2", query={"id": "{{ order_id }}"})
    assert run(tool, order_id="A 1") == {"ok": True}
    assert server.requests[0].path == "/orders?v=2&id=A+1"


def test_error_status_is_a_tool_error_with_status_and_excerpt_but_no_secret(
    server: LoopbackServer, make: Callable[..., HttpTool]
) -> None:
    # A server that echoes the credential back must not get it into the model's context.
    server.add(status_reply(404, {"error": f"no order A-9 (auth {SECRET})"}))
    tool = make(server.url + "/orders/{{ order_id }}?key=k123", headers={"X-Api-Key": SECRET})
    with pytest.raises(ToolError) as info:
        run(tool, order_id="A-9")
    message = str(info.value)
    assert "HTTP 404" in message and "no order A-9" in message
    assert "/orders/A-9" in message
    assert SECRET not in message and "k123" not in message


def test_secret_header_values_are_blanked_out_of_results(
    server: LoopbackServer, make: Callable[..., HttpTool]
) -> None:
    server.add(lambda req: json_reply({"seen": req.headers["authorization"]}))
    tool = make(server.url + "/echo", headers={"Authorization": f"Bearer {SECRET}"})
    result = run(tool, order_id="x")
    assert SECRET not in json.dumps(result)


@pytest.mark.parametrize(
    "target", ["file:///etc/passwd", "ftp://example.com/x", "gopher://127.0.0.1:70/", "/relative"]
)
def test_a_url_whose_origin_a_value_would_supply_is_a_build_error(
    make: Callable[..., HttpTool], target: str
) -> None:
    params = {"type": "object", "properties": {"target": {"type": "string"}}}
    with pytest.raises(ToolBuildError, match="scheme and host written out") as info:
        make("{{ target }}", parameters=params)
    assert info.value.field == "url"


def test_a_body_over_the_cap_is_cut_with_a_marker(
    server: LoopbackServer, make: Callable[..., HttpTool]
) -> None:
    server.add(Reply(200, b"x" * 5000, {"content-type": "text/plain"}))
    result = run(make(server.url + "/big", max_bytes=100), order_id="x")
    assert result.startswith("x" * 100)
    assert "[truncated: the response is larger than 100 bytes" in result
    assert result.count("x") == 100


@pytest.mark.parametrize(("status", "max_bytes"), [(200, 500), (502, 500), (502, 1 << 20)])
def test_a_secret_cut_by_a_cap_shows_no_part_of_it(
    server: LoopbackServer, make: Callable[..., HttpTool], status: int, max_bytes: int
) -> None:
    # The body's cut (max_bytes) or the error excerpt's (500 characters) falls inside the
    # echoed credential: its first half must not reach the model either.
    body = ("x" * 490 + SECRET + "y" * 100).encode()
    server.add(Reply(status, body, {"content-type": "text/plain"}))
    tool = make(server.url + "/echo", headers={"X-Api-Key": SECRET}, max_bytes=max_bytes)
    if status == 200:
        shown = run(tool, order_id="x")
    else:
        with pytest.raises(ToolError) as info:
            run(tool, order_id="x")
        shown = str(info.value)
    assert "x" * 490 in shown
    assert SECRET[:6] not in shown


def test_timeout_is_a_tool_error(server: LoopbackServer, make: Callable[..., HttpTool]) -> None:
    release = threading.Event()

    def slow(req: Request) -> Reply:
        release.wait(5)
        return json_reply({})

    server.add(slow)
    try:
        with pytest.raises(ToolError, match=r"timed out after 0\.05s"):
            run(make(server.url + "/slow", timeout_s=0.05), order_id="x")
    finally:
        release.set()


def test_connection_failure_is_a_tool_error(make: Callable[..., HttpTool]) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # closed again before the request: nobody listens
    tool = make(f"http://127.0.0.1:{port}/x", headers={"Authorization": SECRET})
    with pytest.raises(ToolError, match="failed") as info:
        run(tool, order_id="x")
    assert SECRET not in str(info.value)


def test_arguments_failing_the_schema_send_nothing(
    server: LoopbackServer, make: Callable[..., HttpTool]
) -> None:
    with pytest.raises(ToolError, match="invalid arguments"):
        run(make(server.url + "/orders/{{ order_id }}"), order_id=7)
    assert server.requests == []


def test_a_templated_host_must_be_one_of_the_declared_hosts(
    server: LoopbackServer, make: Callable[..., HttpTool]
) -> None:
    server.add(json_reply({"ok": True}))
    port = server.url.rsplit(":", 1)[1]
    tool = make(f"http://{{{{ target }}}}:{port}/orders", hosts=["127.0.0.*:" + port])
    assert run(tool, order_id="x", target="127.0.0.1") == {"ok": True}
    for target in ("localhost", "127.0.0.1:1@127.0.0.1"):
        with pytest.raises(ToolError, match="refused"):
            run(tool, order_id="x", target=target)
    assert len(server.requests) == 1


@pytest.mark.parametrize(
    ("url", "hosts", "message"),
    [
        ("https://a.example.com/{{ order_id }}", ["*.example.org"], "not one of its 'hosts'"),
        ("https://{{ target }}/x", ["api.example.com/x"], "is not a host"),
        ("https://{{ target }}/x", [], "or list the hosts the tool may reach"),
    ],
)
def test_hosts_that_cannot_match_are_build_errors(
    make: Callable[..., HttpTool], url: str, hosts: list[str], message: str
) -> None:
    with pytest.raises(ToolBuildError, match=message):
        make(url, hosts=hosts)


def test_unknown_method_is_a_build_error(make: Callable[..., HttpTool]) -> None:
    with pytest.raises(ToolBuildError, match="unknown HTTP method 'FETCH'") as info:
        make("http://127.0.0.1/", method="FETCH")
    assert info.value.field == "method"


def test_the_model_sees_the_response_through_runtime_exec(
    server: LoopbackServer, make: Callable[..., HttpTool], run_with_model: Callable[..., Any]
) -> None:
    server.add(json_reply({"id": "A-1", "status": "shipped"}), status_reply(500, {"error": "down"}))
    tool = make(server.url + "/orders/{{ order_id }}")
    model = run_with_model(
        tool,
        [
            ModelReply.call("lookup_order", {"order_id": "A-1"}),
            ModelReply.call("lookup_order", {"order_id": "A-2"}),
            "done",
        ],
    )
    ok = model.requests[1].messages[-1]
    assert (json.loads(ok.text()), ok.is_error) == ({"id": "A-1", "status": "shipped"}, False)
    failed = model.requests[2].messages[-1]
    assert failed.is_error and "HTTP 500" in failed.text()
