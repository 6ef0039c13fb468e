"""The ``openai`` runtime: Chat Completions, with any compatible server via ``base_url``.

OpenAI itself, Ollama, vLLM, llama.cpp's server, LM Studio, OpenRouter and others speak the
same ``POST {base_url}/chat/completions``. Streaming uses server-sent events with
``stream_options.include_usage`` so that usage arrives in the last chunk.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any, Unpack

from ..errors import ErrorReason
from ..runtimes.failures import failure_from_body_error
from ..runtimes.protocol import (
    Capabilities,
    DeltaCallback,
    Message,
    RuntimeDelta,
    RuntimeResult,
    ToolCall,
    ToolSpec,
    TurnFailure,
    Usage,
)
from . import _shape as shape
from ._http import (
    HTTPRuntime,
    ProviderOptions,
    SSEEvent,
    StreamAssembler,
    Unsendable,
    image_source,
)

__all__ = ["OpenAIRuntime"]

_FINISH_REASONS = {
    "stop": "stop",
    "length": "length",
    "tool_calls": "tool_calls",
    "function_call": "tool_calls",
    "content_filter": "content_filter",
}
_SCHEMA_NAME = re.compile(r"[^a-zA-Z0-9_-]")
#: By ``native_json_schema``: asked on every exec, and immutable.
_CAPABILITIES = {native: Capabilities(native_json_schema=native) for native in (False, True)}


class OpenAIRuntime(HTTPRuntime):
    """Chat Completions over one pooled HTTP client.

    Options beyond ``HTTPRuntime``'s: ``max_tokens_field`` (``"max_completion_tokens"`` on
    api.openai.com, ``"max_tokens"`` elsewhere, where older servers know only that one),
    ``native_json_schema`` (set False for a server without ``json_schema`` response
    formats) and ``extra_body`` (merged into every request, e.g. OpenRouter routing).
    """

    runtime_id = "openai"
    default_base_url = "https://api.openai.com/v1"
    default_key_env = "OPENAI_API_KEY"
    base_url_env = "OPENAI_BASE_URL"
    path = "/chat/completions"
    bare_model_prefixes = ("gpt-", "chatgpt-", "o1", "o3", "o4")

    def __init__(
        self,
        *,
        max_tokens_field: str | None = None,
        native_json_schema: bool = True,
        extra_body: Mapping[str, Any] | None = None,
        **settings: Unpack[ProviderOptions],
    ) -> None:
        super().__init__(**settings)
        if max_tokens_field is None:
            official = "api.openai.com" in self.settings.base_url
            max_tokens_field = "max_completion_tokens" if official else "max_tokens"
        self.max_tokens_field = max_tokens_field
        self.native_json_schema = native_json_schema
        self.extra_body = dict(extra_body or {})

    def auth_headers(self, key: str | None) -> dict[str, str]:
        """``Authorization: Bearer`` with the key (none for a local server without one)."""
        return {"authorization": f"Bearer {key}"} if key else {}

    def capabilities(self, model_ref: str | None = None) -> Capabilities:
        """Tools, forced tool choice, parallel calls, streaming and ``json_schema`` output."""
        return _CAPABILITIES[bool(self.native_json_schema)]

    # --- the wire format ----------------------------------------------------------

    def build_body(
        self,
        model: str,
        prompt: str | Sequence[Message],
        system_prompt: str | None,
        options: Mapping[str, Any],
        stream: bool,
    ) -> dict[str, Any]:
        """The JSON body of one request."""
        body: dict[str, Any] = {"model": model, "messages": to_messages(prompt, system_prompt)}
        tools: Sequence[ToolSpec] | None = options.get("tools")
        if tools:
            body["tools"] = [_tool(t) for t in tools]
            if options.get("tool_choice") is not None:
                body["tool_choice"] = _tool_choice(options["tool_choice"])
            if options.get("parallel_tool_calls") is not None:
                body["parallel_tool_calls"] = bool(options["parallel_tool_calls"])
        response_format = options.get("response_format")
        if response_format:
            body["response_format"] = _response_format(response_format)
        if options.get("max_tokens") is not None:
            body[self.max_tokens_field] = int(options["max_tokens"])
        if options.get("temperature") is not None:
            body["temperature"] = float(options["temperature"])
        if isinstance(options.get("thinking_level"), str):
            body["reasoning_effort"] = options["thinking_level"]
        if options.get("web_search"):
            # Chat Completions' own search switch (search-capable models such as
            # gpt-4o-search-preview; others answer with a 400 saying so).
            body["web_search_options"] = {}
        if isinstance(options.get("session_id"), str):
            # The seed: the Runtime's session id is the provider's prompt-cache key, so the
            # turns of one session hit the same cache.
            body["prompt_cache_key"] = options["session_id"]
        if stream:
            body["stream"] = True
            body["stream_options"] = {"include_usage": True}
        if self.extra_body:
            body.update(self.extra_body)
        return body

    def parse_reply(self, data: Mapping[str, Any]) -> RuntimeResult | TurnFailure:
        """A ``chat.completion`` body (see ``parse_completion``)."""
        return parse_completion(data, self)

    def stream_assembler(self, on_delta: DeltaCallback) -> StreamAssembler:
        """Assembles ``chat.completion.chunk`` events."""
        return _ChunkAssembler(self.provider, on_delta)

    # --- embeddings (``similar:`` expectations of tests) -------------------------------

    async def embed(
        self, texts: Sequence[str], *, model_ref: str | None = None
    ) -> list[list[float]] | TurnFailure:
        """One vector a text from ``/embeddings`` (OpenAI's and compatible servers'), in
        the order given; a classified failure otherwise. Never raises."""
        model = self.model_id(model_ref)
        failure = self._precheck(model, {})
        if failure is not None:
            return failure
        data = await self._post_json("/embeddings", {"model": model, "input": list(texts)}, None)
        if isinstance(data, TurnFailure):
            return data
        try:
            rows = sorted(data["data"], key=lambda row: int(row["index"]))
            vectors = [[float(x) for x in row["embedding"]] for row in rows]
        except (KeyError, TypeError, ValueError):
            vectors = []
        if len(vectors) != len(texts):
            return TurnFailure(
                ErrorReason.SERVER_ERROR.value,
                f"{self.provider}: malformed embeddings reply (expected 'data' with "
                f"{len(texts)} embeddings)",
                False,
            )
        return vectors


# --- request ---------------------------------------------------------------------------


def to_messages(prompt: str | Sequence[Message], system_prompt: str | None) -> list[dict[str, Any]]:
    """Provider-neutral messages as Chat Completions messages."""
    out: list[dict[str, Any]] = []
    if system_prompt:
        out.append({"role": "system", "content": system_prompt})
    if isinstance(prompt, str):
        out.append({"role": "user", "content": prompt})
        return out
    # Images tools returned: a tool message takes text only, so they follow the tool
    # messages of a turn as one user message (none may stand between a call and its result).
    shown: list[dict[str, Any]] = []
    for message in prompt:
        if isinstance(message, Mapping):
            message = Message(**message)
        role = message.role
        if role != "tool" and shown:
            out.append({"role": "user", "content": shown})
            shown = []
        if role == "tool":
            text = message.text()
            if message.is_error and not text.lower().startswith("error"):
                text = f"Error: {text}"
            media = _tool_media(message)
            if media and not text:
                text = "(shown in the next message)"
            out.append(
                {"role": "tool", "tool_call_id": message.tool_call_id or "", "content": text}
            )
            shown.extend(media)
        elif role == "assistant":
            entry: dict[str, Any] = {"role": "assistant", "content": message.text() or None}
            if message.tool_calls:
                entry["tool_calls"] = [
                    {
                        "id": call.id,
                        "type": "function",
                        "function": {"name": call.name, "arguments": call.arguments or "{}"},
                    }
                    for call in message.tool_calls
                ]
            elif entry["content"] is None:
                entry["content"] = ""
            out.append(entry)
        elif role == "system":
            out.append({"role": "system", "content": message.text()})
        else:
            out.append({"role": "user", "content": _user_content(message.content)})
    if shown:
        out.append({"role": "user", "content": shown})
    return out


def _tool_media(message: Message) -> list[dict[str, Any]]:
    """The content parts of a tool result's non-text blocks, introduced by a text part."""
    if isinstance(message.content, str):
        return []
    media = [b for b in message.content if b.get("type") != "text"]
    if not media:
        return []
    name = f"tool {message.name!r}" if message.name else "a tool"
    parts: list[dict[str, Any]] = [
        {"type": "text", "text": f"What {name} returned (call {message.tool_call_id or '?'}):"}
    ]
    for block in media:
        try:
            converted = _user_content([block])
        except Unsendable as exc:
            # The tool's result is not the request's fault: the model is told what it
            # could not be shown, and goes on.
            parts.append({"type": "text", "text": f"[not shown: {exc}]"})
            continue
        if isinstance(converted, list):
            parts.extend(converted)
    return parts


