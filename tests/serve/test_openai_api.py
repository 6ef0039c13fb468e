"""The OpenAI-compatible endpoint, called by the official ``openai`` SDK on 127.0.0.1."""

from __future__ import annotations

import asyncio
import base64
import json
import queue
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import openai as openai_sdk
import pytest
from loopback import LoopbackServer, openai_sse, sse_reply, status_reply
from loopback import chat_completion as chat_completion_body
from openai import AsyncOpenAI, OpenAI
from openai.types import Model
from openai.types.chat import ChatCompletion, ChatCompletionChunk
from support import loop_turns

from openprogram_yaml.compile.project import compile_path
from openprogram_yaml.run.record import RunRecord
from openprogram_yaml.run.reload import ProgramHolder
from openprogram_yaml.run.service import RunService
from openprogram_yaml.run.version import VersionStamp
from openprogram_yaml.serve.app import Server, ServeState
from openprogram_yaml.serve.openai_api import (
    OpenAIError,
    chat_completion,
    chunk,
    content_of,
    method_inputs,
    model_table,
    models_list,
    parse_chat_request,
    read_method_inputs,
    record_error,
    usage_of,
)
from openprogram_yaml.serve.served_run import PARSE_IN_WORKER

DESK = """
version: 1
name: desk
description: A help desk.
model: test
methods:
  answer:
    description: Answer a ticket.
    inputs: {ticket: {type: string}}
    prompt: "Answer: {{ ticket }}"
  label:
    description: Label a ticket.
    inputs: {ticket: {type: string}}
    prompt: "Label: {{ ticket }}"
    response_schema:
      type: object
      properties: {label: {type: string, enum: [bug, question]}, urgent: {type: boolean}}
      required: [label, urgent]
  quote:
    inputs: {item: {type: string}, count: {type: integer}}
    prompt: "Price {{ count }} of {{ item }}"
  double:
    inputs: {n: {type: integer}}
    prompt: "Double {{ n }}"
  hello:
    prompt: "Say hello"
"""


def user(content: Any) -> dict[str, Any]:
    return {"model": "desk.answer", "messages": [{"role": "user", "content": content}]}


# --- the wire format, without a server ---------------------------------------------------


def test_each_method_is_a_model_named_agent_method_and_bare_for_a_single_agent(write) -> None:  # type: ignore[no-untyped-def]
    program = compile_path(write("desk.yaml", DESK))
    table = model_table(program)
    assert table["desk.answer"] is table["answer"]
    assert set(table) == {
        *(f"desk.{m}" for m in ("answer", "label", "quote", "double", "hello")),
        *("answer", "label", "quote", "double", "hello"),
    }
    listed = models_list(program, created=1_700_000_000)
    assert listed["object"] == "list"
    models = [Model.model_validate(m) for m in listed["data"]]  # type: ignore[union-attr]
    first = models[0]
    assert (first.id, first.owned_by, first.created) == (
        "desk.answer",
        "openprogram",
        1_700_000_000,
    )
    assert first.model_extra == {"description": "Answer a ticket."}


def test_the_last_user_message_is_the_input_and_earlier_messages_are_ignored() -> None:
    chat = parse_chat_request(
        {
            "model": "desk.answer",
            "messages": [
                {"role": "system", "content": "ignored"},
                {"role": "user", "content": "first"},
                {"role": "assistant", "content": "ok"},
                {"role": "user", "content": [{"type": "text", "text": "my"},
                                             {"type": "text", "text": "printer"}]},
            ],
            "temperature": 0.2,  # sampling parameters are the YAML's to decide
            "stream": True,
            "stream_options": {"include_usage": True},
        }
    )  # fmt: skip
    assert (chat.model, chat.text, chat.stream, chat.include_usage) == (
        "desk.answer",
        "my\nprinter",
        True,
        True,
    )


