"""A sync exec interrupted (Ctrl-C while its loop waits) leaves its call as
``run_until_complete`` leaves it: pending, and destroyed quietly when the loop closes."""

from __future__ import annotations

import asyncio
import functools
import gc

import pytest

from openprogram_yaml.runtime.syncface import _run_to_end


def _interrupt() -> None:
    raise KeyboardInterrupt


def _note(
    messages: list[str], _loop: asyncio.AbstractEventLoop, context: dict[str, object]
) -> None:
    messages.append(str(context["message"]))


async def _waits_forever() -> None:
    await asyncio.get_running_loop().create_future()


def test_a_call_left_pending_by_ctrl_c_is_destroyed_quietly_with_its_loop() -> None:
    # Without this, the Runtime closed after Ctrl-C (``with Runtime() as rt: rt.exec()``)
    # printed "Task was destroyed but it is pending!" on stderr at exit.
    reports: dict[str, list[str]] = {"run_until_complete": [], "lean": []}
    for name, messages in reports.items():
        loop = asyncio.new_event_loop()
        loop.set_exception_handler(functools.partial(_note, messages))
        lean = name == "lean"
        run = functools.partial(_run_to_end, loop) if lean else loop.run_until_complete
        loop.call_soon(loop.call_soon, _interrupt)  # once the call waits
        with pytest.raises(KeyboardInterrupt):
            run(_waits_forever())
        loop.close()
        del loop, run
        gc.collect()  # the pending call goes with its loop
    assert reports == {"run_until_complete": [], "lean": []}
