"""``openprogram-run PATH METHOD --watch``: run, then run again on every new version."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Callable, Iterable
from dataclasses import replace
from pathlib import Path
from typing import TextIO

from .._file_writes import cannot_write
from ..compile.paths import display_path
from ..compile.program import Method
from ..errors import ConfigError, Diagnostic, UsageError
from ..json_types import JSONObject
from ..redaction import redact
from ..run.record import RecordLog, RunRecord, append_trace
from ..run.reload import ProgramHolder, ReloadEvent, describe_failure, describe_reload
from ..run.service import RunService
from ..run.shutdown import DEFAULT_GRACE_S, stop_on_signals
from ..runtime.trace import SessionTrace
from ..shown_text import shown_on_terminal
from .json_text import safe_json_text
from .run_errors import describe_error

__all__ = ["watch_and_run"]


#: Files editors write beside the one being edited: vim's swap files and its write test
#: (``4913``), backups (``name~``), Emacs's lock and auto-save files (``.#name``, ``#name#``).
_EDITOR_SUFFIXES = (".swp", ".swo", ".swx", "~")


def is_editor_temp_file(path: Path) -> bool:
    """Whether ``path`` is an editor's own file, not a change to show."""
    name = path.name
    return (
        name.endswith(_EDITOR_SUFFIXES)
        or name.startswith(".#")
        or (name.startswith("#") and name.endswith("#"))
        or name == "4913"
    )


def _shown(diagnostics: Iterable[Diagnostic]) -> tuple[Diagnostic, ...]:
    """``diagnostics`` with their paths relative to the working folder, as compile names
    them (a reload's own problems name the watched path resolved)."""
    return tuple(replace(d, path=str(display_path(Path(d.path)))) for d in diagnostics)


def _line(stream: TextIO, text: str) -> None:
    stream.write(text if text.endswith("\n") else text + "\n")
    stream.flush()


def _say(text: str) -> None:
    """A line for the person watching (stderr: stdout holds only the outputs), shown as text,
    never obeyed: it may quote the repository's files or a model's error."""
    _line(sys.stderr, shown_on_terminal(text))


def _print(text: str) -> None:
    _line(sys.stdout, text)


async def watch_and_run(
    path: Path,
    *,
    agent: str | None,
    method: str | None,
    inputs_for: Callable[[Method], JSONObject],
    model: str | None,
    json_output: bool,
    records: Path | None = None,
    trace: Path | None = None,
    grace_s: float = DEFAULT_GRACE_S,
    live_tools: bool = False,
    approve_all: bool = False,
) -> int:
    """Run, then re-run on every new version; the exit status (0 once stopped).

    ``approve_all`` (``--yes``) approves every confirmation a tool asks for; without it a
    tool declared ``confirm`` is refused, as nobody is asked while the files are watched.

    Outputs go to stdout (text, or one JSON record per run with ``--json``); reloads and
    diagnostics go to stderr. A broken edit is reported and the next fix runs again.
    """
    ignore = [p for p in (records, trace) if p is not None]
    holder = ProgramHolder(path, ignore=ignore)
    say = _say
    try:
        await asyncio.to_thread(holder.load)
    except ConfigError as exc:
        say(describe_failure(_shown(exc.diagnostics)) + " Waiting for a fix…")
    log = RecordLog(records) if records else None
    service = RunService(holder.snapshot, log, live_tools=live_tools, approve_all=approve_all)
    new_version = asyncio.Event()

    def on_reload(event: ReloadEvent) -> None:
        changed = tuple(p for p in event.changed if not is_editor_temp_file(p))
        if event.changed and not changed and event.status != "loaded":
            return  # an editor's own files came and went: nothing to tell
        shown = replace(event, changed=changed, diagnostics=_shown(event.diagnostics))
        say(describe_reload(shown))
        if event.status == "loaded":
            new_version.set()

    def on_record(record: RunRecord) -> None:
        if json_output:
            _print(safe_json_text(record.to_json()))
        elif record.status == "ok":
            text = record.output if isinstance(record.output, str) else None
            if text is None:
                text = json.dumps(record.output, indent=2, ensure_ascii=False)
            text = redact(text, record.secrets)
            # What the model wrote is shown on a terminal, never obeyed (as a plain run).
            _print(shown_on_terminal(text) if sys.stdout.isatty() else text)
        else:
            say(redact(describe_error(record.error or {}), record.secrets))

    holder.listeners.append(on_reload)
    service.listeners.append(on_record)
    stop, force = asyncio.Event(), asyncio.Event()
    watch_stop = asyncio.Event()
    watcher = asyncio.create_task(holder.watch(watch_stop))
    stopping = asyncio.create_task(stop.wait())
    try:
        with stop_on_signals(stop, force):
            ready = asyncio.create_task(holder.watching.wait())
            await asyncio.wait({ready, watcher, stopping}, return_when=asyncio.FIRST_COMPLETED)
            if watcher.done():
                watcher.result()
            if holder.program is not None:
                files = len(holder.program.files)
                say(f"watching {files} file{'' if files == 1 else 's'}; Ctrl-C stops")
                new_version.set()
            while not stop.is_set():
                changed = asyncio.create_task(new_version.wait())
                await asyncio.wait({changed, stopping}, return_when=asyncio.FIRST_COMPLETED)
                if stop.is_set():
                    changed.cancel()
                    break
                new_version.clear()
                program, stamp = holder.snapshot()
                try:
                    found = program.agent(agent).method(method or None)
                    inputs = inputs_for(found)
                except UsageError as exc:
                    say(f"error: {exc}")
                    continue
                say(f"── {found.agent}.{found.name} on version {stamp.hash}")
                session = SessionTrace() if trace is not None else None
                task = service.start(agent, found.name, inputs, model=model, trace=session)
                await asyncio.wait({task, stopping}, return_when=asyncio.FIRST_COMPLETED)
                if task.done() and session is not None and trace is not None:
                    try:
                        append_trace(trace, session, task.result().secrets)
                    except OSError as exc:
                        say(cannot_write(trace, exc))
            await service.shutdown(grace_s, force)
    finally:
        stopping.cancel()
        watch_stop.set()
        await asyncio.gather(watcher, return_exceptions=True)
        if log is not None:
            log.close()
    return 0
