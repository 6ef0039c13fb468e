"""File inputs through the providers: an agent run on the command line against servers on
127.0.0.1 that speak the wire formats; request bodies checked against the SDK's types."""

from __future__ import annotations

import base64
from pathlib import Path

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