def _user_content(content: str | list[dict[str, Any]]) -> str | list[dict[str, Any]]:
    if isinstance(content, str):
        return content
    parts: list[dict[str, Any]] = []
    for block in content:
        kind = block.get("type")
        if kind == "text":
            parts.append({"type": "text", "text": str(block.get("text", ""))})
        elif kind == "image":
            source = image_source(block)
            if source is None:
                raise Unsendable("an image block without data, url or path cannot be sent")
            url = source if isinstance(source, str) else f"data:{source[0]};base64,{source[1]}"
            parts.append({"type": "image_url", "image_url": {"url": url}})
        elif kind == "audio":
            parts.append(_input_audio(block))
        elif kind == "file":
            parts.append(_input_file(block))
        else:
            shown = "a video block" if kind == "video" else f"a {kind!r} block"
            raise Unsendable(
                f"{shown} cannot be sent: Chat Completions takes text, images, PDF files "
                "and audio (wav, mp3)"
            )
    # Servers that predate content parts (older llama.cpp, some proxies) take plain text.
    if all(p["type"] == "text" for p in parts):
        return "".join(p["text"] for p in parts)
    return parts


#: The audio formats Chat Completions' ``input_audio`` takes, by mime type.
_AUDIO_FORMATS = {
    "audio/wav": "wav",
    "audio/x-wav": "wav",
    "audio/wave": "wav",
    "audio/mpeg": "mp3",
}


