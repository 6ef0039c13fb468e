"""What runs a batch's rows (the engine seam, see the package docstring) and the local engine:
rows run as asyncio tasks in this process, at most ``concurrency`` at a time, sharing the
program's runtimes and so their connection pools (``run.shared_runtimes``)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import (
    AsyncGenerator,
    AsyncIterable,
    AsyncIterator,
    Awaitable,
    Callable,
    Iterable,
    Mapping,
)
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from ...json_types import JSONObject, JSONValue
from ...redaction import redact
from ..execute import execute_run
from ..shared_runtimes import SharedRuntimes
from ..version import VersionStamp
from .limits import LimitedSelector, RateLimiter
from .rows import BatchRow, Key, input_digest

if TYPE_CHECKING:
    from ...compile.program import Program
    from ...runtimes.protocol import RuntimeSelectorProtocol, SelectorWrapper
    from ..record import RunRecord

__all__ = [
    "DEFAULT_CONCURRENCY",
    "BatchEngine",
    "BatchJob",
    "LocalEngine",
    "RowResult",
    "run_batch",
]

#: Rows in flight by default. A model call takes about 1 to 10 s, so 32 at a time is some
#: 200 to 2,000 calls a minute: inside the rate limits of most paid API tiers, and far below
#: the connection pool of a provider runtime (1,000), so no row queues for a connection. A
#: faster provider or a higher tier: raise it, with ``--rpm``/``--tpm`` to stay in limits.
DEFAULT_CONCURRENCY = 32


@dataclass(frozen=True, slots=True)
class BatchJob:
    """What an engine needs to run a batch's rows, in this process or on other machines."""

    #: The project (or agent file) to compile; an engine elsewhere compiles it itself.
    path: Path
    agent: str | None
    method: str | None
    model: str | None = None
    concurrency: int = DEFAULT_CONCURRENCY
    #: Model calls per minute and tokens per minute across the whole batch (None: no limit).
    rpm: float | None = None
    tpm: float | None = None
    #: Answer from the recordings in this folder (``--replay``).
    replay: Path | None = None
    #: Run http and command tools for real under the offline ``test`` model too.
    live_tools: bool = False
    #: The version of the prompts the rows run on, as the driver stamped it.
    version: VersionStamp | None = None


@dataclass(frozen=True, slots=True)
class RowResult:
    """A finished row: what a caller reads, and ``line``, its output line. ``line`` and
    ``error`` are redacted with the run's secrets (a summary quotes errors); ``output`` is
    the run's own, as ``execute_run`` returns it."""

    key: Key
    digest: str
    status: str
    inputs: JSONObject
    output: JSONValue
    error: dict[str, object] | None
    model: str | None
    usage: dict[str, int] | None
    cost: JSONObject | None
    latency_s: float
    line: str

    @classmethod
    def from_record(cls, row: BatchRow, record: RunRecord) -> RowResult:
        """The result of ``row`` from its run's record; ``line`` hides the run's secrets."""
        data: dict[str, object] = {
            "key": row.key,
            "digest": row.digest,
            "status": record.status,
            "inputs": row.inputs,
        }
        if record.error is not None:
            data["error"] = record.error
        else:
            data["output"] = record.output
        data.update(
            model=record.model,
            usage=record.usage,
            cost=record.cost,
            latency_s=record.elapsed_s,
            version=record.version.to_dict(),
            started_at=record.started_at,
            id=record.id,
        )
        line = json.dumps(data, ensure_ascii=False, default=repr)
        error = record.error
        if error is not None and record.secrets:  # the summary quotes it: shown redacted
            error = json.loads(redact(json.dumps(error, default=repr), record.secrets))
        return cls(
            key=row.key,
            digest=row.digest,
            status=record.status,
            inputs=row.inputs,
            output=record.output,
            error=error,
            model=record.model,
            usage=record.usage,
            cost=record.cost,
            latency_s=record.elapsed_s,
            line=redact(line, record.secrets),
        )

    @property
    def tokens(self) -> int:
        return int((self.usage or {}).get("total_tokens", 0))


class BatchEngine(Protocol):
    """Runs rows and yields a ``RowResult`` for each one finished, in completion order, with
    at most ``job.concurrency`` in flight. Closing the results (``aclose``) cancels the rows
    in flight, which yield nothing. An error reading ``rows`` is raised once the rows
    already started have finished and been yielded."""

    def run(self, job: BatchJob, rows: AsyncIterator[BatchRow]) -> AsyncIterator[RowResult]: ...


