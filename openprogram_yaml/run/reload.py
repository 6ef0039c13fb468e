"""Hot reload: keep the last good ``Program`` serving while its files change.

The one home of watchfiles. ``ProgramHolder`` compiles a path, watches every file the
Program says it was compiled from (``Program.files``), recompiles on a change and swaps a
valid Program in whole; an invalid one is reported and the last good Program keeps serving.
A run takes ``holder.snapshot()`` once, when it starts, so a swap never touches it.

Watching is by directory, not by file: editors that save by writing a new file and renaming
it over the old one (vim, JetBrains, many formatters) replace the inode a per-file watch
would follow. The directories are those of the tracked files (and of the symbolic links a
file was reached through, which a deploy may point elsewhere); events on other files are
ignored unless the last compile failed (a broken config cannot say which files it needs, so
any file next to the tracked ones may be the fix).

A compile that crashes (a ``RecursionError``, a tool module calling ``sys.exit`` on import)
is a failed reload like a ``ConfigError``: reported, and the watch goes on.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from ..compile.build import Build
from ..compile.paths import LINK
from ..compile.program import Program
from ..compile.project import compile_path
from ..errors import ConfigError, Diagnostic
from .git_stamp import GitStamper
from .version import VersionStamp

__all__ = [
    "DEBOUNCE_MS",
    "STEP_MS",
    "ProgramHolder",
    "ReloadEvent",
    "describe_failure",
    "describe_reload",
]

#: watchfiles yields a batch once no new change arrived for one ``step``, or at the latest
#: ``debounce`` after the first. An editor's save (truncate+write, or write+rename) lands
#: within a millisecond or two, so 10 ms of quiet is enough to see it whole, and 50 ms
#: bounds the wait under a burst (a formatter touching many files). watchfiles' defaults
#: (1600/50 ms) are tuned for restarting servers, not for seeing an edit. Measured with
#: ``benchmarks/reload.py``: see that file for the save-to-serving latency.
DEBOUNCE_MS = 50
STEP_MS = 10
#: Links one lookup follows before it fails with ELOOP (Linux's limit).
_MAX_HOPS = 40

ReloadStatus = Literal["loaded", "failed", "unchanged"]


@dataclass(frozen=True, slots=True)
class ReloadEvent:
    """The outcome of one recompile.

    ``loaded``: a new version serves. ``failed``: ``diagnostics`` say why, and ``version``
    (None when nothing ever compiled) keeps serving. ``unchanged``: the files compile to the
    version already serving (a save without changes).
    """

    status: ReloadStatus
    version: str | None
    previous: str | None
    diagnostics: tuple[Diagnostic, ...]
    changed: tuple[Path, ...]
    compile_s: float


def _links_on(path: str) -> Iterator[Path]:
    """The symbolic links a lookup of ``path`` passes through, each named in the real folder
    that holds it, as a watcher of that folder reports it: retargeting one of them (a deploy's
    ``ln -sfn v3.txt current.txt``, a folder link, a link a link leads to) changes what the
    lookup finds. Followed one link at a time, as the lookup does, and as far as it does."""
    # Not abspath: it drops ``x/..`` before the lookup would have followed a link ``x``.
    parts = deque(os.path.join(os.getcwd(), path).split(os.sep))
    current, hops = os.sep, 0
    while parts:
        part = parts.popleft()
        if part in ("", "."):
            continue
        if part == "..":
            current = os.path.dirname(current)
            continue
        step = os.path.join(current, part)
        if not os.path.islink(step):
            current = step
            continue
        yield Path(step)
        hops += 1
        try:
            target = os.readlink(step)
        except OSError:  # gone since: the next compile looks again
            return
        if hops > _MAX_HOPS:  # a loop: the lookup fails here (ELOOP)
            return
        if os.path.isabs(target):
            current = os.sep
        parts.extendleft(reversed(target.split(os.sep)))


def describe_failure(diagnostics: Sequence[Diagnostic]) -> str:
    """The lines a first compile that failed prints: each problem, then how many."""
    n = len(diagnostics)
    return "\n".join([*map(str, diagnostics), f"{n} error{'s' if n != 1 else ''} found."])


def describe_reload(event: ReloadEvent) -> str:
    """The lines a reload prints (on stderr) for a person watching."""
    changed = ", ".join(p.name for p in event.changed[:3])
    if len(event.changed) > 3:
        changed += ", …"
    why = f" ({changed} changed)" if changed else ""
    if event.status == "loaded":
        return f"reloaded{why}: version {event.version} ({event.compile_s * 1000:.0f} ms)"
    if event.status == "unchanged":
        return f"no change{why}: still version {event.version}"
    lines = [str(d) for d in event.diagnostics]
    n = len(event.diagnostics)
    keep = f"still serving version {event.version}" if event.version else "nothing to serve yet"
    lines.append(f"{n} error{'s' if n != 1 else ''} in the new version{why}; {keep}")
    return "\n".join(lines)


class _WatchSignal:
    """The ``stop_event`` handed to watchfiles, which its watcher thread polls every step.

    Its first poll also tells us the watcher is set up: from then on no save is missed.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop, stop: asyncio.Event) -> None:
        self._loop = loop
        self._stop = stop
        self._flag = threading.Event()
        self.ready: asyncio.Future[None] = loop.create_future()
        self._polled = False

    def is_set(self) -> bool:
        if not self._polled:
            self._polled = True
            self._loop.call_soon_threadsafe(self._mark_ready)
        return self._flag.is_set() or self._stop.is_set()

    def set(self) -> None:
        self._flag.set()

    def _mark_ready(self) -> None:
        if not self.ready.done():
            self.ready.set_result(None)


