"""Runs of a Program that changes while it serves: started on the current version,
tracked while in flight, recorded, and shut down cleanly. The runs of a version share its
runtimes and their connection pools (``shared_runtimes``)."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from .._file_writes import cannot_write
from ..json_types import JSONValue
from .execute import execute_run
from .record import RecordLog, RunRecord
from .shared_runtimes import SharedRuntimes
from .version import VersionStamp

if TYPE_CHECKING:
    from ..compile.program import Program
    from ..runtime.asking import Asker
    from ..runtime.trace import SessionTrace
    from ..runtimes.protocol import Message
    from .events import Observer

__all__ = ["RunService"]


class RunService:
    """Starts runs on the current Program, tracks those in flight, and shuts down cleanly.

    Each run takes the Program (and its stamp) once, when it starts, and keeps it to the end:
    a reload swaps what the *next* run gets, never what a running one uses. The runs of a
    version share its provider runtimes (one pooled HTTP client per configuration) and the
    clients of its tools; an older version's close when its last run ends, and ``shutdown``
    closes the rest.
    """

    def __init__(
        self,
        current: Callable[[], tuple[Program, VersionStamp]],
        records: RecordLog | None = None,
        *,
        live_tools: bool = False,
        asker: Asker | None = None,
        approve_all: bool = False,
    ) -> None:
        #: Gives the version the next run starts on (``ProgramHolder.snapshot``).
        self._current = current
        self.records = records
        #: Run http and command tools for real under the offline ``test`` model too.
        self.live_tools = live_tools
        #: Who runs ask (``serve``: its pending questions; None: nobody is there).
        self.asker = asker
        #: Approve every tool confirmation (``--yes``).
        self.approve_all = approve_all
        self.in_flight: set[asyncio.Task[RunRecord]] = set()
        #: The runtimes each version's runs share, open while a run may use them.
        self.runtimes = SharedRuntimes()
        self.closing = False
        #: Called with each finished record (the CLI prints them; tests observe them).
        self.listeners: list[Callable[[RunRecord], None]] = []

    def start(
        self,
        agent: str | None,
        method: str | None,
        inputs: Mapping[str, JSONValue],
        *,
        model: str | None = None,
        trace: SessionTrace | None = None,
        on_event: Observer | None = None,
        history: Sequence[Message] = (),
    ) -> asyncio.Task[RunRecord]:
        """Start a run on the current version; the task's result is its record.
        ``on_event`` is told what happens while it runs (``run.events``); ``history`` is a
        chat session's conversation so far (``run.sessions``)."""
        if self.closing:
            raise RuntimeError("the runner is shutting down")
        program, stamp = self._current()
        task = asyncio.create_task(
            self._run(
                program,
                stamp,
                agent,
                method,
                inputs,
                model=model,
                trace=trace,
                on_event=on_event,
                history=history,
            )
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
        inputs: Mapping[str, JSONValue],
        *,
        model: str | None,
        trace: SessionTrace | None,
        on_event: Observer | None,
        history: Sequence[Message],
    ) -> RunRecord:
        # Taken in the task, not in start(): a task cancelled before it ever ran holds none.
        shared = self.runtimes.acquire(program)
        try:
            record = await execute_run(
                program,
                stamp,
                agent,
                method,
                inputs,
                model=model,
                trace=trace,
                shared=shared,
                live_tools=self.live_tools,
                asker=self.asker,
                approve_all=self.approve_all,
                on_event=on_event,
                history=history,
            )
        finally:
            await self.runtimes.release(shared)
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
        is set: a second Ctrl-C); interrupt the rest, which still write their records; then
        close every runtime and tool client the runs shared."""
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
        await self.runtimes.aclose()
