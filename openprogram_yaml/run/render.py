"""What a method would send, without calling any model (``openprogram-run render`` and the
web page's Render button).

The request is caught at the runtime boundary: the real runtime for the model is selected
(so its capabilities decide structured-output and ``choices`` modes exactly as in a run),
but its turn is never taken.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..json_types import JSONValue
from ..runtimes.protocol import (
    AgentRuntimeProtocol,
    Message,
    RuntimeResult,
    RuntimeSelectorProtocol,
    ToolSpec,
    TurnFailure,
)
from ..runtimes.wrapping import WrappedRuntime
from .execute import execute_run

if TYPE_CHECKING:
    from ..compile.program import Program
    from .record import RunRecord
    from .version import VersionStamp

__all__ = ["CaptureSelector", "CapturedRequest", "Rendered", "format_request", "render_method"]

_CAPTURED = "request captured for render; no model was called"


@dataclass(slots=True)
class CapturedRequest:
    """The first turn a method would send."""

    model_ref: str | None
    runtime: str
    system_prompt: str | None
    messages: list[Message]
    kwargs: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        tools: Sequence[ToolSpec] = self.kwargs.get("tools") or ()
        options = {
            k: v
            for k, v in self.kwargs.items()
            # Secrets and per-call values (session ids, the time left) are not the request.
            if k
            not in ("tools", "response_format", "on_delta", "api_key", "session_id", "timeout_s")
            and not callable(v)
        }
        return {
            "model": self.model_ref,
            "runtime": self.runtime,
            "system": self.system_prompt,
            "messages": [_message(m) for m in self.messages],
            "tools": [
                {"name": t.name, "description": t.description, "parameters": t.parameters}
                for t in tools
            ],
            "response_format": self.kwargs.get("response_format"),
            "options": options,
        }


def _message(m: Message) -> dict[str, Any]:
    out: dict[str, Any] = {"role": m.role, "content": m.content}
    if m.tool_calls:
        out["tool_calls"] = [
            {"id": c.id, "name": c.name, "arguments": c.arguments} for c in m.tool_calls
        ]
    if m.tool_call_id:
        out["tool_call_id"] = m.tool_call_id
    return out


class _CaptureRuntime(WrappedRuntime):
    """Stands in front of the real runtime and keeps each request instead of sending it."""

    def __init__(self, inner: AgentRuntimeProtocol, sink: list[CapturedRequest]) -> None:
        super().__init__(inner)
        self.sink = sink

    async def run_turn(
        self,
        prompt: str | Sequence[Message],
        *,
        system_prompt: str | None = None,
        model_ref: str | None = None,
        **kwargs: Any,
    ) -> RuntimeResult:
        messages = [Message("user", prompt)] if isinstance(prompt, str) else list(prompt)
        self.sink.append(
            CapturedRequest(
                model_ref, type(self.inner).__name__, system_prompt, messages, dict(kwargs)
            )
        )
        return RuntimeResult(
            error=_CAPTURED,
            failure=TurnFailure("invalid_request", _CAPTURED, retryable=False),
        )


class CaptureSelector:
    """Selects the real runtime for each model, but only records the turns asked of it."""

    def __init__(self, inner: RuntimeSelectorProtocol) -> None:
        self.inner = inner
        self.captured: list[CapturedRequest] = []

    def select(self, model_ref: str) -> AgentRuntimeProtocol:
        return _CaptureRuntime(self.inner.select(model_ref), self.captured)

    async def aclose(self) -> None:
        await self.inner.aclose()


@dataclass(slots=True)
class Rendered:
    """What ``render_method`` caught: the first request, or why there is none."""

    #: ``CapturedRequest.to_dict()`` of the first turn; None when the method sent nothing.
    request: dict[str, Any] | None
    #: The record of the run that was stopped at the boundary (its error says why nothing
    #: was sent, e.g. an input the prompt needs is missing).
    record: RunRecord


async def render_method(
    program: Program,
    stamp: VersionStamp,
    agent_name: str | None,
    method_name: str | None,
    inputs: Mapping[str, JSONValue],
    *,
    model: str | None = None,
) -> Rendered:
    """Run the method up to its first model call and keep that request instead of sending
    it. Nothing leaves the process (no telemetry either); the request is not redacted (the
    caller shows it with ``record.secrets`` masked)."""
    selectors: list[CaptureSelector] = []

    def capture(inner: RuntimeSelectorProtocol) -> CaptureSelector:
        selectors.append(CaptureSelector(inner))
        return selectors[-1]

    record = await execute_run(
        program,
        stamp,
        agent_name,
        method_name,
        inputs,
        model=model,
        wrap_selector=capture,
        exported=False,  # stopped at the boundary: no run happened to export
    )
    captured = [c for s in selectors for c in s.captured]
    return Rendered(captured[0].to_dict() if captured else None, record)


def format_request(data: Mapping[str, Any]) -> str:
    """The captured request as text a person reads top to bottom."""
    lines = [f"model: {data['model']}  (runtime {data['runtime']})"]
    if data.get("system"):
        lines += ["", "── system ──", str(data["system"]).rstrip()]
    for m in data["messages"]:
        content = m["content"]
        if isinstance(content, str):
            text = content
        else:
            text = json.dumps([_shown_block(b) for b in content], indent=2)
        lines += ["", f"── {m['role']} ──", text.rstrip()]
    tools = data.get("tools") or []
    if tools:
        lines += ["", f"── tools ({len(tools)}) ──"]
        for t in tools:
            lines.append(f"{t['name']}: {t['description']}".rstrip(": "))
            lines.append("  parameters: " + json.dumps(t["parameters"], ensure_ascii=False))
    if data.get("response_format"):
        lines += ["", "── response format ──", json.dumps(data["response_format"], indent=2)]
    if data.get("options"):
        lines += ["", "── options ──"]
        lines += [f"{k}: {json.dumps(v)}" for k, v in sorted(data["options"].items())]
    return "\n".join(lines) + "\n"


def _shown_block(block: Any) -> Any:
    """A content block with its file data as a short note (type, size, a hash that tells two
    files apart in a diff): base64 is no reading matter."""
    data = block.get("data") if isinstance(block, dict) else None
    if not isinstance(data, str) or len(data) <= 64:
        return block
    import hashlib

    digest = hashlib.sha256(data.encode()).hexdigest()[:12]
    size = len(data) * 3 // 4 - (len(data) - len(data.rstrip("=")))
    return {**block, "data": f"<{size} bytes, sha256 {digest}...>"}
