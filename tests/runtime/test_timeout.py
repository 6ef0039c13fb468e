"""timeout_s bounds the whole exec: turns, backoff sleeps and repairs."""

from __future__ import annotations

from typing import Any

import pytest

from openprogram_yaml.errors import ErrorReason, LLMError
from openprogram_yaml.providers.test import FakeClock, Reply

SCHEMA = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}


def test_a_sleep_that_cannot_finish_is_not_started(make: Any, clock: FakeClock) -> None:
    start = clock.now()
    rt, model = make([Reply.fail().after(2), Reply.fail().after(1), "never"])
    with pytest.raises(LLMError) as info:
        rt.exec("hi", timeout_s=5)
    # Turn (2 s), backoff (1.5 s), turn (1 s): the next backoff of 3 s would end past 5 s.
    assert clock.sleeps == [2, 1.5, 1]
    assert clock.now() - start == pytest.approx(4.5)
    assert len(model.requests) == 2
    err = info.value
    assert err.reason == ErrorReason.TIMEOUT
    assert err.retryable is False
    assert "timed out" in str(err)


def test_each_turn_gets_the_time_that_is_left(make: Any) -> None:
    rt, model = make([Reply.fail(), "ok"])
    assert rt.exec("hi", timeout_s=10) == "ok"
    assert [r.timeout_s for r in model.requests] == [10, 8.5]


def test_a_turn_slower_than_the_deadline_times_out(make: Any, clock: FakeClock) -> None:
    rt, model = make([Reply.text("late").after(20), "never"])
    with pytest.raises(LLMError) as info:
        rt.exec("hi", timeout_s=5)
    assert info.value.reason == ErrorReason.TIMEOUT
    assert len(model.requests) == 1
    assert clock.sleeps == [5]


def test_timeout_from_environment(make: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENPROGRAM_EXEC_TIMEOUT_S", "3")
    rt, model = make(["ok"])
    rt.exec("hi")
    assert model.requests[0].timeout_s == 3


@pytest.mark.parametrize("value", ["0", ""])
def test_zero_or_unset_environment_timeout_means_none(
    make: Any, monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    monkeypatch.setenv("OPENPROGRAM_EXEC_TIMEOUT_S", value)
    rt, model = make(["ok"])
    rt.exec("hi")
    assert "timeout_s" not in model.requests[0].kwargs


def test_repairs_count_against_the_deadline(make: Any) -> None:
    rt, model = make([Reply.text("not json").after(3), Reply.json({"n": 1}).after(3)])
    with pytest.raises(LLMError) as info:
        rt.exec("hi", response_format=SCHEMA, timeout_s=5)
    assert info.value.reason == ErrorReason.TIMEOUT
    assert model.requests[1].timeout_s == pytest.approx(2)


def test_tool_loop_turns_share_the_deadline(make: Any) -> None:
    tool = {"spec": {"name": "t"}, "execute": lambda: "r"}
    rt, model = make([Reply.call("t").after(4), Reply.call("t").after(4), "never"])
    with pytest.raises(LLMError) as info:
        rt.exec("hi", tools=[tool], timeout_s=6)
    assert info.value.reason == ErrorReason.TIMEOUT
    assert model.requests[1].timeout_s == pytest.approx(2)
