"""``openprogram-run serve``: load, listen, watch, and stop cleanly on Ctrl-C or SIGTERM."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

from ..access import server_token
from ..errors import ConfigError
from ..run.questions import PendingQuestions
from ..run.record import RecordLog
from ..run.reload import ProgramHolder, describe_failure, describe_reload
from ..run.service import RunService
from ..run.shutdown import DEFAULT_GRACE_S, stop_on_signals
from ..shown_text import shown_on_terminal
from .app import Server, ServeState, shown_host
from .guard import ServeLimits
from .history import RunHistory

__all__ = ["SERVE_GC_THRESHOLD", "serve", "serve_path"]

#: The cyclic collector's first threshold while the command serves (CPython's: 700; 2,000
#: from 3.13). It collects its youngest objects once that many more were made than freed
#: since the last collection. The runs in flight (64 clients) hold more than 700, so every
#: few requests a collection walked them, found them alive and moved them to the older
#: generations, to be walked again there: about 0.05 ms of a served run's 0.43 ms of CPU.
#: At 10,000, more than the runs in flight hold, a collection is rare (what a run made is
#: freed before the count gets there), and the garbage only the collector frees (cycles,
#: under one object a request) waits longer. The collector stays on.
SERVE_GC_THRESHOLD = 10_000


@contextlib.contextmanager
def _collector_for_serving() -> Iterator[None]:
    """The cyclic collector's first threshold at ``SERVE_GC_THRESHOLD`` (a higher one, or
    0, which turns the collections off, is kept), and back as it was after."""
    before = gc.get_threshold()
    if 0 < before[0] < SERVE_GC_THRESHOLD:
        gc.set_threshold(SERVE_GC_THRESHOLD, *before[1:])
    try:
        yield
    finally:
        gc.set_threshold(*before)


def _say(text: str) -> None:
    """A line on stderr, shown as text, never obeyed: it may quote the repository's files
    (a problem of a reload)."""
    text = shown_on_terminal(text)
    sys.stderr.write(text if text.endswith("\n") else text + "\n")
    sys.stderr.flush()


async def serve(
    state: ServeState,
    *,
    port: int,
    grace_s: float,
    watch: bool,
    stop: asyncio.Event,
    force: asyncio.Event,
    on_listening: Callable[[int], None] | None = None,
) -> None:
    """Serve until ``stop`` is set, then shut down cleanly (``force`` cuts the grace short)."""
    holder = state.holder
    holder.listeners.append(lambda event: _say(describe_reload(event)))
    server = Server(state)
    watcher: asyncio.Task[None] | None = None
    watch_stop = asyncio.Event()
    if watch:
        watcher = asyncio.create_task(holder.watch(watch_stop))
        ready = asyncio.create_task(holder.watching.wait())
        await asyncio.wait({ready, watcher}, return_when=asyncio.FIRST_COMPLETED)
        if watcher.done():
            ready.cancel()
            watcher.result()
    try:
        bound = await server.start(port)
        program, stamp = holder.snapshot()
        agents = ", ".join(sorted(program.agents))
        url = f"http://{shown_host(state.host)}:{bound}/"
        _say(
            f"serving {agents} on {url} (version {stamp.hash}"
            + (f"; watching {len(program.files)} files" if watch else "")
            + ("; token required" if state.token else "")
            + "); Ctrl-C stops"
        )
        if on_listening is not None:
            on_listening(bound)
        await stop.wait()
        in_flight = len(state.service.in_flight)
        if in_flight:
            _say(f"stopping: waiting up to {grace_s:g} s for {in_flight} run(s) in flight")
        await server.close(grace_s, force)
    finally:
        watch_stop.set()
        if watcher is not None:
            await asyncio.gather(watcher, return_exceptions=True)
    _say("stopped")


async def serve_path(
    path: Path,
    *,
    port: int,
    host: str = "127.0.0.1",
    token: str | None = None,
    model: str | None = None,
    records: Path | None = None,
    grace_s: float = DEFAULT_GRACE_S,
    watch: bool = True,
    live_tools: bool = False,
    limits: ServeLimits | None = None,
    approve_all: bool = False,
) -> int:
    """``openprogram-run serve``: the exit status (0 after a clean shutdown, 2 bad config or
    flags). Runs ask their questions over HTTP (``/questions``); ``approve_all`` is ``--yes``.
    ``token`` None reads ``OPENPROGRAM_SERVE_TOKEN``."""
    token, problem = server_token(host, token)
    if problem is not None:
        _say(problem)
        return 2
    holder = ProgramHolder(path, ignore=[records] if records else ())
    try:
        await asyncio.to_thread(holder.load)
    except ConfigError as exc:
        _say(describe_failure(exc.diagnostics) + " Nothing to serve.")
        return 2
    log = RecordLog(records) if records else None
    questions = PendingQuestions()
    service = RunService(
        holder.snapshot, log, live_tools=live_tools, asker=questions, approve_all=approve_all
    )
    state = ServeState(
        holder,
        service,
        model=model,
        limits=limits or ServeLimits(),
        host=host,
        token=token,
        log=sys.stderr,
        history=RunHistory(records=records),
    )
    stop, force = asyncio.Event(), asyncio.Event()
    try:
        with _collector_for_serving(), stop_on_signals(stop, force):
            await serve(state, port=port, grace_s=grace_s, watch=watch, stop=stop, force=force)
    except OSError as exc:  # the port is taken, or the address is not this machine's
        _say(f"error: cannot listen on {shown_host(host)}:{port}: {exc.strerror or exc}")
        return 2
    finally:
        if log is not None:
            log.close()
    return 0
