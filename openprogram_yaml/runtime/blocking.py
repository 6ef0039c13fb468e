"""Where a sync tool runs: a worker thread of a pool sized for batches, never the event loop.

The rule (for ``python:`` tools and tools given to ``Runtime``): an ``async def`` function
runs on the event loop; a plain ``def`` runs in a worker thread. A sync function may block
(a network call, a file, a subprocess), and on the loop it would stall every other run of
the process: a batch's other rows, a server's other requests. The hop to a thread costs
about 15 us when calls follow one another at once. In a run it costs more: the call comes
after the model's reply, with the worker asleep since the last one, and the loop sleeps
while the tool runs, so the hop wakes two sleeping threads, each often on a CPU gone idle.
On the 2-CPU virtual machine of benchmarks/README.md, at load 3 to 4.5, that took 55 to
300 us (median about 145 us; about 57 us with both threads held on one CPU, which shows it
is the wake-ups that cost): the sync tool path's gap to an ``async def`` tool. A tool that
must be faster than that is written ``async def``.

The pool is not the loop's default executor: that one has ``min(32, CPUs + 4)`` threads, 6
on a 2-CPU machine, so a batch at concurrency 200 whose tool waits 100 ms on the network
would run 6 tools at a time and queue the rest. This pool grows on demand to
``MAX_TOOL_THREADS`` (threads are made only while none is idle).

Nor is it a ``ThreadPoolExecutor``: its worker settles a ``concurrent.futures.Future`` after
each call, still holding the GIL when the loop thread wakes for the result, which then waits
for it a second time. Here a worker hands the outcome to the loop as its last step and goes
back to its queue: a hop took 45 -> 17 us of wall time (benchmarks/README.md). The workers
are daemon threads: at exit, a tool still running (its exec timed out) does not hold the
process, as it would be held joining an executor's workers.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import os
import queue
import threading
from collections.abc import Callable

__all__ = ["MAX_TOOL_THREADS", "run_blocking"]

#: At most this many sync tool calls run at once (in the whole process); more wait.
MAX_TOOL_THREADS = 256

#: What a worker runs: the call, which gives back how to hand its outcome to the loop.
_Job = Callable[[], Callable[[], None]]


class _ToolThreads:
    """Worker threads taking jobs from one queue, made on demand up to ``limit``."""

    def __init__(
        self, limit: int, start_thread: Callable[[threading.Thread], None] = threading.Thread.start
    ) -> None:
        self.limit = limit
        #: Starts a worker (a parameter so that a test can make it fail, as a process or
        #: container at its thread limit does).
        self._start_thread = start_thread
        self._jobs: queue.SimpleQueue[_Job] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._threads = 0
        #: Workers whose start returned (``_threads`` also counts those being started).
        self._started = 0
        #: Workers waiting for a job and not yet promised one, less the jobs queued that no
        #: worker is promised to (below zero: a backlog, every thread busy).
        self._idle = 0

    def submit(self, job: _Job) -> None:
        with self._lock:
            self._idle -= 1  # a waiting worker takes this job, or it waits for one
            start = self._idle < 0 and self._threads < self.limit
            if start:
                self._threads += 1
                self._idle += 1  # the new worker takes it
        if start:
            # Started before the job is queued: if no thread can be made, the job must not
            # wait in the queue for a worker that may never come (nor run after its caller
            # was told it failed).
            name = f"openprogram-tool-{self._threads}"
            try:
                self._start_thread(threading.Thread(target=self._serve, name=name, daemon=True))
            except RuntimeError:  # "can't start new thread"
                with self._lock:
                    self._threads -= 1
                    self._idle -= 1
                    # Only a worker already started is sure to come: one another caller is
                    # starting at this moment may fail as this one did.
                    if self._started == 0:
                        self._idle += 1  # the job is not queued after all
                        raise
                # Other workers exist: the job waits for one of them.
            else:
                with self._lock:
                    self._started += 1
        self._jobs.put(job)

    def _serve(self) -> None:
        while True:
            hand_back = self._jobs.get()()
            with self._lock:
                self._idle += 1
            hand_back()  # wakes the loop; the next get() releases the GIL at once


_threads: _ToolThreads | None = None


def _pool() -> _ToolThreads:
    global _threads
    if _threads is None:
        _threads = _ToolThreads(MAX_TOOL_THREADS)
    return _threads


def _forget_threads() -> None:
    global _threads
    _threads = None  # a forked child has none of its parent's threads


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_threads)


async def run_blocking(fn: Callable[..., object], /, **kwargs: object) -> object:
    """``fn(**kwargs)`` in a worker thread, with the caller's context variables (a tool
    reads the run's tool policy from one), as ``asyncio.to_thread`` does.

    The worker hands its outcome straight to the loop (``call_soon_threadsafe``); a wait
    cancelled before the call started keeps it from starting, as with ``run_in_executor``.
    """
    loop = asyncio.get_running_loop()
    done: asyncio.Future[object] = loop.create_future()
    context = contextvars.copy_context()

    def job() -> Callable[[], None]:
        value: object = None
        error: BaseException | None = None
        if not done.cancelled():
            try:
                value = context.run(fn, **kwargs)
            except StopIteration as exc:
                # A future refuses StopIteration (a TypeError on the loop, and the wait never
                # ended); a coroutine turns it into RuntimeError (PEP 479), so the same here.
                name = getattr(fn, "__qualname__", type(fn).__qualname__)
                error = RuntimeError(f"{name} raised StopIteration")
                error.__cause__ = exc
            except BaseException as exc:  # the caller's to handle, as run_in_executor passes it
                error = exc
        return lambda: _hand_back(loop, done, value, error)

    _pool().submit(job)
    return await done


def _hand_back(
    loop: asyncio.AbstractEventLoop,
    done: asyncio.Future[object],
    value: object,
    error: BaseException | None,
) -> None:
    with contextlib.suppress(RuntimeError):  # the loop closed meanwhile: nobody waits
        loop.call_soon_threadsafe(_settle, done, value, error)


def _settle(done: asyncio.Future[object], value: object, error: BaseException | None) -> None:
    if done.cancelled():
        return  # the caller stopped waiting (a timeout); the outcome goes nowhere
    if error is None:
        done.set_result(value)
    else:
        done.set_exception(error)
