"""``open_runtime``: what a run opens is closed on every way out of it (an error in the
run, a cancelled run, a failing close, a failing start)."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest

from openprogram_yaml.compile.project import compile_path
from openprogram_yaml.run.agent_runtime import open_runtime
from openprogram_yaml.runtimes.protocol import AgentRuntimeProtocol, RuntimeSelectorProtocol

AGENT = """
version: 1
name: desk
model: test
methods:
  greet: {prompt: "Hello."}
"""


class Watched:
    """A selector wrapper that counts its closes (``open_runtime``'s ``wrap_selector``)."""

    def __init__(self, inner: RuntimeSelectorProtocol, *, fails: bool = False) -> None:
        self.inner = inner
        self.fails = fails
        self.closes = 0

    def select(self, model_ref: str) -> AgentRuntimeProtocol:
        return self.inner.select(model_ref)

    async def aclose(self) -> None:
        self.closes += 1
        await self.inner.aclose()
        if self.fails:
            raise OSError("the close failed")


def watched(made: list[Watched], *, fails: bool = False):  # type: ignore[no-untyped-def]
    def wrap(inner: RuntimeSelectorProtocol) -> RuntimeSelectorProtocol:
        made.append(Watched(inner, fails=fails))
        return made[-1]

    return wrap


def test_the_selector_is_closed_when_the_run_ends_fails_or_is_cancelled(write) -> None:  # type: ignore[no-untyped-def]
    agent = compile_path(write("desk.yaml", AGENT)).agent()
    made: list[Watched] = []

    async def ok() -> str:
        async with open_runtime(agent, wrap_selector=watched(made)) as runtime:
            return str(await runtime.async_exec("hi"))

    async def fails() -> None:
        async with open_runtime(agent, wrap_selector=watched(made)):
            raise ValueError("the run failed")

    async def cancelled() -> None:
        started = asyncio.Event()

        async def run() -> None:
            async with open_runtime(agent, wrap_selector=watched(made)):
                started.set()
                await asyncio.Event().wait()

        task = asyncio.create_task(run())
        await started.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    assert asyncio.run(ok())
    with pytest.raises(ValueError, match="the run failed"):
        asyncio.run(fails())
    asyncio.run(cancelled())
    assert [w.closes >= 1 for w in made] == [True, True, True]


def test_a_close_that_fails_is_raised_after_the_rest_is_closed(write) -> None:  # type: ignore[no-untyped-def]
    """The run's ``Runtime`` closes the selector it was given, and the run then closes the
    selector (and the agent's tools) it opened: the first failing does not skip the rest."""
    agent = compile_path(write("desk.yaml", AGENT)).agent()
    made: list[Watched] = []

    async def run() -> None:
        async with open_runtime(agent, wrap_selector=watched(made, fails=True)):
            pass

    with pytest.raises(OSError, match="the close failed"):
        asyncio.run(run())
    assert made[0].closes == 2


class NoSelector:
    """A wrapper that is no selector (no ``select``): the MCP server is started (the run
    cannot tell it is offline), then ``Runtime`` refuses it. Counts its closes."""

    def __init__(self) -> None:
        self.closes = 0

    async def aclose(self) -> None:
        self.closes += 1


def test_a_failing_start_after_the_mcp_server_started_closes_what_was_opened(
    tmp_path: Path,
) -> None:
    notes = Path(__file__).parents[1] / "tools" / "mcp_servers" / "notes_server.py"
    path = tmp_path / "notes.yaml"
    path.write_text(
        "version: 1\nname: notes\nmodel: test\n"
        f"tools:\n  files:\n    mcp:\n      command: [{sys.executable}, {notes}]\n"
        "methods:\n  read: {prompt: Read the todo note.}\n"
    )
    agent = compile_path(path).agent()
    (server,) = agent.tool_servers
    made: list[NoSelector] = []

    def wrap(inner: RuntimeSelectorProtocol) -> RuntimeSelectorProtocol:
        made.append(NoSelector())
        return made[-1]  # type: ignore[return-value]

    async def run() -> object:
        async with open_runtime(agent, wrap_selector=wrap):
            return None

    with pytest.raises(TypeError, match="must be a selector"):
        asyncio.run(run())
    assert made[0].closes == 1
    assert server.client is None  # the server process was stopped
