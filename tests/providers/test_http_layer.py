"""The shared HTTP layer: failure classification, Retry-After, SSE, clients per loop."""

from __future__ import annotations

import asyncio
import email.utils
import subprocess
import sys
from collections.abc import AsyncIterator

import httpx
import pytest

from openprogram_yaml.providers._http import (
    ClientPool,
    SSEEvent,
    failure_from_body_error,
    failure_from_exception,
    failure_from_status,
    is_local_url,
    iter_sse,
    redact,
)
from openprogram_yaml.runtimes.failures import retry_after_from_headers


@pytest.mark.parametrize(
    ("status", "body", "reason", "retryable"),
    [
        (401, {"error": {"message": "Incorrect API key"}}, "auth", False),
        (403, {"error": {"message": "forbidden"}}, "auth", False),
        (400, {"error": {"message": "bad"}}, "invalid_request", False),
        (404, {"error": {"message": "no such model"}}, "invalid_request", False),
        (422, {"detail": "unprocessable"}, "invalid_request", False),
        (429, {"error": {"message": "Rate limit reached for gpt-4o"}}, "rate_limit", True),
        (
            429,
            {"error": {"message": "You exceeded your current quota", "code": "insufficient_quota"}},
            "quota",
            False,
        ),
        (429, {"error": {"message": "check your plan and billing details"}}, "quota", False),
        (408, {}, "timeout", True),
        (409, {}, "server_error", True),
        (500, {}, "server_error", True),
        (503, {}, "server_error", True),
        (529, {"type": "error", "error": {"type": "overloaded_error"}}, "server_error", True),
    ],
)
def test_status_classification(status: int, body: object, reason: str, retryable: bool) -> None:
    import json

    failure = failure_from_status(status, {}, json.dumps(body).encode(), provider="openai")
    assert (failure.reason, failure.retryable, failure.http_status) == (reason, retryable, status)
    assert failure.message.startswith(f"openai: HTTP {status}")


def test_error_message_carries_the_servers_words() -> None:
    failure = failure_from_status(
        400, {}, b'{"error": {"message": "max_tokens is too large"}}', provider="anthropic"
    )
    assert failure.message == "anthropic: HTTP 400 invalid_request: max_tokens is too large"
    text = failure_from_status(502, {}, b"<html>Bad Gateway</html>", provider="x").message
    assert "Bad Gateway" in text


def test_retry_after_seconds_ms_and_http_date() -> None:
    assert retry_after_from_headers({"retry-after": "7"}) == 7.0
    assert retry_after_from_headers({"retry-after": "1.5"}) == 1.5
    assert retry_after_from_headers({"retry-after-ms": "250", "retry-after": "9"}) == 0.25
    now = 1_700_000_000.0
    date = email.utils.formatdate(now + 30, usegmt=True)
    assert retry_after_from_headers({"retry-after": date}, now=now) == pytest.approx(30.0)
    past = email.utils.formatdate(now - 30, usegmt=True)
    assert retry_after_from_headers({"retry-after": past}, now=now) == 0.0
    assert retry_after_from_headers({"retry-after": "soon"}) is None
    assert retry_after_from_headers({"retry-after": "-3"}) is None
    assert retry_after_from_headers({}) is None


def test_retry_after_only_on_retryable_failures() -> None:
    headers = httpx.Headers({"Retry-After": "3"})
    assert failure_from_status(429, headers, b"{}", provider="p").retry_after_s == 3.0
    assert failure_from_status(503, headers, b"{}", provider="p").retry_after_s == 3.0
    assert failure_from_status(401, headers, b"{}", provider="p").retry_after_s is None


def test_body_errors_inside_streams() -> None:
    overloaded = failure_from_body_error(
        {"type": "overloaded_error", "message": "Overloaded"}, provider="anthropic"
    )
    assert (overloaded.reason, overloaded.retryable) == ("server_error", True)
    billing = failure_from_body_error({"type": "billing_error", "message": "x"}, provider="a")
    assert (billing.reason, billing.retryable) == ("quota", False)
    coded = failure_from_body_error({"code": 429, "message": "Rate limited"}, provider="o")
    assert (coded.reason, coded.retryable, coded.http_status) == ("rate_limit", True, 429)


@pytest.mark.parametrize(
    ("exc", "reason"),
    [
        (httpx.ConnectError("refused"), "connection"),
        (httpx.ReadError("reset"), "connection"),
        (httpx.RemoteProtocolError("peer closed"), "connection"),
        (httpx.ReadTimeout("slow"), "timeout"),
        (httpx.ConnectTimeout("slow"), "timeout"),
        (httpx.PoolTimeout("busy"), "timeout"),
        (ConnectionResetError("reset"), "connection"),
    ],
)
def test_transport_exceptions_are_transient(exc: Exception, reason: str) -> None:
    failure = failure_from_exception(exc, provider="openai")
    assert (failure.reason, failure.retryable) == (reason, True)


def test_other_exceptions_are_final() -> None:
    failure = failure_from_exception(KeyError("choices"), provider="openai")
    assert (failure.reason, failure.retryable) == ("unknown", False)


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
