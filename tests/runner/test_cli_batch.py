"""``openprogram-run batch``, run as users run it: files in, JSON Lines out, resume."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from loopback import LoopbackServer, Request, chat_completion, json_reply
from support import EXAMPLES, REPO, TAGGER_AGENT

from openprogram_yaml.runner.cli import main

AGENT = TAGGER_AGENT

LOOPBACK_AGENT = """\
version: 1
name: tagger
model: local:llama3
retry: {max_retries: 1}
runtimes:
  - {match: "local:*", runtime: openai, options: {base_url: "%s"}}
methods:
  tag:
    inputs: {ticket: {type: string}}
    prompt: "Tag: {{ ticket }}"
"""


def _batch(agent: Path, method: str, rows: Path, out: Path, *more: str) -> list[str]:
    return ["batch", str(agent), method, "--input", str(rows), "--output", str(out), *more]


def _lines(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def test_jsonl_rows_each_get_a_line_keyed_by_a_column(write, tmp_path, capsys) -> None:
    agent = write("agent.yaml", AGENT)
    rows = write("in.jsonl", '{"id": "a", "ticket": "one"}\n{"id": "b", "ticket": "two"}\n')
    out = tmp_path / "out.jsonl"
    code = main(_batch(agent, "tag", rows, out, "--key", "id", "--json"))
    captured = capsys.readouterr()
    assert code == 0, captured.err
    lines = _lines(out)
    assert sorted(line["key"] for line in lines) == ["a", "b"]
    first = next(line for line in lines if line["key"] == "a")
    assert first["inputs"] == {"ticket": "one"}
    assert first["status"] == "ok" and isinstance(first["output"], str)
    assert first["model"] == "test"
    assert {"usage", "cost", "latency_s", "version", "digest"} <= set(first)
    summary = json.loads(captured.out)
    assert summary["ok"] == 2 and summary["failed"] == 0
    assert summary["tokens"]["input"] > 0 and summary["latency_s"]["p50"] is not None


def test_csv_columns_are_mapped_and_typed(write, tmp_path, capsys) -> None:
    agent = write("agent.yaml", AGENT)
    rows = write("in.csv", 'text,prio,note\nhello,1,x\n"a, b",2,y\n')
    out = tmp_path / "out.jsonl"
    code = main(
        _batch(
            agent,
            "tag",
            rows,
            out,
            "--map",
            "text=ticket",
            "--map",
            "prio=priority",
            "--map",
            "note=",
        )
    )
    assert code == 0, capsys.readouterr().err
    by_key = {line["key"]: line for line in _lines(out)}
    assert by_key[0]["inputs"] == {"ticket": "hello", "priority": 1}
    assert by_key[1]["inputs"] == {"ticket": "a, b", "priority": 2}


def test_an_unknown_column_is_an_error_naming_the_line(write, tmp_path, capsys) -> None:
    agent = write("agent.yaml", AGENT)
    rows = write("in.csv", "ticket,note\nhello,x\n")
    code = main(["batch", str(agent), "tag", "--input", str(rows), "--output", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert code == 2
    assert f"{rows}:2: column 'note' is no input of the method" in err
    assert "--map note=" in err


def test_a_json_array_and_failed_rows_recorded(write, tmp_path, capsys) -> None:
    agent = write("agent.yaml", AGENT)
    rows = write("in.json", '[{"ticket": "ok"}, {"ticket": ""}, {"ticket": "fine"}]')
    out = tmp_path / "out.jsonl"
    code = main(["batch", str(agent), "tag", "--input", str(rows), "--output", str(out)])
    err = capsys.readouterr().err
    assert code == 1  # a row failed; the others ran
    by_key = {line["key"]: line for line in _lines(out)}
    assert [by_key[k]["status"] for k in (0, 1, 2)] == ["ok", "failed", "ok"]
    assert by_key[1]["error"]["type"] == "InputValidationError"  # type: ignore[index]
    assert "2 ok, 1 failed" in err and "1× InputValidationError" in err


def test_a_torn_input_line_stops_the_batch_naming_it(write, tmp_path, capsys) -> None:
    agent = write("agent.yaml", AGENT)
    rows = tmp_path / "in.jsonl"
    rows.write_text('{"ticket": "one"}\n{"ticket": "two"}\n{"ticket": "thr', encoding="utf-8")
    out = tmp_path / "out.jsonl"
    code = main(["batch", str(agent), "tag", "--input", str(rows), "--output", str(out)])
    err = capsys.readouterr().err
    assert code == 2
    assert f"error: {rows}:3: a torn line (it ends before its JSON does)" in err
    assert "Traceback" not in err
    assert sorted(line["key"] for line in _lines(out)) == [0, 1]  # the rows before it kept


def test_csv_quoted_values_keep_their_line_breaks_as_written(write, tmp_path, capsys) -> None:
    # The input was read with universal newlines: a quoted "\r\n" or "\r" became "\n".
    agent = write("agent.yaml", AGENT)
    rows = tmp_path / "in.csv"
    rows.write_bytes(b'ticket,id\r\n"a\r\nb",1\r\n"c\rd",2\r\n"e\nf",3')
    out = tmp_path / "out.jsonl"
    code = main(_batch(agent, "tag", rows, out, "--key", "id"))
    assert code == 0, capsys.readouterr().err
    by_key = {line["key"]: line["inputs"] for line in _lines(out)}
    assert by_key == {"1": {"ticket": "a\r\nb"}, "2": {"ticket": "c\rd"}, "3": {"ticket": "e\nf"}}


def test_jsonl_with_crlf_and_no_last_newline_reads_every_row(write, tmp_path, capsys) -> None:
    agent = write("agent.yaml", AGENT)
    rows = tmp_path / "in.jsonl"
    rows.write_bytes(b'{"ticket": "one"}\r\n\r\n{"ticket": "two"}\r\n{"ticket": "three"}')
    out = tmp_path / "out.jsonl"
    code = main(_batch(agent, "tag", rows, out))
    assert code == 0, capsys.readouterr().err
    by_key = {line["key"]: line["inputs"] for line in _lines(out)}
    assert by_key == {0: {"ticket": "one"}, 1: {"ticket": "two"}, 2: {"ticket": "three"}}
    # A line after a blank one is still named by its own number.
    rows.write_bytes(b'{"ticket": "one"}\r\n\r\n{"ticket": "tw')
    code = main(_batch(agent, "tag", rows, tmp_path / "out2.jsonl"))
    assert code == 2
    assert f"{rows}:3: a torn line" in capsys.readouterr().err


def test_max_failures_stops_early(write, tmp_path, capsys) -> None:
    agent = write("agent.yaml", AGENT)
    rows = write("in.jsonl", "".join('{"ticket": ""}\n' for _ in range(10)))
    out = tmp_path / "out.jsonl"
    code = main(_batch(agent, "tag", rows, out, "--max-failures", "2", "--concurrency", "1"))
    err = capsys.readouterr().err
    assert code == 1
    assert len(_lines(out)) == 2
    assert "stopped: 2 rows failed (--max-failures 2)" in err


def test_stdin_input_and_an_output_in_use_is_refused_without_resume(write, tmp_path) -> None:
    agent = write("agent.yaml", AGENT)
    out = tmp_path / "out.jsonl"
    command = [sys.executable, "-m", "openprogram_yaml", "batch", str(agent), "tag"]
    command += ["--input", "-", "--output", str(out)]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    # Standard input is read as the files are: UTF-8, line endings as written.
    done = subprocess.run(
        command,
        input='ticket\r\n"a\r\nb"\r\ncafé\r\n'.encode(),
        capture_output=True,
        env={**env, "PYTHONIOENCODING": "latin-1"},
    )
    assert done.returncode == 0, done.stderr
    by_key = {line["key"]: line["inputs"] for line in _lines(out)}
    assert by_key == {0: {"ticket": "a\r\nb"}, 1: {"ticket": "café"}}
    again = subprocess.run(command, input="", capture_output=True, text=True, env=env)
    assert again.returncode == 2
    assert "already holds rows: pass --resume" in again.stderr


@pytest.mark.parametrize(
    ("stop", "status"),
    [(signal.SIGKILL, -signal.SIGKILL), (signal.SIGINT, 130), (signal.SIGTERM, 143)],
    ids=["kill-9", "ctrl-c", "sigterm"],
)
def test_resume_after_a_stop_loses_no_row_and_runs_none_twice(
    write, tmp_path, stop: signal.Signals, status: int
) -> None:
    # The child runs 2 rows at a time; the server answers the first 6 calls and holds the
    # next two. Once both are held, the 6 rows answered are written (a row starts only
    # after the one before it was written), and the child is stopped: killed with SIGKILL,
    # or interrupted (Ctrl-C, SIGTERM), which cancels the two rows in flight.
    rows_in = write("in.jsonl", "".join(f'{{"ticket": "t{i}"}}\n' for i in range(10)))
    out = tmp_path / "out.jsonl"
    held = threading.Event()
    release = threading.Event()
    count = 0
    lock = threading.Lock()

    def answer(request: Request):  # type: ignore[no-untyped-def]
        nonlocal count
        with lock:
            count += 1
            number = count
        if number > 6:
            if number == 8:
                held.set()
            release.wait(30)
        return json_reply(chat_completion("tag-" + request.json["messages"][-1]["content"]))

    with LoopbackServer() as server:
        server.add(*([answer] * 20))
        agent = write("agent.yaml", LOOPBACK_AGENT % (server.url + "/v1"))
        command = [sys.executable, "-m", "openprogram_yaml", "batch", str(agent), "tag"]
        command += ["--input", str(rows_in), "--output", str(out), "--concurrency", "2"]
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        child = subprocess.Popen(command, env=env, stderr=subprocess.PIPE)
        try:
            assert held.wait(60), "the child never reached the held calls"
            child.send_signal(stop)
            child.wait(30)
        finally:
            release.set()
            if child.poll() is None:
                child.kill()
        assert child.returncode == status
        first = _lines(out)
        assert len(first) == 6
        calls_before = len(server.requests)
        resumed = subprocess.run([*command, "--resume"], env=env, capture_output=True, text=True)
        assert resumed.returncode == 0, resumed.stderr
        assert len(server.requests) - calls_before == 4  # only the rows not written
    lines = _lines(out)
    keys = [line["key"] for line in lines]
    assert sorted(keys) == list(range(10))  # none lost, none twice
    assert all(line["status"] == "ok" for line in lines)
    assert "0 failed, 6 skipped" in resumed.stderr


def test_the_example_dataset_runs_offline(tmp_path, capsys) -> None:
    out = tmp_path / "labels.jsonl"
    tickets = EXAMPLES / "data" / "tickets.jsonl"
    code = main(_batch(EXAMPLES / "triage.yaml", "classify", tickets, out, "--key", "id"))
    assert code == 0, capsys.readouterr().err
    assert len(_lines(out)) == 12


def test_a_batch_replays_recordings_without_the_server(write, tmp_path, capsys) -> None:
    recordings = tmp_path / "recordings"
    with LoopbackServer() as server:
        server.add(*(json_reply(chat_completion(f"tag-{i}")) for i in range(2)))
        agent = write("agent.yaml", LOOPBACK_AGENT % (server.url + "/v1"))
        for ticket in ("one", "two"):
            assert (
                main([str(agent), "tag", "-i", f"ticket={ticket}", "--record", str(recordings)])
                == 0
            )
    # The server is gone: every answer comes from the recordings.
    rows = write("in.jsonl", '{"ticket": "two"}\n{"ticket": "one"}\n')
    out = tmp_path / "out.jsonl"
    capsys.readouterr()
    code = main(_batch(agent, "tag", rows, out, "--replay", str(recordings)))
    assert code == 0, capsys.readouterr().err
    by_key = {line["key"]: line for line in _lines(out)}
    assert by_key[0]["output"] == "tag-1" and by_key[1]["output"] == "tag-0"


def test_secrets_are_redacted_in_lines_and_summary(write, tmp_path, capsys, monkeypatch) -> None:
    monkeypatch.setenv("BATCH_SECRET", "s3cr3t-batch-value-9")
    agent = write(
        "agent.yaml",
        AGENT.replace("model: test\n", "model: test\nvars: {key: '${env:BATCH_SECRET}'}\n"),
    )
    rows = write("in.jsonl", '{"ticket": "s3cr3t-batch-value-9"}\n{"ticket": ""}\n')
    out = tmp_path / "out.jsonl"
    code = main(_batch(agent, "tag", rows, out, "--json"))
    captured = capsys.readouterr()
    assert code == 1
    text = out.read_text(encoding="utf-8")
    assert "s3cr3t-batch-value-9" not in text and "***" in text
    assert "s3cr3t-batch-value-9" not in captured.out + captured.err


def test_an_input_that_is_not_utf8_is_a_clear_error(write, tmp_path, capsys) -> None:
    agent = write("agent.yaml", AGENT)
    rows = tmp_path / "in.jsonl"
    good = b'{"ticket": "one"}\n' * 1000  # past the first read, so rows run before it
    for data in (b'{"ticket": "caf\xe9"}\n', good + b'{"ticket": "caf\xe9"}\n'):
        rows.write_bytes(data)
        out = tmp_path / f"out-{len(data)}.jsonl"
        code = main(_batch(agent, "tag", rows, out))
        err = capsys.readouterr().err
        assert code == 2
        assert f"error: {rows}: not UTF-8 text (invalid continuation byte at byte" in err
        assert "Traceback" not in err


def test_the_input_as_its_own_output_is_refused_and_left_as_it_was(write, capsys) -> None:
    # With --resume an output that holds lines is taken; the same file as the input had
    # the result lines appended to the dataset.
    agent = write("agent.yaml", AGENT)
    rows = write("in.jsonl", '{"ticket": "one"}\n{"ticket": "two"}\n')
    before = rows.read_bytes()
    alias = rows.parent / "." / rows.name
    code = main(_batch(agent, "tag", rows, alias, "--resume"))
    err = capsys.readouterr().err
    assert code == 2
    assert f"error: --output {alias} is the input file: choose another file" in err
    assert rows.read_bytes() == before


def test_a_columns_control_characters_show_as_text(write, tmp_path, capsys) -> None:
    # The dataset names a column; the error quoting it must not drive the terminal.
    agent = write("agent.yaml", AGENT)
    rows = write("in.jsonl", '{"ticket": "x", "\\u001b]52;c;aGk=\\u0007no": 1}\n')
    assert main(_batch(agent, "tag", rows, tmp_path / "out.jsonl")) == 2
    err = capsys.readouterr().err
    assert "\x1b" not in err and "\x07" not in err
    assert "--map \\x1b]52;c;aGk=\\x07no=INPUT" in err


def test_the_summary_shows_an_errors_control_characters_as_text() -> None:
    # A provider's or a model's text quoted in the summary must not drive the terminal: an
    # OSC 52 sequence would set the clipboard, CSI 2J clear the screen.
    from openprogram_yaml.run.batch.driver import BatchSummary
    from openprogram_yaml.run.batch.engine import RowResult
    from openprogram_yaml.runner.batch import _summary_text

    summary = BatchSummary()
    error = {"type": "LLMError", "message": "bad \x1b]52;c;aGk=\x07 reply\x1b[2J\tend"}
    summary.add(RowResult(0, "d", "failed", {}, None, error, None, None, None, 0.5, "{}"))
    text = _summary_text(summary, 1.0)
    assert "\x1b" not in text and "\x07" not in text
    assert "1× LLMError: bad \\x1b]52;c;aGk=\\x07 reply\\x1b[2J\tend" in text