def _input_audio(block: Mapping[str, Any]) -> dict[str, Any]:
    mime = str(block.get("mime_type") or "")
    audio_format = _AUDIO_FORMATS.get(mime.lower())
    data = block.get("data")
    if audio_format is None or not isinstance(data, str):
        shown = f"{mime!r} audio" if mime else "audio without a mime_type"
        raise Unsendable(f"{shown} cannot be sent: Chat Completions takes wav and mp3 audio data")
    return {"type": "input_audio", "input_audio": {"data": data, "format": audio_format}}


def _input_file(block: Mapping[str, Any]) -> dict[str, Any]:
    # Chat Completions takes PDF files inline, as a data URL with a file name.
    mime = str(block.get("mime_type") or "").lower()
    data = block.get("data")
    if mime != "application/pdf" or not isinstance(data, str):
        shown = f"a {mime} file" if mime else "a file without a mime_type"
        raise Unsendable(f"{shown} cannot be sent: Chat Completions takes PDF file data")
    filename = str(block.get("filename") or "file.pdf")
    return {
        "type": "file",
        "file": {"filename": filename, "file_data": f"data:{mime};base64,{data}"},
    }


def _tool(tool: ToolSpec) -> dict[str, Any]:
    function: dict[str, Any] = {"name": tool.name, "parameters": tool.parameters}
    if tool.description:
        function["description"] = tool.description
    if tool.strict:
        function["strict"] = True
    return {"type": "function", "function": function}


