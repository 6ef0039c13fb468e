"""Streaming events, last_usage and the session trace."""

from __future__ import annotations

import asyncio
import io
import json
from pathlib import Path
from typing import Any

import pytest

from openprogram_yaml.errors import LLMError
from openprogram_yaml.providers.test import Reply
from openprogram_yaml.runtime import Runtime, SessionTrace
from openprogram_yaml.runtimes.protocol import Capabilities, Usage

NATIVE = Capabilities(native_json_schema=True)


def test_stream_events_in_order(make: Any) -> None:
    events: list[dict[str, Any]] = []
    tool = {"spec": {"name": "t"}, "execute": lambda: "result"}
    thinking_reply = Reply(content="final answer", thinking="let me think")
    rt, model = make([Reply.call("t"), thinking_reply], on_stream=events.append)
    assert rt.exec("x", tools=[tool]) == "final answer"
    kinds = [e["type"] for e in events]
    assert kinds.index("tool_use") < kinds.index("tool_result") < kinds.index("thinking")
    assert "".join(e["text"] for e in events if e["type"] == "text") == "final answer"
    result = next(e for e in events if e["type"] == "tool_result")
    assert result["content"] == "result" and result["name"] == "t"
    assert "on_delta" in model.requests[0].kwargs


def test_no_on_delta_without_on_stream(make: Any) -> None:
    rt, model = make(["x"])
    rt.exec("x")
    assert "on_delta" not in model.requests[0].kwargs


def test_a_non_streaming_runtime_still_emits_the_text(make: Any) -> None:
    events: list[dict[str, Any]] = []
    rt, model = make(["whole"], caps=Capabilities(streaming=False), on_stream=events.append)
    rt.exec("x")
    assert events == [{"type": "text", "text": "whole"}]
    assert "on_delta" not in model.requests[0].kwargs


def test_a_raising_stream_observer_does_not_break_the_exec(make: Any) -> None:
    def bad(event: dict[str, Any]) -> None:
        raise RuntimeError("observer bug")

    rt, _ = make(["fine"], on_stream=bad)
    assert rt.exec("x") == "fine"


def test_last_usage_sums_the_exec_turns(make: Any) -> None:
    tool = {"spec": {"name": "t"}, "execute": lambda: "r"}
    first = Reply.call("t")
    first.usage = Usage(input_tokens=10, output_tokens=2, cache_read=4)
    second = Reply(content="done", usage=Usage(input_tokens=15, output_tokens=3, cache_create=1))
    rt, _ = make([first, second])
    assert rt.last_usage is None
    rt.exec("x", tools=[tool])
    assert rt.last_usage == {
        "input_tokens": 25,
        "output_tokens": 5,
        "total_tokens": 30,
        "cache_read": 4,
        "cache_create": 1,
    }


def test_every_exec_is_a_trace_node_with_what_happened(make: Any) -> None:
    trace = SessionTrace()
    tool = {"spec": {"name": "t"}, "execute": lambda: "r"}
    rt, _ = make([Reply.fail(http_status=503), Reply.call("t"), "done"], trace=trace)
    rt.system = "be brief"
    rt.exec("hello", tools=[tool], tool_choice="auto")
    node = next(n for n in trace.nodes if n.kind == "exec")
    assert node.status == "ok" and node.output == "done"
    assert node.inputs == {"content": "hello"}
    assert node.data["system_prompt"] == "be brief"
    assert [m["role"] for m in node.data["messages"]] == ["user", "assistant", "tool"]
    assert node.data["options"]["tool_choice"] == "auto"
    assert node.data["usage"]["total_tokens"] > 0
    assert node.data["attempts"][0]["http_status"] == 503
    assert node.data["attempts"][0]["delay_s"] == 1.5
    assert node.data["tool_calls"][0]["name"] == "t"
    assert node.data["elapsed_s"] == pytest.approx(1.5)  # measured on the injected clock
    assert node.data["turns"] == 3
    tool_nodes = trace.children(node)
    assert [n.kind for n in tool_nodes] == ["tool"]


def test_a_failed_exec_is_recorded_as_fully(make: Any) -> None:
    trace = SessionTrace()
    rt, _ = make([Reply.fail("auth", retryable=False, http_status=401)], trace=trace)
    with pytest.raises(LLMError):
        rt.exec("hello")
    node = trace.nodes[0]
    assert node.status == "error"
    assert node.error is not None
    assert node.error["reason"] == "auth" and node.error["http_status"] == 401
    assert node.data["messages"][0]["content"] == "hello"
    assert node.data["attempts"][0]["reason"] == "auth"


def test_execs_nest_under_the_callers_span(make: Any) -> None:
    trace = SessionTrace()
    rt, _ = make(["one", "two"], trace=trace)
    with trace.span("method", name="classify", inputs={"ticket": "t"}) as method:
        rt.exec("a")
        rt.exec("b")
        method.output = "ok"
    execs = trace.children(method)
    assert [n.output for n in execs] == ["one", "two"]
    assert trace.roots() == [method]
    assert method.status == "ok"


def test_a_failing_span_is_recorded(make: Any) -> None:
    trace = SessionTrace()
    with pytest.raises(KeyError), trace.span("method", name="m"):
        raise KeyError("x")
    assert trace.nodes[0].status == "error"
    assert trace.nodes[0].error is not None and trace.nodes[0].error["type"] == "KeyError"


