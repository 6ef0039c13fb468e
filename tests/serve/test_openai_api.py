"""The OpenAI-compatible endpoint, called by the official ``openai`` SDK on 127.0.0.1."""

from __future__ import annotations

from typing import Any

import pytest
from openai.types import Model
from openai.types.chat import ChatCompletion, ChatCompletionChunk

from openprogram_yaml.compile.project import compile_path
from openprogram_yaml.run.record import RunRecord
from openprogram_yaml.run.version import VersionStamp
from openprogram_yaml.serve.openai_api import (
    OpenAIError,
    StreamRedactor,
    chat_completion,
    chunk,
    content_of,
    method_inputs,
    model_table,
    models_list,
    parse_chat_request,
    record_error,
    usage_of,
)

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
        (user(42), "messages[0].content must be a string or an array of text parts"),
        (user([{"type": "image_url", "image_url": {}}]), "only text is taken (got 'image_url')"),
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


@pytest.mark.parametrize("size", [1, 2, 3, 5, 100])
def test_a_secret_split_across_streamed_pieces_is_still_redacted(size: int) -> None:
    secrets = {"sk-live-0123456789", "sk-live-01"}
    text = "key sk-live-0123456789 and sk-live-01x and sk-live-0 at the end ***23"
    redactor = StreamRedactor(secrets)
    pieces = [redactor.feed(text[i : i + size]) for i in range(0, len(text), size)]
    out = "".join(pieces) + redactor.flush()
    assert out == "key *** and ***x and sk-live-0 at the end ***23"
    assert StreamRedactor(()).feed("sk-live-0123456789") == "sk-live-0123456789"
