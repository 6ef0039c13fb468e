"""The tool loop: tool shapes, argument validation, error results, caps, tool_choice."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from openprogram_yaml.errors import ErrorReason, LLMError, StructuredOutputUnsupportedError
from openprogram_yaml.providers.test import Reply
from openprogram_yaml.runtime import Tool
from openprogram_yaml.runtimes.protocol import ToolSpec

ADD_PARAMS = {
    "type": "object",
    "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
    "required": ["a", "b"],
}


def add(a: int, b: int) -> int:
    return a + b


ADD = {"spec": {"name": "add", "description": "Add", "parameters": ADD_PARAMS}, "execute": add}


def tool_results(messages: list[Any]) -> list[Any]:
    return [m for m in messages if m.role == "tool"]


def test_dict_tool_runs_and_the_model_sees_the_result(make: Any) -> None:
    rt, model = make([Reply.call("add", {"a": 2, "b": 3}), "the sum is 5"])
    assert rt.exec("add", tools=[ADD]) == "the sum is 5"
    second = model.requests[1].messages
    assert second[-2].role == "assistant" and second[-2].tool_calls[0].name == "add"
    result = second[-1]
    assert (result.role, result.text(), result.is_error) == ("tool", "5", False)
    assert result.tool_call_id == second[-2].tool_calls[0].id
    spec = model.requests[0].tools[0]
    assert (spec.name, spec.description, spec.parameters) == ("add", "Add", ADD_PARAMS)


def test_object_tool_with_async_execute(make: Any) -> None:
    class Weather:
        spec = ToolSpec("weather", "Weather", {"type": "object", "properties": {"city": {}}})

        async def execute(self, city: str) -> dict[str, Any]:
            await asyncio.sleep(0)
            return {"city": city, "temp": 21}

    rt, model = make([Reply.call("weather", {"city": "Oslo"}), "done"])
    rt.exec("w", tools=[Weather()])
    assert json.loads(model.requests[1].messages[-1].text()) == {"city": "Oslo", "temp": 21}


def test_invalid_arguments_are_an_error_result_and_the_tool_does_not_run(make: Any) -> None:
    ran: list[Any] = []
    tool = {
        "spec": {"name": "add", "parameters": ADD_PARAMS},
        "execute": lambda **kw: ran.append(kw),
    }
    rt, model = make([Reply.call("add", {"a": "two"}), "sorry"])
    rt.exec("add", tools=[tool])
    result = model.requests[1].messages[-1]
    assert result.is_error
    assert "Invalid arguments" in result.text() and "$.a" in result.text()
    assert ran == []


def test_malformed_argument_json_is_an_error_result(make: Any) -> None:
    rt, model = make([Reply.call("add", '{"a": 1,'), "sorry"])
    rt.exec("add", tools=[ADD])
    assert model.requests[1].messages[-1].is_error


def test_unknown_tool_is_an_error_result(make: Any) -> None:
    rt, model = make([Reply.call("delete_all"), "ok"])
    rt.exec("x", tools=[ADD])
    result = model.requests[1].messages[-1]
    assert result.is_error and "Unknown tool 'delete_all'" in result.text()


def test_a_raising_tool_is_an_error_result(make: Any) -> None:
    def boom() -> None:
        raise RuntimeError("disk full")

    rt, model = make([Reply.call("boom"), "ok"])
    assert rt.exec("x", tools=[{"spec": {"name": "boom"}, "execute": boom}]) == "ok"
    result = model.requests[1].messages[-1]
    assert result.is_error and "disk full" in result.text()


def test_the_same_failing_call_is_not_run_a_third_time(make: Any) -> None:
    runs: list[int] = []

    def flaky(n: int) -> None:
        runs.append(n)
        raise ValueError("nope")

    tool = {"spec": {"name": "flaky"}, "execute": flaky}
    same = Reply.call("flaky", {"n": 1})
    rt, model = make([same, same, same, Reply.call("flaky", {"n": 2}), "giving up"])
    rt.exec("x", tools=[tool])
    assert runs == [1, 1, 2]  # the third identical call was refused, a different one ran
    third = model.requests[3].messages[-1]
    assert third.is_error and "Not run" in third.text()


def test_long_results_are_truncated_with_a_marker(make: Any) -> None:
    tool = {"spec": {"name": "big"}, "execute": lambda: "x" * 50_000}
    rt, model = make([Reply.call("big"), "ok"])
    rt.exec("x", tools=[tool])
    text = model.requests[1].messages[-1].text()
    assert len(text) < 20_100
    assert text.startswith("x" * 20_000)
    assert "[truncated: 30000 more characters]" in text


def test_max_iterations_with_calls_pending_is_a_clear_error(make: Any) -> None:
    runs: list[int] = []
    tool = {"spec": {"name": "t"}, "execute": lambda: runs.append(1) or "r"}
    rt, model = make([Reply.call("t")] * 5)
    with pytest.raises(LLMError) as info:
        rt.exec("x", tools=[tool], max_iterations=3)
    assert info.value.reason == ErrorReason.MAX_ITERATIONS
    assert "max_iterations=3" in str(info.value)
    assert len(model.requests) == 3
    assert runs == [1, 1]  # the pending calls of the last turn were not run


def test_loop_ends_when_the_model_answers_in_text(make: Any) -> None:
    rt, model = make(
        [Reply.call("add", {"a": 1, "b": 1}), Reply.call("add", {"a": 2, "b": 2}), "4"]
    )
    assert rt.exec("x", tools=[ADD], max_iterations=3) == "4"
    assert len(tool_results(model.requests[2].messages)) == 2


def test_tool_choice_and_parallel_are_sent_only_when_set(make: Any) -> None:
    rt, model = make(["a", "b", "c"])
    rt.exec("x", tools=[ADD])
    assert "tool_choice" not in model.requests[0].kwargs
    assert "parallel_tool_calls" not in model.requests[0].kwargs
    rt.exec("x", tools=[ADD], tool_choice="auto", parallel_tool_calls=True)
    assert model.requests[1].tool_choice == "auto"
    assert model.requests[1].parallel_tool_calls is True
    rt.exec("x", tools=[ADD], tool_choice={"type": "function", "name": "add"})
    assert model.requests[2].tool_choice == {"type": "function", "name": "add"}


def test_tool_choice_must_be_valid(make: Any) -> None:
    rt, _ = make(["a"])
    with pytest.raises(ValueError):
        rt.exec("x", tools=[ADD], tool_choice="sometimes")
    with pytest.raises(ValueError):
        rt.exec("x", tools=[ADD], tool_choice={"type": "function", "name": "missing"})


def test_parallel_calls_run_concurrently_unless_disabled(make: Any) -> None:
    order: list[str] = []

    async def slow(tag: str) -> str:
        order.append(f"start {tag}")
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        order.append(f"end {tag}")
        return tag

    tool = {"spec": {"name": "slow"}, "execute": slow}
    two = Reply.calls(("slow", {"tag": "a"}, None), ("slow", {"tag": "b"}, None))
    rt, model = make([two, "done", two, "done"])
    rt.exec("x", tools=[tool])
    assert order[:2] == ["start a", "start b"]
    assert [m.text() for m in tool_results(model.requests[1].messages)] == ["a", "b"]
    order.clear()
    rt.exec("x", tools=[tool], parallel_tool_calls=False)
    assert order == ["start a", "end a", "start b", "end b"]


def test_the_calls_of_one_reply_run_at_most_a_few_at_once(make: Any) -> None:
    # The model decides how many calls a reply holds: all of them ran at once (1,500
    # command tools started 1,500 programs). Each runs, in turn, and answers in order.
    from openprogram_yaml.runtime.toolloop import MAX_PARALLEL_CALLS

    running: list[int] = [0]
    most: list[int] = [0]

    async def slow(tag: str) -> str:
        running[0] += 1
        most[0] = max(most[0], running[0])
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        running[0] -= 1
        return tag

    tool = {"spec": {"name": "slow"}, "execute": slow}
    many = Reply.calls(*(("slow", {"tag": str(i)}, None) for i in range(50)))
    rt, model = make([many, "done"])
    assert rt.exec("x", tools=[tool]) == "done"
    assert most[0] == MAX_PARALLEL_CALLS
    assert [m.text() for m in tool_results(model.requests[1].messages)] == [
        str(i) for i in range(50)
    ]


def test_a_tools_failure_reaches_the_model_capped_as_its_results_are(make: Any) -> None:
    from openprogram_yaml.runtime.toolloop import MAX_RESULT_CHARS

    def loud() -> str:
        raise ValueError("x" * 5_000_000)

    tool = {"spec": {"name": "loud"}, "execute": loud}
    rt, model = make([Reply.call("loud", {}), "done"])
    assert rt.exec("x", tools=[tool]) == "done"
    [sent] = [m.text() for m in tool_results(model.requests[1].messages)]
    assert sent.startswith("Tool 'loud' failed: ValueError: xxx")
    assert len(sent) < MAX_RESULT_CHARS + 100 and "[truncated: " in sent


def test_execute_receives_keyword_arguments(make: Any) -> None:
    seen: dict[str, Any] = {}

    def record(**kwargs: Any) -> str:
        seen.update(kwargs)
        return "ok"

    rt, _ = make([Reply.call("rec", {"x": 1, "y": [2]}), "done"])
    rt.exec("x", tools=[{"spec": {"name": "rec"}, "execute": record}])
    assert seen == {"x": 1, "y": [2]}


def test_bad_tool_shapes_are_type_errors(make: Any) -> None:
    rt, _ = make(["a"])
    with pytest.raises(TypeError):
        rt.exec("x", tools=[{"spec": {"name": "t"}}])
    with pytest.raises(TypeError):
        rt.exec("x", tools=[object()])


def test_tool_objects_are_accepted_as_is(make: Any) -> None:
    tool = Tool(ToolSpec("t"), lambda: "r")
    rt, model = make([Reply.call("t"), "ok"])
    rt.exec("x", tools=[tool])
    assert model.requests[1].messages[-1].text() == "r"


def test_a_tool_call_when_none_were_offered_gets_an_error_result(make: Any) -> None:
    rt, model = make([Reply.call("imaginary"), "ok"])
    assert rt.exec("x") == "ok"
    result = model.requests[1].messages[-1]
    assert result.is_error and "Unknown tool 'imaginary'" in result.text()


def test_explicit_tools_need_a_runtime_that_can_call_them(make: Any) -> None:
    from openprogram_yaml.runtimes.protocol import Capabilities

    rt, model = make(["x"], caps=Capabilities(tools=False))
    with pytest.raises(ValueError, match="cannot call tools"):
        rt.exec("x", tools=[ADD])
    rt2, model2 = make(["x"], caps=Capabilities(tools=False), tools=[ADD])
    with pytest.warns(RuntimeWarning, match=r"cannot call tools.*\(add\) are not offered"):
        assert rt2.exec("x") == "x"  # the registered default set is not offered, and said so
    assert "tools" not in model2.requests[0].kwargs
    assert model.requests == []


def test_user_tools_cannot_take_the_hidden_submit_name(make: Any) -> None:
    from openprogram_yaml.runtimes.protocol import Capabilities

    rt, _ = make(["x"], caps=Capabilities(native_json_schema=False))
    clash = {"spec": {"name": "submit_result"}, "execute": lambda: None}
    with pytest.raises(StructuredOutputUnsupportedError, match="reserves"):
        rt.exec("x", tools=[clash], response_format={"type": "object"})


def test_arguments_nested_past_the_decoders_depth_are_an_error_result(make: Any) -> None:
    rt, model = make([Reply.call("add", "[" * 100_000), "sorry"])
    assert rt.exec("add", tools=[ADD]) == "sorry"
    assert model.requests[1].messages[-1].is_error
