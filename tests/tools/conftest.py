"""Fixtures for the tool kinds: compiled templates, a loopback server, a scripted runtime."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from loopback import LoopbackServer

from openprogram_yaml.compile.rendering import CompiledTemplate
from openprogram_yaml.compile.templates import TemplateEngine
from openprogram_yaml.providers.test import ScriptedRuntime
from openprogram_yaml.runtime import Runtime
from openprogram_yaml.spec.positions import TextOrigin

Compile = Callable[..., CompiledTemplate]


@pytest.fixture
def compile_template(tmp_path: Path) -> Compile:
    """``compile_template(text, *names)``: a template the way the compiler builds one."""
    engine = TemplateEngine(tmp_path)

    def _compile(text: str, *declared: str) -> CompiledTemplate:
        return engine.compile(text, origin=TextOrigin("agent.yaml", 1, 1, '"'), declared=declared)

    return _compile


@pytest.fixture
def server() -> Iterator[LoopbackServer]:
    with LoopbackServer() as srv:
        yield srv


RunWithModel = Callable[[Any, Sequence[Any]], ScriptedRuntime]


@pytest.fixture
def run_with_model() -> RunWithModel:
    """``run_with_model(tool, replies)``: ``Runtime.exec`` with a scripted model and ``tool``;
    returns the model, whose requests show what the model saw."""

    async def _go(tool: Any, model: ScriptedRuntime) -> None:
        runtime = Runtime(model="scripted:model", runtimes=model, tools=[tool])
        try:
            await runtime.async_exec("go")
        finally:
            await runtime.aclose()
            await tool.aclose()  # on the loop that used it: connections belong to their loop

    def _run(tool: Any, replies: Sequence[Any]) -> ScriptedRuntime:
        model = ScriptedRuntime(replies)
        asyncio.run(_go(tool, model))
        return model

    return _run
