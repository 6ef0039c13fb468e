"""The recording format: the canonical request and its key, redaction, the files on disk.

What a turn asks of the model, as plain data: system prompt, messages, tools, tool choice,
response format and sampling options. Nothing secret or volatile (key, headers, session id,
time budget, stream callback) and not the model ref, so that a replay answers for any model.
Every string written passes through redaction of known secrets and of common key shapes,
so a key that leaked into a prompt or reply never lands in a file. A recording lives at
``DIR/<label>/<key>.yaml``: the label is the method whose turn it is, the key a short hash
of the canonical request.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import overload

from ..errors import ConfigError, Diagnostic
from ..json_types import JSONObject, JSONValue
from ..redaction import REDACTED, redact, secrets_in_options
from ..runtimes.protocol import (
    Capabilities,
    Message,
    RuntimeResult,
    ToolCall,
    ToolSpec,
    Usage,
)

__all__ = [
    "FILE_HEADER",
    "REQUEST_OPTIONS",
    "UNLABELLED",
    "Recording",
    "RecordingStore",
    "Redactor",
    "canonical_request",
    "capabilities_record",
    "embeddings_request",
    "label_dir",
    "request_key",
    "response_record",
    "selection_secrets",
]

#: ``run_turn`` options that shape the answer and so belong to the request. Everything else
#: (``api_key``, ``session_id``, ``timeout_s``, ``on_delta``, headers …) is left out.
REQUEST_OPTIONS = (
    "tool_choice",
    "parallel_tool_calls",
    "response_format",
    "temperature",
    "max_tokens",
    "thinking_level",
    "top_p",
    "top_k",
    "stop",
    "seed",
    "presence_penalty",
    "frequency_penalty",
    "web_search",
)

#: The folder of turns made outside any method (``runtime.context.current_method`` unset).
UNLABELLED = "unlabelled"
#: 64 bits of sha256: collisions are out of reach for any folder of recordings.
_KEY_CHARS = 16
FILE_HEADER = (
    "# A recorded model turn (openprogram-run --record). Replayed by --replay or the\n"
    "# 'replay' model when a request matches `request` exactly; re-record after a change.\n"
)


# --- the canonical request ---------------------------------------------------------------


def _plain(value: object) -> JSONValue:
    """``value`` as JSON-ready data; unknown objects by ``str`` (never by ``repr``)."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if value is None or isinstance(value, (bool, int, float)):
        return value
    return str(value)


#: What ``_content`` writes in place of media data.
_DIGESTED = re.compile(r"sha256:[0-9a-f]+ \(\d+ chars\)")


def _content(content: str | list[JSONObject]) -> JSONValue:
    if isinstance(content, str):
        return content
    blocks: list[JSONValue] = []
    for block in content:
        data = block.get("data")
        if isinstance(data, str) and not _DIGESTED.fullmatch(data):
            # Media bytes would swamp the file; their hash keeps the request exact. (A
            # replayed tool result holds the hash already: base64 has no ':' nor spaces.)
            digest = hashlib.sha256(data.encode()).hexdigest()[:_KEY_CHARS]
            block = {**block, "data": f"sha256:{digest} ({len(data)} chars)"}
        blocks.append(_plain(block))
    return blocks


def _message(message: Message | Mapping[str, object]) -> JSONObject:
    if isinstance(message, Mapping):
        return {
            str(k): _plain(v)
            for k, v in message.items()
            if v is not None and v is not False and v != []
        }
    out: JSONObject = {"role": message.role, "content": _content(message.content)}
    if message.tool_calls:
        out["tool_calls"] = [_tool_call(c) for c in message.tool_calls]
    if message.tool_call_id is not None:
        out["tool_call_id"] = message.tool_call_id
    if message.name is not None:
        out["name"] = message.name
    if message.is_error:
        out["is_error"] = True
    return out


def _tool_call(call: ToolCall) -> JSONObject:
    return {"id": call.id, "name": call.name, "arguments": call.arguments}


def _tool(tool: ToolSpec | Mapping[str, object]) -> JSONObject:
    if isinstance(tool, Mapping):
        return {str(k): _plain(v) for k, v in tool.items()}
    out: JSONObject = {
        "name": tool.name,
        "description": tool.description,
        "parameters": _plain(tool.parameters),
    }
    if tool.strict:
        out["strict"] = True
    return out