@pytest.mark.parametrize(
    ("body", "says"),
    [
        ([], "must be a JSON object"),
        ({"messages": [{"role": "user", "content": "x"}]}, "'model' must be a string"),
        ({"model": "desk.answer", "messages": []}, "'messages' must be a non-empty array"),
        ({"model": "desk.answer", "messages": ["hi"]}, "messages[0] must be an object"),
        ({**user("x"), "messages": [{"role": "system", "content": "x"}]}, "must hold a user"),
        (user(42), "messages[0].content must be a string or an array of content parts"),
        (user(None), "messages[0].content must be a string or an array of content parts"),
        (user([{"type": "image_url", "image_url": {}}]), "content[0].image_url.url must be a"),
        (user([{"type": "video_url", "video_url": {}}]), "type text, image_url, input_audio or"),
        (user([{"type": "image_url", "image_url": {"url": "https://x.test/a.png"}}]), "a data URL"),
        (user([{"type": "file", "file": {"file_id": "file-1"}}]), "there is no Files API here"),
        (user([{"type": "input_audio", "input_audio": {"data": "AA=="}}]), "(wav or mp3)"),
        (user([{"type": "image_url", "image_url": {"url": "data:image/png;base64,@@"}}]), "base64"),
        ({**user("x"), "stream": "yes"}, "'stream' must be a boolean"),
        ({**user("x"), "stream_options": []}, "'stream_options' must be an object"),
        ({**user("x"), "n": 2}, "'n' must be 1"),
        ({**user("x"), "n": True}, "'n' must be an integer"),
    ],
)
def test_a_bad_request_is_a_400_saying_what_is_wrong(body: object, says: str) -> None:
    with pytest.raises(OpenAIError) as caught:
        parse_chat_request(body)
    assert caught.value.status == 400 and says in caught.value.message
    error = caught.value.body()["error"]
    assert error["type"] == "invalid_request_error"  # type: ignore[index, call-overload]


def test_a_long_message_is_read_as_inputs_while_the_event_loop_serves_others(write) -> None:  # type: ignore[no-untyped-def]
    """A last user message past ``PARSE_IN_WORKER`` is parsed as inputs in a worker thread,
    as the body it came in was: a JSON object of 23 MiB held the event loop 0.24 s. Here
    the loop turns while it is parsed; a parse on the loop would end in the first turn."""
    table = model_table(compile_path(write("desk.yaml", DESK)))
    text = json.dumps({"item": "p" * PARSE_IN_WORKER, "count": 2})

    inputs, turns = loop_turns(read_method_inputs(table["quote"], text))
    assert inputs == {"item": "p" * PARSE_IN_WORKER, "count": 2}
    assert turns > 1
    with pytest.raises(OpenAIError, match="takes inputs item, count"):
        asyncio.run(read_method_inputs(table["quote"], text[:-1]))


def test_inputs_from_the_text_one_input_several_or_none(write) -> None:  # type: ignore[no-untyped-def]
    table = model_table(compile_path(write("desk.yaml", DESK)))
    assert method_inputs(table["answer"], '{"not": "parsed"}') == {"ticket": '{"not": "parsed"}'}
    assert method_inputs(table["double"], "21") == {"n": 21}
    assert method_inputs(table["double"], "many") == {"n": "many"}  # the run says it is bad
    assert method_inputs(table["quote"], '{"item": "pen", "count": 2}') == {
        "item": "pen",
        "count": 2,
    }
    assert method_inputs(table["hello"], "anything") == {}
    for text in ("two pens", "[1, 2]", "[" * 200 + "]" * 200):
        with pytest.raises(OpenAIError) as caught:
            method_inputs(table["quote"], text)
        assert caught.value.status == 400
        assert "takes inputs item, count" in caught.value.message
        assert '{"item": …, "count": …}' in caught.value.message


def test_a_completion_and_its_chunks_are_what_the_sdk_types_describe() -> None:
    record = RunRecord(
        agent="desk",
        method="label",
        inputs={},
        version=VersionStamp(hash="abc123"),
        output={"label": "bug", "urgent": True},
        usage={"input_tokens": 12, "output_tokens": 5, "total_tokens": 17, "cache_read": 4},
    )
    completion = ChatCompletion.model_validate(chat_completion(record, "desk.label", 1))
    assert completion.id == f"chatcmpl-{record.id}" and completion.system_fingerprint == "abc123"
    assert completion.choices[0].message.content == '{"label":"bug","urgent":true}'
    assert completion.choices[0].finish_reason == "stop"
    assert completion.usage is not None
    assert (completion.usage.prompt_tokens, completion.usage.completion_tokens) == (12, 5)
    assert completion.usage.total_tokens == 17
    assert completion.usage.prompt_tokens_details is not None
    assert completion.usage.prompt_tokens_details.cached_tokens == 4
    role = ChatCompletionChunk.model_validate(chunk("c", "m", 1, {"role": "assistant"}))
    assert role.choices[0].delta.role == "assistant" and role.usage is None
    last = ChatCompletionChunk.model_validate(chunk("c", "m", 1, {}, finish_reason="stop"))
    assert last.choices[0].finish_reason == "stop"
    usage = ChatCompletionChunk.model_validate(chunk("c", "m", 1, None, usage=usage_of(None)))
    assert usage.choices == [] and usage.usage is not None and usage.usage.total_tokens == 0


