"""Sync tools run in worker threads of a pool sized for batches: many rows' blocking tools
run at once (the loop's default executor has 6 threads on a 2-CPU machine), with the
caller's context variables, and never on the event loop."""

from __future__ import annotations

import asyncio
import contextvars
import threading

from openprogram_yaml.runtime.toolloop import call_maybe_async

TOGETHER = 40


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
