"""Failure classification: HTTP statuses, Retry-After, body errors, exceptions, error text."""

from __future__ import annotations

import email.utils
import json

import httpx
import pytest

from openprogram_yaml.runtimes.failures import (
    PERMANENT_MARKERS,
    classify_error_text,
    classify_exception,
    failure_from_body_error,
    failure_from_exception,
    failure_from_status,
    is_retryable,
    parse_retry_after,
    retry_after_from_headers,
)
from openprogram_yaml.runtimes.protocol import TurnFailure


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


def test_parse_retry_after_forms() -> None:
    assert parse_retry_after("7") == 7.0
    assert parse_retry_after("2.5") == 2.5
    assert parse_retry_after("1500ms") == 1.5
    assert parse_retry_after(3) == 3.0
    when = email.utils.formatdate(1_000_060.0, usegmt=True)
    assert parse_retry_after(when, now=1_000_000.0) == pytest.approx(60.0)
    assert parse_retry_after("soon") is None
    assert parse_retry_after(None) is None
    assert retry_after_from_headers({"Retry-After-Ms": "250", "Retry-After": "9"}) == 0.25
    assert retry_after_from_headers({"Retry-After": "9"}) == 9.0


class _HTTPError(Exception):
    def __init__(self, status: int, headers: dict[str, str] | None = None) -> None:
        super().__init__(f"HTTP {status}")
        self.status_code = status
        self.headers = headers or {}


def test_classify_exception() -> None:
    assert classify_exception(_HTTPError(401)).reason == "auth"
    assert classify_exception(_HTTPError(401)).retryable is False
    assert classify_exception(_HTTPError(400)).reason == "invalid_request"
    assert classify_exception(_HTTPError(503)).retryable is True
    f = classify_exception(_HTTPError(429))
    assert (f.reason, f.retryable, f.http_status) == ("rate_limit", True, 429)
    assert classify_exception(TimeoutError()).reason == "timeout"
    assert classify_exception(ValueError("Invalid API key provided")).reason == "auth"
    marked = ValueError("weird")
    marked.retryable = False  # type: ignore[attr-defined]
    assert classify_exception(marked).retryable is False


# --- errors that are final (next-step-decision.md, "Errors that are never retried") -------


@pytest.mark.parametrize(
    ("status", "body"),
    [
        (429, {"error": {"type": "usage_limit_reached", "message": "The usage limit was hit"}}),
        (
            400,
            {
                "type": "error",
                "error": {
                    "type": "invalid_request_error",
                    "message": "Your credit balance is too low to access the Anthropic API.",
                },
            },
        ),
    ],
)
def test_an_exhausted_quota_is_final_not_a_rate_limit(status: int, body: object) -> None:
    failure = failure_from_status(status, {}, json.dumps(body).encode(), provider="p")
    assert (failure.reason, failure.retryable, failure.retry_after_s) == ("quota", False, None)


def test_an_exhausted_quota_inside_a_stream_is_final() -> None:
    failure = failure_from_body_error(
        {"type": "usage_limit_reached", "message": "limit reached"}, provider="p"
    )
    assert (failure.reason, failure.retryable) == ("quota", False)
    assert classify_error_text("credit balance is too low").reason == "quota"


@pytest.mark.parametrize("marker", PERMANENT_MARKERS)
def test_the_permanent_markers_make_any_failure_final(marker: str) -> None:
    message = f"Upstream said: {marker.upper()} (request 7)"
    assert failure_from_status(503, {}, message.encode(), provider="p").retryable is False
    body_error = failure_from_body_error({"type": "api_error", "message": message}, provider="p")
    assert body_error.retryable is False
    assert classify_exception(ConnectionError(message)).retryable is False
    assert classify_error_text(message).retryable is False
    # A runtime's own TurnFailure saying retryable=True does not override the words.
    assert not is_retryable(TurnFailure("server_error", message, True))


KEY = "sk-echoed-0123456789abcdef"


@pytest.mark.parametrize(
    "failure",
    [
        lambda text: failure_from_status(500, {}, text, provider="p", secrets=[KEY]),
        lambda text: failure_from_status(
            500, {}, json.dumps({"error": {"message": text}}), provider="p", secrets=[KEY]
        ),
        lambda text: failure_from_body_error({"message": text}, provider="p", secrets=[KEY]),
        lambda text: failure_from_body_error(
            {"code": 500, "message": text}, provider="p", secrets=[KEY]
        ),
        lambda text: failure_from_exception(RuntimeError(text), provider="p", secrets=[KEY]),
    ],
)
def test_an_echoed_key_cut_by_the_length_limit_shows_no_part_of_it(failure: object) -> None:
    # The 500-character cut falls inside the key the server echoed: not even its start shows.
    assert callable(failure)
    message = failure("x" * 490 + KEY + "y" * 50).message
    assert "x" * 490 in message
    assert KEY[:6] not in message
