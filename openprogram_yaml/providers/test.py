"""Offline test doubles: the built-in ``test`` model, a scripted model, and a fake clock.

- ``TestRuntime`` (model ``test``): deterministic, no network. On a turn that offers tools and
  has no tool results yet it calls each tool once with arguments generated from its schema;
  otherwise it answers in text mentioning the tool results, or with JSON generated from the
  requested schema. So ``choices`` get a valid pick of the first option, in the pick format
  ``{"call": "<option>", "args": {...}}``: the test model declares native structured output,
  and the choices' schema is the schema of a pick.
- ``ScriptedRuntime``: replies a test lists in order (text, tool calls, JSON, failures,
  delays, refusals, cut-off replies) and a record of every request it received.
- ``FakeClock``: ``Runtime(clock=fake.now, sleep=fake.sleep)``; sleeping advances time at once.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import re
import zlib
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from openprogram_yaml.json_types import JSONObject
from openprogram_yaml.runtimes.protocol import (
    Capabilities,
    Message,
    RuntimeDelta,
    RuntimeResult,
    ToolCall,
    ToolSpec,
    TurnFailure,
    Usage,
)

__all__ = [
    "FakeClock",
    "Reply",
    "ScriptedRequest",
    "ScriptedRuntime",
    "TestRuntime",
    "generate_value",
]

_FORMATS = {
    "date-time": "2024-01-01T00:00:00Z",
    "date": "2024-01-01",
    "time": "00:00:00Z",
    "email": "test@example.com",
    "uri": "https://example.com/",
    "url": "https://example.com/",
    "uuid": "00000000-0000-4000-8000-000000000000",
    "ipv4": "127.0.0.1",
    "hostname": "example.com",
}


class FakeClock:
    """A clock for tests: ``sleep`` records the delay and advances ``now()`` instantly."""

    def __init__(self, start: float = 1000.0) -> None:
        self.t = start
        self.sleeps: list[float] = []

    def now(self) -> float:
        return self.t

    def advance(self, seconds: float) -> None:
        self.t += seconds

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.t += max(0.0, seconds)
        await asyncio.sleep(0)  # still let other tasks run, as a real sleep would


# --- values from a JSON Schema ---------------------------------------------------------


def _resolve(ref: str, root: Any) -> Any:
    if not ref.startswith("#"):
        return {}
    node = root
    for part in ref.lstrip("#").strip("/").split("/"):
        if not part:
            continue
        part = part.replace("~1", "/").replace("~0", "~")
        node = node.get(part, {}) if isinstance(node, Mapping) else {}
    return node


def _merge(parts: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for part in parts:
        for key, value in part.items():
            if key == "properties":
                out["properties"] = {**out.get("properties", {}), **value}
            elif key == "required":
                out["required"] = [*out.get("required", []), *value]
            else:
                out[key] = value
    return out


def _number(schema: Mapping[str, Any], integer: bool, variant: int) -> int | float:
    low = schema.get("minimum")
    high = schema.get("maximum")
    xlow = schema.get("exclusiveMinimum")
    xhigh = schema.get("exclusiveMaximum")
    step = schema.get("multipleOf")
    value: float = 0.0 if low is None else float(low)
    if xlow is not None and value <= xlow:
        value = float(xlow) + (1 if integer or high is None else 0)
        if not integer and high is not None:
            value = (float(xlow) + float(high)) / 2
    value += variant
    if step:
        value = -(-value // step) * step  # round up to a multiple
    if high is not None and value > high:
        value = float(high)
    if xhigh is not None and value >= xhigh:
        value = float(xhigh) - 1 if integer else float(xhigh) - 1e-6
    return int(value) if integer else float(value)


def _string(schema: Mapping[str, Any], variant: int) -> str:
    fmt = schema.get("format")
    text = _FORMATS.get(fmt, "test") if isinstance(fmt, str) else "test"
    if variant:
        text = f"{text}{variant}" if fmt not in _FORMATS else text
    pattern = schema.get("pattern")
    if isinstance(pattern, str) and not re.search(pattern, text):
        for candidate in ("a", "A", "1", "test", "a1", "abc", "ABC", "123", "a-1", "x@y.z"):
            if re.search(pattern, candidate):
                text = candidate
                break
    low = int(schema.get("minLength", 0))
    high = schema.get("maxLength")
    if len(text) < low:
        text = text + "x" * (low - len(text))
    if high is not None:
        text = text[: int(high)]
    return text


def generate_value(schema: Any, root: Any = None, *, variant: int = 0, depth: int = 0) -> Any:
    """A deterministic value valid for ``schema`` (common keywords; local ``$ref`` only)."""
    root = schema if root is None else root
    if schema is True or schema is None or not isinstance(schema, Mapping):
        return "test"
    if depth > 12:
        return None
    if "$ref" in schema:
        rest = {k: v for k, v in schema.items() if k != "$ref"}
        return generate_value(
            _merge([_resolve(schema["$ref"], root), rest]), root, variant=variant, depth=depth + 1
        )
    if "const" in schema:
        return schema["const"]
    if schema.get("enum"):
        options = schema["enum"]
        return options[variant % len(options)]
    for key in ("anyOf", "oneOf"):
        if schema.get(key):
            rest = {k: v for k, v in schema.items() if k != key}
            return generate_value(
                _merge([rest, schema[key][0]]), root, variant=variant, depth=depth + 1
            )
    if schema.get("allOf"):
        rest = {k: v for k, v in schema.items() if k != "allOf"}
        return generate_value(
            _merge([rest, *schema["allOf"]]), root, variant=variant, depth=depth + 1
        )
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if kind is None:
        kind = "object" if "properties" in schema else "array" if "items" in schema else "string"
    if kind == "object":
        props: Mapping[str, Any] = schema.get("properties", {})
        required = set(schema.get("required", []))
        out: dict[str, Any] = {}
        for name, sub in props.items():
            if name in required or depth < 3:
                out[name] = generate_value(sub, root, depth=depth + 1)
        for name in required - set(out):
            extra = schema.get("additionalProperties")
            out[name] = generate_value(
                extra if isinstance(extra, Mapping) else True, root, depth=depth + 1
            )
        return out
    if kind == "array":
        prefix = list(schema.get("prefixItems", []))
        low = int(schema.get("minItems", 0))
        high = schema.get("maxItems")
        count = max(low, len(prefix), 1 if high is None or high >= 1 else 0)
        if high is not None:
            count = min(count, int(high))
        items = schema.get("items", True)
        return [
            generate_value(
                prefix[i] if i < len(prefix) else items, root, variant=i, depth=depth + 1
            )
            for i in range(count)
        ]
    if kind in ("integer", "number"):
        return _number(schema, kind == "integer", variant)
    if kind == "boolean":
        return variant % 2 == 0
    if kind == "null":
        return None
    return _string(schema, variant)


# --- shared helpers --------------------------------------------------------------------


def _messages(prompt: str | Sequence[Message]) -> list[Message]:
    return [Message("user", prompt)] if isinstance(prompt, str) else list(prompt)


def _usage(messages: Sequence[Message], system: str | None, output: str) -> Usage:
    chars = sum(len(m.text()) for m in messages) + len(system or "")
    return Usage(input_tokens=chars // 4 + 1, output_tokens=len(output) // 4 + 1)


def _stream(on_delta: object, result: RuntimeResult) -> None:
    if not callable(on_delta):
        return
    if result.thinking:
        on_delta(RuntimeDelta(type="thinking", content=result.thinking))
    text = result.content
    for start in range(0, len(text), 16):
        on_delta(RuntimeDelta(type="text", content=text[start : start + 16]))
    for call in result.tool_calls:
        on_delta(
            RuntimeDelta(type="tool_call", content=call.arguments, metadata={"name": call.name})
        )


# --- the `test` model ------------------------------------------------------------------


class TestRuntime:
    """The built-in offline ``test`` model. Deterministic; declares native structured output."""

    __test__ = False  # not a pytest test class
    provider = "test"
    #: Its tool calls are made up, so http and command tools are not run for them unless
    #: the run asks for live tools (``runtime.toolgate``).
    offline = True

    def __init__(self, **options: Any) -> None:
        self.options = options

    def supports(self, model_ref: str | None = None) -> bool:
        return model_ref is None or model_ref == "test" or model_ref.startswith("test:")

    def capabilities(self, model_ref: str | None = None) -> Capabilities:
        return Capabilities(tools=True, native_json_schema=True)

    async def embed(
        self, texts: Sequence[str], *, model_ref: str | None = None
    ) -> list[list[float]]:
        """Offline embeddings: each text's words counted into 64 buckets (by CRC-32), so
        texts sharing words are alike and the same text always gets the same vector."""
        vectors = []
        for text in texts:
            vector = [0.0] * 64
            for word in re.findall(r"\w+", text.lower()):
                vector[zlib.crc32(word.encode()) % 64] += 1.0
            vectors.append(vector)
        return vectors

    async def run_turn(
        self,
        prompt: str | Sequence[Message],
        *,
        system_prompt: str | None = None,
        model_ref: str | None = None,
        **kwargs: Any,
    ) -> RuntimeResult:
        messages = _messages(prompt)
        tools: list[ToolSpec] = list(kwargs.get("tools") or [])
        choice = kwargs.get("tool_choice")
        last_user = max((i for i, m in enumerate(messages) if m.role == "user"), default=0)
        results = [m for m in messages[last_user:] if m.role == "tool"]
        calls: list[ToolCall] = []
        if tools and choice != "none":
            if isinstance(choice, Mapping):
                chosen = [t for t in tools if t.name == choice.get("name")]
            elif not results:
                chosen = tools
            else:
                chosen = tools[:1] if choice == "required" else []
            calls = [
                ToolCall(
                    f"call_{len(messages)}_{i}", t.name, json.dumps(generate_value(t.parameters))
                )
                for i, t in enumerate(chosen)
            ]
        content = ""
        if not calls:
            fmt = kwargs.get("response_format")
            if isinstance(fmt, Mapping) and "schema" in fmt:
                content = json.dumps(generate_value(fmt["schema"]))
            else:
                asked = messages[last_user].text() if messages else ""
                content = f"test reply to: {asked[:200]}"
                if results:
                    content += " | tool results: " + "; ".join(
                        f"{m.name}: {m.text()[:200]}" for m in results
                    )
        result = RuntimeResult(
            content=content,
            tool_calls=calls,
            usage=_usage(messages, system_prompt, content),
            finish_reason="tool_calls" if calls else "stop",
            metadata={"model": model_ref or "test", "runtime": "test"},
        )
        _stream(kwargs.get("on_delta"), result)
        return result

    async def stream_turn(
        self, prompt: str | Sequence[Message], **kwargs: Any
    ) -> AsyncIterator[RuntimeDelta]:
        deltas: list[RuntimeDelta] = []
        await self.run_turn(prompt, **{**kwargs, "on_delta": deltas.append})
        for delta in deltas:
            yield delta


# --- the scripted model ----------------------------------------------------------------


@dataclass(slots=True)
class Reply:
    """One scripted turn. Build with ``Reply.text``, ``Reply.json``, ``Reply.call`` …"""

    content: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list)
    thinking: str = ""
    finish_reason: str | None = None
    refusal: str | None = None
    usage: Usage | None = None
    failure: TurnFailure | None = None
    delay_s: float = 0.0

    @classmethod
    def text(cls, content: str) -> Reply:
        return cls(content=content)

    @classmethod
    def json(cls, value: object) -> Reply:
        return cls(content=json.dumps(value))

    @classmethod
    def call(
        cls,
        name: str,
        arguments: Mapping[str, object] | str | None = None,
        *,
        id: str | None = None,
    ) -> Reply:
        """A reply calling one tool (``arguments`` as a mapping, or raw JSON text)."""
        return cls.calls((name, arguments, id))

    @classmethod
    def calls(
        cls, *calls: tuple[str, Mapping[str, object] | str | None, str | None] | ToolCall
    ) -> Reply:
        out: list[ToolCall] = []
        for item in calls:
            if isinstance(item, ToolCall):
                out.append(item)
                continue
            name, args, call_id = item
            raw = args if isinstance(args, str) else json.dumps(dict(args or {}))
            out.append(ToolCall(call_id or "", name, raw))
        return cls(tool_calls=out, finish_reason="tool_calls")

    @classmethod
    def fail(
        cls,
        reason: str = "server_error",
        message: str | None = None,
        *,
        retryable: bool = True,
        http_status: int | None = None,
        retry_after_s: float | None = None,
    ) -> Reply:
        failure = TurnFailure(
            reason, message or f"scripted {reason}", retryable, http_status, retry_after_s
        )
        return cls(failure=failure)

    @classmethod
    def refuse(cls, message: str = "I can't help with that.") -> Reply:
        return cls(refusal=message, finish_reason="refusal")

    @classmethod
    def cut(cls, content: str) -> Reply:
        """A reply stopped by the length limit."""
        return cls(content=content, finish_reason="length")

    def after(self, seconds: float) -> Reply:
        """This reply, arriving ``seconds`` later (on the injected clock)."""
        return replace(self, delay_s=seconds)


@dataclass(slots=True)
class ScriptedRequest:
    """What ``ScriptedRuntime`` received for one turn."""

    messages: list[Message]
    system_prompt: str | None
    model_ref: str | None
    kwargs: dict[str, Any]

    @property
    def tools(self) -> list[ToolSpec]:
        return list(self.kwargs.get("tools") or [])

    @property
    def tool_names(self) -> list[str]:
        return [t.name for t in self.tools]

    @property
    def tool_choice(self) -> str | JSONObject | None:
        return self.kwargs.get("tool_choice")

    @property
    def parallel_tool_calls(self) -> bool | None:
        return self.kwargs.get("parallel_tool_calls")

    @property
    def response_format(self) -> JSONObject | None:
        return self.kwargs.get("response_format")

    @property
    def timeout_s(self) -> float | None:
        return self.kwargs.get("timeout_s")

    @property
    def last_text(self) -> str:
        return self.messages[-1].text() if self.messages else ""


ScriptItem = (
    str
    | Reply
    | TurnFailure
    | RuntimeResult
    | BaseException
    | dict[str, object]
    | list[object]
    | Callable[[ScriptedRequest], object]
)


class ScriptedRuntime:
    """Answers each turn with the next scripted item and records every request.

    Items: ``str`` (text), ``Reply``, ``TurnFailure``, a ``RuntimeResult`` (returned as is),
    a dict or list (sent as JSON text),
    an exception (raised, as a runtime that breaks the protocol would), or a function of the
    ``ScriptedRequest`` returning one of those. ``sleep`` is used for delays.
    """

    provider = "scripted"

    def __init__(
        self,
        replies: Iterable[ScriptItem] = (),
        *,
        capabilities: Capabilities | None = None,
        sleep: Callable[[float], Awaitable[object]] | None = None,
    ) -> None:
        self.script: list[ScriptItem] = list(replies)
        self.caps = capabilities or Capabilities()
        self.sleep = sleep or asyncio.sleep
        self.requests: list[ScriptedRequest] = []
        self._ids = itertools.count(1)

    def add(self, *replies: ScriptItem) -> None:
        self.script.extend(replies)

    @property
    def remaining(self) -> int:
        return len(self.script)

    def supports(self, model_ref: str | None = None) -> bool:
        return True

    def capabilities(self, model_ref: str | None = None) -> Capabilities:
        return self.caps

    def _reply(self, item: object, request: ScriptedRequest) -> Reply:
        if callable(item) and not isinstance(item, BaseException | Reply):
            item = item(request)
        if isinstance(item, BaseException):
            raise item
        if isinstance(item, Reply):
            return item
        if isinstance(item, str):
            return Reply(content=item)
        if isinstance(item, TurnFailure):
            return Reply(failure=item)
        return Reply(content=json.dumps(item))

    async def run_turn(
        self,
        prompt: str | Sequence[Message],
        *,
        system_prompt: str | None = None,
        model_ref: str | None = None,
        **kwargs: Any,
    ) -> RuntimeResult:
        messages = _messages(prompt)
        request = ScriptedRequest(messages, system_prompt, model_ref, dict(kwargs))
        self.requests.append(request)
        if not self.script:
            message = f"ScriptedRuntime: script exhausted at request {len(self.requests)}"
            return RuntimeResult(
                error=message, failure=TurnFailure("invalid_request", message, False)
            )
        item = self.script.pop(0)
        if isinstance(item, RuntimeResult):
            return item  # returned as is: lets a test send any shape, e.g. an error string only
        reply = self._reply(item, request)
        if reply.delay_s:
            budget = kwargs.get("timeout_s")
            if budget is not None and reply.delay_s > budget:
                await self.sleep(budget)
                message = f"scripted turn took longer than timeout_s={budget}"
                return RuntimeResult(error=message, failure=TurnFailure("timeout", message, True))
            await self.sleep(reply.delay_s)
        if reply.failure is not None:
            return RuntimeResult(error=reply.failure.message, failure=reply.failure)
        calls = [
            c if c.id else ToolCall(f"call_{next(self._ids)}", c.name, c.arguments)
            for c in reply.tool_calls
        ]
        result = RuntimeResult(
            content=reply.content,
            tool_calls=calls,
            thinking=reply.thinking,
            usage=reply.usage or _usage(messages, system_prompt, reply.content),
            finish_reason=reply.finish_reason or ("tool_calls" if calls else "stop"),
            refusal=reply.refusal,
        )
        _stream(kwargs.get("on_delta"), result)
        return result

    async def stream_turn(
        self, prompt: str | Sequence[Message], **kwargs: Any
    ) -> AsyncIterator[RuntimeDelta]:
        deltas: list[RuntimeDelta] = []
        result = await self.run_turn(prompt, **{**kwargs, "on_delta": deltas.append})
        for delta in deltas:
            yield delta
        if result.error:
            yield RuntimeDelta(type="error", content=result.error)
