"""The agent runtime protocol: what a runtime is, and the data it exchanges.

A runtime answers one model turn. ``Runtime.exec`` (in ``runtime/``) wraps every runtime in
the same retries, validation, repair and ``choices`` handling, so a runtime only has to speak
its wire format and report failures in ``RuntimeResult.error`` / ``.failure`` (never raise).
The one exception is ``ConfigError``, for files the user gave the runtime that it cannot use
(a broken recordings folder): it stops the run with exit status 2, as a bad config does,
since neither a retry nor a fallback model would help.

Keyword arguments a runtime receives in ``run_turn`` (all optional; ignore what you cannot do):

- ``tools``: ``list[ToolSpec]`` offered to the model.
- ``tool_choice``: ``"auto" | "required" | "none" | {"type": "function", "name": N}``;
  absent means "do not send".
- ``parallel_tool_calls``: ``bool``; absent means "do not send".
- ``response_format``: ``{"name", "schema", "strict", "description"}`` for native
  structured output (only when ``capabilities().native_json_schema``).
- ``max_tokens``, ``temperature``, ``thinking_level``.
- ``timeout_s``: seconds left in the caller's budget for this turn.
- ``on_delta``: ``Callable[[RuntimeDelta], None]``; when given, the runtime streams and calls it
  for each delta as it arrives, and still returns the assembled ``RuntimeResult``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol, TypeAlias, runtime_checkable

if TYPE_CHECKING:
    # TypeIs is in typing from Python 3.13; annotations are not evaluated at run time.
    from typing_extensions import TypeIs

from openprogram_yaml.json_types import JSONObject

__all__ = [
    "UNDECLARED_CAPABILITIES",
    "AgentRuntimeProtocol",
    "Capabilities",
    "DeltaCallback",
    "Message",
    "RuntimeConfig",
    "RuntimeDelta",
    "RuntimeRegistryEntry",
    "RuntimeResult",
    "RuntimeSelectorProtocol",
    "SelectorWrapper",
    "ToolCall",
    "ToolSpec",
    "TurnFailure",
    "Usage",
    "capabilities_of",
    "is_runtime",
    "is_selector",
]

Role = Literal["system", "user", "assistant", "tool"]


@dataclass(slots=True)
class ToolCall:
    """A tool call the model asked for. ``arguments`` is the raw JSON text it sent."""

    id: str
    name: str
    arguments: str = "{}"


@dataclass(slots=True)
class ToolSpec:
    """A tool as the model sees it."""

    name: str
    description: str = ""
    parameters: JSONObject = field(default_factory=lambda: {"type": "object", "properties": {}})
    strict: bool = False


@dataclass(slots=True)
class Message:
    """One chat message in a provider-neutral shape.

    ``content`` is text, or a list of content blocks (``{"type": "text", "text": …}``,
    ``{"type": "image", "data": …, "mime_type": …}``). A ``tool`` message answers the call
    ``tool_call_id``; ``is_error`` marks a failed tool result.
    """

    role: Role
    content: str | list[JSONObject] = ""
    tool_calls: list[ToolCall] = field(default_factory=list)
    tool_call_id: str | None = None
    name: str | None = None
    is_error: bool = False

    def text(self) -> str:
        """The message's text, with non-text blocks left out."""
        if isinstance(self.content, str):
            return self.content
        return "".join(str(b.get("text", "")) for b in self.content if b.get("type") == "text")


@dataclass(slots=True)
class Usage:
    """Token usage of one turn (or a sum of turns)."""

    input_tokens: int = 0
    output_tokens: int = 0
    cache_read: int = 0
    cache_create: int = 0

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.input_tokens + other.input_tokens,
            self.output_tokens + other.output_tokens,
            self.cache_read + other.cache_read,
            self.cache_create + other.cache_create,
        )

    def to_dict(self) -> dict[str, int]:
        return {
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "total_tokens": self.total_tokens,
            "cache_read": self.cache_read,
            "cache_create": self.cache_create,
        }


@dataclass(slots=True)
class TurnFailure:
    """A classified failure, for the retry loop. ``reason`` takes ``ErrorReason`` values."""

    reason: str
    message: str
    retryable: bool
    http_status: int | None = None
    retry_after_s: float | None = None