def canonical_request(
    prompt: str | Sequence[Message],
    *,
    system_prompt: str | None = None,
    options: Mapping[str, object] | None = None,
) -> JSONObject:
    """What a turn asks of the model, as plain data: the part a recording must match.

    Optional fields are left out when unset, so that files stay short and an option added
    to this list later does not change the keys of older recordings.
    """
    options = options or {}
    messages = [Message("user", prompt)] if isinstance(prompt, str) else list(prompt)
    request: JSONObject = {}
    if system_prompt is not None:
        request["system_prompt"] = system_prompt
    request["messages"] = [_message(m) for m in messages]
    tools = options.get("tools")
    if tools and isinstance(tools, list | tuple):
        request["tools"] = [_tool(t) for t in tools]
    for name in REQUEST_OPTIONS:
        value = options.get(name)
        if value is not None:
            request[name] = _plain(value)
    return request


def request_key(request: Mapping[str, object]) -> str:
    """A short sha256 of the request's canonical JSON (sorted keys)."""
    text = json.dumps(request, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:_KEY_CHARS]


def label_dir(label: str | None) -> str:
    """The folder name for a label: safe on every file system, never leaving the folder."""
    if not label:
        return UNLABELLED
    name = re.sub(r"[^A-Za-z0-9._-]", "_", label).lstrip(".")
    return name or UNLABELLED


# --- redaction ---------------------------------------------------------------------------

#: Shapes of keys and credentials, replaced wherever they appear. Over-redacting a prompt
#: is harmless (it is done the same way when recording and replaying); a leaked key is not.
_PATTERNS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"(?i)\b(bearer)\s+[A-Za-z0-9._~+/=-]{8,}"), r"\1 " + REDACTED),
    (
        re.compile(r"(?i)(\bauthorization[\"']?\s*[:=]\s*[\"']?)[^\s\"',;}]+(\s+[^\s\"',;}]+)?"),
        r"\1" + REDACTED,
    ),
    (
        re.compile(
            r"(?i)((?:api[_-]?key|x-api-key|access[_-]?token|auth[_-]?token|client[_-]?secret"
            r"|secret[_-]?key|password|passwd)[\"']?\s*[:=]\s*[\"']?)[^\s\"',;}]{6,}"
        ),
        r"\1" + REDACTED,
    ),
    (re.compile(r"\bsk-[A-Za-z0-9_-]{8,}"), REDACTED),
    (re.compile(r"\b(?:ghp|gho|ghu|ghs|ghr|github_pat)_[A-Za-z0-9_]{16,}"), REDACTED),
    (re.compile(r"\bxox[abposr]-[A-Za-z0-9-]{10,}"), REDACTED),
    (re.compile(r"\bAKIA[0-9A-Z]{16}\b"), REDACTED),
    (re.compile(r"\bAIza[0-9A-Za-z_-]{30,}"), REDACTED),
)


def selection_secrets(selector: object, model_ref: str | None) -> set[str]:
    """The key, header values and key variable's value a selector would give a runtime."""
    explain = getattr(selector, "explain", None)
    if model_ref is None or not callable(explain):
        return set()
    try:
        options = explain(model_ref).options
    except Exception:  # a selector that cannot explain has no options to leak
        return set()
    return secrets_in_options(options)


class Redactor:
    """Replaces known secret values and common key shapes in text and in nested data."""

    def __init__(self, secrets: Iterable[str | None] = ()) -> None:
        # Longest first, so that a secret containing another is replaced whole.
        values = {s for s in secrets if s and len(s) >= 4 and s != REDACTED}
        self.secrets: tuple[str, ...] = tuple(sorted(values, key=len, reverse=True))

    def text(self, text: str) -> str:
        text = redact(text, self.secrets)
        for pattern, replacement in _PATTERNS:
            text = pattern.sub(replacement, text)
        return text

    @overload
    def data(self, value: JSONObject) -> JSONObject: ...
    @overload
    def data(self, value: JSONValue) -> JSONValue: ...
    def data(self, value: JSONValue) -> JSONValue:
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, dict):
            return {self.text(k): self.data(v) for k, v in value.items()}
        if isinstance(value, list):
            return [self.data(v) for v in value]
        return value


# --- recordings on disk ------------------------------------------------------------------


def embeddings_request(texts: Sequence[str]) -> JSONObject:
    """The recorded request of an embeddings call (``run.evals``): the texts alone, like a
    turn's request without its model ref."""
    return {"embed": list(texts)}


def response_record(result: RuntimeResult) -> JSONObject:
    return {
        "content": result.content,
        "tool_calls": [_tool_call(c) for c in result.tool_calls],
        "thinking": result.thinking,
        "usage": dict(result.usage.to_dict()) if result.usage is not None else None,
        "finish_reason": result.finish_reason,
        "refusal": result.refusal,
    }


