"""Runs and their records: what ran, on which version of the prompts, with what result.

A ``RunRecord`` is the one shape every long-running mode reports (``--watch --json``,
``serve``, ``--records FILE``): agent, method, model, inputs, output or error, usage, timing,
status (``ok`` | ``failed`` | ``interrupted``) and the version the run started on — the
Program's content hash and, in a git checkout, the commit and whether the Program's files
differ from it. Secrets are redacted from everything a record writes.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from openprogram_yaml._fast_dataclass import fast_dataclass

from .._file_writes import append_lines, cannot_write
from ..compile.program import DEFAULT_MAX_STEPS, Agent, Program, RunState
from ..errors import OpenProgramError, UsageError
from ..redaction import env_secrets, redact, secrets_in_options
from ..runtime.toolgate import ToolGate

if TYPE_CHECKING:
    from ..runtime.retry import RetryInfo
    from ..runtime.trace import SessionTrace

__all__ = [
    "GitStamper",
    "RecordLog",
    "RunRecord",
    "RunService",
    "VersionStamp",
    "append_trace",
    "error_dict",
    "execute_run",
    "redact",
    "run_secrets",
]

Status = Literal["ok", "failed", "interrupted"]


@fast_dataclass(frozen=True)
class VersionStamp:
    """Which version of the prompts a run used.

    ``commit`` and ``dirty`` are None outside a git checkout. ``dirty`` is True when any of
    the Program's files differs from the commit (modified, untracked, ignored, or outside the
    checkout), i.e. when the commit alone cannot reproduce the run.
    """

    hash: str
    commit: str | None = None
    dirty: bool | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"hash": self.hash}
        if self.commit is not None:
            out["commit"] = self.commit
            out["dirty"] = self.dirty
        return out


@fast_dataclass(frozen=True)
class _GitInfo:
    """The git checkout a program's files are in."""

    toplevel: Path
    git_dir: Path