@dataclass(slots=True)
class RuntimeResult:
    """The outcome of one turn. Failures are returned in ``error`` (and ``failure``)."""

    content: str = ""
    metadata: JSONObject = field(default_factory=dict)
    error: str | None = None
    tool_calls: list[ToolCall] = field(default_factory=list)
    thinking: str = ""
    usage: Usage | None = None
    #: "stop" | "length" | "tool_calls" | "refusal" | "content_filter" | None
    finish_reason: str | None = None
    refusal: str | None = None
    failure: TurnFailure | None = None


@dataclass(slots=True)
class RuntimeDelta:
    """A streamed piece of a turn: ``type`` is "text", "tool_call", "thinking" or "error"."""

    type: str
    content: str = ""
    metadata: JSONObject = field(default_factory=dict)


DeltaCallback = Callable[[RuntimeDelta], None]


@dataclass(slots=True)
class RuntimeConfig:
    """Identity and options a runtime was resolved with."""

    runtime_id: str
    metadata: JSONObject = field(default_factory=dict)


@dataclass(slots=True)
class RuntimeRegistryEntry:
    """What the registry knows about one runtime."""

    runtime_id: str
    display_name: str | None = None
    description: str | None = None
    is_builtin: bool = False
    metadata: JSONObject = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.display_name is None:
            self.display_name = self.runtime_id


@dataclass(frozen=True, slots=True)
class Capabilities:
    """What a runtime can do for a model; ``Runtime.exec`` picks modes from these."""

    tools: bool = True
    native_json_schema: bool = False
    forced_tool_choice: bool = True
    parallel_tool_calls: bool = True
    streaming: bool = True


@runtime_checkable
class AgentRuntimeProtocol(Protocol):
    """Any object with these three methods is a runtime.

    Optional extras ``Runtime.exec`` uses when present: ``capabilities(model_ref)`` returning
    ``Capabilities`` (absent: tools only, no native structured output), ``aclose()``, and a
    ``provider`` attribute naming the provider for errors.
    """

    def supports(self, model_ref: str | None = None) -> bool: ...

    async def run_turn(
        self,
        prompt: str | Sequence[Message],
        *,
        system_prompt: str | None = None,
        model_ref: str | None = None,
        **kwargs: Any,
    ) -> RuntimeResult: ...

    def stream_turn(
        self, prompt: str | Sequence[Message], **kwargs: Any
    ) -> AsyncIterator[RuntimeDelta]: ...


class RuntimeSelectorProtocol(Protocol):
    """What picks the runtime serving a model ref; ``Runtime(runtimes=…)`` takes any.

    Four implement it: ``runtimes.select.RuntimeSelector`` (rules, providers,
    ``supports()``), the recording and replay selectors of ``recording/``, and the capture
    ``render`` uses. ``aclose()`` closes the runtimes the selector created.
    """

    def select(self, model_ref: str) -> AgentRuntimeProtocol: ...

    async def aclose(self) -> None: ...


def is_runtime(obj: object) -> TypeIs[AgentRuntimeProtocol]:
    """Whether ``obj`` answers turns itself (has ``run_turn``): a runtime, not a function."""
    return callable(getattr(obj, "run_turn", None))


def is_selector(obj: object) -> TypeIs[RuntimeSelectorProtocol]:
    """Whether ``obj`` picks runtimes (has ``select``)."""
    return callable(getattr(obj, "select", None))


#: Puts a selector in front of another (recording, replay, capture) for one run.
SelectorWrapper: TypeAlias = Callable[[RuntimeSelectorProtocol], RuntimeSelectorProtocol]


#: What ``capabilities_of`` gives a runtime that declares nothing: tools, no native
#: structured output. Wrappers pass this very object on, and structured output checks for
#: it by identity to fail closed (a runtime that says nothing gets no hidden submit tool).
UNDECLARED_CAPABILITIES = Capabilities()


def capabilities_of(runtime: object, model_ref: str | None) -> Capabilities:
    """What ``runtime`` can do for ``model_ref``; a runtime that cannot say (no
    ``capabilities()``, or not a ``Capabilities``) gets the defaults: tools, no native
    structured output: ``UNDECLARED_CAPABILITIES``."""
    ask = getattr(runtime, "capabilities", None)
    value = ask(model_ref) if callable(ask) else None
    return value if isinstance(value, Capabilities) else UNDECLARED_CAPABILITIES
