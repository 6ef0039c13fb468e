"""A plain run on a terminal: the answer shows as it streams, tool calls and results as
one-line events, retries as one line; piped, ``--json`` or ``--no-stream``, the output is
what it always was. Driven through a pseudo-terminal (a real ``openprogram-run`` child with
a pty as stdout) against the loopback chat server streaming SSE and the offline model."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from loopback import (
    Gated,
    LoopbackServer,
    Reply,
    chat_completion,
    json_reply,
    openai_sse,
    sse_reply,
    status_reply,
)
from support import read_until

from openprogram_yaml.runner.cli import main

AGENT = """\
version: 1
name: writer
model: local:llama3
retry: {max_retries: 3, backoff_base_s: 0.001}
runtimes:
  - {match: "local:*", runtime: openai, options: {base_url: "%s", api_key_env: WRITER_KEY}}
methods:
  greet:
    inputs: {who: {type: string}}
    prompt: "Greet {{ who }}."
  mood:
    prompt: "How do you feel?"
    response_schema:
      name: mood
      schema:
        type: object
        additionalProperties: false
        required: [sentiment]
        properties: {sentiment: {type: string, enum: [good, bad]}}
"""

SECRET = "sk-writer-0123456789"


def _chunk(text: str) -> dict[str, object]:
    return {"choices": [{"index": 0, "delta": {"content": text}, "finish_reason": None}]}


def _done() -> dict[str, object]:
    return {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}


def _read_rest(fd: int) -> bytes:
    out = bytearray()
    while True:
        try:
            chunk = os.read(fd, 4096)
        except OSError:
            break
        if not chunk:
            break
        out += chunk
    return bytes(out)


def _on_a_terminal(args: list[str], cwd: Path) -> tuple[subprocess.Popen[bytes], int]:
    """``openprogram-run ARGS`` with a pty as stdin and stdout (stderr a pipe)."""
    controller, terminal = os.openpty()
    env = {**os.environ, "WRITER_KEY": SECRET}
    proc = subprocess.Popen(
        [sys.executable, "-m", "openprogram_yaml", *args],
        stdin=terminal,
        stdout=terminal,
        stderr=subprocess.PIPE,
        cwd=cwd,
        env=env,
    )
    os.close(terminal)
    return proc, controller


def _shown_on_a_terminal(args: list[str], cwd: Path) -> tuple[int, bytes, bytes]:
    """``openprogram-run ARGS`` run to its end on a pty: its exit status, what the terminal
    showed and what went to stderr."""
    proc, controller = _on_a_terminal(args, cwd)
    try:
        _, err = proc.communicate(timeout=60)
        out = _read_rest(controller)
    finally:
        proc.kill()
        os.close(controller)
    return proc.returncode, out, err


def test_a_text_answer_shows_on_the_terminal_as_it_streams(tmp_path: Path) -> None:
    gate = threading.Event()
    events = openai_sse([_chunk("Hello, "), _chunk("Ada"), _chunk("!"), _done()])
    with LoopbackServer() as server:
        reply = sse_reply([])
        server.add(Reply(reply.status, b"", reply.headers, events=Gated(events, 1, gate)))
        (tmp_path / "agent.yaml").write_text(AGENT % (server.url + "/v1"))
        proc, controller = _on_a_terminal(["agent.yaml", "greet", "-i", "who=Ada"], tmp_path)
        seen = bytearray()
        try:
            # The first piece is on the terminal while the server still holds the rest.
            read_until(controller, b"Hello, ", seen)
            gate.set()
            _, err = proc.communicate(timeout=60)
            rest = bytes(seen) + _read_rest(controller)
        finally:
            gate.set()
            proc.kill()
            os.close(controller)
        [request] = server.requests
    assert proc.returncode == 0, err
    assert request.json["stream"] is True
    # The answer once, ended by one newline (not printed again at the end).
    assert rest.replace(b"\r\n", b"\n") == b"Ada!\n"


def test_a_secret_split_across_pieces_is_hidden_on_the_terminal(tmp_path: Path) -> None:
    half = len(SECRET) // 2
    pieces = ["key: ", SECRET[:half], SECRET[half:], " done"]
    with LoopbackServer() as server:
        server.add(sse_reply(openai_sse([*map(_chunk, pieces), _done()])))
        (tmp_path / "agent.yaml").write_text(AGENT % (server.url + "/v1"))
        code, out, err = _shown_on_a_terminal(["agent.yaml", "greet", "-i", "who=Ada"], tmp_path)
    assert code == 0, err
    assert SECRET[:half].encode() not in out and SECRET[half:].encode() not in out
    assert out.replace(b"\r\n", b"\n") == b"key: *** done\n"


def test_a_retry_is_one_line_on_stderr_and_the_next_attempt_streams(tmp_path: Path) -> None:
    with LoopbackServer() as server:
        server.add(status_reply(429, {"error": {"message": "slow down"}}))
        server.add(sse_reply(openai_sse([_chunk("Hi"), _done()])))
        (tmp_path / "agent.yaml").write_text(AGENT % (server.url + "/v1"))
        code, out, err = _shown_on_a_terminal(["agent.yaml", "greet", "-i", "who=Ada"], tmp_path)
    assert code == 0, err
    lines = err.decode().splitlines()
    assert len(lines) == 1 and lines[0].startswith("HTTP 429 – retrying in "), lines
    assert lines[0].endswith(" s (2/3)")  # the second attempt of three
    assert out.replace(b"\r\n", b"\n") == b"Hi\n"


TOOLS_AGENT = """\
version: 1
name: helper
model: test
tools:
  lookup:
    python: helper_tools:lookup
