"""Record a conversation against a server on 127.0.0.1, replay it without the server, and
fail clearly once the prompt changes; no secret reaches a recording or a trace."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from loopback import LoopbackServer, chat_completion, json_reply
from support import EXAMPLES

from openprogram_yaml.runner.cli import main

SECRET_KEY = "sk-live-0123456789abcdef"
SECRET_HEADER = "gw-token-fedcba9876543210"


def test_record_replay_and_a_changed_prompt(tmp_path: Path, monkeypatch, capsys) -> None:
    agent_dir = tmp_path / "agent"
    shutil.copytree(EXAMPLES, agent_dir, ignore=shutil.ignore_patterns("support_repo"))
    agent = agent_dir / "triage.yaml"
    # A gateway header read from the environment: a secret that must stay out of files.
    text = agent.read_text().replace("runtimes:", "runtimes:") + (
        "runtimes:\n"
        "  - match: 'openai:*'\n"
        "    runtime: openai\n"
        "    options: {headers: {X-Gateway-Token: '${env:GATEWAY_TOKEN}'}}\n"
    )
    agent.write_text(text)
    recordings = tmp_path / "recordings"
    trace = tmp_path / "trace.jsonl"
    monkeypatch.setenv("OPENAI_API_KEY", SECRET_KEY)
    monkeypatch.setenv("GATEWAY_TOKEN", SECRET_HEADER)
    monkeypatch.setenv("OPENPROGRAM_MODEL", "openai:gpt-4o-mini")
    label = {"category": "billing", "priority": "high", "reason": "Charged twice."}
    args = [str(agent), "classify", "-i", "ticket=I was charged twice", "--json"]

    with LoopbackServer() as server:
        server.add(json_reply(chat_completion(json.dumps(label))))
        monkeypatch.setenv("OPENAI_BASE_URL", server.url + "/v1")
        code = main([*args, "--record", str(recordings), "--trace", str(trace)])
        recorded = json.loads(capsys.readouterr().out)
        [request] = server.requests
    assert code == 0, recorded
    assert recorded["output"] == label
    assert request.headers["authorization"] == f"Bearer {SECRET_KEY}"
    assert request.headers["x-gateway-token"] == SECRET_HEADER

    files = sorted(recordings.rglob("*.yaml"))
    assert [f.parent.name for f in files] == ["triage.classify"]
    for path in [*files, trace]:
        written = path.read_text()
        assert SECRET_KEY not in written and SECRET_HEADER not in written, path

    # The server is gone: the recording answers.
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
    assert main([*args, "--replay", str(recordings)]) == 0
    assert json.loads(capsys.readouterr().out)["output"] == label

    # A prompt edit changes the request: replay says so, with what changed.
    agent.write_text(agent.read_text().replace("Classify this support ticket.", "Label it."))
    code = main([*args, "--replay", str(recordings)])
    captured = capsys.readouterr()
    assert code == 1
    error = json.loads(captured.out)["error"]["message"]
    assert "prompt changed since it was recorded" in error
    assert "-Classify this support ticket." in error.replace("  ", "").replace("- ", "-")
    assert "+Label it." in error.replace("  ", "").replace("+ ", "+")


BROKEN_AGENT = """\
version: 1
name: greeter
model: test
methods:
  greet:
    inputs: {who: {type: string}}
    prompt: "Greet {{ who }}."
tests:
  - name: greets ada
    method: greet
    inputs: {who: Ada}
    expect: {contains: Ada}
"""


def test_a_broken_recording_is_bad_input_named_at_its_line_not_a_failed_turn(
    tmp_path: Path, capsys
) -> None:
    # It was each turn's failure: exit 1, "LLMError: exec() failed", once per row or test.
    agent = tmp_path / "agent.yaml"
    agent.write_text(BROKEN_AGENT)
    recordings = tmp_path / "recordings"
    broken = recordings / "greeter.greet" / "0123456789abcdef.yaml"
    broken.parent.mkdir(parents=True)
    broken.write_text("request: {messages: [1\nresponse: {}\n")
    rows = tmp_path / "rows.jsonl"
    rows.write_text('{"who": "Ada"}\n')
    out = tmp_path / "out.jsonl"
    replay = ["--replay", str(recordings)]
    commands = [
        [str(agent), "greet", "-i", "who=Ada", *replay],
        ["test", str(agent), *replay],
        ["batch", str(agent), "greet", "--input", str(rows), "--output", str(out), *replay],
    ]
    for command in commands:
        assert main(command) == 2, command
        captured = capsys.readouterr()
        assert f"{broken}:2:" in captured.err and "invalid YAML" in captured.err
        assert "nothing was run" in captured.err
        assert "LLMError" not in captured.err + captured.out
    assert not out.exists() or out.read_text() == ""
    # A folder that is not there is said the same way.
    assert main([*commands[0][:-1], str(tmp_path / "nowhere")]) == 2
    assert "no recordings folder here" in capsys.readouterr().err


def test_watch_refuses_record_and_replay_it_would_not_use(tmp_path: Path, capsys) -> None:
    # The runs --watch starts took neither: a replay asked for ran the live model, and the
    # watch went on until stopped.
    import threading

    agent = tmp_path / "agent.yaml"
    agent.write_text(BROKEN_AGENT)
    for option in ("--record", "--replay"):
        folder = tmp_path / option.strip("-")
        codes: list[int] = []
        argv = [str(agent), "greet", "-i", "who=Ada", "--watch", option, str(folder)]
        thread = threading.Thread(target=lambda a=argv, c=codes: c.append(main(a)), daemon=True)
        thread.start()
        thread.join(20.0)
        assert codes == [2], "the watch went on"
        err = capsys.readouterr().err
        assert "--watch does not go together with --record or --replay" in err
        assert not folder.exists()
