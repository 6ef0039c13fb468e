"""Sync tools run in worker threads of a pool sized for batches: many rows' blocking tools
run at once (the loop's default executor has 6 threads on a 2-CPU machine), with the
caller's context variables, and never on the event loop."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import multiprocessing
import os
import threading
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from openprogram_yaml.providers.test import Reply
from openprogram_yaml.runtime.blocking import MAX_TOOL_THREADS, _ToolThreads, run_blocking
from openprogram_yaml.runtime.toolloop import call_maybe_async

TOGETHER = 40
ITEMS = {"type": "object", "properties": {"items": {"type": "array"}}, "required": ["items"]}


def test_forty_blocking_tool_calls_run_at_once() -> None:
    # Each call waits until all forty are running: with fewer threads than calls the
    # barrier breaks (after its timeout) instead of opening.
    barrier = threading.Barrier(TOGETHER, timeout=10)

    def wait_for_the_others() -> str:
        barrier.wait()
        return "ok"

    async def batch() -> list[object]:
        calls = (call_maybe_async(wait_for_the_others, False, {}) for _ in range(TOGETHER))
        return list(await asyncio.gather(*calls))

    assert asyncio.run(batch()) == ["ok"] * TOGETHER


def test_a_sync_tool_runs_off_the_loop_with_the_callers_context() -> None:
    policy: contextvars.ContextVar[str] = contextvars.ContextVar("policy", default="none")

    def tool(text: str) -> tuple[str, str, bool]:
        try:
            asyncio.get_running_loop()
            on_loop = True
        except RuntimeError:
            on_loop = False
        return text, policy.get(), on_loop

    async def run() -> object:
        policy.set("read-only")
        return await call_maybe_async(tool, False, {"text": "hi"})

    assert asyncio.run(run()) == ("hi", "read-only", False)


def test_the_hop_gives_what_asyncio_to_thread_gives() -> None:
    # Differential: results and exceptions (SystemExit too) arrive as to_thread passes them.
    def tool(value: object) -> object:
        if isinstance(value, BaseException):
            raise value
        return value

    async def both(value: object) -> list[tuple[str, object]]:
        outcomes: list[tuple[str, object]] = []
        hops: tuple[Callable[[], Awaitable[object]], ...] = (
            lambda: asyncio.to_thread(tool, value),
            lambda: run_blocking(tool, value=value),
        )
        for hop in hops:
            try:
                outcomes.append(("value", await hop()))
            except BaseException as exc:
                outcomes.append(("raised", exc))
        return outcomes

    for value in (42, None, ValueError("bad"), SystemExit(3)):
        first, second = asyncio.run(both(value))
        assert first == second


def test_a_wait_cancelled_before_the_call_started_keeps_it_from_running() -> None:
    gate = threading.Event()
    started: list[int] = []
    ran: list[str] = []

    def occupy(i: int) -> None:
        started.append(i)
        gate.wait(10)

    def record(text: str) -> None:
        ran.append(text)

    async def scenario() -> None:
        # Every worker busy, so the next call waits in the pool's queue.
        busy = [asyncio.ensure_future(run_blocking(occupy, i=i)) for i in range(MAX_TOOL_THREADS)]
        while len(started) < MAX_TOOL_THREADS:
            await asyncio.sleep(0.001)
        queued = asyncio.ensure_future(run_blocking(record, text="queued"))
        await asyncio.sleep(0)
        queued.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await queued
        gate.set()
        await asyncio.gather(*busy)

    asyncio.run(scenario())
    assert ran == []


def test_a_result_after_the_caller_stopped_waiting_goes_nowhere_quietly() -> None:
    started = threading.Event()
    gate = threading.Event()
    finished = threading.Event()

    def slow() -> str:
        started.set()
        gate.wait(10)
        finished.set()
        return "late"

    async def scenario() -> None:
        waiting = asyncio.ensure_future(run_blocking(slow))
        # The caller stops waiting once the call runs: stopped before it started, the call
        # never runs (a wait cancelled early keeps it from starting), and on a loaded
        # machine a worker can take longer than any fixed time to start it.
        await asyncio.to_thread(started.wait, 10)
        assert started.is_set(), "the call never started"
        waiting.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await waiting
        gate.set()
        await asyncio.to_thread(finished.wait, 10)
        assert finished.is_set(), "the call never finished"
        await asyncio.sleep(0.01)  # the late outcome reaches the loop and is dropped

    loop = asyncio.new_event_loop()
    errors: list[dict[str, object]] = []
    loop.set_exception_handler(lambda _loop, context: errors.append(context))
    try:
        loop.run_until_complete(scenario())
    finally:
        loop.close()
    assert errors == []


def _tool_in_a_fresh_loop() -> None:
    def tool(text: str) -> str:
        return text

    async def run() -> object:
        return await run_blocking(tool, text="child")

    raise SystemExit(0 if asyncio.run(run()) == "child" else 1)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork here")
def test_a_forked_child_gets_threads_of_its_own() -> None:
    # The parent's workers exist (and wait) in the parent only: a child that queued its
    # call for them would wait forever.
    assert asyncio.run(call_maybe_async(lambda: "parent", False, {})) == "parent"
    child = multiprocessing.get_context("fork").Process(target=_tool_in_a_fresh_loop)
    child.start()
    child.join(timeout=30)
    if child.is_alive():
        child.kill()
        pytest.fail("a sync tool in a forked child never ran")
    assert child.exitcode == 0


def test_a_sync_tool_raising_stopiteration_is_an_error_result_not_a_hang(make: Any) -> None:
    # asyncio refuses StopIteration in a future: the outcome was lost on the loop (a
    # TypeError logged there) and the exec waited forever. Now a RuntimeError, as a
    # coroutine's StopIteration becomes (PEP 479), which the model sees as the tool's error.
    def first(items: list[str]) -> str:
        return next(iter(items))

    tool = {"spec": {"name": "first", "description": "d", "parameters": ITEMS}, "execute": first}
    rt, model = make([Reply.call("first", {"items": []}), "recovered"])
    outcome: list[object] = []
    caller = threading.Thread(target=lambda: outcome.append(rt.exec("x", tools=[tool])))
    caller.daemon = True
    caller.start()
    caller.join(timeout=30)  # at once when it works
    assert outcome == ["recovered"]
    result = model.requests[1].messages[-1]
    assert result.is_error and "first raised StopIteration" in result.text()


def test_after_a_backlog_the_pool_counts_each_waiting_worker_once() -> None:
    # Jobs queued while every thread was busy made each worker count itself idle again
    # after them: 2 threads counted 5 idle, a count that no longer meant waiting workers.
    pool = _ToolThreads(limit=2)
    gate = threading.Event()
    handed_back = threading.Semaphore(0)

    def job() -> Callable[[], None]:
        gate.wait(10)
        return handed_back.release

    for _ in range(5):
        pool.submit(job)
    gate.set()
    for _ in range(5):
        assert handed_back.acquire(timeout=10)
    assert (pool._threads, pool._idle) == (2, 2)


def _cannot_start(thread: threading.Thread) -> None:
    raise RuntimeError("can't start new thread")


def test_a_first_worker_that_cannot_start_fails_the_call_not_hangs_it() -> None:
    # The job was queued before the thread was started: when no thread could be made (a
    # process or container at its thread limit) it waited in the queue forever.
    pool = _ToolThreads(limit=2, start_thread=_cannot_start)
    with pytest.raises(RuntimeError, match="can't start new thread"):
        pool.submit(lambda: lambda: None)
    assert (pool._threads, pool._idle, pool._jobs.qsize()) == (0, 0, 0)


def test_when_another_worker_exists_a_failed_start_leaves_the_job_to_it() -> None:
    starts: list[threading.Thread] = []

    def start_once(thread: threading.Thread) -> None:
        if starts:
            raise RuntimeError("can't start new thread")
        starts.append(thread)
        thread.start()

    pool = _ToolThreads(limit=4, start_thread=start_once)
    gate = threading.Event()
    handed_back = threading.Semaphore(0)

    def job() -> Callable[[], None]:
        gate.wait(10)
        return handed_back.release

    pool.submit(job)  # the one worker, busy until the gate opens
    pool.submit(job)  # no second worker can be made: it waits for the first
    gate.set()
    for _ in range(2):
        assert handed_back.acquire(timeout=10)
    assert (pool._threads, pool._idle) == (1, 1)


def test_a_failed_start_while_the_only_other_worker_is_still_starting_fails_the_call() -> None:
    # Two threads submit at once and neither worker can be made. The second failure counted
    # the first worker, still being started, as alive and queued its job for it; that start
    # failed too, and the job waited in the queue forever while its caller went on waiting.
    first_starting, second_failed = threading.Event(), threading.Event()
    calls: list[int] = []

    def start(thread: threading.Thread) -> None:
        calls.append(1)
        if len(calls) == 1:  # the first submitter's start: fails once the second one did
            first_starting.set()
            assert second_failed.wait(10)
        raise RuntimeError("can't start new thread")

    pool = _ToolThreads(limit=4, start_thread=start)
    first_error: list[BaseException] = []

    def submit_first() -> None:
        try:
            pool.submit(lambda: lambda: None)
        except RuntimeError as exc:
            first_error.append(exc)

    first = threading.Thread(target=submit_first)
    first.start()
    assert first_starting.wait(10)
    try:
        with pytest.raises(RuntimeError, match="can't start new thread"):
            pool.submit(lambda: lambda: None)
    finally:
        second_failed.set()
        first.join(10)
    assert len(first_error) == 1
    assert (pool._threads, pool._idle, pool._jobs.qsize()) == (0, 0, 0)
