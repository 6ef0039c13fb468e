"""Shared by the reload and serve tests: an agent on disk, and a runtime that holds runs.

``GateRuntime`` is a real runtime (registered like a plugin) whose turns wait on an
``asyncio.Event``: a test decides when a run in flight may finish, without sleeping.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

from openprogram_yaml.run.reload import ProgramHolder, ReloadEvent
from openprogram_yaml.runtimes.protocol import Message, RuntimeDelta, RuntimeResult, Usage

#: Generous: a watchfiles event normally arrives in tens of milliseconds.
EVENT_TIMEOUT_S = 15.0

_ids = itertools.count()


def agent_yaml(model: str = "test", runtime: str | None = None) -> str:
    rules = f"runtimes:\n  - {{match: 'gate:*', runtime: {runtime}}}\n" if runtime else ""
    return (
        "version: 1\n"
        "name: echo\n"
        f"model: {model}\n"
        f"{rules}"
        "methods:\n"
        "  say:\n"
        "    inputs: {x: {type: string}}\n"
        "    prompt_file: prompts/say.j2\n"
    )


def write_agent(root: Path, prompt: str, **kwargs: Any) -> Path:
    (root / "prompts").mkdir(parents=True, exist_ok=True)
    (root / "prompts" / "say.j2").write_text(prompt, encoding="utf-8")
    path = root / "echo.yaml"
    path.write_text(agent_yaml(**kwargs), encoding="utf-8")
    return path


def save(path: Path, text: str) -> None:
    """Save as editors do: write a new file, then rename it over the old one."""
    tmp = path.with_name(path.name + ".tmp~")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)


class GateRuntime:
    """Answers ``gated reply to: <prompt>`` once ``release`` is set."""

    def __init__(self) -> None:
        self.runtime_id = f"gate{next(_ids)}"
        self.started: asyncio.Queue[str] = asyncio.Queue()
        self.release = asyncio.Event()

    def supports(self, model_ref: str | None = None) -> bool:
        return bool(model_ref and model_ref.startswith("gate:"))

    async def run_turn(
        self,
        prompt: str | Sequence[Message],
        *,
        system_prompt: str | None = None,
        model_ref: str | None = None,
        **kwargs: Any,
    ) -> RuntimeResult:
        text = prompt if isinstance(prompt, str) else prompt[-1].text()
        self.started.put_nowait(text)
        await self.release.wait()
        return RuntimeResult(content=f"gated reply to: {text}", usage=Usage(3, 4))

    async def stream_turn(
        self, prompt: str | Sequence[Message], **kwargs: Any
    ) -> AsyncIterator[RuntimeDelta]:
        result = await self.run_turn(prompt, **kwargs)
        yield RuntimeDelta(type="text", content=result.content)


class Events:
    """Reload events of a holder, awaited one at a time."""

    def __init__(self, holder: ProgramHolder) -> None:
        self.queue: asyncio.Queue[ReloadEvent] = asyncio.Queue()
        holder.listeners.append(self.queue.put_nowait)

    async def next(self, status: str | None = None) -> ReloadEvent:
        """The next event (of ``status``, skipping others such as a save's echo)."""
        while True:
            event = await asyncio.wait_for(self.queue.get(), EVENT_TIMEOUT_S)
            if status is None or event.status == status:
                return event


async def start_watching(holder: ProgramHolder) -> tuple[asyncio.Task[None], asyncio.Event]:
    stop = asyncio.Event()
    task = asyncio.create_task(holder.watch(stop))
    await asyncio.wait_for(holder.watching.wait(), EVENT_TIMEOUT_S)
    return task, stop
