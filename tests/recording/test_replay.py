"""Record real turns against a Chat Completions server on 127.0.0.1, then replay them offline."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml
from loopback import (
    LoopbackServer,
    Request,
    chat_completion,
    json_reply,
    openai_sse,
    sse_reply,
    status_reply,
)

from openprogram_yaml.errors import ConfigError, LLMError
from openprogram_yaml.recording.format import canonical_request, request_key
from openprogram_yaml.recording.record import RecordingSelector
from openprogram_yaml.recording.replay import ReplayRuntime, ReplaySelector
from openprogram_yaml.runtime.context import current_method
from openprogram_yaml.runtime.runtime import Runtime
from openprogram_yaml.runtimes.protocol import Message, ToolSpec
from openprogram_yaml.runtimes.registry import RuntimeRegistry
from openprogram_yaml.runtimes.rules import RuntimeRule
from openprogram_yaml.runtimes.select import RuntimeSelector
from openprogram_yaml.spec.yamlwrite import dump_yaml

KEY = "sk-secret-123456"
LABEL = "triage.classify"
PROMPT = """\
You triage support tickets for Acme Mail.
Look the order up before you answer.

Ticket: I was charged twice for order A-17.
"""
CHANGED = PROMPT.replace("Look the order up before you answer.", "Always check the order first.")
SCHEMA = {
    "name": "label",
    "schema": {
        "type": "object",
        "additionalProperties": False,
        "required": ["category", "order"],
        "properties": {
            "category": {"type": "string", "enum": ["bug", "billing"]},
            "order": {"type": "string"},
        },
    },
}
ANSWER = {"category": "billing", "order": "A-17"}


def tool_call(call_id: str, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": call_id,
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(arguments)},
    }


def lookup_order(order_id: str) -> dict[str, Any]:
    return {"order_id": order_id, "charges": [19.99, 19.99]}


LOOKUP = {
    "spec": {
        "name": "lookup_order",
        "description": "Fetch an order by id.",
        "parameters": {
            "type": "object",
            "properties": {"order_id": {"type": "string"}},
            "required": ["order_id"],
        },
    },
    "execute": lookup_order,
}


@contextmanager
def labelled(label: str) -> Iterator[None]:
    """What ``Method.run`` does around its turns."""
    token = current_method.set(label)
    try:
        yield
    finally:
        current_method.reset(token)


def live_selector(server: LoopbackServer, **options: Any) -> RuntimeSelector:
    options = {"base_url": server.url + "/v1", "api_key": KEY, **options}
    return RuntimeSelector(rules=[RuntimeRule("local:*", "openai", options)])


def classify(selector: Any, prompt: str = PROMPT, **runtime_options: Any) -> Any:
    with labelled(LABEL), Runtime(model="local:llama3", runtimes=selector, **runtime_options) as rt:
        return rt.exec(
            prompt, tools=[LOOKUP], response_format=SCHEMA, model_options={"temperature": 0.2}
        )


def record_conversation(folder: Path) -> tuple[Any, list[Request], list[Path]]:
    with LoopbackServer() as server:
        server.add(
            json_reply(
                chat_completion(
                    tool_calls=[tool_call("call_7", "lookup_order", {"order_id": "A-17"})]
                )
            ),
            json_reply(chat_completion(json.dumps(ANSWER))),
        )
        selector = RecordingSelector(live_selector(server), folder)
        output = classify(selector)
        asyncio.run(selector.aclose())
        return output, list(server.requests), list(selector.written)


def recording_texts(folder: Path) -> dict[Path, str]:
    return {p: p.read_text(encoding="utf-8") for p in sorted(folder.rglob("*")) if p.is_file()}


# --- record, then replay ---------------------------------------------------------------


def test_a_recorded_conversation_replays_without_the_server(tmp_path: Path) -> None:
    folder = tmp_path / "recordings"
    output, requests, written = record_conversation(folder)
    assert output == ANSWER
    assert len(requests) == 2  # the tool call, then the structured answer
    assert [p.parent.name for p in written] == [LABEL, LABEL]
    assert sorted(folder.rglob("*.yaml")) == sorted(written)

    # The server is gone: every answer now comes from the files.
    assert classify(ReplaySelector(folder)) == ANSWER


def test_replay_serves_the_registered_replay_model_too(tmp_path: Path) -> None:
    folder = tmp_path / "recordings"
    record_conversation(folder)
    registry = RuntimeRegistry.isolated(None)
    registry.register("replay", ReplayRuntime)  # how the lead registers the `replay` model
    selector = RuntimeSelector(registry=registry)
    with labelled(LABEL), Runtime(model=f"replay:{folder}", runtimes=selector) as rt:
        output = rt.exec(
            PROMPT, tools=[LOOKUP], response_format=SCHEMA, model_options={"temperature": 0.2}
        )
    assert output == ANSWER
    assert selector.explain(f"replay:{folder}").runtime_id == "replay"
    # The registry's instance claims only `replay` models, never every model it is asked about.
    assert not ReplayRuntime().supports("local:llama3")


def test_a_changed_prompt_fails_clearly_with_a_diff(tmp_path: Path) -> None:
    folder = tmp_path / "recordings"
    record_conversation(folder)
    with pytest.raises(LLMError) as caught:
        classify(ReplaySelector(folder), CHANGED)
    message = str(caught.value)
    assert caught.value.reason == "invalid_request" and not caught.value.retryable
    assert "'triage.classify'" in message
    assert "the prompt changed since it was recorded" in message
    assert "re-record with --record" in message and str(folder) in message
    lines = message.splitlines()
    assert any(ln.lstrip().startswith("-") and "Look the order up" in ln for ln in lines)
    assert any(ln.lstrip().startswith("+") and "Always check the order first" in ln for ln in lines)
    # Bounded: the diff shows what changed, not the whole request.
    assert len(lines) < 60


def test_a_method_with_no_recordings_says_so(tmp_path: Path) -> None:
    folder = tmp_path / "recordings"
    record_conversation(folder)
    with (
        labelled("triage.route"),
        Runtime(model="local:llama3", runtimes=ReplaySelector(folder)) as rt,
        pytest.raises(LLMError) as caught,
    ):
        rt.exec("Route this ticket")
    message = str(caught.value)
    assert "no recordings for 'triage.route'" in message
    assert f"recorded: {LABEL}" in message
    assert f"--record {folder}" in message


def test_a_missing_folder_is_a_clear_failure(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no recordings folder here"):
        classify(ReplaySelector(tmp_path / "nowhere"))


def test_failed_turns_are_not_recorded(tmp_path: Path) -> None:
    folder = tmp_path / "recordings"
    with LoopbackServer() as server:
        server.add(status_reply(400, {"error": {"message": "bad request"}}))
        selector = RecordingSelector(live_selector(server), folder)
        with pytest.raises(LLMError):
            classify(selector)
        asyncio.run(selector.aclose())
    assert selector.written == []
    assert not list(folder.rglob("*.yaml"))


def test_a_recording_that_cannot_be_written_after_the_turn_keeps_the_turns_usage(
    tmp_path: Path,
) -> None:
    folder = tmp_path / "recordings"

    def answer_then_fill_the_label_folder(request: Request) -> Any:
        # The folder was fine before the turn: what fails now is the write (a full disk).
        (folder / "greeter.hello").rmdir()
        (folder / "greeter.hello").write_text("in the way\n", encoding="utf-8")
        return json_reply(chat_completion("Hello"))

    with LoopbackServer() as server:
        server.add(answer_then_fill_the_label_folder)
        selector = RecordingSelector(live_selector(server), folder)
        with labelled("greeter.hello"), Runtime(model="local:llama3", runtimes=selector) as rt:
            with pytest.raises(LLMError, match="cannot write a recording"):
                rt.exec("Say hello")
            usage = rt.total_usage  # the turn was made and paid for: 0 tokens before
        asyncio.run(selector.aclose())
    assert (usage.input_tokens, usage.output_tokens) == (31, 9)
    assert selector.written == []


def test_streaming_works_through_recording_and_replay(tmp_path: Path) -> None:
    folder = tmp_path / "recordings"
    chunks = [
        {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "llama3",
         "choices": [{"index": 0, "delta": {"role": "assistant", "content": part},
                      "finish_reason": None}]}
        for part in ("Hello ", "there")
    ]  # fmt: skip
    events: list[dict[str, Any]] = []
    with LoopbackServer() as server:
        server.add(sse_reply(openai_sse(chunks)))
        selector = RecordingSelector(live_selector(server), folder)
        with (
            labelled("greeter.hello"),
            Runtime(model="local:llama3", runtimes=selector, on_stream=events.append) as rt,
        ):
            assert rt.exec("Say hello") == "Hello there"
        asyncio.run(selector.aclose())
    assert [e["text"] for e in events if e["type"] == "text"] == ["Hello ", "there"]
    [path] = selector.written
    assert yaml.safe_load(path.read_text())["response"]["content"] == "Hello there"

    replayed: list[dict[str, Any]] = []
    with (
        labelled("greeter.hello"),
        Runtime(
            model="local:llama3", runtimes=ReplaySelector(folder), on_stream=replayed.append
        ) as rt,
    ):
        assert rt.exec("Say hello") == "Hello there"
    assert "".join(e["text"] for e in replayed if e["type"] == "text") == "Hello there"


# --- what lands in the files --------------------------------------------------------------


def test_no_key_or_secret_header_lands_in_a_recording(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "recordings"
    gateway_key = "gk-live-0a1b2c3d4e5f"
    header_secret = "hdr-7f3c9a1b2d4e"
    env_token = "tok-9z8y7x6w5v4u"
    monkeypatch.setenv("MY_GATEWAY_KEY", gateway_key)
    monkeypatch.setenv("SHOP_TOKEN", env_token)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-env-only-abcdef0123")

    def echo(request: Request) -> Any:
        # A careless gateway that repeats what it was sent: the reply carries every secret.
        seen = f"auth={request.headers['authorization']} gw={request.headers['x-gateway-token']}"
        return json_reply(chat_completion(f"I saw {seen} and {env_token}"))

    def leaky_tool(order_id: str) -> str:
        return f"order {order_id}; fetched with Authorization: Bearer {gateway_key}"

    leaky = {**LOOKUP, "execute": leaky_tool}
    with LoopbackServer() as server:
        server.add(
            json_reply(
                chat_completion(tool_calls=[tool_call("c1", "lookup_order", {"order_id": "7"})])
            ),
            echo,
        )
        inner = RuntimeSelector(
            rules=[
                RuntimeRule(
                    "local:*",
                    "openai",
                    {
                        "base_url": server.url + "/v1",
                        "api_key_env": "MY_GATEWAY_KEY",
                        "headers": {"X-Gateway-Token": header_secret},
                    },
                )
            ]
        )
        selector = RecordingSelector(inner, folder, secrets=["extra-secret-value-1"])
        with labelled(LABEL), Runtime(model="local:llama3", runtimes=selector) as rt:
            answer = rt.exec(f"Ticket from {env_token}: extra-secret-value-1", tools=[leaky])
        asyncio.run(selector.aclose())
        assert server.requests[0].headers["authorization"] == f"Bearer {gateway_key}"
        assert server.requests[0].headers["x-gateway-token"] == header_secret
    assert gateway_key in answer and header_secret in answer  # the secrets were really there

    texts = recording_texts(folder)
    assert len(texts) == 2
    everything = "\n".join(texts.values())
    for secret in (gateway_key, header_secret, env_token, "extra-secret-value-1", "sk-env-only"):
        assert secret not in everything
    assert "***" in everything
    assert "api_key" not in everything and "session_id" not in everything


def test_recordings_are_readable_yaml(tmp_path: Path) -> None:
    folder = tmp_path / "recordings"
    _, _, written = record_conversation(folder)
    first = written[0].read_text(encoding="utf-8")
    assert KEY not in "".join(recording_texts(folder).values())
    assert first.startswith("# A recorded model turn")
    # The multi-line prompt is a literal block: each prompt line is one line of the file.
    assert "content: |" in first
    for line in PROMPT.splitlines():
        if line:
            assert f"        {line}\n" in first
    data = yaml.safe_load(first)
    assert list(data) == ["request", "response", "recorded"]
    assert data["request"]["messages"][0]["content"] == PROMPT
    assert data["request"]["tools"][0]["name"] == "lookup_order"
    assert data["request"]["response_format"]["name"] == "label"
    assert data["request"]["temperature"] == 0.2
    assert data["response"]["tool_calls"] == [
        {"id": "call_7", "name": "lookup_order", "arguments": '{"order_id": "A-17"}'}
    ]
    assert data["response"]["usage"]["input_tokens"] == 31
    recorded = data["recorded"]
    assert recorded["label"] == LABEL and recorded["model_ref"] == "local:llama3"
    assert recorded["runtime"] == "openai" and recorded["at"].endswith("+00:00")
    assert written[0].stem == request_key(data["request"])


# --- the canonical request and the YAML writer ---------------------------------------------


def test_the_request_key_ignores_secret_and_volatile_options() -> None:
    tools = [ToolSpec("t", "A tool", {"type": "object", "properties": {}})]
    base = canonical_request(
        [Message("user", "hi")], system_prompt="Be brief.", options={"tools": tools}
    )
    noisy = canonical_request(
        "hi",
        system_prompt="Be brief.",
        options={
            "tools": tools,
            "api_key": KEY,
            "session_id": "op-1234",
            "timeout_s": 12.5,
            "on_delta": print,
            "headers": {"x": "y"},
        },
    )
    assert noisy == base and request_key(noisy) == request_key(base)
    assert len(request_key(base)) == 16
    warmer = canonical_request(
        "hi", system_prompt="Be brief.", options={"tools": tools, "temperature": 0.9}
    )
    assert request_key(warmer) != request_key(base)


def test_dump_yaml_is_block_style_ordered_and_round_trips() -> None:
    data = {
        "zeta": 1,
        "alpha": "héllo ✓",
        "text": "one\ntwo\n",
        "items": [{"b": 2, "a": (1, 2)}],
        "no": "no",
    }
    text = dump_yaml(data)
    assert text.index("zeta") < text.index("alpha")  # key order kept
    assert "héllo ✓" in text  # unicode kept
    assert "text: |\n  one\n  two\n" in text
    assert "{" not in text and "!!" not in text
    assert yaml.safe_load(text) == {**data, "items": [{"b": 2, "a": [1, 2]}]}