methods:
  answer:
    prompt: Look it up.
"""


def test_tool_calls_and_results_are_one_line_events_under_the_offline_model(
    tmp_path: Path,
) -> None:
    (tmp_path / "helper_tools.py").write_text(
        'def lookup(topic: str) -> str:\n    """Look a topic up."""\n    return "found 3 notes"\n'
    )
    (tmp_path / "agent.yaml").write_text(TOOLS_AGENT)
    proc, controller = _on_a_terminal(["agent.yaml", "answer"], tmp_path)
    try:
        _, err = proc.communicate(timeout=60)
        out = _read_rest(controller).decode().replace("\r\n", "\n")
    finally:
        proc.kill()
        os.close(controller)
    assert proc.returncode == 0, err
    lines = err.decode().splitlines()
    assert len(lines) == 2, lines
    assert lines[0].startswith("→ lookup({") and '"topic"' in lines[0]
    assert lines[1] == "← lookup returned: found 3 notes"
    assert out.endswith("\n") and out.count("\n") >= 1
    # Shown once: the streamed answer is not printed again at the end.
    assert "found 3 notes" in out and out.count(out.strip()) == 1


@pytest.mark.parametrize("flag", ["--no-stream", "--json"])
def test_no_stream_and_json_on_a_terminal_print_as_a_pipe_gets_it(
    tmp_path: Path, flag: str
) -> None:
    with LoopbackServer() as server:
        server.add(json_reply(chat_completion("Hello, Ada!")))
        (tmp_path / "agent.yaml").write_text(AGENT % (server.url + "/v1"))
        proc, controller = _on_a_terminal(["agent.yaml", "greet", "-i", "who=Ada", flag], tmp_path)
        try:
            _, err = proc.communicate(timeout=60)
            out = _read_rest(controller).decode().replace("\r\n", "\n")
        finally:
            proc.kill()
            os.close(controller)
        [request] = server.requests
    assert proc.returncode == 0, err
    assert "stream" not in request.json  # not streamed: the same request a pipe sends
    if flag == "--json":
        assert json.loads(out)["output"] == "Hello, Ada!"
    else:
        assert out == "Hello, Ada!\n"


def test_a_schema_failure_says_its_issues_and_how_many_repairs_were_tried(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("WRITER_KEY", SECRET)
    with LoopbackServer() as server:
        for _ in range(4):
            server.add(json_reply(chat_completion('{"sentiment": "mixed"}')))
        path = tmp_path / "agent.yaml"
        path.write_text(AGENT % (server.url + "/v1"))
        code = main([str(path), "mood"])
        sent = len(server.requests)
    err = capsys.readouterr().err
    assert code == 1
    assert "$.sentiment: must be one of" in err
    assert f"after {sent - 1} repair" in err


def test_a_spinner_shows_while_the_model_is_quiet_and_is_gone_once_it_answers(
    tmp_path: Path,
) -> None:
    gate = threading.Event()
    events = openai_sse([_chunk("Hello, Ada!"), _done()])
    with LoopbackServer() as server:
        reply = sse_reply([])
        server.add(Reply(reply.status, b"", reply.headers, events=Gated(events, 0, gate)))
        (tmp_path / "agent.yaml").write_text(AGENT % (server.url + "/v1"))
        controller, terminal = os.openpty()
        proc = subprocess.Popen(
            [sys.executable, "-m", "openprogram_yaml", "agent.yaml", "greet", "-i", "who=Ada"],
            stdin=terminal,
            stdout=terminal,
            stderr=terminal,  # the spinner draws on stderr when it is a terminal
            cwd=tmp_path,
            env={**os.environ, "WRITER_KEY": SECRET},
        )
        os.close(terminal)
        seen = bytearray()
        try:
            read_until(controller, b"writer.greet", seen)  # the spinner's title
            gate.set()
            read_until(controller, b"Hello, Ada!", seen)
            assert proc.wait(timeout=60) == 0
        finally:
            gate.set()
            proc.kill()
            os.close(controller)


def test_escape_sequences_in_a_streamed_answer_and_a_tool_line_are_shown_not_obeyed(
    tmp_path: Path,
) -> None:
    # A model (or a page it read) may write escape sequences: a clipboard write (OSC 52), a
    # screen clear, a carriage return over the line. On the terminal they show as text.
    pieces = ["a\x1b]52;c;ZXZpbA==\x07", "b\x1b[2J", "c\x9b31m\rd\r\n"]
    with LoopbackServer() as server:
        server.add(sse_reply(openai_sse([*map(_chunk, pieces), _done()])))
        (tmp_path / "agent.yaml").write_text(AGENT % (server.url + "/v1"))
        code, out, err = _shown_on_a_terminal(["agent.yaml", "greet", "-i", "who=Ada"], tmp_path)
    assert code == 0, err
    shown = out.replace(b"\r\n", b"\n")
    assert b"\x1b" not in shown and b"\x07" not in shown and b"\r" not in shown
    assert "\x9b" not in shown.decode()
    assert shown == b"a\\x1b]52;c;ZXZpbA==\\x07b\\x1b[2Jc\\x9b31m\\rd\n"


def test_escape_sequences_in_a_tool_call_line_are_shown_not_obeyed(tmp_path: Path) -> None:
    (tmp_path / "helper_tools.py").write_text(
        'def lookup(topic: str) -> str:\n    """Look a topic up."""\n'
        '    return "\\x1b]0;owned\\x07found"\n'
    )
    (tmp_path / "agent.yaml").write_text(TOOLS_AGENT)
    code, _, err = _shown_on_a_terminal(["agent.yaml", "answer"], tmp_path)
    assert code == 0, err
    assert b"\x1b" not in err and b"\x07" not in err
    assert "← lookup returned: \\x1b]0;owned\\x07found" in err.decode().splitlines()


def test_an_error_message_from_the_provider_shows_its_escape_sequences_as_text(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # The provider's (or a proxy's) error text is not ours: it is shown, never obeyed.
    monkeypatch.setenv("WRITER_KEY", SECRET)
    with LoopbackServer() as server:
        server.add(status_reply(400, {"error": {"message": "bad \x1b]0;owned\x07 request"}}))
        path = tmp_path / "agent.yaml"
        path.write_text(AGENT % (server.url + "/v1"))
        code = main([str(path), "greet", "-i", "who=Ada"])
    err = capsys.readouterr().err
    assert code == 1
    assert "\x1b" not in err and "\x07" not in err
    assert "bad \\x1b]0;owned\\x07 request" in err


def test_with_no_stream_on_a_terminal_escape_sequences_show_as_text_too(tmp_path: Path) -> None:
    with LoopbackServer() as server:
        server.add(json_reply(chat_completion("a\x1b]52;c;ZXZpbA==\x07b")))
        (tmp_path / "agent.yaml").write_text(AGENT % (server.url + "/v1"))
        code, out, err = _shown_on_a_terminal(
            ["agent.yaml", "greet", "-i", "who=Ada", "--no-stream"], tmp_path
        )
    assert code == 0, err
    assert out.replace(b"\r\n", b"\n") == b"a\\x1b]52;c;ZXZpbA==\\x07b\n"