def test_nested_exec_inside_a_tool_is_a_child(make: Any) -> None:
    trace = SessionTrace()
    inner, _ = make(["inner"], trace=trace)
    tool = {"spec": {"name": "ask"}, "execute": lambda: inner.exec("sub")}
    outer, _ = make([Reply.call("ask"), "outer"], trace=trace)
    outer.exec("x", tools=[tool])
    outer_node = trace.roots()[0]
    tool_node = trace.children(outer_node)[0]
    assert [n.output for n in trace.children(tool_node)] == ["inner"]


def test_jsonl_round_trip(make: Any, tmp_path: Path) -> None:
    trace = SessionTrace()
    rt, _ = make(['{"call": "a"}'], trace=trace, caps=Capabilities(tools=False))
    with trace.span("method", name="m"):
        rt.exec("x", choices=["a", "b"])
    path = tmp_path / "trace.jsonl"
    trace.write_jsonl(path)
    lines = path.read_text().splitlines()
    assert len(lines) == 2 and all(json.loads(line) for line in lines)
    back = SessionTrace.read_jsonl(path)
    assert [n.to_dict() for n in back.nodes] == [n.to_dict() for n in trace.nodes]
    assert back.nodes[0] == trace.nodes[0]  # public data: equal by value, as it always was
    assert back.nodes[1].data["pick"]["decision"] == "a"
    assert back.children(back.nodes[0]) == [back.nodes[1]]
    buffer = io.StringIO()
    trace.write_jsonl(buffer)
    assert buffer.getvalue() == path.read_text()


def test_api_keys_never_reach_the_trace(make: Any) -> None:
    trace = SessionTrace()
    rt, model = make(["ok"], trace=trace, api_key="sk-secret-123")
    rt.exec("x")
    assert model.requests[0].kwargs["api_key"] == "sk-secret-123"
    assert "sk-secret-123" not in trace.to_jsonl()
    with trace.span("method", inputs={"api_key": "sk-other", "headers": {"Authorization": "b"}}):
        pass
    text = trace.to_jsonl()
    assert "sk-other" not in text and '"b"' not in text


def test_runtime_repr_has_no_key() -> None:
    rt = Runtime(call=lambda c, m, r: "x", api_key="sk-secret-123")
    assert "sk-secret" not in repr(rt)


def test_a_run_failing_before_any_request_is_recorded(make: Any) -> None:
    from openprogram_yaml.errors import StructuredOutputUnsupportedError

    trace = SessionTrace()
    rt, _ = make([], caps=Capabilities(tools=False), trace=trace)
    with pytest.raises(StructuredOutputUnsupportedError):
        rt.exec("x", response_format={"type": "object"})
    node = trace.nodes[0]
    assert node.kind == "exec" and node.status == "error"
    assert node.error is not None and node.error["code"] == "unsupported"
    assert node.data["options"]["response_format"] == {"type": "object"}


def test_trace_node_ids_are_unique_random_hex(make: Any) -> None:
    # 64 random bits each (secrets.token_hex), the 16 hex digits a uuid4's were cut to.
    trace = SessionTrace()
    runtime, _ = make(["ok"] * 200, trace=trace)
    for _ in range(200):
        runtime.exec("hi")
    ids = [node.id for node in trace.nodes]
    assert len(ids) == 200 and len(set(ids)) == 200
    assert all(len(i) == 16 and int(i, 16) >= 0 for i in ids)


def test_span_records_what_the_generator_based_span_recorded() -> None:
    # SessionTrace.span is a small class; the reference is the contextmanager it replaced.
    import contextlib
    from collections.abc import Iterator

    from openprogram_yaml.runtime import trace as trace_module

    @contextlib.contextmanager
    def reference(
        trace: SessionTrace, kind: str, name: str = "", inputs: object = None
    ) -> Iterator[Any]:
        node = trace.start(kind, name, inputs)
        token = trace_module._current.set(node)
        try:
            yield node
        except BaseException as exc:
            trace.finish(node, error=exc)
            raise
        else:
            trace.finish(node, output=node.output)
        finally:
            trace_module._current.reset(token)

    def scenario(span: Any) -> list[tuple[object, ...]]:
        trace = SessionTrace()
        with span(trace, "run", "outer", {"a": 1}) as outer:
            with span(trace, "method", "ok") as node:
                node.output = "fine"
            with contextlib.suppress(ValueError), span(trace, "method", "bad"):
                raise ValueError("boom")
            with contextlib.suppress(KeyboardInterrupt), span(trace, "tool", "stopped"):
                raise KeyboardInterrupt

            async def in_task() -> None:
                with span(trace, "exec", "async") as n:
                    await asyncio.sleep(0)
                    n.output = 2

            asyncio.run(in_task())
            outer.output = "done"
        assert trace_module.current_span() is None
        index = {n.id: i for i, n in enumerate(trace.nodes)}
        return [
            (
                n.kind, n.name, n.inputs, n.output, n.status,
                (n.error or {}).get("type"), index.get(n.parent_id or ""),
            )
            for n in trace.nodes
        ]  # fmt: skip

    ours = scenario(lambda t, *a: t.span(*a))
    assert ours == scenario(reference)
    assert [row[4] for row in ours] == ["ok", "ok", "error", "error", "ok"]
