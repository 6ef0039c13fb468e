"""``openprogram-run test --replay``: a test that was never recorded says so; a recorded
test whose prompt changed shows what changed."""

from __future__ import annotations

from pathlib import Path

import pytest
from loopback import LoopbackServer, chat_completion, json_reply

from openprogram_yaml.runner.cli import main

AGENT = """\
version: 1
name: greeter
model: local:llama3
runtimes:
  - {match: "local:*", runtime: openai, options: {base_url: "%s"}}
methods:
  greet:
    inputs: {who: {type: string}}
    prompt: "%s {{ who }}."
tests:
  - name: greets ada
    method: greet
    inputs: {who: Ada}
    expect: {contains: Hello}
"""

NEW_TEST = """\
  - name: greets bob
    method: greet
    inputs: {who: Bob}
    expect: {contains: Hello}
"""


def test_a_never_recorded_test_says_so_and_a_changed_prompt_shows_the_change(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "agent.yaml"
    recordings = tmp_path / "recordings"
    with LoopbackServer() as server:
        server.add(json_reply(chat_completion("Hello, Ada!")))
        path.write_text(AGENT % (server.url + "/v1", "Greet"))
        assert main(["test", str(path), "--record", str(recordings)]) == 0
    capsys.readouterr()
    gone = "http://127.0.0.1:9/v1"  # the server is gone: only recordings answer

    path.write_text(AGENT % (gone, "Greet") + NEW_TEST)
    assert main(["test", str(path), "--replay", str(recordings)]) == 1
    out = capsys.readouterr().out
    assert "FAIL greeter: greets bob" in out and "FAIL greeter: greets ada" not in out
    assert "replay: test 'greeter: greets bob' was never recorded" in out
    assert "prompt changed" not in out

    path.write_text(AGENT % (gone, "Welcome"))
    assert main(["test", str(path), "--replay", str(recordings)]) == 1
    out = capsys.readouterr().out
    assert "the prompt changed since it was recorded" in out and "Welcome" in out
