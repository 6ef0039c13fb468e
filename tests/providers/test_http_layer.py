"""The shared HTTP layer: the turn template, redaction, local servers, SSE, clients per loop."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

import httpx
import pytest
from loopback import LoopbackServer, json_reply, sse_reply

from openprogram_yaml.providers import _shape as shape
from openprogram_yaml.providers._http import (
    HTTPRuntime,
    SSEEvent,
    StreamAssembler,
    is_local_url,
    iter_sse,
)
from openprogram_yaml.providers.http_client import ClientPool
from openprogram_yaml.redaction import redact
from openprogram_yaml.runtimes.protocol import (
    DeltaCallback,
    Message,
    RuntimeDelta,
    RuntimeResult,
    ToolSpec,
    TurnFailure,
)


def test_redact_replaces_every_secret() -> None:
    text = "key sk-abcdef and sk-abcdef again, header tok-123456"
    assert (
        redact(text, ["sk-abcdef", "tok-123456", None, ""]) == "key *** and *** again, header ***"
    )


@pytest.mark.parametrize(
    ("url", "local"),
    [
        ("http://127.0.0.1:11434/v1", True),
        ("http://localhost:8000/v1", True),
        ("http://[::1]:8080", True),
        ("http://192.168.1.20:1234/v1", True),
        ("http://gpu-box.local:8000", True),
        ("https://api.openai.com/v1", False),
        ("https://openrouter.ai/api/v1", False),
    ],
)
def test_local_servers_need_no_key(url: str, local: bool) -> None:
    assert is_local_url(url) is local


async def _lines(*lines: str) -> AsyncIterator[str]:
    for line in lines:
        yield line


def test_sse_parser_follows_the_event_stream_rules() -> None:
    async def collect() -> list[SSEEvent]:
        return [
            e
            async for e in iter_sse(
                _lines(
                    ": keep-alive comment",
                    "event: message_start",
                    'data: {"a":',
                    "data: 1}",
                    "",
                    "",
                    "data:no-space",
                    "id: 7",
                    "",
                    "event: ping",
                    "",  # no data: not dispatched
                    "data: [DONE]",
                )
            )
        ]

    events = asyncio.run(collect())
    assert [(e.event, e.data) for e in events] == [
        ("message_start", '{"a":\n1}'),
        ("message", "no-space"),
        ("message", "[DONE]"),
    ]
    assert events[1].id == "7"


def test_client_pool_keeps_one_client_per_event_loop() -> None:
    made: list[httpx.AsyncClient] = []

    def factory() -> httpx.AsyncClient:
        client = httpx.AsyncClient()
        made.append(client)
        return client

    pool = ClientPool(factory)

    async def twice() -> tuple[httpx.AsyncClient, httpx.AsyncClient]:
        return pool.get(), pool.get()

    a, b = asyncio.run(twice())
    assert a is b
    c, _ = asyncio.run(twice())  # a new loop (like exec() on a fresh loop) gets a new client
    assert c is not a
    assert len(made) == 2

    asyncio.run(pool.aclose())
    assert pool.closed


class _EchoAssembler(StreamAssembler):
    def __init__(self, provider: str, on_delta: DeltaCallback) -> None:
        self.provider, self.on_delta, self.text = provider, on_delta, ""

    def feed(self, event: SSEEvent) -> None:
        data = self.decode(event)
        if data is not None:
            self.text += shape.str_at(data, "delta")
            self.on_delta(RuntimeDelta("text", shape.str_at(data, "delta")))
            self.done = bool(data.get("end"))

    def result(self) -> RuntimeResult:
        return RuntimeResult(content=self.text)


class EchoRuntime(HTTPRuntime):
    """The module docstring's sketch: a provider that writes its wire format only."""

    runtime_id, path = "echo", "/v1/generate"
    default_base_url, default_key_env = "https://api.echo.example", "ECHO_API_KEY"

    def auth_headers(self, key: str | None) -> dict[str, str]:
        return {"authorization": f"Bearer {key}"} if key else {}

    def build_body(
        self,
        model: str,
        prompt: str | Sequence[Message],
        system_prompt: str | None,
        options: Mapping[str, Any],
        stream: bool,
    ) -> dict[str, Any]:
        return {"model": model, "input": prompt, "stream": stream}

    def parse_reply(self, data: Mapping[str, Any]) -> RuntimeResult | TurnFailure:
        return RuntimeResult(content=shape.str_at(data, "output"))

    def stream_assembler(self, on_delta: DeltaCallback) -> StreamAssembler:
        return _EchoAssembler(self.provider, on_delta)