def _git(args: list[str], cwd: Path) -> str | None:
    try:
        proc = subprocess.run(
            ["git", *args],
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=10,
            # A prompt repository's hooks or pagers have no business running here.
            env={**os.environ, "GIT_OPTIONAL_LOCKS": "0", "GIT_PAGER": "cat"},
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return proc.stdout if proc.returncode == 0 else None


class GitStamper:
    """Computes ``VersionStamp``s, caching git's answer per Program version.

    The cache key also holds the modification times of git's index and HEAD log, so a
    commit made while the runner serves an unchanged Program is still noticed; a run pays
    for ``git`` only on the first run of a version or after such a commit.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._info: dict[Path, _GitInfo | None] = {}
        self._stamps: dict[tuple[str, tuple[int, ...]], VersionStamp] = {}

    def _git_info(self, root: Path) -> _GitInfo | None:
        if root not in self._info:
            out = _git(["rev-parse", "--show-toplevel", "--absolute-git-dir"], root)
            lines = out.splitlines() if out else []
            self._info[root] = (
                _GitInfo(Path(lines[0]).resolve(), Path(lines[1])) if len(lines) == 2 else None
            )
        return self._info[root]

    @staticmethod
    def _markers(info: _GitInfo) -> tuple[int, ...]:
        stamps: list[int] = []
        for name in ("index", "HEAD", "logs/HEAD"):
            try:
                stamps.append((info.git_dir / name).stat().st_mtime_ns)
            except OSError:
                stamps.append(0)
        return tuple(stamps)

    def stamp(self, program: Program) -> VersionStamp:
        """The stamp of ``program``; blocking (runs ``git`` on a cache miss)."""
        with self._lock:
            info = self._git_info(program.root)
            if info is None:
                return VersionStamp(program.version)
            key = (program.version, self._markers(info))
            cached = self._stamps.get(key)
            if cached is not None:
                return cached
            head = _git(["rev-parse", "--verify", "-q", "HEAD"], info.toplevel)
            if head is None:  # a repository without commits
                stamp = VersionStamp(program.version)
            else:
                stamp = VersionStamp(program.version, head.strip(), self._dirty(program, info))
            self._stamps[key] = stamp
            return stamp

    @staticmethod
    def _dirty(program: Program, info: _GitInfo) -> bool:
        inside: list[str] = []
        for path in program.files:
            try:
                inside.append(path.resolve().relative_to(info.toplevel).as_posix())
            except ValueError:
                return True  # a file the commit cannot hold
        if not inside:
            return True
        status = _git(
            ["status", "--porcelain", "--untracked-files=all", "--ignored", "--", *inside],
            info.toplevel,
        )
        return status is None or bool(status.strip())


@fast_dataclass
class RunRecord:
    """One run, as written to ``--records FILE`` and returned by ``serve``."""

    agent: str
    method: str
    inputs: Mapping[str, Any]
    version: VersionStamp
    model: str | None = None
    status: Status = "ok"
    output: Any = None
    error: dict[str, Any] | None = None
    usage: dict[str, int] | None = None
    started_at: str = ""
    elapsed_s: float = 0.0
    id: str = field(default_factory=lambda: uuid.uuid4().hex[:16])
    #: The exit status the CLI would give: 0 ok, 1 the run failed, 2 usage error.
    exit_code: int = 0
    #: What must never be shown of the run (see ``run_secrets``); not part of the record.
    secrets: frozenset[str] = frozenset()
    #: The methods the run passed through by ``choices``, with the pick made in each.
    path: list[dict[str, Any]] = field(default_factory=list)
    #: Tool calls not run for real (``{"name", "reason"}``, reason "offline" or "replay").
    tools_not_run: list[dict[str, str]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
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
        out.update(
            usage=self.usage,
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
    found = set(agent.secrets) | env_secrets(environ)
    for rule in agent.runtime_rules:
        found |= secrets_in_options(rule.options, environ)
    for provider in agent.providers.values():
        found |= secrets_in_options(provider.runtime_options(), environ)
    return frozenset(found)


def error_dict(exc: BaseException) -> dict[str, Any]:
    """A JSON-able description of an error (the error's own ``to_dict`` when it has one)."""
    to_dict = getattr(exc, "to_dict", None)
    if callable(to_dict):
        out: dict[str, Any] = to_dict()
        return out
    data: dict[str, Any] = {"type": type(exc).__name__, "message": str(exc)}
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


async def execute_run(
    program: Program,
    stamp: VersionStamp,
    agent_name: str | None,
    method_name: str | None,
    inputs: Mapping[str, Any],
    *,
    model: str | None = None,
    trace: SessionTrace | None = None,
    wrap_selector: Callable[[Any], Any] | None = None,
    tool_gate: ToolGate | None = None,
    on_retry: Callable[[RetryInfo], Any] | None = None,
) -> RunRecord:
    """Run one method of ``program`` and describe the outcome; never raises for a failed run.

    ``tool_gate`` says which tool calls run for real; by default none of the http and command
    tools does under the offline ``test`` model. ``on_retry`` is told of every retry of a
    model call.

    A cancelled run (shutdown after the grace period) ends as an ``interrupted`` record, so
    callers always get a record to write.
    """
    record = RunRecord(
        agent=agent_name or "",
        method=method_name or "",
        inputs=dict(inputs),
        version=stamp,
        started_at=datetime.now(UTC).isoformat(timespec="milliseconds"),
    )
    started = time.perf_counter()
    try:
        agent = program.agent(agent_name)
        record.agent = agent.name
        record.secrets = run_secrets(agent)
        method = agent.method(method_name or _only_method(agent))
        record.method = method.name
        record.model = model or method.options.model or agent.model
        if not record.model:
            raise UsageError(
                f"no model for agent '{agent.name}': set 'model:' in {agent.path.name} "
                "or pass a model"
            )
        state = RunState(method.options.max_steps or DEFAULT_MAX_STEPS)
        record.path = state.path
        gate = tool_gate if tool_gate is not None else ToolGate()
        record.tools_not_run = gate.not_run
        async with agent.open_runtime(
            trace=trace, wrap_selector=wrap_selector, tool_gate=gate, on_retry=on_retry
        ) as runtime:
            try:
                if trace is None:
                    record.output = await method.run(
                        runtime, inputs, model=record.model, state=state
                    )
                else:
                    # The trace's root names the version of the prompts the run used.
                    with trace.span("run", f"{agent.name}.{method.name}", dict(inputs)) as node:
                        node.data["version"] = stamp.to_dict()
                        node.data["model"] = record.model
                        record.output = await method.run(
                            runtime, inputs, model=record.model, state=state
                        )
                        node.output = record.output
            finally:
                record.usage = runtime.total_usage.to_dict()
    except asyncio.CancelledError:
        record.status = "interrupted"
        record.error = {"type": "Interrupted", "message": "the runner stopped before the run ended"}
        record.exit_code = 130
    except OpenProgramError as exc:
        record.status = "failed"
        record.error = error_dict(exc)
        record.exit_code = exc.exit_code
    except Exception as exc:  # a tool or plugin bug: report it in the record, keep serving
        record.status = "failed"
        record.error = error_dict(exc)
        record.exit_code = 1
    record.elapsed_s = round(time.perf_counter() - started, 3)
    return record


def _only_method(agent: Agent) -> str:
    if len(agent.methods) == 1:
        return next(iter(agent.methods))
    raise UsageError(f"name a method of agent '{agent.name}': {', '.join(sorted(agent.methods))}")


class RunService:
    """Starts runs on the current Program, tracks those in flight, and shuts down cleanly.

    Each run takes the Program (and its stamp) once, when it starts, and keeps it to the end:
    a reload swaps what the *next* run gets, never what a running one uses.
    """

    def __init__(
        self,
        current: Callable[[], tuple[Program, VersionStamp]],
        records: RecordLog | None = None,
        *,
        live_tools: bool = False,
    ) -> None:
        #: Gives the version the next run starts on (``ProgramHolder.snapshot``).
        self._current = current
        self.records = records
        #: Run http and command tools for real under the offline ``test`` model too.
        self.live_tools = live_tools
        self.in_flight: set[asyncio.Task[RunRecord]] = set()
        self.closing = False
        #: Called with each finished record (the CLI prints them; tests observe them).
        self.listeners: list[Callable[[RunRecord], None]] = []

    def start(
        self,
        agent: str | None,
        method: str | None,
        inputs: Mapping[str, Any],
        *,
        model: str | None = None,
        trace: SessionTrace | None = None,
    ) -> asyncio.Task[RunRecord]:
        """Start a run on the current version; the task's result is its record."""
        if self.closing:
            raise RuntimeError("the runner is shutting down")
        program, stamp = self._current()
        task = asyncio.create_task(
            self._run(program, stamp, agent, method, inputs, model=model, trace=trace)
        )
        self.in_flight.add(task)
        task.add_done_callback(self.in_flight.discard)
        return task

    async def _run(
        self,
        program: Program,
        stamp: VersionStamp,
        agent: str | None,
        method: str | None,
        inputs: Mapping[str, Any],
        *,
        model: str | None,
        trace: SessionTrace | None,
    ) -> RunRecord:
        record = await execute_run(
            program,
            stamp,
            agent,
            method,
            inputs,
            model=model,
            trace=trace,
            tool_gate=ToolGate(live_tools=self.live_tools),
        )
        if self.records is not None:
            try:
                self.records.append(record)
            except OSError as exc:
                # The run's answer still reaches its caller; the lost record is said once.
                print(cannot_write(self.records.path, exc), file=sys.stderr)
        for listener in self.listeners:
            listener(record)
        return record

    async def shutdown(self, grace_s: float, force: asyncio.Event | None = None) -> None:
        """Refuse new runs; let runs in flight finish within ``grace_s`` (or until ``force``
        is set: a second Ctrl-C); interrupt the rest, which still write their records."""
        self.closing = True
        pending = set(self.in_flight)
        if pending and grace_s > 0:
            # Wrapped in tasks so that cancelling the wait later never cancels a run.
            waiters: set[asyncio.Task[Any]] = {asyncio.create_task(asyncio.wait(pending))}
            if force is not None:
                waiters.add(asyncio.create_task(force.wait()))
            await asyncio.wait(waiters, timeout=grace_s, return_when=asyncio.FIRST_COMPLETED)
            for waiter in waiters:
                waiter.cancel()
            pending = {t for t in pending if not t.done()}
        for task in pending:
            task.cancel()
        if pending:
            await asyncio.wait(pending)


def append_trace(path: Path, trace: SessionTrace, secrets: frozenset[str] = frozenset()) -> None:
    """Append a run's session trace to ``path`` as JSON Lines, secrets redacted."""
    path.parent.mkdir(parents=True, exist_ok=True)
    append_lines(path, redact(trace.to_jsonl(), secrets))
