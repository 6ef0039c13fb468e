"""A block's ``path`` read by a provider itself (a turn called directly, not through
``Runtime.exec``): regular files only, capped, as ``runtime.content`` reads them."""

from __future__ import annotations

import asyncio
import base64
import os
from pathlib import Path

import pytest
from loopback import LoopbackServer, chat_completion, json_reply
from support import without_blocking_on

from openprogram_yaml.providers.anthropic import AnthropicRuntime
from openprogram_yaml.providers.openai import OpenAIRuntime
from openprogram_yaml.runtime.content import MAX_MEDIA_BYTES
from openprogram_yaml.runtimes.protocol import Message, RuntimeResult

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 16


def _turn(url: str, path: Path, kind: str = "openai") -> RuntimeResult:
    runtime = (
        OpenAIRuntime(base_url=f"{url}/v1")
        if kind == "openai"
        else AnthropicRuntime(base_url=url, api_key="sk-ant-x")
    )
    prompt = [Message("user", [{"type": "image", "path": str(path)}])]

    async def turn() -> RuntimeResult:
        try:
            return await runtime.run_turn(prompt, model_ref=f"{kind}:m")
        finally:
            await runtime.aclose()

    return asyncio.run(turn())


def test_an_image_path_is_read_and_sent(tmp_path: Path) -> None:
    (tmp_path / "cat.png").write_bytes(PNG)
    with LoopbackServer() as server:
        server.add(json_reply(chat_completion("a cat")))
        result = _turn(server.url, tmp_path / "cat.png")
        [request] = server.requests
    assert result.content == "a cat"
    url = "data:image/png;base64," + base64.b64encode(PNG).decode()
    assert request.json["messages"][-1]["content"] == [
        {"type": "image_url", "image_url": {"url": url}}
    ]


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
def test_a_file_over_the_cap_is_refused_before_any_request(tmp_path: Path, kind: str) -> None:
    huge = tmp_path / "huge.png"
    with huge.open("wb") as fh:  # sparse: nothing is written but its size
        fh.truncate(MAX_MEDIA_BYTES + 1)
    with LoopbackServer() as server:
        result = _turn(server.url, huge, kind)
        requests = server.requests
    assert requests == []
    assert result.failure is not None
    assert result.failure.reason == "invalid_request"
    assert "huge.png" in result.failure.message
    assert f"larger than {MAX_MEDIA_BYTES} bytes" in result.failure.message


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_a_fifo_named_as_an_image_is_refused_and_never_blocks(tmp_path: Path) -> None:
    fifo = tmp_path / "shot.png"
    os.mkfifo(fifo)  # no writer: opening it for reading would wait forever
    with LoopbackServer() as server:
        result = without_blocking_on(fifo, lambda: _turn(server.url, fifo))
        requests = server.requests
    assert requests == []
    assert isinstance(result, RuntimeResult)
    assert result.failure is not None and result.failure.reason == "invalid_request"
    assert "not a regular file (a FIFO (named pipe))" in result.failure.message
