"""The bridge from session traces to OpenTelemetry spans: the one module that imports
opentelemetry (loaded only when telemetry is on).

Each node of a run's trace becomes a span, nested as the nodes are, named and described
with the GenAI semantic conventions (the attribute names of opentelemetry-semantic-conventions'
``gen_ai`` module, spelled out here as that module marks them "moved" to the GenAI repo):

- the run: ``invoke_agent {agent}``, with the program's version and the run's total usage;
- a method: ``{agent}.{method}``, with the version of its prompt;
- an exec (the model call, its retries, repairs and tool loop): ``chat {model}``, a client
  span with the provider, the requested and answering model, usage and finish reason;
- a tool call: ``execute_tool {name}``, with the call's id.

Prompts, completions, tool arguments and results go out only with ``capture_content``,
as JSON, and every string that leaves has the run's secrets redacted.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from opentelemetry import trace as otel_trace
from opentelemetry.sdk.resources import (
    SERVICE_NAME,
    SERVICE_VERSION,
    OTELResourceDetector,
    Resource,
)
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.trace import Span, SpanKind, Status, StatusCode

from .._version import __version__
from ..json_types import JSONObject, JSONValue, parse_json
from ..redaction import redact
from ..runtime.trace import SessionTrace, TraceNode, jsonable

if TYPE_CHECKING:
    from opentelemetry.util.types import AttributeValue

__all__ = ["MAX_CONTENT_CHARS", "OTelTelemetry"]

OPERATION = "gen_ai.operation.name"
PROVIDER = "gen_ai.provider.name"
SYSTEM = "gen_ai.system"  # the older name of the provider attribute; backends still read it
AGENT_NAME = "gen_ai.agent.name"
AGENT_VERSION = "gen_ai.agent.version"
CONVERSATION_ID = "gen_ai.conversation.id"
REQUEST_MODEL = "gen_ai.request.model"
REQUEST_TEMPERATURE = "gen_ai.request.temperature"
REQUEST_MAX_TOKENS = "gen_ai.request.max_tokens"
RESPONSE_MODEL = "gen_ai.response.model"
RESPONSE_ID = "gen_ai.response.id"
RESPONSE_FINISH_REASONS = "gen_ai.response.finish_reasons"
OUTPUT_TYPE = "gen_ai.output.type"
INPUT_TOKENS = "gen_ai.usage.input_tokens"
OUTPUT_TOKENS = "gen_ai.usage.output_tokens"
CACHE_READ_TOKENS = "gen_ai.usage.cache_read.input_tokens"
CACHE_CREATION_TOKENS = "gen_ai.usage.cache_creation.input_tokens"
TOOL_NAME = "gen_ai.tool.name"
TOOL_TYPE = "gen_ai.tool.type"
TOOL_CALL_ID = "gen_ai.tool.call.id"
TOOL_CALL_ARGUMENTS = "gen_ai.tool.call.arguments"
TOOL_CALL_RESULT = "gen_ai.tool.call.result"
SYSTEM_INSTRUCTIONS = "gen_ai.system_instructions"
INPUT_MESSAGES = "gen_ai.input.messages"
OUTPUT_MESSAGES = "gen_ai.output.messages"
ERROR_TYPE = "error.type"

_TRACER_NAME = "openprogram_yaml"

#: Each string of exported content (a prompt, a message, an input, a result) is cut to this
#: many characters, saying how long it was: a file input (up to 20 MiB, as base64) would
#: make a span larger than a collector takes (4 MiB a request by default), and the batch
#: it is sent in, other runs' spans included, would be lost.
MAX_CONTENT_CHARS = 16 * 1024


class OTelTelemetry:
    """Exports the runs it watches through ``tracer_provider``.

    ``to_otlp`` builds the provider the command line uses (OTLP over HTTP, configured by
    the ``OTEL_EXPORTER_OTLP_*`` variables); a program embedding the package can pass its
    own provider (tests pass one with an in-memory exporter).
    """

    def __init__(
        self,
        tracer_provider: otel_trace.TracerProvider,
        *,
        capture_content: bool = False,
        owns_provider: bool = False,
    ) -> None:
        self.provider = tracer_provider
        self.tracer = tracer_provider.get_tracer(_TRACER_NAME, __version__)
        self.capture_content = capture_content
        self._owns_provider = owns_provider

    @classmethod
    def to_otlp(cls, *, capture_content: bool = False) -> OTelTelemetry:
        """Telemetry exported in batches over OTLP/HTTP (``OTEL_EXPORTER_OTLP_ENDPOINT``, by
        default http://localhost:4318), as service "openprogram" unless ``OTEL_SERVICE_NAME``
        or ``OTEL_RESOURCE_ATTRIBUTES`` say otherwise."""
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        ours = Resource.create({SERVICE_NAME: "openprogram", SERVICE_VERSION: __version__})
        provider = TracerProvider(resource=ours.merge(OTELResourceDetector().detect()))
        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
        return cls(provider, capture_content=capture_content, owns_provider=True)

    def watch(self, trace: SessionTrace | None, secrets: frozenset[str]) -> SessionTrace:
        """``trace`` (or a new one) exporting the nodes of the next run recorded into it."""
        trace = SessionTrace() if trace is None else trace
        trace.observers.append(_RunSpans(self, secrets))
        return trace

    def shutdown(self) -> None:
        """Export the spans still in the batch, then stop (only a provider built here)."""
        if self._owns_provider and isinstance(self.provider, TracerProvider):
            self.provider.shutdown()


class _RunSpans:
    """The spans of one run: started and ended as the run's trace nodes are.

    The first node started after it is attached is the run's root; when the root ends,
    the observer detaches, so a trace reused for another run is not exported twice.
    """

    def __init__(self, telemetry: OTelTelemetry, secrets: frozenset[str]) -> None:
        self.telemetry = telemetry
        self.secrets = secrets
        self.spans: dict[str, Span] = {}
        self.root: str | None = None
        self.usage = {INPUT_TOKENS: 0, OUTPUT_TOKENS: 0}

    def node_started(self, trace: SessionTrace, node: TraceNode) -> None:
        if self.root is None:
            self.root = node.id
        parent = self.spans.get(node.parent_id) if node.parent_id is not None else None
        # With no parent node, the span joins whatever span the caller has open (if any).
        context = otel_trace.set_span_in_context(parent) if parent is not None else None
        name, kind, attributes = _opening(node)
        self.spans[node.id] = self.telemetry.tracer.start_span(
            self._clean(name), context=context, kind=kind, attributes=self._cleaned(attributes)
        )

    def node_finished(self, trace: SessionTrace, node: TraceNode) -> None:
        span = self.spans.pop(node.id, None)
        if span is None:
            return
        attributes: dict[str, AttributeValue] = {}
        if node.kind == "exec":
            attributes.update(self._exec(node))
        elif node.kind == "tool":
            attributes.update(self._tool(node))
        elif node.kind in ("run", "method"):
            attributes.update(self._call(node))
        if node.id == self.root:
            attributes.update({k: v for k, v in self.usage.items() if node.kind == "run"})
            if self in trace.observers:
                trace.observers.remove(self)
        if node.error is not None:
            kind = str(node.error.get("type") or "error")
            attributes[ERROR_TYPE] = kind
            reason = node.error.get("reason") or node.error.get("code")
            if reason is not None:
                attributes["openprogram.error.reason"] = str(reason)
            # An error's message may quote the model's reply or a tool's arguments.
            message = node.error.get("message") if self.telemetry.capture_content else reason
            description = f"{kind}: {message}" if message else kind
            span.set_status(Status(StatusCode.ERROR, self._clean(description)))
        span.set_attributes(self._cleaned(attributes))
        span.end()

    # --- what each kind of node tells at its end --------------------------------------------

    def _exec(self, node: TraceNode) -> dict[str, AttributeValue]:
        data = node.data
        out: dict[str, AttributeValue] = {}
        usage = data.get("usage")
        if isinstance(usage, dict):
            tokens = {
                INPUT_TOKENS: usage.get("input_tokens"),
                OUTPUT_TOKENS: usage.get("output_tokens"),
                CACHE_READ_TOKENS: usage.get("cache_read"),
                CACHE_CREATION_TOKENS: usage.get("cache_create"),
            }
            for key, value in tokens.items():
                if isinstance(value, int) and (value or key in self.usage):
                    out[key] = value
                    if key in self.usage:
                        self.usage[key] += value
        provider = data.get("provider")
        if isinstance(provider, str):
            out[PROVIDER] = out[SYSTEM] = provider
        response = data.get("response")
        finish = None
        if isinstance(response, dict):
            _put(out, RESPONSE_MODEL, response.get("model"))
            _put(out, RESPONSE_ID, response.get("id"))
            finish = response.get("finish_reason")
            if isinstance(finish, str):
                out[RESPONSE_FINISH_REASONS] = (finish,)
        _put(out, CONVERSATION_ID, data.get("session_id"))
        options = data.get("options")
        if isinstance(options, dict):
            out[OUTPUT_TYPE] = "json" if options.get("response_format") is not None else "text"
            model_options = options.get("model_options")
            if isinstance(model_options, dict):
                for key, attribute in (
                    ("temperature", REQUEST_TEMPERATURE),
                    ("max_tokens", REQUEST_MAX_TOKENS),
                ):
                    value = model_options.get(key)
                    if isinstance(value, int | float) and not isinstance(value, bool):
                        out[attribute] = value
        attempts = data.get("attempts")
        if isinstance(attempts, list) and attempts:
            out["openprogram.failed_attempts"] = len(attempts)
        _put(out, "openprogram.turns", data.get("turns"))
        if self.telemetry.capture_content:
            system = data.get("system_prompt")
            if isinstance(system, str) and system:
                out[SYSTEM_INSTRUCTIONS] = self._json([{"type": "text", "content": system}])
            messages = data.get("messages")
            if isinstance(messages, list):
                out[INPUT_MESSAGES] = self._json([_message(m) for m in messages])
            if node.status == "ok":
                reply: JSONObject = {
                    "role": "assistant",
                    "parts": [{"type": "text", "content": _text(node.output)}],
                    "finish_reason": finish if isinstance(finish, str) else "stop",
                }
                out[OUTPUT_MESSAGES] = self._json([reply])
        return out

    def _tool(self, node: TraceNode) -> dict[str, AttributeValue]:
        data = node.data
        out: dict[str, AttributeValue] = {}
        _put(out, TOOL_CALL_ID, data.get("call_id"))
        _put(out, "openprogram.tool.not_run", data.get("not_run"))
        for mark in ("double", "replayed", "declined"):
            if data.get(mark) is True:
                out[f"openprogram.tool.{mark}"] = True
        if self.telemetry.capture_content:
            out[TOOL_CALL_ARGUMENTS] = self._json(node.inputs)
            if node.status == "ok":
                out[TOOL_CALL_RESULT] = self._content(node.output)
        return out

    def _call(self, node: TraceNode) -> dict[str, AttributeValue]:
        data = node.data
        out: dict[str, AttributeValue] = {}
        version = data.get("version")
        if isinstance(version, dict):
            for key in ("hash", "commit", "dirty"):
                _put(out, f"openprogram.version.{key}", version.get(key))
            _put(out, AGENT_VERSION, version.get("hash"))
        _put(out, "openprogram.prompt_version", data.get("prompt_version"))
        model = data.get("model")
        if isinstance(model, str):
            out[REQUEST_MODEL] = _model_id(model)
        if self.telemetry.capture_content:
            out["openprogram.inputs"] = self._json(node.inputs)
            if node.status == "ok":
                out["openprogram.output"] = self._json(node.output)
        return out

    # --- redaction ----------------------------------------------------------------------------

    def _json(self, value: object) -> str:
        return json.dumps(self._shortened(jsonable(value)), ensure_ascii=False)

    def _content(self, value: object) -> str:
        """A result as text (JSON unless it is a string), redacted and cut."""
        return self._cut(value) if isinstance(value, str) else self._json(value)

    def _shortened(self, value: JSONValue) -> JSONValue:
        """``value`` with every string redacted, then cut (redacted first: a secret that
        straddles the cut would otherwise leave its first part)."""
        if isinstance(value, str):
            return self._cut(value)
        if isinstance(value, dict):
            return {k: self._shortened(v) for k, v in value.items()}
        if isinstance(value, list):
            return [self._shortened(v) for v in value]
        return value

    def _cut(self, text: str) -> str:
        text = self._clean(text)
        if len(text) <= MAX_CONTENT_CHARS:
            return text
        return f"{text[:MAX_CONTENT_CHARS]}… ({len(text):,} characters)"

    def _clean(self, text: str) -> str:
        return redact(text, self.secrets) if self.secrets else text

    def _cleaned(self, attributes: dict[str, AttributeValue]) -> dict[str, AttributeValue]:
        """Every string value redacted: names, models and messages alike."""
        if not self.secrets:
            return attributes
        out: dict[str, AttributeValue] = {}
        for key, value in attributes.items():
            if isinstance(value, str):
                out[key] = self._clean(value)
            elif isinstance(value, tuple | list) and value and isinstance(value[0], str):
                out[key] = tuple(self._clean(str(v)) for v in value)
            else:
                out[key] = value
        return out


def _opening(node: TraceNode) -> tuple[str, SpanKind, dict[str, AttributeValue]]:
    """The span's name, kind and the attributes known when the node starts (what a sampler
    sees)."""
    if node.kind == "exec":
        model = _model_id(node.name)
        name = f"chat {model}" if model else "chat"
        return name, SpanKind.CLIENT, {OPERATION: "chat", REQUEST_MODEL: model}
    if node.kind == "tool":
        attributes: dict[str, AttributeValue] = {
            OPERATION: "execute_tool",
            TOOL_NAME: node.name,
            TOOL_TYPE: "function",
        }
        return f"execute_tool {node.name}", SpanKind.INTERNAL, attributes
    if node.kind not in ("run", "method"):  # a kind this module does not know (yet)
        return node.name or node.kind, SpanKind.INTERNAL, {}
    agent, _, method = node.name.rpartition(".")
    names: dict[str, AttributeValue] = {AGENT_NAME: agent, "openprogram.method": method}
    if node.kind == "run":
        return f"invoke_agent {agent}", SpanKind.INTERNAL, {OPERATION: "invoke_agent", **names}
    return node.name, SpanKind.INTERNAL, names


def _put(out: dict[str, AttributeValue], key: str, value: object) -> None:
    """Set ``key`` when ``value`` is a plain scalar (absent values are left out)."""
    if isinstance(value, str | bool | int | float):
        out[key] = value


def _model_id(model_ref: str) -> str:
    """``openai:gpt-4o`` -> ``gpt-4o``: the model as the provider names it."""
    return model_ref.partition(":")[2] or model_ref


def _text(value: object) -> str:
    return value if isinstance(value, str) else json.dumps(jsonable(value), ensure_ascii=False)


def _message(record: object) -> JSONValue:
    """A trace's message record in the conventions' shape: ``{role, parts}``."""
    if not isinstance(record, dict):
        return jsonable(record)
    role = record.get("role")
    content = record.get("content")
    parts: list[JSONValue] = []
    if role == "tool":
        parts.append(
            {"type": "tool_call_response", "id": record.get("tool_call_id"), "response": content}
        )
    elif isinstance(content, str):
        if content:
            parts.append({"type": "text", "content": content})
    elif isinstance(content, list):
        for block in content:
            if isinstance(block, dict) and block.get("type") == "text":
                parts.append({"type": "text", "content": block.get("text")})
            else:
                parts.append(jsonable(block))
    for call in record.get("tool_calls") or ():
        if isinstance(call, dict):
            parts.append(
                {
                    "type": "tool_call",
                    "id": call.get("id"),
                    "name": call.get("name"),
                    "arguments": _arguments(call.get("arguments")),
                }
            )
    return {"role": jsonable(role), "parts": parts}


def _arguments(raw: object) -> JSONValue:
    if isinstance(raw, str):
        try:
            parsed: JSONValue = parse_json(raw)
        except ValueError:
            return raw
        return parsed
    return jsonable(raw)
