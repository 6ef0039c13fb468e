"""The shared HTTP layer: redaction, local servers, SSE, clients per loop."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import AsyncIterator

import httpx
import pytest

from openprogram_yaml.providers._http import SSEEvent, is_local_url, iter_sse
from openprogram_yaml.providers.http_client import ClientPool
from openprogram_yaml.redaction import redact


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


def test_importing_the_package_does_not_import_httpx() -> None:
    code = (
        "import sys, openprogram_yaml, openprogram_yaml.runtimes.registry, "
        "openprogram_yaml.runtimes.select, openprogram_yaml.providers.openai, "
        "openprogram_yaml.providers.anthropic; "
        "assert 'httpx' not in sys.modules, 'httpx imported'; "
        "assert 'importlib.metadata' not in sys.modules or True"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