def test_a_provider_that_writes_only_its_wire_format_gets_the_whole_turn(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("ECHO_API_KEY", raising=False)
    no_key = asyncio.run(EchoRuntime().run_turn("hi", model_ref="echo:e1"))
    assert no_key.failure is not None and "no API key: set ECHO_API_KEY" in no_key.error

    deltas: list[RuntimeDelta] = []
    events = [{"delta": "po"}, {"delta": "ng", "end": True}]
    with LoopbackServer() as server:
        server.add(
            json_reply({"output": "pong"}),
            sse_reply(f"data: {json.dumps(e)}\n\n" for e in events),
            json_reply({"error": {"message": "no such model sk-echo-secret"}}, status=404),
        )
        runtime = EchoRuntime(base_url=server.url, api_key="sk-echo-secret")

        async def turns() -> list[RuntimeResult]:
            try:
                return [
                    await runtime.run_turn("ping", model_ref="echo:e1"),
                    await runtime.run_turn("ping", model_ref="echo:e1", on_delta=deltas.append),
                    await runtime.run_turn("ping", model_ref="echo:nope"),
                ]
            finally:
                await runtime.aclose()

        whole, streamed, missing = asyncio.run(turns())
        sent = server.requests[0]
    assert (sent.path, sent.json) == (
        "/v1/generate",
        {"model": "e1", "input": "ping", "stream": False},
    )
    assert sent.headers["authorization"] == "Bearer sk-echo-secret"
    assert whole.content == "pong"
    assert whole.metadata == {"runtime": "echo", "provider": "echo", "model": "e1"}
    assert (streamed.content, [d.content for d in deltas]) == ("pong", ["po", "ng"])
    assert missing.failure is not None
    assert (missing.failure.reason, missing.failure.retryable) == ("invalid_request", False)
    assert "sk-echo-secret" not in missing.failure.message


def test_settings_come_from_the_keywords_and_an_unknown_one_names_the_runtime() -> None:
    runtime = EchoRuntime(base_url="http://127.0.0.1:9/", api_key="sk-echo-secret", timeout_s=3)
    assert (runtime.settings.base_url, runtime.settings.read_timeout_s) == ("http://127.0.0.1:9", 3)
    assert "sk-echo-secret" not in repr(runtime.settings)
    with pytest.raises(TypeError, match=r"^EchoRuntime.__init__\(\) got an unexpected keyword "):
        EchoRuntime(bse="http://127.0.0.1:9")  # type: ignore[call-arg]


def test_a_body_holding_a_cycle_fails_its_turn_before_anything_is_sent() -> None:
    # Bodies are encoded without the encoder's cycle check: a schema that contains itself
    # must still end as a failed turn, not a crash or a request.
    from openprogram_yaml.providers.openai import OpenAIRuntime

    parameters: dict[str, Any] = {"type": "object", "properties": {}}
    parameters["properties"]["again"] = parameters
    with LoopbackServer() as server:
        runtime = OpenAIRuntime(base_url=f"{server.url}/v1")
        tools = [ToolSpec("loop", "A tool whose schema contains itself.", parameters)]
        result = asyncio.run(runtime.run_turn("hi", model_ref="openai:m", tools=tools))
        requests = server.requests
    assert requests == []
    assert result.failure is not None and not result.failure.retryable
