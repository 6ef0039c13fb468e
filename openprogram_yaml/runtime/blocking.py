"""Where a sync tool runs: a worker thread of a pool sized for batches, never the event loop.

The rule (for ``python:`` tools and tools given to ``Runtime``): an ``async def`` function
runs on the event loop; a plain ``def`` runs in a worker thread. A sync function may block
(a network call, a file, a subprocess), and on the loop it would stall every other run of
the process: a batch's other rows, a server's other requests. The hop to a thread costs
40-100 us a call (benchmarks/README.md, per_call.py); a tool that must be faster than that
is written ``async def``.

The pool is not the loop's default executor: that one has ``min(32, CPUs + 4)`` threads, 6
on a 2-CPU machine, so a batch at concurrency 200 whose tool waits 100 ms on the network
would run 6 tools at a time and queue the rest. This pool grows on demand to
``MAX_TOOL_THREADS`` (threads are made only while none is idle).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

__all__ = ["MAX_TOOL_THREADS", "run_blocking"]

#: At most this many sync tool calls run at once (in the whole process); more wait.
MAX_TOOL_THREADS = 256

_pool: ThreadPoolExecutor | None = None


def _executor() -> ThreadPoolExecutor:
    global _pool
    if _pool is None:
        _pool = ThreadPoolExecutor(MAX_TOOL_THREADS, thread_name_prefix="openprogram-tool")
    return _pool


async def run_blocking(fn: Callable[..., object], /, **kwargs: object) -> object:
    """``fn(**kwargs)`` in a worker thread, with the caller's context variables (a tool
    reads the run's tool policy from one), as ``asyncio.to_thread`` does.

    The worker hands its outcome straight to the loop (``call_soon_threadsafe``) instead of
    through ``run_in_executor``'s pair of chained futures: 24 -> 18 us a call. As there, a
    wait cancelled before the call started keeps it from starting.
    """
    loop = asyncio.get_running_loop()
    done: asyncio.Future[object] = loop.create_future()
    work = functools.partial(_work, loop, done, contextvars.copy_context(), fn, kwargs)
    job = _executor().submit(work)
    try:
        return await done
    except asyncio.CancelledError:
        job.cancel()
        raise


def _work(
    loop: asyncio.AbstractEventLoop,
    done: asyncio.Future[object],
    context: contextvars.Context,
    fn: Callable[..., object],
    kwargs: dict[str, object],
) -> None:
    value: object = None
    error: BaseException | None = None
    try:
        value = context.run(fn, **kwargs)
    except BaseException as exc:  # the caller's to handle, as run_in_executor passes it
        error = exc
    with contextlib.suppress(RuntimeError):  # the loop closed meanwhile: nobody waits
        loop.call_soon_threadsafe(_settle, done, value, error)


def _settle(done: asyncio.Future[object], value: object, error: BaseException | None) -> None:
    if done.cancelled():
        return  # the caller stopped waiting (a timeout); the outcome goes nowhere
    if error is None:
        done.set_result(value)
    else:
        done.set_exception(error)