def capabilities_record(caps: Capabilities) -> dict[str, bool]:
    return {
        "tools": caps.tools,
        "native_json_schema": caps.native_json_schema,
        "forced_tool_choice": caps.forced_tool_choice,
        "parallel_tool_calls": caps.parallel_tool_calls,
        "streaming": caps.streaming,
    }


@dataclass(frozen=True, slots=True)
class Recording:
    """One recorded turn as read from ``path``."""

    label: str
    key: str
    path: Path
    request: JSONObject
    response: JSONObject
    recorded: JSONObject = field(default_factory=dict)

    def capabilities(self) -> Capabilities | None:
        caps = self.recorded.get("capabilities")
        if not isinstance(caps, Mapping):
            return None
        known = capabilities_record(Capabilities())
        return Capabilities(**{k: bool(caps[k]) for k in known if k in caps})

    def result(self, model_ref: str | None) -> RuntimeResult:
        response = self.response
        usage = response.get("usage")
        calls = response.get("tool_calls")
        return RuntimeResult(
            content=str(response.get("content") or ""),
            tool_calls=[
                ToolCall(str(c["id"]), str(c["name"]), str(c.get("arguments", "{}")))
                for c in (calls if isinstance(calls, list) else [])
                if isinstance(c, dict)
            ],
            thinking=str(response.get("thinking") or ""),
            usage=Usage(
                _count(usage.get("input_tokens")),
                _count(usage.get("output_tokens")),
                _count(usage.get("cache_read")),
                _count(usage.get("cache_create")),
            )
            if isinstance(usage, dict)
            else None,
            finish_reason=_text_or_none(response.get("finish_reason")),
            refusal=_text_or_none(response.get("refusal")),
            metadata={
                "runtime": "replay",
                "model": model_ref,
                "recording": str(self.path),
                "recorded_model": self.recorded.get("model_ref"),
            },
        )


def _count(value: JSONValue) -> int:
    """A token count from a recording edited by hand: absent, not a number or not a finite
    one (YAML's .inf and .nan, which int() raised on at the turn) is 0."""
    if isinstance(value, float):
        return int(value) if math.isfinite(value) else 0
    return value if isinstance(value, int) else 0


#: The text fields of a recorded reply: each a string, or absent (null).
_TEXT_FIELDS = ("content", "thinking", "finish_reason", "refusal")


def _bad_response(response: JSONObject) -> tuple[tuple[str | int, ...], str] | None:
    """What is wrong with a recorded reply: where (a path into ``response``) and what; None
    when nothing is. A reply the runtime could not have given is refused, not replayed as
    the Python text of what it holds (``content: {a: 1}`` was the text ``{'a': 1}``)."""
    for name in _TEXT_FIELDS:
        value = response.get(name)
        if value is not None and not isinstance(value, str):
            return (name,), f"not a recording: 'response.{name}' must be text"
    usage = response.get("usage")
    if usage is not None and not isinstance(usage, dict):
        return ("usage",), "not a recording: 'response.usage' must be a mapping of token counts"
    calls = response.get("tool_calls")
    if calls is None:
        return None
    if not isinstance(calls, list):
        return (
            "tool_calls",
        ), "not a recording: 'response.tool_calls' must be a list of tool calls"
    for index, call in enumerate(calls):
        if not isinstance(call, dict) or not all(
            isinstance(call.get(k), str | int) and not isinstance(call.get(k), bool)
            for k in ("id", "name")
        ):
            return ("tool_calls", index), (
                f"not a recording: tool call {index} of 'response.tool_calls' needs an 'id' "
                "and a 'name'"
            )
        if not isinstance(call.get("arguments", ""), str):
            return ("tool_calls", index, "arguments"), (
                f"not a recording: the arguments of tool call {index} must be JSON text, as "
                "the model sent them"
            )
    return None


def _text_or_none(value: JSONValue) -> str | None:
    return None if value is None else str(value)


def _listing(folder: Path) -> list[str]:
    """The names in ``folder``, sorted; ``OSError`` when it cannot be read."""
    return sorted(os.listdir(folder))


def _recording_paths(directory: Path) -> tuple[list[Path], list[Diagnostic]]:
    """Every ``*/*.yaml`` under ``directory``, and a problem for each folder that cannot be
    read. (``Path.glob`` passes over such a folder in silence, and a replay then said that
    nothing was ever recorded.)"""
    paths: list[Path] = []
    problems: list[Diagnostic] = []

    def unreadable(folder: Path, exc: OSError) -> Diagnostic:
        reason = exc.strerror or str(exc)
        return Diagnostic(
            str(folder), 0, 0, f"cannot read this recordings folder ({reason}); make it readable"
        )

    try:
        labels = _listing(directory)
    except OSError as exc:
        return [], [unreadable(directory, exc)]
    for label in labels:
        folder = directory / label
        if not folder.is_dir():
            continue
        try:
            names = _listing(folder)
        except OSError as exc:
            problems.append(unreadable(folder, exc))
            continue
        paths += [folder / name for name in names if name.endswith(".yaml")]
    return paths, problems