def _tool_choice(choice: Any) -> Any:
    if isinstance(choice, str):
        return choice
    if isinstance(choice, Mapping):
        if isinstance(choice.get("function"), Mapping):
            return {"type": "function", "function": {"name": choice["function"]["name"]}}
        if choice.get("name"):
            return {"type": "function", "function": {"name": choice["name"]}}
    return choice


def _response_format(spec: Mapping[str, Any]) -> dict[str, Any]:
    name = _SCHEMA_NAME.sub("_", str(spec.get("name") or "response"))[:64] or "response"
    json_schema: dict[str, Any] = {"name": name, "schema": spec.get("schema", {})}
    if spec.get("description"):
        json_schema["description"] = spec["description"]
    if spec.get("strict") is not None:
        json_schema["strict"] = bool(spec["strict"])
    return {"type": "json_schema", "json_schema": json_schema}


# --- response --------------------------------------------------------------------------


def _usage(data: Mapping[str, Any]) -> Usage | None:
    raw = shape.obj_at(data, "usage")
    if not raw:
        return None
    details = shape.obj_at(raw, "prompt_tokens_details", "usage")
    return Usage(
        input_tokens=shape.number_at(raw, "prompt_tokens", "usage") or 0,
        output_tokens=shape.number_at(raw, "completion_tokens", "usage") or 0,
        cache_read=shape.number_at(details, "cached_tokens", "usage.prompt_tokens_details") or 0,
    )


def _finish(raw: str | None, refusal: str | None) -> str | None:
    if refusal:
        return "refusal"
    if raw is None:
        return None
    return _FINISH_REASONS.get(raw, raw)


def _thinking(message: Mapping[str, Any]) -> str:
    # Servers name it differently (and a few send structured reasoning): text only.
    thinking = message.get("reasoning_content") or message.get("reasoning") or ""
    return thinking if isinstance(thinking, str) else ""


def parse_completion(
    data: Mapping[str, Any], runtime: OpenAIRuntime
) -> RuntimeResult | TurnFailure:
    """A ``chat.completion`` body as a ``RuntimeResult``; ``MalformedReply`` if it is not one."""
    choices = shape.list_at(data, "choices")
    if not choices:
        if data.get("error"):
            return failure_from_body_error(data["error"], provider=runtime.provider)
        return TurnFailure(
            ErrorReason.SERVER_ERROR.value, f"{runtime.provider}: a reply without choices", True
        )
    choice = shape.obj(choices[0], "choices[0]")
    where = "choices[0].message"
    message = shape.obj_at(choice, "message", "choices[0]")
    refusal = shape.optional_str_at(message, "refusal", where) or None
    tool_calls = []
    for i, raw_call in enumerate(shape.list_at(message, "tool_calls", where)):
        at = f"{where}.tool_calls[{i}]"
        call = shape.obj(raw_call, at)
        function = shape.obj_at(call, "function", at)
        tool_calls.append(
            ToolCall(
                id=str(call.get("id") or f"call_{i}"),
                name=shape.str_at(function, "name", f"{at}.function"),
                arguments=shape.str_at(function, "arguments", f"{at}.function") or "{}",
            )
        )
    raw_finish = shape.optional_str_at(choice, "finish_reason", "choices[0]")
    return RuntimeResult(
        content=shape.str_at(message, "content", where),
        tool_calls=tool_calls,
        thinking=_thinking(message),
        usage=_usage(data),
        finish_reason=_finish(raw_finish, refusal),
        refusal=refusal,
        metadata={
            "model": data.get("model"),
            "response_id": data.get("id"),
            "raw_finish_reason": raw_finish,
        },
    )


