"""The session trace: one node per exec (and per method call or tool call), nested.

Nodes form a tree through ``parent_id``: an exec started while a ``span`` is open (a method
call, a tool call, another exec) becomes its child. The trace can be written as JSON Lines,
one node per line, and read back. Keys that look like credentials are redacted on output.

Observers (``SessionTrace.observers``) are told when a node starts and when it ends: the
OpenTelemetry bridge (``openprogram_yaml.telemetry``) turns nodes into spans that way.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import time
from collections.abc import Callable
from contextvars import ContextVar, Token
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import IO, Any, Protocol

from openprogram_yaml._file_writes import write_atomically
from openprogram_yaml.json_types import JSONObject, JSONValue
from openprogram_yaml.redaction import REDACTED

__all__ = ["SessionTrace", "TraceNode", "TraceObserver", "current_span", "jsonable"]

_SECRET_KEY_PATTERN = (
    r"(^|[_-])(api[_-]?key|authorization|secret|password|passwd|access[_-]?token|"
    r"refresh[_-]?token|auth[_-]?token|bearer|x-api-key)$"
)


def _secret_key(key: str) -> bool:
    # re caches the compiled pattern; compiling it on first use keeps it out of start-up.
    return re.search(_SECRET_KEY_PATTERN, key, re.IGNORECASE) is not None


def jsonable(value: object) -> JSONValue:
    """``value`` as plain JSON data, with credential-like keys redacted."""
    if value is None or isinstance(value, str | int | float | bool):
        return value
    if isinstance(value, dict):
        return {
            str(k): (REDACTED if _secret_key(str(k)) else jsonable(v)) for k, v in value.items()
        }
    if isinstance(value, list | tuple | set | frozenset):
        return [jsonable(v) for v in value]
    to_dict = getattr(value, "to_dict", None)
    if callable(to_dict):
        return jsonable(to_dict())
    return repr(value)


@dataclass(slots=True)
class TraceNode:
    """One recorded step. ``data`` holds kind-specific fields (messages, usage, attempts, …).

    Public data: two nodes are equal when they record the same step (``clock_start``, the
    clock's reading for timing, aside), so a node read back from its JSON equals it."""

    id: str
    kind: str
    name: str = ""
    parent_id: str | None = None
    start_time: float = 0.0
    duration_s: float | None = None
    status: str = "running"
    inputs: object = None
    output: object = None
    error: dict[str, object] | None = None
    data: dict[str, object] = field(default_factory=dict)
    clock_start: float = field(default=0.0, repr=False, compare=False)

    def to_dict(self) -> JSONObject:
        return {
            "id": self.id,
            "kind": self.kind,
            "name": self.name,
            "parent_id": self.parent_id,
            "start_time": self.start_time,
            "duration_s": self.duration_s,
            "status": self.status,
            "inputs": jsonable(self.inputs),
            "output": jsonable(self.output),
            "error": jsonable(self.error),
            "data": jsonable(self.data),
        }

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> TraceNode:
        return cls(
            id=str(raw["id"]),
            kind=str(raw["kind"]),
            name=str(raw.get("name", "")),
            parent_id=raw.get("parent_id"),
            start_time=float(raw.get("start_time", 0.0)),
            duration_s=raw.get("duration_s"),
            status=str(raw.get("status", "ok")),
            inputs=raw.get("inputs"),
            output=raw.get("output"),
            error=raw.get("error"),
            data=dict(raw.get("data") or {}),
        )


class TraceObserver(Protocol):
    """Told of every node of a trace as it starts and as it ends (``SessionTrace.observers``).

    ``node_started`` sees the kind, name, parent and inputs; ``node_finished`` sees the node
    complete (status, output or error, ``data``). Both must be quick; an observer that
    raises is ignored, so it never breaks the run it watches.
    """

    def node_started(self, trace: SessionTrace, node: TraceNode) -> None: ...

    def node_finished(self, trace: SessionTrace, node: TraceNode) -> None: ...


_current: ContextVar[TraceNode | None] = ContextVar("openprogram_trace_span", default=None)


def current_span() -> TraceNode | None:
    """The innermost open node in this context (task or thread), if any."""
    return _current.get()


def _error_dict(exc: BaseException) -> dict[str, object]:
    to_dict = getattr(exc, "to_dict", None)
    base: dict[str, object] = to_dict() if callable(to_dict) else {}
    base.setdefault("type", type(exc).__name__)
    base.setdefault("message", str(exc))
    for attr in ("code", "issues", "kind"):
        if hasattr(exc, attr) and attr not in base:
            base[attr] = getattr(exc, attr)
    return base


class Span:
    """``SessionTrace.span``'s context: the node started on entry, finished on exit.

    A class rather than ``contextlib.contextmanager``: every exec, method and served run
    opens one, and the generator-based manager cost about 1 us more each.
    """

    __slots__ = ("inputs", "kind", "name", "node", "token", "trace")

    def __init__(self, trace: SessionTrace, kind: str, name: str, inputs: object) -> None:
        self.trace = trace
        self.kind = kind
        self.name = name
        self.inputs = inputs
        self.node: TraceNode | None = None
        self.token: Token[TraceNode | None] | None = None

    def __enter__(self) -> TraceNode:
        node = self.node = self.trace.start(self.kind, self.name, self.inputs)
        self.token = _current.set(node)
        return node

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        node, token = self.node, self.token
        assert node is not None and token is not None
        try:
            if exc is None:
                self.trace.finish(node, output=node.output)
            else:
                self.trace.finish(node, error=exc)
        finally:
            _current.reset(token)


class SessionTrace:
    """Records nodes in start order. Pass it to ``Runtime(trace=...)``."""

    def __init__(
        self, *, clock: Callable[[], float] | None = None, session_id: str | None = None
    ) -> None:
        self.clock = clock or time.monotonic
        self.session_id = session_id
        self.nodes: list[TraceNode] = []
        #: Told of each node as it starts and ends; an observer may remove itself when told.
        self.observers: list[TraceObserver] = []

    def start(self, kind: str, name: str = "", inputs: object = None) -> TraceNode:
        """Open a node under the current span; close it with ``finish``."""
        parent = _current.get()
        node = TraceNode(
            # 64 random bits, as the 16 hex digits of a uuid4 were (a third of its cost).
            id=secrets.token_hex(8),
            kind=kind,
            name=name,
            parent_id=parent.id if parent is not None else None,
            start_time=time.time(),
            inputs=inputs,
        )
        node.clock_start = self.clock()
        self.nodes.append(node)
        if self.observers:
            for observer in tuple(self.observers):
                with contextlib.suppress(Exception):
                    observer.node_started(self, node)
        return node

    def finish(
        self, node: TraceNode, *, output: object = None, error: BaseException | None = None
    ) -> None:
        node.duration_s = self.clock() - node.clock_start
        if error is not None:
            node.status = "error"
            node.error = _error_dict(error)
        else:
            node.status = "ok"
            node.output = output
        if self.observers:
            for observer in tuple(self.observers):
                with contextlib.suppress(Exception):
                    observer.node_finished(self, node)

    def span(self, kind: str, name: str = "", inputs: object = None) -> Span:
        """Open a node; execs and spans started inside become its children.

        Set ``node.output`` inside the block; an exception marks the node failed.
        """
        return Span(self, kind, name, inputs)

    def get(self, node_id: str) -> TraceNode:
        for node in self.nodes:
            if node.id == node_id:
                return node
        raise KeyError(node_id)

    def roots(self) -> list[TraceNode]:
        ids = {n.id for n in self.nodes}
        return [n for n in self.nodes if n.parent_id is None or n.parent_id not in ids]

    def children(self, node: TraceNode | str) -> list[TraceNode]:
        node_id = node if isinstance(node, str) else node.id
        return [n for n in self.nodes if n.parent_id == node_id]

    def to_jsonl(self) -> str:
        """One JSON object per node.

        A span that returns what its child returned (a run its method's output, a method
        its exec's) writes ``"output": null, "output_of": CHILD_ID`` instead of a copy: a
        long reply is written once, not once per level. ``read_jsonl`` restores it.
        """
        by_id = {node.id: node for node in self.nodes}
        copied_from: dict[str, str] = {}
        for node in self.nodes:
            parent = by_id.get(node.parent_id) if node.parent_id is not None else None
            if parent is not None and node.output is not None and parent.output is node.output:
                copied_from.setdefault(parent.id, node.id)
        lines = []
        for node in self.nodes:
            raw = node.to_dict()
            if node.id in copied_from:
                raw["output"] = None
                raw["output_of"] = copied_from[node.id]
            lines.append(json.dumps(raw, ensure_ascii=False, default=repr) + "\n")
        return "".join(lines)

    def write_jsonl(self, target: str | os.PathLike[str] | IO[str]) -> None:
        """Write every node, one JSON object per line."""
        text = self.to_jsonl()
        if isinstance(target, str | os.PathLike):
            write_atomically(target, text)
        else:
            target.write(text)

    @classmethod
    def read_jsonl(cls, source: str | os.PathLike[str] | IO[str]) -> SessionTrace:
        """A trace from JSON Lines written by ``write_jsonl``."""
        if isinstance(source, str | os.PathLike):
            text = Path(source).read_text(encoding="utf-8")
        else:
            text = source.read()
        trace = cls()
        # Lines end at "\n" alone: a string written raw may hold U+2028, U+2029 or U+0085.
        raws = [json.loads(line) for line in text.split("\n") if line.strip()]
        trace.nodes = [TraceNode.from_dict(raw) for raw in raws]
        by_id = {node.id: node for node in trace.nodes}
        # Children follow their parents: resolving from the end fills a chain in one pass.
        for raw, node in reversed(list(zip(raws, trace.nodes, strict=True))):
            child = by_id.get(str(raw.get("output_of")))
            if child is not None:
                node.output = child.output
        return trace
