"""Turning ``exec`` content (a string or content blocks) into the user message, and files
(images, PDFs, audio) given as inputs into the content blocks that carry them.

A text block with ``"role": "system"`` contributes to the system prompt instead; media blocks
given by ``path`` are read (``read_block_file``: regular files of at most ``MAX_MEDIA_BYTES``)
and base64-encoded. A block of a type no runtime knows is an
error: dropping it would send the model something else than was asked.

Files as inputs: an input declared ``{type: string, contentMediaType: image/png}`` (a
pattern such as ``image/*`` too) or ``{type: string, format: image}`` (``audio``, ``pdf``,
``file``) holds a file as a data URL (``data:image/png;base64,…``; plain base64 is read
with the declared type, or the type its first bytes show). ``media_value`` checks and
normalises one; ``media_block`` is the content block it becomes where a template places it.
"""

from __future__ import annotations

import base64
import binascii
import mimetypes
import os
import re
import urllib.parse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from openprogram_yaml._file_reads import (
    MAX_MEDIA_BYTES,
    FileRefused,
    FileTooLarge,
    read_regular_file,
)
from openprogram_yaml.json_types import JSONObject, JSONValue
from openprogram_yaml.runtimes.protocol import Message, RuntimeResult

__all__ = [
    "MAX_MEDIA_BYTES",
    "MediaError",
    "ToolContent",
    "accepts",
    "data_url_type",
    "media_block",
    "media_types",
    "media_value",
    "read_block_file",
    "read_media_file",
    "render_content",
]

_MEDIA = ("image", "video", "audio", "file")

#: ``format:`` names that declare a file input, and the media types each one takes.
FORMAT_MEDIA: dict[str, tuple[str, ...]] = {
    "image": ("image/*",),
    "audio": ("audio/*",),
    "pdf": ("application/pdf",),
    "file": ("image/*", "audio/*", "video/*", "application/pdf"),
}

#: What a ``contentMediaType`` must be for the input to be a file (other media types, say
#: ``application/json``, describe text and stay plain strings).
_FILE_MAJOR = ("image/", "audio/", "video/")

#: The first bytes of the kinds of file the providers take: plain base64 names no type.
_MAGIC: tuple[tuple[bytes, int, str], ...] = (
    (b"\x89PNG\r\n\x1a\n", 0, "image/png"),
    (b"\xff\xd8\xff", 0, "image/jpeg"),
    (b"GIF87a", 0, "image/gif"),
    (b"GIF89a", 0, "image/gif"),
    (b"WEBP", 8, "image/webp"),
    (b"%PDF-", 0, "application/pdf"),
    (b"WAVE", 8, "audio/wav"),
    (b"ID3", 0, "audio/mpeg"),
    (b"\xff\xfb", 0, "audio/mpeg"),
    (b"\xff\xf3", 0, "audio/mpeg"),
)
#: ``str.translate``'s table that drops every white space character (``str.isspace``).
_NO_SPACES: dict[int, None] = dict.fromkeys(
    map(
        ord,
        "\t\n\x0b\x0c\r\x1c\x1d\x1e\x1f \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004"
        "\u2005\u2006\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000",
    )
)
_DATA_URL = re.compile(r"data:(?P<type>[\w.+-]+/[\w.+-]+)(?P<params>(?:;[^;,]*)*?);base64,", re.I)


#: How far into a value its data URL's head (``data:TYPE;PARAMS;base64,``) may end: a name
#: of 255 bytes, percent-encoded, fits. Matching a 27 MB value of ``data:a/b;;;;…`` whole
#: took seconds of CPU, on a server's event loop.
_DATA_URL_HEAD = 2048


def _data_url_head(value: str) -> re.Match[str] | None:
    return _DATA_URL.match(value, 0, _DATA_URL_HEAD)


class MediaError(ValueError):
    """A file input that cannot be used; the message says why and what to give instead."""