#: The most of a streamed tool call's name kept (no API takes a name of over 64 characters;
#: one this long matches no tool either way). Its pieces are added to the name so far, and
#: each delta reports that: a name sent in thousands of pieces cost time growing with its
#: square (40,000 pieces of 90 characters: 16 s).
MAX_STREAMED_NAME = 4096


class _ChunkAssembler(StreamAssembler):
    """Assembles ``chat.completion.chunk`` events and reports each delta as it arrives."""

    def __init__(self, provider: str, on_delta: DeltaCallback) -> None:
        self.provider = provider
        self.on_delta = on_delta
        self.text: list[str] = []
        self.thinking: list[str] = []
        self.refusal: list[str] = []
        self.calls: dict[int, list[str]] = {}  # index -> [id, name, arguments...]
        self.finish: str | None = None
        self.usage: Usage | None = None
        self.model: str | None = None
        self.response_id: str | None = None

    def finished(self) -> bool:
        return self.done or self.finish is not None

    def feed(self, event: SSEEvent) -> None:
        if event.data == "[DONE]":
            self.done = True
            return
        chunk = self.decode(event)
        if chunk is None:
            return
        if chunk.get("error"):
            self.failure = failure_from_body_error(chunk["error"], provider=self.provider)
            return
        if self.response_id is None:
            self.response_id = chunk.get("id")
            self.model = chunk.get("model")
        if chunk.get("usage"):
            self.usage = _usage(chunk)
        for i, raw_choice in enumerate(shape.list_at(chunk, "choices")):
            where = f"choices[{i}]"
            choice = shape.obj(raw_choice, where)
            if choice.get("index", 0) != 0:
                continue
            delta = shape.obj_at(choice, "delta", where)
            where += ".delta"
            text = shape.str_at(delta, "content", where)
            if text:
                self.text.append(text)
                self.on_delta(RuntimeDelta("text", text))
            thinking = _thinking(delta)
            if thinking:
                self.thinking.append(thinking)
                self.on_delta(RuntimeDelta("thinking", thinking))
            refusal = shape.str_at(delta, "refusal", where)
            if refusal:
                self.refusal.append(refusal)
            for n, call in enumerate(shape.list_at(delta, "tool_calls", where)):
                self._tool_call_delta(shape.obj(call, f"{where}.tool_calls[{n}]"), where, n)
            finish = shape.optional_str_at(choice, "finish_reason", f"choices[{i}]")
            if finish:
                self.finish = finish

    def _tool_call_delta(self, call: Mapping[str, Any], where: str, n: int) -> None:
        at = f"{where}.tool_calls[{n}]"
        index = shape.integer(call.get("index"), f"{at}.index", default=len(self.calls))
        slot = self.calls.get(index)
        if slot is None:
            slot = self.calls[index] = ["", ""]
        function = shape.obj_at(call, "function", at)
        call_id = shape.str_at(call, "id", at)
        if call_id:
            slot[0] = call_id
        name = shape.str_at(function, "name", f"{at}.function")
        if name and len(slot[1]) < MAX_STREAMED_NAME:
            slot[1] += name[: MAX_STREAMED_NAME - len(slot[1])]
        fragment = shape.str_at(function, "arguments", f"{at}.function")
        if fragment:
            slot.append(fragment)
        self.on_delta(
            RuntimeDelta("tool_call", fragment, {"index": index, "id": slot[0], "name": slot[1]})
        )

    def result(self) -> RuntimeResult:
        refusal = "".join(self.refusal) or None
        return RuntimeResult(
            content="".join(self.text),
            tool_calls=[
                ToolCall(slot[0] or f"call_{i}", slot[1], "".join(slot[2:]) or "{}")
                for i, slot in sorted(self.calls.items())
            ],
            thinking="".join(self.thinking),
            usage=self.usage,
            finish_reason=_finish(self.finish, refusal),
            refusal=refusal,
            metadata={
                "model": self.model,
                "response_id": self.response_id,
                "raw_finish_reason": self.finish,
            },
        )