def test_content_is_text_as_it_is_and_any_other_value_compact_json() -> None:
    assert content_of("plain {text}") == "plain {text}"
    assert content_of({"a": [1, 2], "é": None}) == '{"a":[1,2],"é":null}'
    assert content_of(None) == "null" and content_of(3) == "3"


def test_a_failed_run_is_an_error_of_its_kind_with_secrets_redacted() -> None:
    def failed(kind: str, exit_code: int, status: str = "failed") -> OpenAIError:
        record = RunRecord(
            agent="desk",
            method="answer",
            inputs={},
            version=VersionStamp(hash="v"),
            status=status,  # type: ignore[arg-type]
            error={"type": kind, "message": "key sk-secret-123 refused"},
            exit_code=exit_code,
            secrets=frozenset({"sk-secret-123"}),
        )
        return record_error(record)

    model = failed("LLMError", 1)
    assert (model.status, model.type, model.message) == (
        502,
        "server_error",
        "LLMError: key *** refused",
    )
    assert failed("UsageError", 2).status == 400
    assert failed("ValueError", 1).status == 500
    assert failed("Interrupted", 130, "interrupted").status == 503


# --- the endpoint, called by the openai SDK ----------------------------------------------


@contextmanager
def serving(agent: Path, token: str | None = None) -> Iterator[str]:
    """The server on 127.0.0.1, in a thread with its own event loop (the sync client blocks
    the thread it runs in); yields the base URL the SDK takes (``.../v1``)."""
    holder = ProgramHolder(agent)
    holder.load()
    started: queue.Queue[tuple[asyncio.AbstractEventLoop, asyncio.Event, int] | BaseException]
    started = queue.Queue()

    async def serve() -> None:
        stop = asyncio.Event()
        state = ServeState(holder, RunService(holder.snapshot), token=token)
        server = Server(state)
        try:
            port = await server.start(0)
        except BaseException as exc:
            started.put(exc)
            raise
        started.put((asyncio.get_running_loop(), stop, port))
        await stop.wait()
        await server.close(grace_s=0)

    thread = threading.Thread(target=asyncio.run, args=(serve(),), daemon=True)
    thread.start()
    got = started.get(timeout=30)
    if isinstance(got, BaseException):
        raise got
    loop, stop, port = got
    try:
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        loop.call_soon_threadsafe(stop.set)
        thread.join(timeout=30)


def client(url: str, api_key: str = "unused") -> OpenAI:
    # No retries: a test that expects an error must not wait for the SDK's backoff.
    return OpenAI(base_url=url, api_key=api_key, max_retries=0)


def async_client(url: str, api_key: str = "unused") -> AsyncOpenAI:
    return AsyncOpenAI(base_url=url, api_key=api_key, max_retries=0)


ASK = [{"role": "system", "content": "ignored"}, {"role": "user", "content": "my printer"}]


def test_the_sync_client_runs_a_method_and_reads_its_answer_and_usage(write) -> None:  # type: ignore[no-untyped-def]
    with serving(write("desk.yaml", DESK)) as url, client(url) as openai:
        completion = openai.chat.completions.create(model="desk.answer", messages=ASK)  # type: ignore[arg-type]
        bare = openai.chat.completions.create(model="answer", messages=ASK)  # type: ignore[arg-type]
        run_id = completion.id.removeprefix("chatcmpl-")
        run = httpx.get(f"{url.removesuffix('/v1')}/runs/{run_id}").json()
    assert completion.object == "chat.completion" and completion.model == "desk.answer"
    # The run is in the history like any other: its record, with its trace.
    assert run["record"]["inputs"] == {"ticket": "my printer"}
    assert run["record"]["output"] == completion.choices[0].message.content
    assert run["trace"]
    [choice] = completion.choices
    assert choice.message.role == "assistant" and choice.finish_reason == "stop"
    assert choice.message.content == "test reply to: Answer: my printer"
    assert bare.choices[0].message.content == choice.message.content
    usage = completion.usage
    assert usage is not None and usage.prompt_tokens > 0 and usage.completion_tokens > 0
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens
    assert completion.id.startswith("chatcmpl-") and completion.id != bare.id


