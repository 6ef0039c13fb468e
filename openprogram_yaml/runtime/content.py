"""Turning ``exec`` content (a string or content blocks) into the user message.

A text block with ``"role": "system"`` contributes to the system prompt instead; media blocks
given by ``path`` are read and base64-encoded; unknown block types are skipped (the seed).
"""

from __future__ import annotations

import base64
import mimetypes
import os
from collections.abc import Mapping, Sequence
from pathlib import Path

from openprogram_yaml.json_types import JSONObject, JSONValue
from openprogram_yaml.runtimes.protocol import Message, RuntimeResult

__all__ = ["render_content"]

_MEDIA = ("image", "video", "audio")


def _media_block(block: Mapping[str, JSONValue]) -> JSONObject:
    """A media block with inline ``data`` (a ``path`` is read and base64-encoded)."""
    out = dict(block)
    path: object = out.pop("path", None)
    if path is not None and "data" not in out:
        if not isinstance(path, str | os.PathLike):
            raise TypeError(f"expected str, bytes or os.PathLike object, not {type(path).__name__}")
        raw = Path(path).read_bytes()
        out["data"] = base64.b64encode(raw).decode("ascii")
        out.setdefault(
            "mime_type", mimetypes.guess_type(str(path))[0] or "application/octet-stream"
        )
    return out


def render_content(content: str | Sequence[object]) -> tuple[Message, list[str]]:
    """The user message for ``content`` and the text of blocks marked ``"role": "system"``."""
    if isinstance(content, str):
        return Message("user", content), []
    if not isinstance(content, Sequence):
        raise TypeError(
            f"content must be a string or a list of blocks, not {type(content).__name__}"
        )
    blocks: list[JSONObject] = []
    system: list[str] = []
    for block in content:
        if isinstance(block, str):
            blocks.append({"type": "text", "text": block})
            continue
        if not isinstance(block, Mapping):
            raise TypeError(f"a content block must be a mapping, not {type(block).__name__}")
        kind = block.get("type")
        if kind == "text":
            if block.get("role") == "system":
                system.append(str(block.get("text", "")))
            else:
                blocks.append(dict(block))
        elif kind in _MEDIA:
            blocks.append(_media_block(block))
        # The seed: unknown block types are skipped silently.
    if len(blocks) == 1 and set(blocks[0]) == {"type", "text"}:
        return Message("user", str(blocks[0]["text"])), system
    return Message("user", blocks), system


def assistant_reply(result: RuntimeResult) -> Message:
    """The model's reply as the assistant message the conversation continues from.

    Signed thinking blocks a runtime returned (``metadata["thinking_blocks"]``, Anthropic's
    extended thinking) go back first and unchanged: with tool use, the provider refuses a
    continuation that drops them.
    """
    blocks = result.metadata.get("thinking_blocks") if result.metadata else None
    if not blocks or not isinstance(blocks, list):
        return Message("assistant", result.content, list(result.tool_calls))
    content: list[JSONObject] = [dict(b) for b in blocks if isinstance(b, dict)]
    if result.content:
        content.append({"type": "text", "text": result.content})
    return Message("assistant", content, list(result.tool_calls))
