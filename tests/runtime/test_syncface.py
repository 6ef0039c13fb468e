"""The sync face's loop entry (``runtime.syncface``) keeps ``run_until_complete``'s contract:
results, exceptions, a loop stopped early, and a loop that serves the next call."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
from typing import Any

import pytest

from openprogram_yaml.runtime.syncface import LoopRunner, _run_to_end

VAR: contextvars.ContextVar[str] = contextvars.ContextVar("VAR", default="unset")


async def _answer(value: object, turns: int = 3) -> object:
    for _ in range(turns):
        await asyncio.sleep(0)
    if isinstance(value, BaseException):
        raise value
    return value


async def _stops_the_loop_early() -> None:
    asyncio.get_running_loop().stop()
    await asyncio.sleep(0)
    await asyncio.sleep(0)


@pytest.mark.parametrize("value", [42, None, ValueError("bad"), KeyboardInterrupt()])
def test_the_lean_entry_gives_what_run_until_complete_gives(value: object) -> None:
    loop = asyncio.new_event_loop()
    try:
        outcomes = []
        for run in (loop.run_until_complete, lambda c: _run_to_end(loop, c)):
            try:
                outcomes.append(("value", run(_answer(value))))
            except BaseException as exc:
                outcomes.append(("raised", exc))
        assert outcomes[0] == outcomes[1]
        assert not loop.is_running()
        assert loop.run_until_complete(_answer("again")) == "again"  # the loop serves on
    finally:
        loop.close()


def test_a_loop_stopped_before_the_end_is_an_error_as_with_run_until_complete() -> None:
    loop = asyncio.new_event_loop()
    try:
        messages = []
        for run in (loop.run_until_complete, lambda c: _run_to_end(loop, c)):
            with pytest.raises(RuntimeError) as raised:
                run(_stops_the_loop_early())
            messages.append(str(raised.value))
        assert messages[0] == messages[1]
    finally:
        # The stopped tasks are still pending: cancel them (each may stop the loop again).
        for task in asyncio.all_tasks(loop):
            task.cancel()
        while asyncio.all_tasks(loop):
            with contextlib.suppress(RuntimeError):
                loop.run_until_complete(asyncio.sleep(0))
        loop.close()


def test_the_runner_keeps_one_loop_per_thread_and_raises_what_the_call_raised() -> None:
    runner = LoopRunner()
    try:

        async def loop_id() -> int:
            return id(asyncio.get_running_loop())

        first = runner.run(loop_id())
        with pytest.raises(ValueError, match="bad"):
            runner.run(_answer(ValueError("bad")))
        assert runner.run(loop_id()) == first
    finally:
        runner.close()


def test_inside_a_running_loop_the_call_runs_elsewhere_with_the_callers_context() -> None:
    runner = LoopRunner()

    async def read() -> str:
        return VAR.get()

    async def caller() -> str:
        VAR.set("the caller's")
        return runner.run(read())  # as sync code called from async code does

    try:
        assert asyncio.run(caller()) == "the caller's"
    finally:
        runner.close()


def test_a_call_left_pending_by_an_interrupted_run_does_not_stop_a_later_one() -> None:
    # Ctrl-C during a sync exec leaves its task pending (as run_until_complete does); when
    # it ends during the next exec, that exec must still run to its own end.
    def interrupt() -> None:
        raise KeyboardInterrupt

    outcomes = []
    for lean in (False, True):
        loop = asyncio.new_event_loop()
        run = functools.partial(_run_to_end, loop) if lean else loop.run_until_complete
        try:
            loop.call_soon(interrupt)
            with pytest.raises(KeyboardInterrupt):
                run(_answer("left behind", turns=2))
            outcomes.append(run(_answer("next", turns=6)))
        finally:
            loop.close()
    assert outcomes == ["next", "next"]


def test_a_runtime_makes_its_sync_loops_at_its_first_sync_call(make: Any) -> None:
    # A run's Runtime used only through async_exec never needs the sync face; one that is
    # then called from several threads at once gets one runner with a loop for each.
    import threading

    runtime, _ = make(["a", "b", "c", "d", "e"])
    assert asyncio.run(runtime.async_exec("hi")) == "a"
    loops: list[int] = []
    answers: list[object] = []

    def call() -> None:
        answers.append(runtime.exec("hi"))
        loops.append(id(runtime._loops._loop()))

    threads = [threading.Thread(target=call, daemon=True) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)  # at once when it works; a hang fails instead of hanging
    assert not any(thread.is_alive() for thread in threads)
    assert sorted(answers) == ["b", "c", "d"] and len(set(loops)) == 3
    assert runtime.exec("hi") == "e"
    runtime.close()
    with pytest.raises(RuntimeError, match="closed"):
        runtime.exec("hi")