def test_the_async_client_runs_methods_concurrently(write) -> None:  # type: ignore[no-untyped-def]
    async def ask(url: str) -> list[str | None]:
        async with async_client(url) as openai:
            replies = await asyncio.gather(
                *(
                    openai.chat.completions.create(
                        model="desk.answer", messages=[{"role": "user", "content": f"t{i}"}]
                    )
                    for i in range(5)
                )
            )
        return [r.choices[0].message.content for r in replies]

    with serving(write("desk.yaml", DESK)) as url:
        contents = asyncio.run(ask(url))
    assert contents == [f"test reply to: Answer: t{i}" for i in range(5)]


def test_a_response_schema_answers_its_json_as_the_content(write) -> None:  # type: ignore[no-untyped-def]
    with serving(write("desk.yaml", DESK)) as url, client(url) as openai:
        completion = openai.chat.completions.create(model="desk.label", messages=ASK)  # type: ignore[arg-type]
        stream = openai.chat.completions.create(model="desk.label", messages=ASK, stream=True)  # type: ignore[arg-type]
        streamed = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    content = completion.choices[0].message.content
    assert content is not None
    label = json.loads(content)
    assert label["label"] in ("bug", "question") and isinstance(label["urgent"], bool)
    assert content == json.dumps(label, separators=(",", ":"))
    assert streamed == content


def test_a_stream_is_chunks_role_content_finish_usage(write) -> None:  # type: ignore[no-untyped-def]
    with serving(write("desk.yaml", DESK)) as url, client(url) as openai:
        chunks = list(
            openai.chat.completions.create(
                model="desk.answer",
                messages=ASK,  # type: ignore[arg-type]
                stream=True,
                stream_options={"include_usage": True},
            )
        )
        plain = list(openai.chat.completions.create(model="desk.answer", messages=ASK, stream=True))  # type: ignore[arg-type]
    assert all(c.object == "chat.completion.chunk" and c.model == "desk.answer" for c in chunks)
    assert len({c.id for c in chunks}) == 1
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "test reply to: Answer: my printer"
    finish = [c.choices[0].finish_reason for c in chunks if c.choices]
    assert finish[-1] == "stop" and set(finish[:-1]) == {None}
    usage = chunks[-1]
    assert usage.choices == [] and usage.usage is not None and usage.usage.total_tokens > 0
    assert plain[-1].choices[0].finish_reason == "stop" and plain[-1].usage is None


def test_the_async_client_streams(write) -> None:  # type: ignore[no-untyped-def]
    async def stream(url: str) -> str:
        async with async_client(url) as openai:
            chunks = await openai.chat.completions.create(
                model="desk.answer",
                messages=ASK,
                stream=True,  # type: ignore[arg-type]
            )
            return "".join([c.choices[0].delta.content or "" async for c in chunks if c.choices])

    with serving(write("desk.yaml", DESK)) as url:
        assert asyncio.run(stream(url)) == "test reply to: Answer: my printer"


def test_the_models_are_the_methods(write) -> None:  # type: ignore[no-untyped-def]
    with serving(write("desk.yaml", DESK)) as url, client(url) as openai:
        models = {m.id: m for m in openai.models.list()}
    assert "desk.label" in models and "label" in models
    assert models["desk.label"].owned_by == "openprogram"
    assert models["desk.label"].model_extra == {"description": "Label a ticket."}


