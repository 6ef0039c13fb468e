"""Records of runs: what ran, on which version of the prompts, with what result.

A ``RunRecord`` is the one shape every long-running mode reports (``--watch --json``,
``serve``, ``--records FILE``): agent, method, model, inputs, output or error, usage and
cost, the models that failed and passed their call on (``fallbacks``), timing, status
(``ok`` | ``failed`` | ``interrupted``) and the version the run started on (see
``run.version``). Secrets are redacted from everything a record writes.
"""

from __future__ import annotations

import json
import secrets
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from .._file_writes import append_lines
from ..json_types import JSONObject, JSONValue
from ..redaction import env_secrets, redact, secrets_in_options
from .version import VersionStamp

if TYPE_CHECKING:
    from ..compile.program import Agent
    from ..runtime.trace import SessionTrace

__all__ = ["RecordLog", "RunRecord", "append_trace", "error_dict", "run_secrets"]

Status = Literal["ok", "failed", "interrupted"]


@dataclass(slots=True)
class RunRecord:
    """One run, as written to ``--records FILE`` and returned by ``serve``."""

    agent: str
    method: str
    inputs: Mapping[str, JSONValue]
    version: VersionStamp
    model: str | None = None
    status: Status = "ok"
    output: JSONValue = None
    error: dict[str, object] | None = None
    usage: dict[str, int] | None = None
    started_at: str = ""
    elapsed_s: float = 0.0
    #: 64 random bits from the OS's generator, as hex: a run's id cannot be guessed.
    id: str = field(default_factory=lambda: secrets.token_hex(8))
    #: The exit status the CLI would give: 0 ok, 1 the run failed, 2 usage error.
    exit_code: int = 0
    #: What must never be shown of the run (see ``run_secrets``); not part of the record.
    secrets: frozenset[str] = frozenset()
    #: The methods the run passed through by ``choices``, with the pick made in each.
    path: list[JSONObject] = field(default_factory=list)
    #: Tool calls not run for real (``{"name", "reason"}``, reason "offline" or "replay").
    tools_not_run: list[dict[str, str]] = field(default_factory=list)
    #: Every confirmation a tool asked for: ``{"name", "question", "answer", "by"}``.
    confirmations: list[dict[str, str]] = field(default_factory=list)
    #: What the run's model calls cost (``run.costs``): ``{"usd", "models": [...]}``, ``usd``
    #: None when a model used has no known price.
    cost: JSONObject | None = None
    #: Each model that failed for good and passed its call to the next (``run.fallback``).
    fallbacks: list[JSONObject] = field(default_factory=list)

    def to_dict(self) -> dict[str, object]:
        out: dict[str, object] = {
            "id": self.id,
            "agent": self.agent,
            "method": self.method,
            "model": self.model,
            "status": self.status,
            "inputs": dict(self.inputs),
        }
        if self.error is not None:
            out["error"] = self.error
        else:
            out["output"] = self.output
        if self.path:
            out["path"] = self.path
        if self.tools_not_run:
            out["tools_not_run"] = self.tools_not_run
        if self.confirmations:
            out["confirmations"] = self.confirmations
        if self.fallbacks:
            out["fallbacks"] = self.fallbacks
        out.update(
            usage=self.usage,
            cost=self.cost,
            version=self.version.to_dict(),
            started_at=self.started_at,
            elapsed_s=self.elapsed_s,
        )
        return out

    def to_json(self) -> str:
        """One line of JSON with the agent's secrets redacted."""
        return redact(json.dumps(self.to_dict(), ensure_ascii=False, default=repr), self.secrets)


def run_secrets(agent: Agent, environ: Mapping[str, str] | None = None) -> frozenset[str]:
    """Every value a run of ``agent`` must not show: the ``${env:…}`` secrets its files read,
    the keys and header values of its runtime rules and providers (the value of a key
    variable included), and secret-looking environment variables (``OPENAI_API_KEY`` …).

    One set for every output of the run: the command line's text and ``--json``, records,
    traces, serve replies and recordings. Read when the run starts, as the runtimes read
    their keys then.
    """
    found = set(agent.secrets)
    found |= env_secrets(environ)
    for rule in agent.runtime_rules:
        found |= secrets_in_options(rule.options, environ)
    for provider in agent.providers.values():
        found |= secrets_in_options(provider.runtime_options(), environ)
    return frozenset(found)


def error_dict(exc: BaseException) -> dict[str, object]:
    """A JSON-able description of an error (the error's own ``to_dict`` when it has one)."""
    to_dict = getattr(exc, "to_dict", None)
    if callable(to_dict):
        out: dict[str, object] = to_dict()
        return out
    data: dict[str, object] = {"type": type(exc).__name__, "message": str(exc)}
    for attr in ("code", "issues", "kind"):
        if hasattr(exc, attr):
            data[attr] = getattr(exc, attr)
    return data


class RecordLog:
    """Appends records to a JSON Lines file, flushed and synced per record.

    Each record is written when its run ends, so a crash or a kill loses at most the run
    that was executing, never one already finished; a line torn by a crash or a full disk
    does not swallow the next record (see ``append_lines``).
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()

    def append(self, record: RunRecord) -> None:
        """Write ``record``; raises ``OSError`` when it cannot be written."""
        with self._lock:
            append_lines(self.path, record.to_json() + "\n")

    def close(self) -> None:
        """Nothing is held open between records; kept for callers that close their log."""


def append_trace(path: Path, trace: SessionTrace, secrets: frozenset[str] = frozenset()) -> None:
    """Append a run's session trace to ``path`` as JSON Lines, secrets redacted."""
    path.parent.mkdir(parents=True, exist_ok=True)
    append_lines(path, redact(trace.to_jsonl(), secrets))
