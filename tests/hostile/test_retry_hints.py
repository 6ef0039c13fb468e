"""A server's ``Retry-After`` cannot hold a run for ever.

A 429 asking to come back in three years (or in ``inf`` milliseconds, or 400 nines of
seconds, which a float makes infinite) once put the run to sleep that long: with no
``timeout_s``, for good. Servers are ``LoopbackServer``s on 127.0.0.1; sleeps go to a
``FakeClock``.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import pytest
from loopback import LoopbackServer, chat_completion, json_reply, status_reply

from openprogram_yaml.errors import LLMError
from openprogram_yaml.providers.openai import OpenAIRuntime
from openprogram_yaml.providers.test import FakeClock, Reply, ScriptedRuntime
from openprogram_yaml.runtime import Runtime
from openprogram_yaml.runtimes.failures import parse_retry_after, retry_after_from_headers

HOUR = 3600.0  # runtimes.failures.HOUR


@pytest.fixture
def server() -> Iterator[LoopbackServer]:
    with LoopbackServer() as srv:
        yield srv


def _runtime(model: OpenAIRuntime | ScriptedRuntime, clock: FakeClock) -> Runtime:
    return Runtime(
        model="m:model",
        runtimes=model,
        clock=clock.now,
        sleep=clock.sleep,
        random=lambda: 0.5,
        max_retries=3,
    )


@pytest.mark.parametrize(
    "headers",
    [
        {"retry-after-ms": "inf"},
        {"retry-after-ms": "Infinity"},
        {"retry-after": "9" * 400},
        {"retry-after": "9" * 400 + "ms"},
        {"retry-after-ms": "nan", "retry-after": "9" * 400},
    ],
)
def test_an_infinite_hint_is_no_hint(headers: dict[str, str]) -> None:
    assert retry_after_from_headers(headers) is None


def test_finite_hints_are_read_as_before() -> None:
    assert parse_retry_after(2.5) == 2.5
    assert parse_retry_after(math.inf) is None
    assert retry_after_from_headers({"retry-after-ms": "nan", "retry-after": "3"}) == 3.0
    assert retry_after_from_headers({"retry-after": "99999999"}) == 99999999.0


def test_an_infinite_hint_waits_the_usual_backoff(server: LoopbackServer) -> None:
    server.add(
        status_reply(429, {"error": {"message": "slow"}}, headers={"retry-after-ms": "inf"}),
        json_reply(chat_completion("hello")),
    )
    clock = FakeClock()
    rt = _runtime(OpenAIRuntime(base_url=server.url + "/v1", provider="m", api_key="k"), clock)
    assert rt.exec("hi") == "hello"
    rt.close()
    assert clock.now() == pytest.approx(1001.5)  # FakeClock starts at 1000; 1.5 s backoff


@pytest.mark.parametrize(
    "retry_after", ["99999999", "Wed, 21 Oct 2999 07:28:00 GMT", str(HOUR + 1)]
)
def test_a_hint_longer_than_an_hour_is_final_and_not_slept(
    server: LoopbackServer, retry_after: str
) -> None:
    server.add(status_reply(429, {"error": {"message": "slow"}}, retry_after=retry_after))
    clock = FakeClock()
    rt = _runtime(OpenAIRuntime(base_url=server.url + "/v1", provider="m", api_key="k"), clock)
    with pytest.raises(LLMError) as info:
        rt.exec("hi")
    rt.close()
    error = info.value
    assert (error.reason, error.retryable, error.attempts) == ("rate_limit", False, 1)
    assert "longer than the hour a retry waits at most, so final" in str(info.value)
    assert clock.now() == 1000.0 and len(server.requests) == 1


def test_an_hour_is_still_waited_for(server: LoopbackServer) -> None:
    hint = str(int(HOUR))
    server.add(
        status_reply(429, {"error": {"message": "slow"}}, retry_after=hint),
        json_reply(chat_completion("hello")),
    )
    clock = FakeClock()
    rt = _runtime(OpenAIRuntime(base_url=server.url + "/v1", provider="m", api_key="k"), clock)
    assert rt.exec("hi") == "hello"
    rt.close()
    assert clock.now() == pytest.approx(1000 + HOUR * 1.125)  # upward jitter


def test_a_runtime_reporting_a_longer_hint_is_not_retried_either() -> None:
    clock = FakeClock()
    scripted = ScriptedRuntime(
        [Reply.fail("rate_limit", retry_after_s=math.inf), "never"], sleep=clock.sleep
    )
    rt = _runtime(scripted, clock)
    with pytest.raises(LLMError) as info:
        rt.exec("hi")
    rt.close()
    assert (info.value.retryable, info.value.attempts) == (False, 1)
    assert clock.now() == 1000.0 and scripted.remaining == 1