class ProgramHolder:
    """The Program now serving for ``path``, kept up to date by ``watch()``."""

    def __init__(
        self,
        path: Path,
        *,
        compile: Callable[[Path], Program] | None = None,
        stamper: GitStamper | None = None,
        debounce_ms: int = DEBOUNCE_MS,
        step_ms: int = STEP_MS,
        ignore: Iterable[Path] = (),
    ) -> None:
        self.path = path.resolve()
        #: What successive compiles share: an agent whose reads still hold is not compiled
        #: again, so a save recompiles what it touched, not the repository.
        self.build = Build()
        self._compile_lock = threading.RLock()  # one compile at a time uses the build
        self._compile = compile or self._compile_with_build
        self._watched: tuple[Program | None, frozenset[Path], frozenset[Path]] | None = None
        self.stamper = stamper or GitStamper()
        self.debounce_ms = debounce_ms
        self.step_ms = step_ms
        #: Files the runner itself writes (records, traces) must not trigger a recompile.
        self.ignore = frozenset(p.resolve() for p in ignore)
        self.program: Program | None = None
        #: The diagnostics of the last compile when it failed; None once one succeeds.
        self.failure: tuple[Diagnostic, ...] | None = None
        #: When the last compile (or watch failure) was settled, for ``/health``.
        self.checked_at: datetime | None = None
        self.listeners: list[Callable[[ReloadEvent], None]] = []
        #: Set once the watcher is set up (every later save will be seen).
        self.watching = asyncio.Event()

    # --- compiling ----------------------------------------------------------------------

    def load(self) -> Program:
        """Compile now (blocking); raises ``ConfigError`` when there is no valid version."""
        try:
            program = self._compile(self.path)
        except ConfigError as exc:
            self._settle(tuple(exc.diagnostics))
            raise
        except (Exception, SystemExit) as exc:
            self._settle(self._crash(exc))
            raise ConfigError(list(self.failure or ())) from exc
        self._swap(program)
        return program

    def _compile_with_build(self, path: Path) -> Program:
        with self._compile_lock:
            return compile_path(path, build=self.build)

    def _crash(self, exc: BaseException) -> tuple[Diagnostic, ...]:
        """A compile that raised something other than ``ConfigError``, as a diagnostic."""
        # SystemExit too: user code imported by the compile (a tool module) may call
        # sys.exit, which must fail the reload, not stop the server.
        detail = str(exc)
        if len(detail) > 300:
            detail = detail[:300] + "…"
        message = f"the compile crashed: {type(exc).__name__}" + (f": {detail}" if detail else "")
        return (Diagnostic(str(self.path), 0, 0, message),)

    def _settle(self, failure: tuple[Diagnostic, ...] | None) -> None:
        self.failure = failure
        self.checked_at = datetime.now(UTC)

    def snapshot(self) -> tuple[Program, VersionStamp]:
        """The version a run starting now uses; the run keeps it to its end."""
        program = self.program
        if program is None:
            raise RuntimeError("no valid version of the program has compiled yet")
        return program, self.stamper.stamp(program)

    def _swap(self, program: Program) -> None:
        self.program = program  # one reference assignment: atomic for every reader
        self._settle(None)

    def _compile_and_stamp(self, changed: Collection[Path] = ()) -> Program:
        with self._compile_lock:
            if changed and self._compile == self._compile_with_build:
                # What the watcher saw change: agents that read none of it are taken as
                # they are without a stat each (at 10,000 agents, most of a reload).
                self.build.report_changes(changed)
            program = self._compile(self.path)
        self.stamper.stamp(program)  # warm the cache so the next run does not wait for git
        return program

    async def reload(self, changed: Collection[Path] = (), *, quiet: bool = False) -> ReloadEvent:
        """Recompile; swap in a valid version, keep the current one otherwise.

        Compiles in a worker thread so runs in flight keep streaming meanwhile. Listeners hear
        of the outcome unless ``quiet`` and nothing changed (a startup catch-up check).
        """
        previous = self.program.version if self.program is not None else None
        was_failing = self.failure
        started = time.perf_counter()
        try:
            program = await asyncio.to_thread(self._compile_and_stamp, changed)
        except (Exception, SystemExit) as exc:
            failure = tuple(exc.diagnostics) if isinstance(exc, ConfigError) else self._crash(exc)
            self._settle(failure)
            event = ReloadEvent(
                "failed",
                previous,
                previous,
                failure,
                tuple(changed),
                time.perf_counter() - started,
            )
            if failure != was_failing:  # the same errors again are no news
                self._publish(event)
            return event
        elapsed = time.perf_counter() - started
        recovered = was_failing is not None
        status: ReloadStatus = "loaded" if program.version != previous or recovered else "unchanged"
        if status == "loaded":
            self._swap(program)
        else:
            self._settle(None)
        event = ReloadEvent(status, program.version, previous, (), tuple(changed), elapsed)
        if not (quiet and status == "unchanged"):
            self._publish(event)
        return event

    def _publish(self, event: ReloadEvent) -> None:
        for listener in list(self.listeners):
            listener(event)

    # --- watching -----------------------------------------------------------------------

    def _watch_set(self) -> tuple[frozenset[Path], frozenset[Path]]:
        """The directories to watch, and the symbolic links the program's files were
        reached through (``_links_on``); computed once per version: a repository of many
        files lies in few folders, and the watch loop asks after every reload."""
        program = self.program
        known = self._watched
        if known is None or known[0] is not program:
            dirs = {self.path if self.path.is_dir() else self.path.parent}
            links: set[Path] = set()
            if program is not None:
                dirs.update(Path(d) for d in {os.path.dirname(p) for p in map(str, program.files)})
                for looked_up, kind in program.reads.lookups:
                    if kind.startswith(LINK):
                        links.update(_links_on(looked_up))
                dirs.update(link.parent for link in links)
            known = self._watched = (program, frozenset(dirs), frozenset(links))
        return known[1], known[2]

    def watched_dirs(self) -> frozenset[Path]:
        """The directories to watch: those of the tracked files and of the links to them,
        and the source path's."""
        return frozenset(d for d in self._watch_set()[0] if d.is_dir())

    def is_relevant(self, path: Path, *, added: bool = False) -> bool:
        """Whether a change to ``path`` may change the Program (``added``: a new file)."""
        if path in self.ignore:
            return False
        if self.program is not None and (
            path in self.program.files or path in self._watch_set()[1]
        ):
            return True  # a file it read, or a link it read through (retargeted: ln -sfn)
        if self.path.is_dir() and path.parent == self.path and path.suffix in (".yaml", ".yml"):
            return True  # an agent file in a folder of agents
        if self.failure is None and self.program is not None:
            return False
        # A broken config cannot list its files: the fix is in a file a diagnostic names,
        # or a file just created (a missing template). Other files changing next to the
        # agent (logs, outputs) must not recompile, or a runner logging there would loop.
        return added or path in {Path(d.path).resolve() for d in self.failure or ()}

    async def watch(self, stop: asyncio.Event) -> None:
        """Watch and reload until ``stop`` is set. Sets ``watching`` once set up."""
        while not stop.is_set():
            try:
                await self._watch_dirs(self.watched_dirs(), stop)
            except Exception as exc:  # a watched folder vanished, too many watches, or a bug
                # Say so (the last good version keeps serving) and try again shortly: a watch
                # that ended silently would leave every later edit ignored.
                why = str(exc) if isinstance(exc, OSError) else f"{type(exc).__name__}: {exc}"
                where = Diagnostic(str(self.path), 0, 0, f"cannot watch for changes: {why}")
                if self.failure != (where,):
                    self._settle((where,))
                    version = self.program.version if self.program else None
                    self._publish(ReloadEvent("failed", version, version, (where,), (), 0.0))
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), 1.0)

    async def _watch_dirs(self, dirs: frozenset[Path], stop: asyncio.Event) -> None:
        from watchfiles import Change, DefaultFilter, awatch

        junk = DefaultFilter()
        loop = asyncio.get_running_loop()
        signal = _WatchSignal(loop, stop)
        batches: asyncio.Queue[set[Path]] = asyncio.Queue()

        def wanted(change: Change, raw: str) -> bool:
            return junk(change, raw) and self.is_relevant(Path(raw), added=change == Change.added)

        async def pump() -> None:
            async for changes in awatch(
                *dirs,
                watch_filter=wanted,
                debounce=self.debounce_ms,
                step=self.step_ms,
                stop_event=signal,
                recursive=False,
            ):
                batches.put_nowait({Path(raw) for _, raw in changes})

        pump_task = asyncio.create_task(pump())
        stop_task = asyncio.create_task(stop.wait())
        try:
            first: set[asyncio.Future[Any]] = {signal.ready, pump_task, stop_task}
            await asyncio.wait(first, return_when=asyncio.FIRST_COMPLETED)
            if pump_task.done():
                pump_task.result()  # a watcher that could not start raises here
                return
            if stop.is_set():
                return
            # A save between the last compile and the watcher's start raised no event.
            await self.reload(quiet=True)
            self.watching.set()
            while self.watched_dirs() == dirs:
                get = asyncio.create_task(batches.get())
                await asyncio.wait({get, pump_task, stop_task}, return_when=asyncio.FIRST_COMPLETED)
                if not get.done():
                    get.cancel()
                    if pump_task.done():
                        pump_task.result()
                    return
                changed = get.result()
                while not batches.empty():  # coalesce saves that queued up during a compile
                    changed |= batches.get_nowait()
                await self.reload(sorted(changed))
        finally:
            # Stop the watcher thread first: watchfiles cannot be cancelled while it waits.
            signal.set()
            stop_task.cancel()
            await asyncio.gather(pump_task, return_exceptions=True)