class LocalEngine:
    """The rows run as asyncio tasks of this process, on the driver's compiled program.

    ``clock`` and ``sleep`` drive the rate limits (tests pass a ``FakeClock``'s)."""

    def __init__(
        self,
        program: Program,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.program = program
        self.clock = clock
        self.sleep = sleep

    async def run(self, job: BatchJob, rows: AsyncIterator[BatchRow]) -> AsyncIterator[RowResult]:
        stamp = job.version or VersionStamp(self.program.version)
        limiter = RateLimiter(job.rpm, job.tpm, clock=self.clock, sleep=self.sleep)
        wrap = _selector_wrapper(job, limiter)
        runtimes = SharedRuntimes()
        shared = runtimes.acquire(self.program)

        async def one(row: BatchRow) -> RowResult | None:
            record = await execute_run(
                self.program,
                stamp,
                job.agent,
                job.method,
                row.inputs,
                model=job.model,
                shared=shared,
                wrap_selector=wrap,
                live_tools=job.live_tools,
            )
            return None if record.status == "interrupted" else RowResult.from_record(row, record)

        try:
            # Closed here, not left to the collector: its rows in flight are cancelled before
            # what they run on is closed.
            async with contextlib.aclosing(
                in_completion_order(rows, job.concurrency, one)
            ) as results:
                async for result in results:
                    yield result
        finally:
            await runtimes.release(shared)
            await runtimes.aclose()


async def in_completion_order(
    rows: AsyncIterator[BatchRow],
    concurrency: int,
    run_row: Callable[[BatchRow], Awaitable[RowResult | None]],
) -> AsyncGenerator[RowResult, None]:
    """``run_row`` for each of ``rows``, as tasks, at most ``concurrency`` at once (a row is
    read only when a slot is free); each result as it comes, None (a row stopped before it
    ended) left out. The engines' loop: what differs is where ``run_row`` runs it.

    An error reading ``rows`` (a bad line) is raised once the rows already started have
    finished and been yielded; an error of ``run_row`` stops the batch at once. Closing the
    results (``aclose``) cancels the rows in flight."""
    finished: asyncio.Queue[RowResult | BaseException | None] = asyncio.Queue()
    in_flight: set[asyncio.Task[None]] = set()

    async def one(row: BatchRow) -> None:
        outcome: RowResult | BaseException | None = None
        try:
            outcome = await run_row(row)
        except Exception as exc:
            outcome = exc
        finally:  # exactly one item per row (None when cancelled)
            finished.put_nowait(outcome)

    reading_failed: BaseException | None = None
    more = True
    # Rows started whose outcome was not taken yet. Counted here, not by ``in_flight``: a
    # task leaves that set a loop turn after its outcome is queued, and waiting for one more
    # outcome then would wait forever.
    running = 0
    try:
        while True:
            while more and running < concurrency:
                try:
                    row = await anext(rows)
                except StopAsyncIteration:
                    more = False
                    break
                except Exception as exc:  # a bad line: finish what runs, then say it
                    reading_failed, more = exc, False
                    break
                task = asyncio.create_task(one(row))
                in_flight.add(task)
                task.add_done_callback(in_flight.discard)
                running += 1
            if not running:
                break
            outcome = await finished.get()
            running -= 1
            if isinstance(outcome, BaseException):
                raise outcome
            if outcome is not None:
                yield outcome
        if reading_failed is not None:
            raise reading_failed
    finally:
        for task in in_flight:
            task.cancel()
        if in_flight:
            await asyncio.wait(in_flight)


def _selector_wrapper(job: BatchJob, limiter: RateLimiter) -> SelectorWrapper | None:
    """Replay and rate limits in front of the rows' runtimes, when asked for."""
    replay = job.replay
    if replay is None and not limiter.active:
        return None

    def wrap(inner: RuntimeSelectorProtocol) -> RuntimeSelectorProtocol:
        selector = inner
        if replay is not None:
            from ...recording.replay import ReplaySelector

            selector = ReplaySelector(replay)
        return LimitedSelector(selector, limiter) if limiter.active else selector

    return wrap


async def _as_rows(
    inputs: Iterable[Mapping[str, JSONValue]] | AsyncIterable[Mapping[str, JSONValue]],
) -> AsyncIterator[BatchRow]:
    index = 0
    if isinstance(inputs, AsyncIterable):
        async for item in inputs:
            values = dict(item)
            yield BatchRow(index, values, input_digest(values), f"row {index}")
            index += 1
        return
    for item in inputs:
        values = dict(item)
        yield BatchRow(index, values, input_digest(values), f"row {index}")
        index += 1


async def run_batch(
    program: Program,
    inputs: Iterable[Mapping[str, JSONValue]] | AsyncIterable[Mapping[str, JSONValue]],
    *,
    agent: str | None = None,
    method: str | None = None,
    model: str | None = None,
    concurrency: int = DEFAULT_CONCURRENCY,
    rpm: float | None = None,
    tpm: float | None = None,
    replay: Path | None = None,
    engine: BatchEngine | None = None,
) -> AsyncIterator[RowResult]:
    """Run ``method`` of ``agent`` once per item of ``inputs`` (each a mapping of the
    method's inputs), at most ``concurrency`` at a time, and yield each ``RowResult`` as its
    run ends (completion order; ``key`` is the item's index). A failed row is a result with
    ``status`` "failed" and its ``error``; the batch goes on. Items are read as slots free
    up, so a long (or endless) iterable costs no more memory than ``concurrency`` rows.

    ``rpm``/``tpm`` limit model calls and tokens per minute; ``replay`` answers from the
    recordings in that folder. Stopping the iteration cancels the rows in flight::

        async for result in run_batch(program, [{"text": "hi"}, {"text": "bye"}]):
            print(result.key, result.status, result.output)
    """
    if concurrency < 1:
        raise ValueError(f"concurrency must be 1 or more, not {concurrency}")
    job = BatchJob(
        path=program.root,
        agent=agent,
        method=method,
        model=model,
        concurrency=concurrency,
        rpm=rpm,
        tpm=tpm,
        replay=replay,
    )
    results = (engine or LocalEngine(program)).run(job, _as_rows(inputs))
    try:
        async for result in results:
            yield result
    finally:
        await results.aclose()  # type: ignore[attr-defined]