def media_types(schema: object) -> tuple[str, ...] | None:
    """The media types a file input takes (patterns like ``image/*``), or None when the
    schema does not declare a file."""
    if not isinstance(schema, Mapping) or schema.get("type") != "string":
        return None
    declared = schema.get("contentMediaType")
    if isinstance(declared, str):
        declared = declared.strip().lower()
        if declared.startswith(_FILE_MAJOR) or declared == "application/pdf":
            return (declared,)
        return None
    named = schema.get("format")
    return FORMAT_MEDIA.get(named) if isinstance(named, str) else None


def accepts(accepted: Sequence[str], mime: str) -> bool:
    """Whether a file input taking ``accepted`` (``media_types``) takes a ``mime`` file."""
    for pattern in accepted:
        if pattern == mime or (pattern.endswith("/*") and mime.startswith(pattern[:-1])):
            return True
    return False


def _sniff(raw: bytes) -> str | None:
    for magic, at, mime in _MAGIC:
        if raw[at : at + len(magic)] == magic:
            return mime
    return None


def _data_url(mime: str, raw_b64: str, filename: str | None) -> str:
    name = f";name={urllib.parse.quote(filename, safe='')}" if filename else ""
    return f"data:{mime}{name};base64,{raw_b64}"


def _too_large(size: int, what: str) -> MediaError:
    return MediaError(
        f"{what} is {size / 2**20:.1f} MiB; a file input takes at most "
        f"{MAX_MEDIA_BYTES // 2**20} MiB"
    )


def _check_size(size: int, what: str) -> None:
    if size > MAX_MEDIA_BYTES:
        raise _too_large(size, what)


def _check_type(mime: str, accepted: Sequence[str], what: str) -> None:
    if not accepts(accepted, mime):
        raise MediaError(f"{what} is {mime}; this input takes {', '.join(accepted)}")


