"""The ``anthropic`` runtime: the Messages API (``POST /v1/messages``).

Structured output uses the documented JSON outputs mechanism, ``output_config.format =
{"type": "json_schema", "schema": …}`` (generally available, no beta header), on the models
that support it (Claude 4.5 and later). For other models ``capabilities`` reports no native
schema support, so ``Runtime.exec`` falls back to a forced hidden submit tool.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any, Unpack

from ..errors import ErrorReason
from ..json_types import JSONValue, parse_json
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
    failed,
    image_source,
)

__all__ = ["AnthropicRuntime"]

API_VERSION = "2023-06-01"
_STOP_REASONS = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "pause_turn": "stop",
    "max_tokens": "length",
    "model_context_window_exceeded": "length",
    "tool_use": "tool_calls",
    "refusal": "refusal",
}
_THINKING_BUDGETS = {"minimal": 1024, "low": 2048, "medium": 8192, "high": 24576}
_MODEL_VERSION = re.compile(r"claude-(opus|sonnet|haiku)-(\d+)(?:-(\d{1,2}))?(?!\d)")
_CLAUDE_3 = re.compile(r"claude-3-(?:opus|sonnet|haiku)")


def _model_version(model: str | None) -> tuple[str, tuple[int, int]] | None:
    match = _MODEL_VERSION.search(model or "")
    if match is None:
        return None
    return match[1], (int(match[2]), int(match[3] or 0))


def native_schema_model(model: str | None) -> bool:
    """Whether ``model`` supports ``output_config.format`` (Claude 4.5 and later)."""
    found = _model_version(model)
    return found is not None and found[1] >= (4, 5)


def accepts_temperature(model: str | None) -> bool:
    """False for the models that refuse sampling parameters (Opus 4.7+, generation 5+)."""
    found = _model_version(model)
    if found is None:
        return True
    family, version = found
    return version < (5, 0) and not (family == "opus" and version >= (4, 7))


class AnthropicRuntime(HTTPRuntime):
    """The Messages API over one pooled HTTP client.

    Options beyond ``HTTPRuntime``'s: ``max_tokens`` (the default when a turn gives none:
    4096 for Claude 3 models, 8192 otherwise), ``anthropic_version``, ``beta`` (values for
    the ``anthropic-beta`` header) and ``native_json_schema`` (overrides the per-model
    choice, e.g. for a compatible gateway).
    """

    runtime_id = "anthropic"
    default_base_url = "https://api.anthropic.com"
    default_key_env = "ANTHROPIC_API_KEY"
    base_url_env = "ANTHROPIC_BASE_URL"
    bare_model_prefixes = ("claude-",)

    def __init__(
        self,
        *,
        max_tokens: int | None = None,
        anthropic_version: str = API_VERSION,
        beta: Sequence[str] = (),
        native_json_schema: bool | None = None,
        **settings: Unpack[ProviderOptions],
    ) -> None:
        super().__init__(**settings)
        self.default_max_tokens = max_tokens
        self.anthropic_version = anthropic_version
        self.beta = tuple(beta)
        self.native_json_schema = native_json_schema
        self.path = "/messages" if self.settings.base_url.endswith("/v1") else "/v1/messages"

    def auth_headers(self, key: str | None) -> dict[str, str]:
        """``x-api-key``, ``anthropic-version`` and ``anthropic-beta``."""
        headers = {"anthropic-version": self.anthropic_version}
        if key:
            headers["x-api-key"] = key
        if self.beta:
            headers["anthropic-beta"] = ",".join(self.beta)
        return headers

    def capabilities(self, model_ref: str | None = None) -> Capabilities:
        """Native JSON schema on Claude 4.5+ (else the engine's forced submit tool)."""
        native = self.native_json_schema
        if native is None:
            native = native_schema_model(self.model_id(model_ref))
        return Capabilities(native_json_schema=native, forced_tool_choice=True)

    async def run_turn(
        self,
        prompt: str | Sequence[Message],
        *,
        system_prompt: str | None = None,
        model_ref: str | None = None,
        **kwargs: Any,
    ) -> RuntimeResult:
        """One turn (see ``HTTPRuntime.run_turn``); a reply that skips a forced tool fails.

        Anthropic's API always calls a tool that ``tool_choice`` forces. Some
        Anthropic-compatible servers ignore ``tool_choice``; structured output on a model not
        known to support native output relies on it (the hidden ``submit_result`` tool), so
        such a reply is reported at once, with the way out, instead of being repaired in
        vain.
        """
        result = await super().run_turn(
            prompt, system_prompt=system_prompt, model_ref=model_ref, **kwargs
        )
        forced = kwargs.get("tool_choice")
        if (
            not isinstance(forced, Mapping)
            or result.failure is not None
            or result.error
            or result.tool_calls
            or result.finish_reason in ("length", "refusal")
        ):
            return result
        model = self.model_id(model_ref)
        message = (
            f"{self.provider}: tool_choice forced the tool {forced.get('name')!r}, but the "
            f"reply called no tool: the server at {self.settings.base_url} ignores "
            "tool_choice."
        )
        if not self.capabilities(model_ref).native_json_schema:
            message += (
                f" Model {model!r} is not known to support native structured output, so "
                "structured output is asked for through a forced submit_result tool, which "
                "cannot work against this server. If the server supports "
                "output_config.format, set the runtime option native_json_schema: true; "
                "otherwise set fallback: prompt."
            )
        failure = TurnFailure(ErrorReason.INVALID_REQUEST.value, message, False)
        return failed(failure, **result.metadata)

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
        system, messages = to_messages(prompt, system_prompt)
        max_tokens = options.get("max_tokens") or self.default_max_tokens
        if not max_tokens:
            max_tokens = 4096 if _CLAUDE_3.search(model) else 8192
        body: dict[str, Any] = {"model": model, "max_tokens": int(max_tokens), "messages": messages}
        if system:
            body["system"] = system
        tools: Sequence[ToolSpec] | None = options.get("tools")
        if tools:
            body["tools"] = [_tool(t) for t in tools]
            choice = _tool_choice(options.get("tool_choice"), options.get("parallel_tool_calls"))
            if choice is not None:
                body["tool_choice"] = choice
        if options.get("web_search"):
            # Anthropic's server tool: the search runs on their side, within this request.
            body.setdefault("tools", []).append(dict(WEB_SEARCH_TOOL))
        response_format = options.get("response_format")
        if response_format:
            body["output_config"] = {
                "format": {"type": "json_schema", "schema": response_format.get("schema", {})}
            }
        budget = _thinking_budget(options.get("thinking_level"))
        if budget:
            body["thinking"] = {"type": "enabled", "budget_tokens": budget}
            if body["max_tokens"] <= budget:
                body["max_tokens"] = budget + int(max_tokens)
        elif options.get("temperature") is not None and accepts_temperature(model):
            # Not sent with extended thinking (it runs at the default temperature only), nor
            # to models that reject sampling parameters outright.
            body["temperature"] = float(options["temperature"])
        if stream:
            body["stream"] = True
        return body

    def parse_reply(self, data: Mapping[str, Any]) -> RuntimeResult | TurnFailure:
        """A ``message`` body (see ``parse_message``)."""
        return parse_message(data, self)

    def stream_assembler(self, on_delta: DeltaCallback) -> StreamAssembler:
        """Assembles Messages stream events."""
        return _EventAssembler(self.provider, on_delta)


# --- request ---------------------------------------------------------------------------


def _thinking_budget(level: Any) -> int:
    if isinstance(level, bool) or level is None:
        return 0
    if isinstance(level, int):
        return max(level, 1024) if level > 0 else 0
    return _THINKING_BUDGETS.get(str(level).lower(), 0)


def to_messages(
    prompt: str | Sequence[Message], system_prompt: str | None
) -> tuple[str, list[dict[str, Any]]]:
    """The system text and the Messages API turns (consecutive same-role turns merged)."""
    system = [system_prompt] if system_prompt else []
    if isinstance(prompt, str):
        return "\n\n".join(system), [{"role": "user", "content": prompt}]
    turns: list[dict[str, Any]] = []
    for message in prompt:
        if isinstance(message, Mapping):
            message = Message(**message)
        if message.role == "system":
            system.append(message.text())
            continue
        role = "assistant" if message.role == "assistant" else "user"
        blocks = _blocks(message)
        if not blocks:
            if role == "assistant":
                continue  # the API refuses empty assistant turns
            blocks = [{"type": "text", "text": message.text() or " "}]
        if turns and turns[-1]["role"] == role:
            previous = turns[-1]["content"]
            if isinstance(previous, str):
                previous = turns[-1]["content"] = [{"type": "text", "text": previous}]
            previous.extend(blocks)
        elif len(blocks) == 1 and blocks[0]["type"] == "text" and len(blocks[0]) == 2:
            turns.append({"role": role, "content": blocks[0]["text"]})
        else:
            turns.append({"role": role, "content": blocks})
    return "\n\n".join(s for s in system if s), turns


def _blocks(message: Message) -> list[dict[str, Any]]:
    if message.role == "tool":
        result: dict[str, Any] = {
            "type": "tool_result",
            "tool_use_id": message.tool_call_id or "",
            "content": message.text(),
        }
        if not isinstance(message.content, str) and any(
            b.get("type") != "text" for b in message.content
        ):
            # A tool result's content takes images and documents beside its text.
            result["content"] = [
                part for part in map(_tool_result_part, message.content) if part is not None
            ]
        if message.is_error:
            result["is_error"] = True
        return [result]
    blocks: list[dict[str, Any]] = []
    content = message.content
    if isinstance(content, str):
        if content:
            blocks.append({"type": "text", "text": content})
    else:
        for block in content:
            converted = _block(block, message.role)
            if converted is not None:
                blocks.append(converted)
    for call in message.tool_calls:
        try:
            arguments = parse_json(call.arguments or "{}")
        except ValueError:
            arguments = {}
        blocks.append(
            {
                "type": "tool_use",
                "id": call.id,
                "name": call.name,
                "input": arguments if isinstance(arguments, dict) else {},
            }
        )
    return blocks


def _block(block: Mapping[str, Any], role: str) -> dict[str, Any] | None:
    kind = block.get("type")
    out: dict[str, Any] | None = None
    if kind == "text":
        text = str(block.get("text", ""))
        if not text:
            return None  # empty text blocks are refused
        out = {"type": "text", "text": text}
    elif kind == "image" and role != "assistant":
        source = image_source(block)
        if source is None:
            raise Unsendable("an image block without data, url or path cannot be sent")
        if isinstance(source, str):
            out = {"type": "image", "source": {"type": "url", "url": source}}
        else:
            out = {
                "type": "image",
                "source": {"type": "base64", "media_type": source[0], "data": source[1]},
            }
    elif kind == "file" and role != "assistant":
        out = _document(block)
    elif kind in ("thinking", "redacted_thinking") and role == "assistant":
        # Thinking blocks (with their signatures) must go back unchanged with tool results.
        return dict(block)
    elif role != "assistant":
        shown = f"{'an' if kind == 'audio' else 'a'} {kind} block"
        if kind not in ("audio", "video"):
            shown = f"a {kind!r} block"
        raise Unsendable(
            f"{shown} cannot be sent: the Messages API takes text, images and PDF documents"
        )
    if out is not None and block.get("cache_control"):
        out["cache_control"] = block["cache_control"]
    return out


def _tool_result_part(block: Mapping[str, Any]) -> dict[str, Any] | None:
    try:
        return _block(block, "user")
    except Unsendable as exc:
        # The tool's result is not the request's fault: the model is told what it could
        # not be shown, and goes on.
        return {"type": "text", "text": f"[not shown: {exc}]"}


def _document(block: Mapping[str, Any]) -> dict[str, Any]:
    # The Messages API reads PDFs as base64 ``document`` blocks.
    mime = str(block.get("mime_type") or "").lower()
    data = block.get("data")
    if mime != "application/pdf" or not isinstance(data, str):
        shown = f"a {mime} file" if mime else "a file without a mime_type"
        raise Unsendable(f"{shown} cannot be sent: the Messages API takes PDF documents")
    out: dict[str, Any] = {
        "type": "document",
        "source": {"type": "base64", "media_type": mime, "data": data},
    }
    if block.get("filename"):
        out["title"] = str(block["filename"])
    return out


#: The web search server tool ``web_search=True`` adds to a request's tools.
WEB_SEARCH_TOOL: dict[str, Any] = {"type": "web_search_20250305", "name": "web_search"}


def _tool(tool: ToolSpec) -> dict[str, Any]:
    spec: dict[str, Any] = {"name": tool.name, "input_schema": tool.parameters}
    if tool.description:
        spec["description"] = tool.description
    if tool.strict:
        spec["strict"] = True
    return spec


def _tool_choice(choice: Any, parallel: Any) -> dict[str, Any] | None:
    if isinstance(choice, Mapping):
        name = choice.get("name") or (choice.get("function") or {}).get("name")
        out: dict[str, Any] = {"type": "tool", "name": name}
    elif choice == "required":
        out = {"type": "any"}
    elif choice == "none":
        return {"type": "none"}
    elif choice == "auto" or parallel is False:
        out = {"type": "auto"}
    else:
        return None
    if parallel is False:
        out["disable_parallel_tool_use"] = True
    return out


# --- response --------------------------------------------------------------------------


def _usage(parent: Mapping[str, Any], where: str = "", into: Usage | None = None) -> Usage:
    """``parent.usage`` with ``input_tokens`` counting every input token, cached ones
    included."""
    usage = into or Usage()
    raw = shape.obj_at(parent, "usage", where)
    where = f"{where}.usage" if where else "usage"
    cache_read = shape.number_at(raw, "cache_read_input_tokens", where)
    if cache_read is not None:
        usage.cache_read = cache_read
    cache_create = shape.number_at(raw, "cache_creation_input_tokens", where)
    if cache_create is not None:
        usage.cache_create = cache_create
    input_tokens = shape.number_at(raw, "input_tokens", where)
    if input_tokens is not None:
        usage.input_tokens = input_tokens + usage.cache_read + usage.cache_create
    output_tokens = shape.number_at(raw, "output_tokens", where)
    if output_tokens is not None:
        usage.output_tokens = output_tokens
    return usage


def _refusal(stop_reason: str | None, text: str, details: Any) -> str | None:
    if stop_reason != "refusal":
        return None
    if isinstance(details, Mapping) and details.get("explanation"):
        return str(details["explanation"])
    return text or "The model refused to answer."


def parse_message(
    data: Mapping[str, Any], runtime: AnthropicRuntime
) -> RuntimeResult | TurnFailure:
    """A ``message`` body as a ``RuntimeResult``; ``MalformedReply`` if it is not one."""
    if data.get("type") == "error" or (data.get("error") and "content" not in data):
        return failure_from_body_error(data.get("error"), provider=runtime.provider)
    text: list[str] = []
    thinking: list[str] = []
    thinking_blocks: list[JSONValue] = []
    calls: list[ToolCall] = []
    for i, raw_block in enumerate(shape.list_at(data, "content")):
        where = f"content[{i}]"
        block = shape.obj(raw_block, where)
        kind = block.get("type")
        if kind == "text":
            text.append(shape.str_at(block, "text", where))
        elif kind == "tool_use":
            arguments = json.dumps(shape.obj_at(block, "input", where), ensure_ascii=False)
            calls.append(ToolCall(str(block.get("id")), str(block.get("name")), arguments))
        elif kind in ("thinking", "redacted_thinking"):
            thinking.append(shape.str_at(block, "thinking", where))
            thinking_blocks.append(dict(block))
    stop = shape.optional_str_at(data, "stop_reason")
    content = "".join(text)
    return RuntimeResult(
        content=content,
        tool_calls=calls,
        thinking="".join(thinking),
        usage=_usage(data),
        finish_reason=_STOP_REASONS.get(stop, stop) if stop else None,
        refusal=_refusal(stop, content, data.get("stop_details")),
        metadata={
            "model": data.get("model"),
            "response_id": data.get("id"),
            "stop_reason": stop,
            "thinking_blocks": thinking_blocks or None,
        },
    )


class _EventAssembler(StreamAssembler):
    """Assembles Messages stream events and reports each delta as it arrives."""

    def __init__(self, provider: str, on_delta: DeltaCallback) -> None:
        self.provider = provider
        self.on_delta = on_delta
        self.blocks: dict[int, dict[str, Any]] = {}
        #: The pieces of a block's "text", "thinking" or "signature", joined once at the end:
        #: added to the block's string at each delta, a stream of many small deltas took
        #: time growing with its square (8 MB of them: 6 s).
        self.pieces: dict[tuple[int, str], list[str]] = {}
        self.json_parts: dict[int, list[str]] = {}
        self.tool_index: dict[int, int] = {}  # block index -> tool-call ordinal
        self.usage = Usage()
        self.stop: str | None = None
        self.stop_details: Any = None
        self.model: str | None = None
        self.response_id: str | None = None

    def feed(self, event: SSEEvent) -> None:
        data = self.decode(event)
        if data is None:
            return
        kind = data.get("type") or event.event
        if kind == "content_block_delta":
            index = shape.integer(data.get("index"), f"{kind}.index")
            self._delta(index, shape.obj_at(data, "delta", kind))
        elif kind == "content_block_start":
            index = shape.integer(data.get("index"), f"{kind}.index")
            self._start(index, dict(shape.obj_at(data, "content_block", kind)))
        elif kind == "message_start":
            message = shape.obj_at(data, "message", kind)
            self.model, self.response_id = message.get("model"), message.get("id")
            _usage(message, f"{kind}.message", self.usage)
        elif kind == "message_delta":
            delta = shape.obj_at(data, "delta", kind)
            self.stop = shape.optional_str_at(delta, "stop_reason", f"{kind}.delta") or self.stop
            self.stop_details = delta.get("stop_details") or self.stop_details
            _usage(data, kind, self.usage)
        elif kind == "message_stop":
            self.done = True
        elif kind == "error":
            self.failure = failure_from_body_error(data.get("error"), provider=self.provider)

    def _start(self, index: int, block: dict[str, Any]) -> None:
        self.blocks[index] = block  # a block started again starts empty
        for key in ("text", "thinking", "signature"):
            self.pieces.pop((index, key), None)
        kind = block.get("type")
        if kind == "tool_use":
            ordinal = self.tool_index[index] = len(self.tool_index)
            self.json_parts[index] = []
            self.on_delta(
                RuntimeDelta(
                    "tool_call",
                    "",
                    {"index": ordinal, "id": block.get("id"), "name": block.get("name")},
                )
            )
        elif kind == "text":
            text = shape.str_at(block, "text", "content_block_start.content_block")
            if text:
                self.on_delta(RuntimeDelta("text", text))

    def _delta(self, index: int, delta: Mapping[str, Any]) -> None:
        block = self.blocks.setdefault(index, {"type": "text", "text": ""})
        kind = delta.get("type")
        where = "content_block_delta.delta"
        if kind == "text_delta":
            text = shape.str_at(delta, "text", where)
            self.pieces.setdefault((index, "text"), []).append(text)
            self.on_delta(RuntimeDelta("text", text))
        elif kind == "input_json_delta":
            fragment = shape.str_at(delta, "partial_json", where)
            self.json_parts.setdefault(index, []).append(fragment)
            if fragment:
                meta = {
                    "index": self.tool_index.get(index, 0),
                    "id": block.get("id"),
                    "name": block.get("name"),
                }
                self.on_delta(RuntimeDelta("tool_call", fragment, meta))
        elif kind == "thinking_delta":
            text = shape.str_at(delta, "thinking", where)
            self.pieces.setdefault((index, "thinking"), []).append(text)
            self.on_delta(RuntimeDelta("thinking", text))
        elif kind == "signature_delta":
            signature = shape.str_at(delta, "signature", where)
            self.pieces.setdefault((index, "signature"), []).append(signature)

    def result(self) -> RuntimeResult:
        text: list[str] = []
        thinking: list[str] = []
        thinking_blocks: list[JSONValue] = []
        calls: list[ToolCall] = []
        for (index, key), pieces in self.pieces.items():
            block = self.blocks[index]
            block[key] = block.get(key, "") + "".join(pieces)
        self.pieces.clear()
        for index in sorted(self.blocks):
            block = self.blocks[index]
            kind = block.get("type")
            if kind == "text":
                text.append(block.get("text", ""))
            elif kind == "tool_use":
                arguments = "".join(self.json_parts.get(index, ()))
                calls.append(
                    ToolCall(str(block.get("id")), str(block.get("name")), arguments or "{}")
                )
            elif kind in ("thinking", "redacted_thinking"):
                thinking.append(block.get("thinking", ""))
                thinking_blocks.append(block)
        content = "".join(text)
        stop = self.stop
        return RuntimeResult(
            content=content,
            tool_calls=calls,
            thinking="".join(thinking),
            usage=self.usage,
            finish_reason=_STOP_REASONS.get(stop, stop) if stop else None,
            refusal=_refusal(stop, content, self.stop_details),
            metadata={
                "model": self.model,
                "response_id": self.response_id,
                "stop_reason": stop,
                "thinking_blocks": thinking_blocks or None,
            },
        )