def test_a_secret_in_a_description_is_not_listed_with_the_models(write, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """A description may read ``${env:…}``: ``/v1/models`` shows it redacted, as ``/agents``."""
    secret = "desk-key-0123456789abcdef"
    monkeypatch.setenv("DESK_API_KEY", secret)
    agent = DESK.replace("Label a ticket.", "Label a ticket (key ${env:DESK_API_KEY}).")
    with serving(write("desk.yaml", agent)) as url, client(url) as openai:
        models = {m.id: m for m in openai.models.list()}
    assert models["desk.label"].model_extra == {"description": "Label a ticket (key ***)."}


def test_errors_are_openai_errors(write) -> None:  # type: ignore[no-untyped-def]
    with serving(write("desk.yaml", DESK)) as url, client(url) as openai:
        with pytest.raises(openai_sdk.NotFoundError) as missing:
            openai.chat.completions.create(model="desk.labl", messages=ASK)  # type: ignore[arg-type]
        with pytest.raises(openai_sdk.NotFoundError):
            openai.chat.completions.create(model="nope", messages=ASK, stream=True)  # type: ignore[arg-type]
        with pytest.raises(openai_sdk.BadRequestError) as not_json:
            openai.chat.completions.create(model="desk.quote", messages=ASK)  # type: ignore[arg-type]
        with pytest.raises(openai_sdk.BadRequestError) as invalid:
            openai.chat.completions.create(
                model="desk.quote",
                messages=[{"role": "user", "content": '{"item": "pen", "count": "two"}'}],
            )
        with pytest.raises(openai_sdk.BadRequestError) as no_user:
            openai.chat.completions.create(model="desk.answer", messages=ASK[:1])  # type: ignore[arg-type]
        with pytest.raises(openai_sdk.NotFoundError) as no_route:
            openai.completions.create(model="desk.answer", prompt="legacy completions")
    assert missing.value.code == "model_not_found" and missing.value.param == "model"
    assert "did you mean 'desk.label'?" in missing.value.message
    assert "takes inputs item, count" in not_json.value.message
    assert invalid.value.code == "invalid_inputs" and "count" in invalid.value.message
    assert "must hold a user message" in no_user.value.message
    assert no_route.value.type == "invalid_request_error"
    for error in (missing, not_json, invalid, no_user, no_route):
        assert set(error.value.body) == {"message", "type", "param", "code"}  # type: ignore[arg-type]


def test_a_token_protected_server_takes_the_token_as_the_api_key(write) -> None:  # type: ignore[no-untyped-def]
    token = "serve-token-0123456789"
    with serving(write("desk.yaml", DESK), token=token) as url:
        with client(url, api_key=token) as openai:
            completion = openai.chat.completions.create(model="desk.answer", messages=ASK)  # type: ignore[arg-type]
        with (
            client(url, api_key="wrong-token") as openai,
            pytest.raises(openai_sdk.AuthenticationError) as refused,
        ):
            openai.models.list()
    assert completion.choices[0].message.content == "test reply to: Answer: my printer"
    assert refused.value.status_code == 401 and refused.value.code == "invalid_api_key"
    assert refused.value.type == "invalid_request_error"
    assert "Authorization: Bearer" in refused.value.message and token not in str(refused.value.body)


ROUTER = """
version: 1
name: router
model: test
methods:
  triage:
    inputs: {ticket: {type: string}}
    prompt: "Sort: {{ ticket }}"
    choices:
      answer: {method: answer, description: Answer it.}
  answer:
    inputs: {ticket: {type: string}}
    prompt: "Answer: {{ ticket }}"
"""


def test_a_method_picking_another_streams_the_answer_of_the_one_it_picked(write) -> None:  # type: ignore[no-untyped-def]
    with serving(write("router.yaml", ROUTER)) as url, client(url) as openai:
        whole = openai.chat.completions.create(model="triage", messages=ASK)  # type: ignore[arg-type]
        stream = openai.chat.completions.create(model="triage", messages=ASK, stream=True)  # type: ignore[arg-type]
        pieces = [c.choices[0].delta.content for c in stream if c.choices]
    assert whole.choices[0].message.content == "test reply to: Answer: my printer"
    assert "".join(p or "" for p in pieces) == whole.choices[0].message.content


RELAY = """
version: 1
name: relay
model: local:llama3
runtimes:
  - match: "local:*"
    runtime: openai
    options: {base_url: "%s/v1", api_key: "${env:RELAY_KEY}"}
methods:
  ask:
    inputs: {question: {type: string}}
    prompt: "{{ question }}"
"""

RELAY_KEY = "rk-secret-0123456789"


def delta_chunk(content: str | None, finish: str | None = None) -> dict[str, Any]:
    delta = {} if content is None else {"content": content}
    return {
        "id": "chatcmpl-up",
        "object": "chat.completion.chunk",
        "created": 1_700_000_000,
        "model": "llama3",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }


def test_a_model_servers_streamed_deltas_pass_through_with_secrets_redacted(
    write, monkeypatch: pytest.MonkeyPatch
) -> None:  # type: ignore[no-untyped-def]
    """An agent served by the openai runtime against the loopback chat server: each delta
    the upstream streams is a chunk of ours, and its key, echoed across two deltas, is not."""
    monkeypatch.setenv("RELAY_KEY", RELAY_KEY)
    upstream = ["Hel", "lo, your key is ", RELAY_KEY[:6], RELAY_KEY[6:], " - done"]
    usage = {**delta_chunk(None), "choices": [], "usage": chat_completion_body()["usage"]}
    with LoopbackServer() as server:
        server.add(
            sse_reply(openai_sse([*map(delta_chunk, upstream), delta_chunk(None, "stop"), usage]))
        )
        with serving(write("relay.yaml", RELAY % server.url)) as url, client(url) as openai:
            chunks = list(
                openai.chat.completions.create(
                    model="ask",
                    messages=[{"role": "user", "content": "hi"}],
                    stream=True,
                    stream_options={"include_usage": True},
                )
            )
        [sent] = server.requests
    assert sent.json["stream"] is True and sent.json["messages"][-1]["content"] == "hi"
    pieces = [
        c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content
    ]
    assert pieces[:2] == ["Hel", "lo, your key is "]  # one chunk per upstream delta
    assert "".join(pieces) == "Hello, your key is *** - done"
    assert chunks[-1].usage is not None
    assert (chunks[-1].usage.prompt_tokens, chunks[-1].usage.completion_tokens) == (31, 9)


def test_a_run_that_fails_mid_stream_ends_with_an_error_event(
    write, monkeypatch: pytest.MonkeyPatch
) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("RELAY_KEY", RELAY_KEY)
    refusal = {"error": {"message": f"key {RELAY_KEY} is not allowed", "type": "auth"}}
    with LoopbackServer() as server:
        server.add(status_reply(400, refusal), status_reply(400, refusal))
        with serving(write("relay.yaml", RELAY % server.url)) as url, client(url) as openai:
            stream = openai.chat.completions.create(
                model="relay.ask", messages=[{"role": "user", "content": "hi"}], stream=True
            )
            first = next(iter(stream))
            with pytest.raises(openai_sdk.APIError) as failed:
                list(stream)
            with pytest.raises(openai_sdk.InternalServerError) as whole:
                openai.chat.completions.create(
                    model="relay.ask", messages=[{"role": "user", "content": "hi"}]
                )
    assert first.choices[0].delta.role == "assistant"
    assert failed.value.message.startswith("LLMError: ")
    assert (
        RELAY_KEY not in failed.value.message and "key *** is not allowed" in failed.value.message
    )
    assert whole.value.status_code == 502 and whole.value.code == "LLMError"
    assert RELAY_KEY not in whole.value.message


def test_refused_requests_get_openai_errors_too(write) -> None:  # type: ignore[no-untyped-def]
    """What the server refuses before the endpoint sees it, and what the endpoint refuses
    in the body, is still in the shape OpenAI clients read."""
    deep = {"model": "desk.answer", "messages": [{"role": "user", "content": "x"}]}
    for _ in range(150):
        deep = {"nested": deep}
    with serving(write("desk.yaml", DESK)) as url, httpx.Client(base_url=url) as http:
        plain = http.post(
            "/chat/completions", content=b"{}", headers={"Content-Type": "text/plain"}
        )
        foreign = http.get("/models", headers={"Origin": "https://evil.example"})
        nested = http.post("/chat/completions", json=deep)
        broken = http.post(
            "/chat/completions", content=b"{", headers={"Content-Type": "application/json"}
        )
    for reply, status in ((plain, 415), (foreign, 403), (nested, 400), (broken, 400)):
        assert reply.status_code == status
        error = reply.json()["error"]
        assert set(error) == {"message", "type", "param", "code"}
        assert error["type"] == "invalid_request_error"
    assert "application/json" in plain.json()["error"]["message"]
    assert "deeper than 100" in nested.json()["error"]["message"]


HELPED = """
version: 1
name: helped
model: test
tools:
  lookup: {method: lookup, description: Look a thing up.}
methods:
  answer:
    inputs: {ticket: {type: string}}
    prompt: "Answer: {{ ticket }}"
  lookup:
    inputs: {ticket: {type: string}}
    prompt: "Look up: {{ ticket }}"
    toolset: none
"""


def test_the_text_of_a_method_called_as_a_tool_is_not_streamed_as_the_answer(write) -> None:  # type: ignore[no-untyped-def]
    """The tool's own run streams its text too (between the call and its result): only the
    answer of the method asked for is the content."""
    with serving(write("helped.yaml", HELPED)) as url, client(url) as openai:
        whole = openai.chat.completions.create(model="answer", messages=ASK)  # type: ignore[arg-type]
        stream = openai.chat.completions.create(model="answer", messages=ASK, stream=True)  # type: ignore[arg-type]
        streamed = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    content = whole.choices[0].message.content
    assert content is not None and content.startswith("test reply to: Answer: my printer")
    assert "tool results: lookup: test reply to: Look up:" in content
    assert streamed == content


# --- files: image_url, input_audio and file parts onto the method's file inputs ----------

LOOKER = """
version: 1
name: looker
model: test
methods:
  look:
    inputs:
      question: {type: string}
      photo: {type: string, format: image}
      clip: {type: string, contentMediaType: audio/*, default: ""}
    prompt: "{{ question }}"
  read:
    inputs: {report: {type: string, format: pdf}}
    prompt: "Summarise the report."
"""

PNG = b"\x89PNG\r\n\x1a\n" + bytes(24)
WAV = b"RIFF\x24\x00\x00\x00WAVEfmt " + bytes(16)
PDF = b"%PDF-1.4\n%%EOF\n"


def _b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode("ascii")


def test_files_in_content_parts_fill_the_methods_file_inputs(write) -> None:  # type: ignore[no-untyped-def]
    with serving(write("looker.yaml", LOOKER)) as url, client(url) as openai:
        looked = openai.chat.completions.create(
            model="looker.look",
            messages=[
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "What is in it?"},
                        {
                            "type": "image_url",
                            "image_url": {"url": f"data:image/png;base64,{_b64(PNG)}"},
                        },
                        {
                            "type": "input_audio",
                            "input_audio": {"data": _b64(WAV), "format": "wav"},
                        },
                    ],
                }
            ],
        )
        read = openai.chat.completions.create(
            model="read",
            messages=[
                {
                    "role": "user",
                    "content": [
                        {"type": "file", "file": {"file_data": _b64(PDF), "filename": "q3.pdf"}}
                    ],
                }
            ],
        )
        runs = [
            httpx.get(f"{url.removesuffix('/v1')}/runs/{c.id.removeprefix('chatcmpl-')}").json()
            for c in (looked, read)
        ]
    look_inputs, read_inputs = (run["record"]["inputs"] for run in runs)
    assert look_inputs["question"] == "What is in it?"
    assert look_inputs["photo"] == f"data:image/png;base64,{_b64(PNG)}"
    assert look_inputs["clip"] == f"data:audio/wav;base64,{_b64(WAV)}"
    assert read_inputs == {"report": f"data:application/pdf;name=q3.pdf;base64,{_b64(PDF)}"}
    assert looked.choices[0].message.content and read.choices[0].message.content


