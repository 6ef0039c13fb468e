"""``CallableRuntime``: the seed's ``call=`` function as a runtime.

``fn(content, model, response_format) -> str``, sync or async. ``content`` is a list of content
blocks: the system prompt as a text block with ``"role": "system"``, then each message's
blocks (assistant and tool text carry their ``role`` too, so a repair turn keeps its history).
A sync ``fn`` runs in a worker thread so it may block. Exceptions it raises are classified
for the retry loop; ``TypeError`` and ``NotImplementedError`` propagate (programming errors).
"""

from __future__ import annotations

import asyncio
import inspect
import json
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any, TypeAlias

from openprogram_yaml.json_types import JSONObject
from openprogram_yaml.runtimes.failures import classify_exception
from openprogram_yaml.runtimes.protocol import (
    Capabilities,
    Message,
    RuntimeDelta,
    RuntimeResult,
)

__all__ = ["CallFn", "CallableRuntime", "content_blocks"]

#: The seed's ``call=`` function: ``fn(content, model, response_format)``, sync or async,
#: replying with text (or JSON data, which is serialised and validated like text).
CallFn: TypeAlias = "Callable[[list[JSONObject], str, JSONObject | None], object]"


def content_blocks(prompt: str | Sequence[Message], system_prompt: str | None) -> list[JSONObject]:
    """The blocks a ``call=`` function receives for one turn."""
    blocks: list[JSONObject] = []
    if system_prompt:
        blocks.append({"type": "text", "text": system_prompt, "role": "system"})
    if isinstance(prompt, str):
        blocks.append({"type": "text", "text": prompt})
        return blocks
    for message in prompt:
        if message.role == "user" and isinstance(message.content, list):
            blocks.extend(message.content)
        elif message.role == "user":
            blocks.append({"type": "text", "text": message.text()})
        elif message.text():
            blocks.append({"type": "text", "text": message.text(), "role": message.role})
    return blocks


class CallableRuntime:
    """Adapts a ``call=`` function to ``AgentRuntimeProtocol``.

    No tools. Structured output counts as native: the function receives the caller's
    ``response_format`` as given to ``exec`` (a bare schema, an envelope dict or a
    ``JsonSchemaOutput``), and its reply is still parsed, validated and repaired by
    ``Runtime.exec``.
    """

    provider = "callable"

    def __init__(self, fn: CallFn, *, native_json_schema: bool = True) -> None:
        self.fn = fn
        self._is_async = inspect.iscoroutinefunction(fn)
        self._caps = Capabilities(
            tools=False,
            native_json_schema=native_json_schema,
            forced_tool_choice=False,
            parallel_tool_calls=False,
            streaming=False,
        )

    def supports(self, model_ref: str | None = None) -> bool:
        return True

    def capabilities(self, model_ref: str | None = None) -> Capabilities:
        return self._caps

    async def run_turn(
        self,
        prompt: str | Sequence[Message],
        *,
        system_prompt: str | None = None,
        model_ref: str | None = None,
        **kwargs: Any,
    ) -> RuntimeResult:
        content = content_blocks(prompt, system_prompt)
        model = model_ref or "default"
        response_format = kwargs.get("response_format")
        try:
            if self._is_async:
                reply = self.fn(content, model, response_format)
            else:
                reply = await asyncio.to_thread(self.fn, content, model, response_format)
            if inspect.isawaitable(reply):
                reply = await reply
        except (TypeError, NotImplementedError):
            raise
        except Exception as exc:
            failure = classify_exception(exc)
            return RuntimeResult(error=failure.message, failure=failure)
        if not isinstance(reply, str):
            # A function that hands back parsed JSON still gets validated like text would.
            reply = json.dumps(reply, ensure_ascii=False, default=str)
        return RuntimeResult(content=reply)

    async def stream_turn(
        self, prompt: str | Sequence[Message], **kwargs: Any
    ) -> AsyncIterator[RuntimeDelta]:
        result = await self.run_turn(prompt, **kwargs)
        if result.error:
            yield RuntimeDelta(type="error", content=result.error)
        else:
            yield RuntimeDelta(type="text", content=result.content)
