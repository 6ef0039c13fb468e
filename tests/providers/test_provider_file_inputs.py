"""File inputs through the providers: an agent run on the command line against servers on
127.0.0.1 that speak the wire formats; request bodies checked against the SDK's types."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

from anthropic.types.message_create_params import MessageCreateParamsNonStreaming
from loopback import LoopbackServer, chat_completion, json_reply
from openai.types.chat.completion_create_params import CompletionCreateParamsNonStreaming
from sdk_contract import assert_valid_request

from openprogram_yaml.runner.cli import main

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 16


WIRE_AGENT = """\
version: 1
name: wire
model: local:llama3
runtimes:
  - {match: "local:*", runtime: openai, options: {base_url: "%s/v1"}}
  - {match: "claude:*", runtime: anthropic, options: {base_url: "%s", api_key: sk-ant-x}}
methods:
  hear:
    inputs: {clip: {type: string, format: audio}, photo: {type: string, format: image}}
    prompt: "{{ photo }} Transcribe: {{ clip }}"
  hear_claude:
    model: claude:claude-sonnet-4-5
    inputs: {clip: {type: string, format: audio}}
    prompt: "Transcribe: {{ clip }}"
"""
WAV = b"RIFF\x24\x00\x00\x00WAVEfmt "


def test_an_image_and_audio_reach_chat_completions_as_content_parts(tmp_path: Path, capsys) -> None:
    (tmp_path / "a.wav").write_bytes(WAV)
    (tmp_path / "cat.png").write_bytes(PNG)
    with LoopbackServer() as server:
        server.add(json_reply(chat_completion("hello")))
        agent = tmp_path / "wire.yaml"
        agent.write_text(WIRE_AGENT % (server.url, server.url))
        args = [str(agent), "hear", "-i", f"clip=@{tmp_path / 'a.wav'}"]
        code = main([*args, "-i", f"photo=@{tmp_path / 'cat.png'}"])
        assert code == 0, capsys.readouterr().err
        [request] = server.requests
    body = request.json
    assert_valid_request(CompletionCreateParamsNonStreaming, body)
    assert body["messages"][-1]["content"] == [
        {
            "type": "image_url",
            "image_url": {"url": "data:image/png;base64," + base64.b64encode(PNG).decode()},
        },
        {"type": "text", "text": " Transcribe: "},
        {
            "type": "input_audio",
            "input_audio": {"data": base64.b64encode(WAV).decode(), "format": "wav"},
        },
    ]


def test_audio_the_messages_api_cannot_take_is_refused_before_any_request(
    tmp_path: Path, capsys
) -> None:
    (tmp_path / "a.wav").write_bytes(WAV)
    with LoopbackServer() as server:
        agent = tmp_path / "wire.yaml"
        agent.write_text(WIRE_AGENT % (server.url, server.url))
        code = main([str(agent), "hear_claude", "-i", f"clip=@{tmp_path / 'a.wav'}"])
        requests = server.requests
    err = capsys.readouterr().err
    assert code != 0
    assert "an audio block cannot be sent: the Messages API takes text, images and PDF" in err
    assert requests == []


TOOLS = """\
from openprogram_yaml.runtime.content import ToolContent


def snap() -> ToolContent:
    '''A screenshot.'''
    return ToolContent(
        (
            {"type": "text", "text": "the screen"},
            {"type": "image", "data": "iVBORw0KGgo=", "mime_type": "image/png"},
        )
    )
"""
SNAP_AGENT = """\
version: 1
name: snapper
model: claude:claude-sonnet-4-5
runtimes:
  - {match: "claude:*", runtime: anthropic, options: {base_url: "%s", api_key: sk-ant-x}}
tools:
  snap: {python: "snap_tools:snap"}
methods:
  look:
    prompt: Take a screenshot and describe it.
"""


def _anthropic_message(content: list[dict[str, Any]], stop: str) -> dict[str, Any]:
    return {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-4-5",
        "content": content,
        "stop_reason": stop,
        "usage": {"input_tokens": 10, "output_tokens": 5},
    }


def test_an_image_a_python_tool_returns_reaches_the_messages_api_in_its_tool_result(
    tmp_path: Path, capsys
) -> None:
    (tmp_path / "snap_tools.py").write_text(TOOLS)
    call = {"type": "tool_use", "id": "toolu_1", "name": "snap", "input": {}}
    with LoopbackServer() as server:
        server.add(json_reply(_anthropic_message([call], "tool_use")))
        server.add(json_reply(_anthropic_message([{"type": "text", "text": "A PNG."}], "end_turn")))
        agent = tmp_path / "snapper.yaml"
        agent.write_text(SNAP_AGENT % server.url)
        code = main([str(agent), "look", "--live-tools"])
        assert code == 0, capsys.readouterr().err
        assert capsys.readouterr().out.strip() == "A PNG."
        second = server.requests[1].json
    assert_valid_request(MessageCreateParamsNonStreaming, second)
    [result] = second["messages"][-1]["content"]
    assert result["content"] == [
        {"type": "text", "text": "the screen"},
        {
            "type": "image",
            "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="},
        },
    ]


def test_a_run_whose_tool_returned_an_image_replays_from_its_recording(
    tmp_path: Path, capsys
) -> None:
    (tmp_path / "snap_tools.py").write_text(TOOLS)
    call = {"type": "tool_use", "id": "toolu_1", "name": "snap", "input": {}}
    recordings = tmp_path / "recordings"
    agent = tmp_path / "snapper.yaml"
    with LoopbackServer() as server:
        server.add(json_reply(_anthropic_message([call], "tool_use")))
        server.add(json_reply(_anthropic_message([{"type": "text", "text": "A PNG."}], "end_turn")))
        agent.write_text(SNAP_AGENT % server.url)
        assert main([str(agent), "look", "--record", str(recordings)]) == 0
        assert capsys.readouterr().out.strip() == "A PNG."
    # The server is gone: the recordings answer, the tool's image result included.
    code = main([str(agent), "look", "--replay", str(recordings)])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert captured.out.strip() == "A PNG."
