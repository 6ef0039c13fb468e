"""The spans of a run: one per trace node, nested, named and described with the GenAI
semantic conventions; content only when asked, and secrets never."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from loopback import LoopbackServer, chat_completion, json_reply
from opentelemetry.semconv._incubating.attributes import gen_ai_attributes
from opentelemetry.trace import SpanKind, StatusCode
from otel_helpers import AGENT, everything_exported, named, spans_in_memory, tree, write_desk
from support import SHOP_AGENT

from openprogram_yaml import telemetry
from openprogram_yaml.compile.project import compile_path
from openprogram_yaml.run.execute import execute_run
from openprogram_yaml.run.version import VersionStamp
from openprogram_yaml.runtime.trace import SessionTrace
from openprogram_yaml.telemetry import otel

#: The attributes that carry prompts, completions, tool arguments and results.
CONTENT = (
    "gen_ai.system_instructions",
    "gen_ai.input.messages",
    "gen_ai.output.messages",
    "gen_ai.tool.call.arguments",
    "gen_ai.tool.call.result",
    "openprogram.inputs",
    "openprogram.output",
)


def run(path: Path, method: str, inputs: dict[str, object], **kwargs: object):  # type: ignore[no-untyped-def]
    program = compile_path(path)
    stamp = VersionStamp(program.version, commit="c0ffee", dirty=False)
    return asyncio.run(execute_run(program, stamp, None, method, inputs, **kwargs))  # type: ignore[arg-type]


def test_a_run_with_a_tool_call_on_the_test_model_is_a_tree_of_genai_spans(
    tmp_path: Path,
) -> None:
    path = write_desk(tmp_path)
    with spans_in_memory() as exporter:
        record = run(path, "ask", {"ticket": "T-17"})
    assert record.status == "ok", record.error
    spans = exporter.get_finished_spans()
    assert tree(spans) == [
        "invoke_agent desk",
        "  desk.ask",
        "    chat test",
        "      execute_tool lookup",
    ]
    agent = named(spans, "invoke_agent desk")
    assert agent.parent is None and agent.kind is SpanKind.INTERNAL
    assert agent.attributes is not None
    assert agent.attributes["gen_ai.operation.name"] == "invoke_agent"
    assert agent.attributes["gen_ai.agent.name"] == "desk"
    assert agent.attributes["openprogram.method"] == "ask"
    assert agent.attributes["gen_ai.request.model"] == "test"
    assert agent.attributes["openprogram.version.hash"] == record.version.hash
    assert agent.attributes["openprogram.version.commit"] == "c0ffee"
    assert record.usage is not None
    assert agent.attributes["gen_ai.usage.input_tokens"] == record.usage["input_tokens"] > 0
    assert agent.attributes["gen_ai.usage.output_tokens"] == record.usage["output_tokens"] > 0

    method = named(spans, "desk.ask")
    assert method.attributes is not None
    assert method.attributes["openprogram.prompt_version"]

    chat = named(spans, "chat test")
    assert chat.kind is SpanKind.CLIENT and chat.attributes is not None
    assert chat.attributes["gen_ai.operation.name"] == "chat"
    assert chat.attributes["gen_ai.provider.name"] == chat.attributes["gen_ai.system"] == "test"
    assert chat.attributes["gen_ai.request.model"] == "test"
    assert chat.attributes["gen_ai.response.model"] == "test"
    assert chat.attributes["gen_ai.usage.input_tokens"] == record.usage["input_tokens"]
    assert chat.attributes["gen_ai.response.finish_reasons"] == ("stop",)

    tool = named(spans, "execute_tool lookup")
    assert tool.attributes is not None
    assert tool.attributes["gen_ai.operation.name"] == "execute_tool"
    assert tool.attributes["gen_ai.tool.name"] == "lookup"
    assert tool.attributes["gen_ai.tool.call.id"]
    assert all(s.status.status_code is StatusCode.UNSET for s in spans)


def test_prompts_completions_and_tool_arguments_are_not_exported_by_default(
    tmp_path: Path,
) -> None:
    path = write_desk(tmp_path)
    with spans_in_memory() as exporter:
        record = run(path, "ask", {"ticket": "T-17"})
    assert record.status == "ok", record.error
    spans = exporter.get_finished_spans()
    assert not [key for s in spans for key in (s.attributes or {}) if key in CONTENT]
    exported = everything_exported(spans)
    assert "T-17" not in exported and "Look up" not in exported and "is open" not in exported


def test_content_is_exported_when_asked_with_the_runs_secrets_redacted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = "desk-token-5b7e91"
    monkeypatch.setenv("DESK_TOKEN", secret)
    agent = AGENT.replace("model: test", "model: test\ninstructions: Sign with ${env:DESK_TOKEN}.")
    path = write_desk(tmp_path, agent)
    with spans_in_memory(capture_content=True) as exporter:
        record = run(path, "ask", {"ticket": f"T-17 {secret}"})
    assert record.status == "ok", record.error
    spans = exporter.get_finished_spans()
    assert secret not in everything_exported(spans)

    chat = named(spans, "chat test")
    assert chat.attributes is not None
    system = json.loads(str(chat.attributes["gen_ai.system_instructions"]))
    assert system == [{"type": "text", "content": "Sign with ***."}]
    messages = json.loads(str(chat.attributes["gen_ai.input.messages"]))
    assert messages[0] == {
        "role": "user",
        "parts": [{"type": "text", "content": "Look up T-17 ***"}],
    }
    call = messages[1]["parts"][0]
    assert call["type"] == "tool_call" and call["name"] == "lookup"
    assert messages[2]["role"] == "tool"
    assert messages[2]["parts"][0]["type"] == "tool_call_response"
    assert messages[2]["parts"][0]["id"] == call["id"]
    reply = json.loads(str(chat.attributes["gen_ai.output.messages"]))
    assert reply[0]["role"] == "assistant" and reply[0]["finish_reason"] == "stop"
    assert reply[0]["parts"][0]["content"] == str(record.output).replace(secret, "***")

    tool = named(spans, "execute_tool lookup")
    assert tool.attributes is not None
    arguments = json.loads(str(tool.attributes["gen_ai.tool.call.arguments"]))
    assert arguments == call["arguments"]
    assert "is open" in str(tool.attributes["gen_ai.tool.call.result"])
    agent_span = named(spans, "invoke_agent desk")
    assert agent_span.attributes is not None
    assert json.loads(str(agent_span.attributes["openprogram.inputs"])) == {"ticket": "T-17 ***"}


def test_long_content_is_cut_and_a_secret_at_the_cut_is_still_hidden(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A file input (up to 20 MiB as base64) would make spans bigger than a collector takes
    (4 MiB a request by default): the whole batch, other runs' spans with it, would be lost.
    Each string of content is cut, saying how long it was; a secret that straddles the cut
    is hidden all the same (redacted before cutting)."""
    secret = "desk-token-5b7e91"
    monkeypatch.setenv("DESK_TOKEN", secret)
    path = write_desk(tmp_path)
    limit = otel.MAX_CONTENT_CHARS
    ticket = "a" * (limit - 5) + secret + "b" * 3 * limit
    with spans_in_memory(capture_content=True) as exporter:
        record = run(path, "ask", {"ticket": ticket})
    assert record.status == "ok", record.error
    spans = exporter.get_finished_spans()
    exported = everything_exported(spans)
    assert secret[:5] not in exported and "b" * limit not in exported
    for span in spans:
        for value in (span.attributes or {}).values():
            assert len(str(value)) < 2 * limit
    agent_span = named(spans, "invoke_agent desk")
    assert agent_span.attributes is not None
    shown = json.loads(str(agent_span.attributes["openprogram.inputs"]))["ticket"]
    assert shown.startswith("a" * (limit - 5) + "***") and shown.endswith(
        f"… ({len(ticket) - len(secret) + 3:,} characters)"
    )