def media_value(value: JSONValue, accepted: Sequence[str], what: str = "the file") -> str:
    """``value`` (a data URL, or plain base64) as a checked data URL of an accepted type.

    Raises ``MediaError`` saying what is wrong: not base64, too large, the wrong type.
    """
    if not isinstance(value, str):
        raise MediaError(f"{what} must be a data URL or base64 text, not {type(value).__name__}")
    match = _data_url_head(value)
    mime: str | None = None
    filename: str | None = None
    encoded = value
    if match is not None:
        mime = match["type"].lower()
        encoded = value[match.end() :]
        for param in match["params"].split(";"):
            key, _, val = param.partition("=")
            if key.strip().lower() == "name" and val:
                filename = urllib.parse.unquote(val)
    elif value.startswith("data:"):
        raise MediaError(f"{what} is a data URL without base64 data: write data:TYPE;base64,DATA")
    # Base64 may be wrapped: every white space character goes (as str.split drops them), in
    # one pass; "".join(split()) held a string object for each piece, 25 times the text's
    # size for "AA AA AA …" (680 MB for a 27 MB body).
    encoded = encoded.translate(_NO_SPACES)
    _check_size(len(encoded) * 3 // 4, what)
    try:
        raw = base64.b64decode(encoded, validate=True)
    except (binascii.Error, ValueError):
        raise MediaError(
            f"{what} is neither a data URL nor base64 "
            "(give data:TYPE;base64,DATA, or the file's bytes in base64)"
        ) from None
    if mime is None:
        exact = [a for a in accepted if not a.endswith("/*")]
        mime = _sniff(raw) or (exact[0] if len(exact) == 1 else None)
        if mime is None:
            raise MediaError(
                f"{what}: the type of this base64 data is not known; give a data URL "
                "(data:TYPE;base64,DATA) naming it"
            )
    _check_type(mime, accepted, what)
    return _data_url(mime, encoded, filename)


def read_block_file(path: str | os.PathLike[str]) -> bytes:
    """The bytes of the file a content block or file input names by ``path``.

    The one way a media file is read: a regular file only (a FIFO or device is refused, never
    waited on) of at most ``MAX_MEDIA_BYTES``, refused before it is read whole. Raises
    ``MediaError`` saying why.
    """
    what = f"file {os.fspath(path)!r}"
    try:
        return read_regular_file(path, limit=MAX_MEDIA_BYTES)
    except FileTooLarge as exc:
        raise _too_large(exc.size, what) from None
    except FileRefused as exc:
        raise MediaError(f"cannot read {what}: {exc.reason}") from None


def read_media_file(path: str | os.PathLike[str], accepted: Sequence[str]) -> str:
    """The file at ``path`` as a data URL (its type from its name, else its first bytes).

    Raises ``MediaError`` when it cannot be read, is too large or of a type not accepted.
    """
    where = Path(path)
    what = f"file {str(path)!r}"
    raw = read_block_file(path)
    mime = _sniff(raw) or mimetypes.guess_type(where.name)[0] or "application/octet-stream"
    _check_type(mime, accepted, what)
    encoded = base64.b64encode(raw).decode("ascii")
    return _data_url(mime, encoded, where.name)


def data_url_type(data_url: str) -> str:
    """The media type a data URL (``media_value``'s) names; ``MediaError`` for another text."""
    match = _data_url_head(data_url)
    if match is None:
        raise MediaError("not a data URL with base64 data")
    return match["type"].lower()


def media_block(data_url: str) -> JSONObject:
    """The content block a checked data URL (``media_value``) becomes.

    Images, audio and video are blocks of that type; other files (PDFs) are ``file``
    blocks with a ``filename`` (the one the data URL names, or ``file.pdf``).
    """
    match = _data_url_head(data_url)
    if match is None:
        raise MediaError("not a data URL with base64 data")
    mime = match["type"].lower()
    filename = None
    for param in match["params"].split(";"):
        key, _, val = param.partition("=")
        if key.strip().lower() == "name" and val:
            filename = urllib.parse.unquote(val)
    major = mime.partition("/")[0]
    kind = major if major in ("image", "audio", "video") else "file"
    block: JSONObject = {"type": kind, "data": data_url[match.end() :], "mime_type": mime}
    if kind == "file":
        extension = mimetypes.guess_extension(mime) or ""
        block["filename"] = filename or f"file{extension}"
    return block


@dataclass(frozen=True, slots=True)
class ToolContent:
    """A tool result that is more than text: content blocks (text, images) in order.

    A tool returns one to show the model an image (MCP tools do for image results). The
    runtimes that take images in tool results send them there; the others say how they
    carry them (``providers/openai.py``).
    """

    blocks: tuple[JSONObject, ...]

    def text(self) -> str:
        """The text blocks, with a short note for each other block (records, events)."""
        parts: list[str] = []
        for block in self.blocks:
            if block.get("type") == "text":
                parts.append(str(block.get("text", "")))
            else:
                size = len(str(block.get("data", ""))) * 3 // 4
                parts.append(f"[{block.get('type')}: {block.get('mime_type')}, {size} bytes]")
        return "\n".join(part for part in parts if part)


def _media_block(block: Mapping[str, JSONValue]) -> JSONObject:
    """A media block with inline ``data`` (a ``path`` is read and base64-encoded)."""
    out = dict(block)
    path: object = out.pop("path", None)
    if path is not None and "data" not in out:
        if not isinstance(path, str | os.PathLike):
            raise TypeError(f"expected str, bytes or os.PathLike object, not {type(path).__name__}")
        raw = read_block_file(path)
        out["data"] = base64.b64encode(raw).decode("ascii")
        out.setdefault(
            "mime_type", mimetypes.guess_type(str(path))[0] or "application/octet-stream"
        )
        if out.get("type") == "file":
            out.setdefault("filename", Path(path).name)
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
        else:
            raise ValueError(
                f"a content block of type {kind!r} cannot be sent: the types are text, "
                f"{', '.join(_MEDIA)}"
            )
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