def test_a_file_the_method_cannot_take_is_an_openai_400(write) -> None:  # type: ignore[no-untyped-def]
    image = {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{_b64(PNG)}"}}
    with serving(write("looker.yaml", LOOKER)) as url, client(url) as openai:
        with pytest.raises(openai_sdk.BadRequestError) as wrong_type:
            openai.chat.completions.create(
                model="looker.read", messages=[{"role": "user", "content": [image]}]
            )
        with pytest.raises(openai_sdk.BadRequestError) as two_images:
            openai.chat.completions.create(
                model="looker.look",
                messages=[
                    {"role": "user", "content": [{"type": "text", "text": "?"}, image, image]}
                ],
            )
        with pytest.raises(openai_sdk.BadRequestError) as web_image:
            openai.chat.completions.create(
                model="looker.look",
                messages=[
                    {
                        "role": "user",
                        "content": [
                            {"type": "image_url", "image_url": {"url": "https://x.test/a.png"}}
                        ],
                    }
                ],
            )
    assert wrong_type.value.param == "messages"
    assert "cannot take this image/png file: report takes application/pdf" in (
        wrong_type.value.message
    )
    assert "content[2]" in two_images.value.message and "clip takes audio/*" in (
        two_images.value.message
    )
    assert "must be a data URL" in web_image.value.message