def test_against_a_chat_server_the_spans_carry_its_usage_model_and_reply_id(
    tmp_path: Path,
) -> None:
    call = {
        "id": "call-1",
        "type": "function",
        "function": {"name": "lookup_order", "arguments": json.dumps({"id": "42"})},
    }
    replies = [
        json_reply(chat_completion(tool_calls=[call])),
        json_reply({"id": "42", "status": "shipped"}),
        json_reply(chat_completion("It shipped.")),
    ]
    with LoopbackServer(replies) as server, spans_in_memory() as exporter:
        path = tmp_path / "shop.yaml"
        path.write_text(SHOP_AGENT % {"url": server.url}, encoding="utf-8")
        record = run(path, "ask", {})
    assert record.status == "ok", record.error
    spans = exporter.get_finished_spans()
    assert tree(spans) == [
        "invoke_agent shop",
        "  shop.ask",
        "    chat llama3",
        "      execute_tool lookup_order",
    ]
    chat = named(spans, "chat llama3")
    assert chat.attributes is not None
    # Two requests of 31 prompt and 9 completion tokens each, as the server said.
    assert chat.attributes["gen_ai.usage.input_tokens"] == 62
    assert chat.attributes["gen_ai.usage.output_tokens"] == 18
    assert chat.attributes["gen_ai.request.model"] == "llama3"
    assert chat.attributes["gen_ai.response.model"] == "llama3"
    assert chat.attributes["gen_ai.response.id"] == "chatcmpl-1"
    assert chat.attributes["gen_ai.provider.name"] == "openai"
    assert chat.attributes["openprogram.turns"] == 2
    tool = named(spans, "execute_tool lookup_order")
    assert tool.attributes is not None
    assert tool.attributes["gen_ai.tool.call.id"] == "call-1"
    agent = named(spans, "invoke_agent shop")
    assert agent.attributes is not None
    assert agent.attributes["gen_ai.usage.input_tokens"] == 62
    assert agent.attributes["gen_ai.usage.output_tokens"] == 18
    assert record.usage is not None and record.usage["input_tokens"] == 62