class RecordingStore:
    """The recordings in one folder, by label folder and key; read once, on first use."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.by_label: dict[str, dict[str, Recording]] = {}
        self._texts: dict[Path, list[str]] = {}

    @classmethod
    def load(cls, directory: Path) -> RecordingStore:
        """Every ``*/*.yaml`` under ``directory``; ``ConfigError`` names each broken file."""
        from ..spec.yamlread import load_yaml_file

        store = cls(directory)
        if not directory.exists():
            raise ConfigError(
                Diagnostic(str(directory), 0, 0, "no recordings folder here; record with --record")
            )
        if not directory.is_dir():
            raise ConfigError(
                Diagnostic(
                    str(directory),
                    0,
                    0,
                    "not a folder: name the folder of recordings --record wrote",
                )
            )
        paths, problems = _recording_paths(directory)
        for path in paths:
            try:
                loaded = load_yaml_file(path)
            except ConfigError as exc:
                problems.extend(exc.diagnostics)
                continue
            data = loaded.data
            if not (
                isinstance(data, dict)
                and isinstance(data.get("request"), dict)
                and isinstance(data.get("response"), dict)
            ):
                problems.append(
                    Diagnostic(str(path), 1, 1, "not a recording: needs 'request' and 'response'")
                )
                continue
            bad = _bad_response(data["response"])
            if bad is not None:
                # Replaying it failed the run with a bare KeyError ('id') at the turn, or
                # answered with the Python text of a mapping.
                where, message = bad
                at = loaded.source.at(("response", *where))
                problems.append(Diagnostic(at.path, at.line, at.col, message))
                continue
            recorded = data.get("recorded")
            # The key is recomputed from the stored request, so a recording edited by hand
            # answers the request it now shows.
            request: JSONObject = data["request"]
            recording = Recording(
                label=path.parent.name,
                key=request_key(request),
                path=path,
                request=request,
                response=data["response"],
                recorded=recorded if isinstance(recorded, dict) else {},
            )
            store.by_label.setdefault(recording.label, {})[recording.key] = recording
        if problems:
            raise ConfigError(problems)
        return store

    def find(self, label: str, key: str) -> Recording | None:
        found = self.by_label.get(label, {}).get(key)
        if found is not None:
            return found
        # The same request recorded under another label is still the same request.
        for recordings in self.by_label.values():
            if key in recordings:
                return recordings[key]
        return None

    def tool_results(
        self, label: str, request: Mapping[str, object], recording: Recording
    ) -> JSONObject:
        """What the tool calls ``recording`` answers ``request`` with got when they were
        recorded: the tool messages of the recorded request that continues this one, by
        call id (empty when no recording continues it)."""
        messages = request.get("messages")
        calls = recording.response.get("tool_calls")
        if not isinstance(messages, list) or not calls:
            return {}
        n = len(messages)
        for recordings in (self.by_label.get(label, {}), *self.by_label.values()):
            for later in sorted(recordings.values(), key=lambda r: r.key):
                following = later.request.get("messages")
                if not isinstance(following, list) or len(following) <= n + 1:
                    continue
                reply = following[n]
                if (
                    following[:n] != messages
                    or not isinstance(reply, Mapping)
                    or reply.get("role") != "assistant"
                    or reply.get("tool_calls") != calls
                ):
                    continue
                results: JSONObject = {}
                for message in following[n + 1 :]:
                    if not isinstance(message, Mapping) or message.get("role") != "tool":
                        break
                    results[str(message.get("tool_call_id"))] = {
                        "content": message.get("content", ""),
                        "is_error": bool(message.get("is_error")),
                    }
                return results
        return {}

    def lines(self, recording: Recording) -> list[str]:
        from ..spec.yamlwrite import dump_yaml

        cached = self._texts.get(recording.path)
        if cached is None:
            cached = self._texts[recording.path] = dump_yaml(recording.request).splitlines()
        return cached

    def capabilities(self, label: str) -> Capabilities | None:
        for recordings in (self.by_label.get(label, {}), *self.by_label.values()):
            for recording in recordings.values():
                caps = recording.capabilities()
                if caps is not None:
                    return caps
        return None
