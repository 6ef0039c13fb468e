"""Retries: backoff, Retry-After, permanent errors, on_retry, the final LLMError."""

from __future__ import annotations

from typing import Any

import pytest

from openprogram_yaml.errors import ErrorReason, LLMError
from openprogram_yaml.providers.test import FakeClock, Reply
from openprogram_yaml.runtime import (
    RetryInfo,
    Runtime,
    backoff_delay,
)


def test_backoff_doubles_from_the_base(make: Any, clock: FakeClock) -> None:
    rt, model = make([Reply.fail(), Reply.fail(), Reply.fail(), Reply.fail(), "ok"], max_retries=5)
    assert rt.exec("hi") == "ok"
    assert clock.sleeps == [1.5, 3.0, 6.0, 12.0]
    assert len(model.requests) == 5


@pytest.mark.parametrize(("rand", "factor"), [(0.0, 0.75), (0.999999, 1.25)])
def test_jitter_is_within_25_percent(
    make: Any, clock: FakeClock, rand: float, factor: float
) -> None:
    rt, _ = make([Reply.fail(), Reply.fail(), "ok"], random=lambda: rand)
    rt.exec("hi")
    assert clock.sleeps == pytest.approx([1.5 * factor, 3.0 * factor], rel=1e-5)


def test_backoff_base_from_environment(
    make: Any, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENPROGRAM_RETRY_BACKOFF_BASE", "0.25")
    rt, _ = make([Reply.fail(), Reply.fail(), "ok"])
    rt.exec("hi")
    assert clock.sleeps == [0.25, 0.5]


def test_retry_after_is_a_lower_bound(make: Any, clock: FakeClock) -> None:
    # Lowest possible jitter: the wait is exactly the hint, never less.
    rt, _ = make(
        [Reply.fail("rate_limit", http_status=429, retry_after_s=10.0), "ok"], random=lambda: 0.0
    )
    rt.exec("hi")
    assert clock.sleeps == [10.0]


def test_retry_after_jitter_only_adds(make: Any, clock: FakeClock) -> None:
    rt, _ = make([Reply.fail("rate_limit", retry_after_s=10.0), "ok"], random=lambda: 0.999)
    rt.exec("hi")
    assert 10.0 < clock.sleeps[0] <= 12.5


def test_a_short_retry_after_does_not_shorten_the_backoff(make: Any, clock: FakeClock) -> None:
    rt, _ = make([Reply.fail(), Reply.fail(), Reply.fail(retry_after_s=0.5), "ok"])
    rt.exec("hi")
    assert clock.sleeps == [1.5, 3.0, 6.0]


def test_backoff_delay_function() -> None:
    assert backoff_delay(0, base_s=1.5, rand=lambda: 0.5) == 1.5
    assert backoff_delay(3, base_s=1.5, rand=lambda: 0.5) == 12.0
    assert backoff_delay(0, base_s=1.5, rand=lambda: 0.0, retry_after_s=30) == 30.0


@pytest.mark.parametrize(
    ("reason", "retryable"),
    [
        ("auth", True),
        ("invalid_request", True),
        ("quota", True),
        ("transport_exhausted", True),
        ("server_error", False),
    ],
)
def test_permanent_errors_are_raised_at_once(
    make: Any, clock: FakeClock, reason: str, retryable: bool
) -> None:
    rt, model = make([Reply.fail(reason, retryable=retryable, http_status=401), "never"])
    with pytest.raises(LLMError) as info:
        rt.exec("hi")
    assert len(model.requests) == 1
    assert clock.sleeps == []
    assert info.value.retryable is False
    assert info.value.reason == reason
    assert info.value.attempts == 1


@pytest.mark.parametrize(
    "message",
    ["500: image data is not valid base64", "gateway: login expired, please re-auth"],
)
def test_a_failure_naming_a_permanent_marker_is_never_retried(
    make: Any, clock: FakeClock, message: str
) -> None:
    # The runtime calls it a retryable server error; the words make it final.
    rt, model = make([Reply.fail("server_error", message, retryable=True), "never"])
    with pytest.raises(LLMError) as info:
        rt.exec("hi")
    assert (len(model.requests), clock.sleeps, info.value.retryable) == (1, [], False)


def test_an_exhausted_quota_from_a_call_function_is_final(clock: FakeClock) -> None:
    calls: list[str] = []

    def spent(content: object, model: str, response_format: object) -> str:
        calls.append(model)
        raise RuntimeError("429: usage_limit_reached for this plan")

    rt = Runtime(call=spent, clock=clock.now, sleep=clock.sleep)
    with pytest.raises(LLMError) as info:
        rt.exec("hi")
    assert (len(calls), info.value.reason, info.value.retryable) == (1, "quota", False)


@pytest.mark.parametrize("exc", [TypeError("bad call"), NotImplementedError("no provider")])
def test_programming_errors_propagate_without_retry(make: Any, exc: Exception) -> None:
    rt, model = make([exc, "never"])
    with pytest.raises(type(exc)):
        rt.exec("hi")
    assert len(model.requests) == 1


def test_a_raising_runtime_is_classified_and_retried(make: Any) -> None:
    rt, model = make([ConnectionError("connection reset"), "ok"])
    assert rt.exec("hi") == "ok"
    assert len(model.requests) == 2


def test_exhausted_retries_raise_a_structured_error(make: Any, clock: FakeClock) -> None:
    fail = Reply.fail("rate_limit", "429 Too Many Requests", http_status=429, retry_after_s=2.0)
    rt, model = make([fail, fail, fail, "never"], max_retries=3)
    with pytest.raises(LLMError) as info:
        rt.exec("hi")
    err = info.value
    assert len(model.requests) == 3
    assert len(clock.sleeps) == 2  # no sleep after the last attempt
    assert err.reason == ErrorReason.RATE_LIMIT
    assert err.retryable is True
    assert err.http_status == 429
    assert err.retry_after_s == 2.0
    assert err.attempts == 3
    assert err.elapsed_s == pytest.approx(sum(clock.sleeps))
    assert err.provider == "scripted"
    assert err.model == "scripted:model"
    assert "failed after 3 attempt(s)" in str(err)
    for n in (1, 2, 3):
        assert f"Attempt {n}: rate_limit: 429 Too Many Requests" in str(err)


def test_max_retries_one_means_no_retry(make: Any) -> None:
    rt, model = make([Reply.fail(), "never"], max_retries=1)
    with pytest.raises(LLMError):
        rt.exec("hi")
    assert len(model.requests) == 1


def test_on_retry_fires_before_each_sleep_and_its_errors_are_swallowed(
    make: Any, clock: FakeClock
) -> None:
    seen: list[tuple[RetryInfo, int]] = []

    def on_retry(info: RetryInfo) -> None:
        seen.append((info, len(clock.sleeps)))
        raise ValueError("observer bug")

    rt, _ = make([Reply.fail(http_status=503), Reply.fail(http_status=503), "ok"])
    assert rt.exec("hi", on_retry=on_retry) == "ok"
    assert [info.attempt for info, _ in seen] == [1, 2]
    assert [info.delay_s for info, _ in seen] == clock.sleeps
    assert [before for _, before in seen] == [0, 1]  # called before its sleep
    assert seen[0][0].http_status == 503
    assert seen[0][0].model == "scripted:model"


def test_on_retry_not_fired_for_the_terminal_failure(make: Any) -> None:
    calls: list[RetryInfo] = []
    rt, _ = make([Reply.fail(), Reply.fail()], max_retries=2)
    with pytest.raises(LLMError):
        rt.exec("hi", on_retry=calls.append)
    assert len(calls) == 1


def test_max_retries_from_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    assert Runtime(call=lambda c, m, r: "x").max_retries == 6
    monkeypatch.setenv("OPENPROGRAM_MAX_RETRIES", "2")
    assert Runtime(call=lambda c, m, r: "x").max_retries == 2
    assert Runtime(call=lambda c, m, r: "x", max_retries=4).max_retries == 4
    monkeypatch.setenv("OPENPROGRAM_MAX_RETRIES", "0")
    with pytest.raises(ValueError, match="max_retries"):
        Runtime(call=lambda c, m, r: "x")
    with pytest.raises(ValueError):
        Runtime(call=lambda c, m, r: "x", max_retries=0)


def test_transport_recovery_is_bounded_per_request(make: Any) -> None:
    """Each request of a tool loop may recover; recovered retries return to the allowance."""
    tool = {
        "spec": {"name": "ping", "parameters": {"type": "object", "properties": {}}},
        "execute": lambda: "pong",
    }
    script = [
        Reply.fail(),
        Reply.call("ping"),
        Reply.fail(),
        Reply.call("ping"),
        Reply.fail(),
        "done",
    ]
    rt, model = make(script, max_retries=2)
    assert rt.exec("hi", tools=[tool]) == "done"
    assert len(model.requests) == 6


class _HTTPError(Exception):
    def __init__(self, status: int, headers: dict[str, str] | None = None) -> None:
        super().__init__(f"HTTP {status}")
        self.status_code = status
        self.headers = headers or {}


def test_call_function_http_errors_follow_the_rules(clock: FakeClock) -> None:
    attempts: list[int] = []

    def flaky(content: Any, model: str, response_format: Any) -> str:
        attempts.append(1)
        if len(attempts) == 1:
            raise _HTTPError(503)
        if len(attempts) == 2:
            raise _HTTPError(401)
        return "unreachable"

    rt = Runtime(call=flaky, clock=clock.now, sleep=clock.sleep, random=lambda: 0.5)
    with pytest.raises(LLMError) as info:
        rt.exec("hi")
    assert info.value.reason == "auth"
    assert info.value.http_status == 401
    assert len(attempts) == 2
    assert clock.sleeps == [1.5]


@pytest.mark.parametrize(
    ("error", "retried"),
    [
        ("HTTP 503 Service Unavailable", True),
        ("connection reset by peer", True),
        ("something odd happened", False),
        ("HTTP 401: invalid api key", False),
        ("insufficient_quota: you exceeded your current quota", False),
        ("400 Bad Request: unknown field", False),
    ],
)
def test_error_text_without_a_classification(make: Any, error: str, retried: bool) -> None:
    from openprogram_yaml.runtimes.protocol import RuntimeResult

    rt, model = make([RuntimeResult(error=error), "ok"])
    if retried:
        assert rt.exec("hi") == "ok"
    else:
        with pytest.raises(LLMError) as info:
            rt.exec("hi")
        assert info.value.retryable is False
    assert len(model.requests) == (2 if retried else 1)


def test_type_error_from_a_call_function_is_not_retried(clock: FakeClock) -> None:
    calls: list[int] = []

    def broken(content: Any, model: str, response_format: Any) -> str:
        calls.append(1)
        raise TypeError("wrong signature")

    rt = Runtime(call=broken, clock=clock.now, sleep=clock.sleep)
    with pytest.raises(TypeError):
        rt.exec("hi")
    assert calls == [1]