def test_a_failed_model_call_marks_its_spans_failed_without_the_servers_words(
    tmp_path: Path,
) -> None:
    refusal = {"error": {"message": "prompt rejected: 'Where is order 42?'"}}
    with LoopbackServer([json_reply(refusal, 400)]) as server, spans_in_memory() as exporter:
        path = tmp_path / "shop.yaml"
        path.write_text(SHOP_AGENT % {"url": server.url}, encoding="utf-8")
        record = run(path, "ask", {})
    assert record.status == "failed"
    spans = exporter.get_finished_spans()
    for name in ("invoke_agent shop", "shop.ask", "chat llama3"):
        span = named(spans, name)
        assert span.status.status_code is StatusCode.ERROR, name
        assert span.attributes is not None and span.attributes["error.type"] == "LLMError"
        assert span.attributes["openprogram.error.reason"]
    assert "order 42" not in everything_exported(spans)


def test_a_trace_reused_for_a_second_run_exports_each_run_once(tmp_path: Path) -> None:
    path = write_desk(tmp_path)
    trace = SessionTrace()
    with spans_in_memory() as exporter:
        run(path, "ask", {"ticket": "one"}, trace=trace)
        run(path, "ask", {"ticket": "two"}, trace=trace)
    spans = exporter.get_finished_spans()
    assert len(spans) == 8 and len(trace.nodes) == 8
    assert not trace.observers
    roots = [s for s in spans if s.parent is None]
    assert [s.name for s in roots] == ["invoke_agent desk", "invoke_agent desk"]
    assert roots[0].context is not None and roots[1].context is not None
    assert roots[0].context.trace_id != roots[1].context.trace_id


def test_the_attribute_names_are_those_of_the_installed_semantic_conventions() -> None:
    ours = {
        name: value
        for name, value in vars(otel).items()
        if name.isupper() and isinstance(value, str) and value.startswith("gen_ai.")
    }
    theirs = {
        value for name, value in vars(gen_ai_attributes).items() if name.startswith("GEN_AI_")
    }
    assert ours and set(ours.values()) <= theirs


def test_a_node_of_a_kind_it_does_not_know_is_a_plain_span_and_a_nameless_model_call_is_chat(
    tmp_path: Path,
) -> None:
    with spans_in_memory() as exporter:
        active = telemetry.active()
        assert active is not None
        trace = active.watch(None, frozenset())
        with trace.span("batch", "nightly"), trace.span("exec", ""):
            pass
    spans = exporter.get_finished_spans()
    assert tree(spans) == ["nightly", "  chat"]
    assert not named(spans, "nightly").attributes
