"""Hostile local inputs of the command line: files named on it (``--input-json @FILE``, a
batch's ``--input`` and ``--output``), files a folder or project holds (a FIFO named like an
agent, a lock file) and the session store. Each gets a clear error and exit status 2, never
a traceback and never a hang (a broken case fails on a timeout instead of blocking the run).
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import threading
from pathlib import Path

import pytest
from support import TAGGER_AGENT, within_time

from openprogram_yaml.errors import UsageError
from openprogram_yaml.run.sessions import SessionStore
from openprogram_yaml.runner.cli import main

AGENT = TAGGER_AGENT


def _refused(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    code = within_time(lambda: main(argv))
    err = capsys.readouterr().err
    assert code == 2, err
    assert "Traceback" not in err
    return err


@pytest.fixture
def agent(tmp_path: Path) -> Path:
    path = tmp_path / "agent.yaml"
    path.write_text(AGENT, encoding="utf-8")
    return path


# --- --input-json @FILE -----------------------------------------------------------------------


def test_input_json_file_that_is_not_utf8_is_positioned(
    agent: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "in.json"
    bad.write_bytes(b'{"ticket":\n "\xc3("}')
    err = _refused(capsys, [str(agent), "tag", "--input-json", f"@{bad}"])
    assert f"{bad}:2:3:" in err and "UTF-8" in err


def test_input_json_from_a_device_is_refused_not_read_without_end(
    agent: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    err = _refused(capsys, [str(agent), "tag", "--input-json", "@/dev/zero"])
    assert "/dev/zero" in err and "not a regular file" in err


def test_input_json_folder_is_refused(
    agent: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    err = _refused(capsys, [str(agent), "tag", "--input-json", f"@{tmp_path}"])
    assert "not a regular file (a folder)" in err


def test_input_json_from_a_pipe_is_read_up_to_its_limit(
    agent: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from openprogram_yaml.runner import cli

    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)

    def feed(data: bytes) -> threading.Thread:
        def run() -> None:
            # The reader may stop early (the data is past the limit): that breaks the pipe.
            with contextlib.suppress(BrokenPipeError), open(fifo, "wb") as stream:
                stream.write(data)

        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        return thread

    feed(b'{"ticket": "piped"}')
    code = within_time(lambda: main([str(agent), "tag", "--input-json", f"@{fifo}"]))
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert "piped" in captured.out

    feed(b'{"ticket": "' + b"x" * cli.MAX_INPUT_JSON_BYTES + b'"}')
    err = _refused(capsys, [str(agent), "tag", "--input-json", f"@{fifo}"])
    assert "larger than" in err


def test_input_json_file_past_the_limit_is_refused_before_it_is_read(
    agent: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from openprogram_yaml.runner.cli import MAX_INPUT_JSON_BYTES

    big = tmp_path / "big.json"
    with big.open("wb") as stream:  # sparse: no disk is used
        stream.truncate(MAX_INPUT_JSON_BYTES + 1)
    err = _refused(capsys, [str(agent), "tag", "--input-json", f"@{big}"])
    assert "larger than" in err


# --- files a folder or project holds ----------------------------------------------------------


def test_a_fifo_named_like_an_agent_in_a_checked_folder_never_blocks(
    agent: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    os.mkfifo(tmp_path / "zz.yaml")
    code = within_time(lambda: main(["check", str(tmp_path)]))
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert "1 agent" in captured.out + captured.err


def _project(folder: Path) -> None:
    (folder / "agents").mkdir()
    (folder / "agents" / "a.yaml").write_text(AGENT, encoding="utf-8")
    (folder / "openprogram.yaml").write_text("version: 1\nagents: ['agents/*.yaml']\n")


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads any file")
def test_a_lock_file_that_cannot_be_read_is_a_config_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _project(tmp_path)
    assert main(["lock", str(tmp_path)]) == 0
    lock = tmp_path / "openprogram.lock"
    lock.chmod(0)
    err = _refused(capsys, ["lock", str(tmp_path), "--check"])
    assert f"{lock}: error: cannot read file: Permission denied; write it again" in err


@pytest.mark.parametrize("kind", ["fifo", "device"])
def test_a_lock_file_that_is_a_fifo_or_device_is_unreadable_not_waited_on(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], kind: str
) -> None:
    _project(tmp_path)
    lock = tmp_path / "openprogram.lock"
    if kind == "fifo":
        os.mkfifo(lock)
    else:
        lock.symlink_to("/dev/zero")
    code = within_time(lambda: main(["lock", str(tmp_path), "--check"]))
    captured = capsys.readouterr()
    assert code == 2, captured.err
    assert f"{lock}: error: not a regular file" in captured.err
    assert "Traceback" not in captured.err


# --- batch --------------------------------------------------------------------------------------


def _batch(agent: Path, rows: Path | str, out: Path | str, *more: str) -> list[str]:
    return ["batch", str(agent), "tag", "--input", str(rows), "--output", str(out), *more]


def test_a_csv_column_named_twice_is_refused_not_half_dropped(
    agent: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = tmp_path / "in.csv"
    rows.write_text("ticket,ticket\na,b\n", encoding="utf-8")
    out = tmp_path / "out.jsonl"
    err = _refused(capsys, _batch(agent, rows, out))
    assert f"{rows}:1: column 'ticket' is named more than once" in err
    assert out.read_text(encoding="utf-8") == ""


def test_a_csv_header_of_many_columns_is_checked_for_twice_named_ones_at_once(
    agent: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Each column was counted over the whole header: 200,000 columns (1.6 MB) took minutes.
    rows = tmp_path / "in.csv"
    columns = [f"c{n}" for n in range(200_000)]
    rows.write_text(",".join(["ticket", *columns, *columns[:7]]) + "\n", encoding="utf-8")
    err = _refused(capsys, _batch(agent, rows, tmp_path / "out.jsonl"))
    assert f"{rows}:1: column 'c0', 'c1', 'c2', 'c3', 'c4' (and 2 more) is named" in err


@pytest.mark.parametrize(
    ("name", "text"),
    [("in.csv", "ticket,x\na,b\n"), ("in.jsonl", '{"ticket": "a", "x": "b"}\n')],
)
def test_two_columns_filling_one_input_are_refused_not_one_dropped(
    agent: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str, text: str
) -> None:
    rows = tmp_path / name
    rows.write_text(text, encoding="utf-8")
    out = tmp_path / "out.jsonl"
    err = _refused(capsys, _batch(agent, rows, out, "--map", "x=ticket"))
    assert "columns 'ticket' and 'x' both fill input 'ticket'" in err
    assert out.read_text(encoding="utf-8") == ""
    # Dropping one of them runs the row with the other.
    code = main(_batch(agent, rows, out, "--map", "x=ticket", "--map", "ticket=", "-q"))
    assert code == 0, capsys.readouterr().err
    (line,) = out.read_text(encoding="utf-8").splitlines()
    assert json.loads(line)["inputs"] == {"ticket": "b"}


def test_a_device_as_batch_input_is_refused_not_read_as_one_endless_line(
    agent: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    err = _refused(capsys, _batch(agent, "/dev/zero", tmp_path / "out.jsonl", "--format", "jsonl"))
    assert "cannot read /dev/zero (--input): a device" in err


def test_a_batch_input_of_one_endless_line_is_refused_not_read_whole(
    agent: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from openprogram_yaml.run.batch.rows import MAX_LINE_CHARS

    rows = tmp_path / "in.jsonl"
    with rows.open("wb") as stream:  # sparse: no disk is used
        stream.write(b'{"ticket": "a"}\n')
        stream.truncate(16 + 4 * MAX_LINE_CHARS)
    out = tmp_path / "out.jsonl"
    err = _refused(capsys, _batch(agent, rows, out))
    assert f"{rows}:2: the line is longer than {MAX_LINE_CHARS:,} characters" in err
    assert [json.loads(line)["key"] for line in out.read_text().splitlines()] == [0]


def test_a_first_line_past_the_bound_is_refused_too(
    agent: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from openprogram_yaml.run.batch.rows import MAX_LINE_CHARS

    rows = tmp_path / "in.jsonl"
    with rows.open("wb") as stream:  # sparse: no disk is used
        stream.truncate(4 * MAX_LINE_CHARS)
    out = tmp_path / "out.jsonl"
    err = _refused(capsys, _batch(agent, rows, out))
    assert f"{rows}:1: the line is longer than {MAX_LINE_CHARS:,} characters" in err


def test_a_json_array_on_one_line_past_the_line_bound_is_read_whole(
    agent: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A JSON array is read whole, as it always was, and ``json.dump`` writes it on one line:
    the bound on a line of JSON Lines or CSV (a row) refused a dataset of 28 MiB written so."""
    from openprogram_yaml.run.batch.rows import MAX_LINE_CHARS

    rows = tmp_path / "in.json"
    rows.write_text('[{"ticket": "a"},' + " " * MAX_LINE_CHARS + '{"ticket": "b"}]')
    out = tmp_path / "out.jsonl"
    code = within_time(lambda: main(_batch(agent, rows, out)))
    assert code == 0, capsys.readouterr().err
    tickets = [json.loads(line)["inputs"]["ticket"] for line in out.read_text().splitlines()]
    assert sorted(tickets) == ["a", "b"]


def test_resume_from_a_device_is_refused_not_read_without_end(
    agent: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = tmp_path / "in.jsonl"
    rows.write_text('{"ticket": "a"}\n', encoding="utf-8")
    err = _refused(capsys, _batch(agent, rows, "/dev/zero", "--resume"))
    assert "cannot read /dev/zero (--resume): not a regular file" in err


def test_rows_of_a_fifo_are_not_counted_by_reading_it_a_second_time(tmp_path: Path) -> None:
    from openprogram_yaml.runner.batch import _count_rows

    fifo = tmp_path / "rows.jsonl"
    os.mkfifo(fifo)
    # Opening it to count would wait for a writer; reading it would take the batch's rows.
    assert within_time(lambda: _count_rows(str(fifo), "jsonl") or 0) == 0


# --- the session store ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("column", "value"),
    # A number in a TEXT column is made text by SQLite; a blob stays a blob.
    [("content", b"\xff\xfe\x00"), ("created_at", b"now"), ("version", b"v1")],
)
def test_a_stored_message_that_is_not_text_is_named_not_passed_on(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    column: str,
    value: object,
) -> None:
    path = tmp_path / ".openprogram" / "sessions.db"
    with SessionStore(path) as store:
        store.open("s1", "bot", "talk")
        store.add_turn("s1", "hi", "hello", run_id=None, version=None)
    db = sqlite3.connect(path)
    with db:
        db.execute(f"UPDATE messages SET {column} = ? WHERE role = 'assistant'", (value,))
    db.close()
    with SessionStore(path) as store, pytest.raises(UsageError, match="not text"):
        store.history("s1")  # never bytes or a number as a message to a model
    monkeypatch.chdir(tmp_path)
    for action in ("show", "export"):
        err = _refused(capsys, ["sessions", action, "s1"])
        assert "holds a message of session 's1' that is not text" in err
    # It can be deleted.
    assert main(["sessions", "delete", "s1"]) == 0
    with SessionStore(path) as store:
        assert store.sessions() == []


def test_a_stored_session_that_is_not_text_is_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / ".openprogram" / "sessions.db"
    with SessionStore(path) as store:
        store.open("s1", "bot", "talk")
    db = sqlite3.connect(path)
    with db:
        db.execute("UPDATE sessions SET agent = ?", (b"\x00\x01",))
    db.close()
    monkeypatch.chdir(tmp_path)
    for argv in (["sessions", "list", "--json"], ["sessions", "export", "s1"]):
        err = _refused(capsys, argv)
        assert "holds a session that is not text ('s1')" in err


# --- recordings -------------------------------------------------------------------------------


def _recorded(agent: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    folder = tmp_path / "rec"
    assert main([str(agent), "tag", "-i", "ticket=x", "--record", str(folder)]) == 0
    capsys.readouterr()
    (recording,) = folder.glob("*/*.yaml")
    return recording


@pytest.mark.parametrize("count", [".inf", "-.inf", ".nan", "1e400"])
def test_a_recorded_count_that_is_no_finite_number_counts_as_none(
    agent: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], count: str
) -> None:
    recording = _recorded(agent, tmp_path, capsys)
    text = recording.read_text(encoding="utf-8")
    recording.write_text(text.replace("input_tokens: 3", f"input_tokens: {count}"))
    argv = [str(agent), "tag", "-i", "ticket=x", "--replay", str(recording.parent.parent)]
    code = main([*argv, "--json"])
    captured = capsys.readouterr()
    assert code == 0, captured.err  # an OverflowError or ValueError failed the run
    assert json.loads(captured.out)["usage"]["input_tokens"] == 0


@pytest.mark.parametrize(
    ("calls", "message"),
    [
        ("[{name: lookup}]", "tool call 0 of 'response.tool_calls' needs an 'id' and a 'name'"),
        ("[{id: c1}]", "tool call 0 of 'response.tool_calls' needs an 'id' and a 'name'"),
        ("[{id: c1, name: [x]}]", "tool call 0 of 'response.tool_calls' needs an 'id'"),
        ("[7]", "tool call 0 of 'response.tool_calls' needs an 'id' and a 'name'"),
        ("7", "'response.tool_calls' must be a list of tool calls"),
    ],
)
def test_a_recorded_tool_call_without_id_or_name_is_a_positioned_error(
    agent: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], calls: str, message: str
) -> None:
    recording = _recorded(agent, tmp_path, capsys)
    text = recording.read_text(encoding="utf-8")
    assert "  tool_calls: []\n" in text
    recording.write_text(text.replace("  tool_calls: []\n", f"  tool_calls: {calls}\n"))
    line = text.splitlines().index("  tool_calls: []") + 1
    argv = [str(agent), "tag", "-i", "ticket=x", "--replay", str(recording.parent.parent)]
    code = main(argv)
    err = capsys.readouterr().err
    assert code == 2, err  # bad input, said before the run (it was the turn's failure, 1)
    assert f"{recording}:{line}:" in err and message in err, err
    assert "KeyError" not in err and "nothing was run" in err


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        (
            "  content: 'test reply",
            "  content: {a: 1}\n  was: 'test reply",
            "'response.content' must be text",
        ),
        ("  thinking: ''", "  thinking: [x]", "'response.thinking' must be text"),
        (
            "  finish_reason: stop",
            "  finish_reason: {x: 1}",
            "'response.finish_reason' must be text",
        ),
        (
            "  tool_calls: []",
            "  tool_calls: [{id: c1, name: tag, arguments: {a: 1}}]",
            "must be JSON text",
        ),
        ("  usage:\n", "  usage: 3\n  was:\n", "'response.usage' must be a mapping"),
    ],
)
def test_a_recorded_reply_of_what_no_model_answers_is_a_positioned_error(
    agent: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    old: str,
    new: str,
    message: str,
) -> None:
    # A mapping as the reply's content was replayed as its Python text ("{'a': 1}"), and a
    # tool call's arguments the same way: what no model ever sent.
    recording = _recorded(agent, tmp_path, capsys)
    text = recording.read_text(encoding="utf-8")
    assert old in text
    recording.write_text(text.replace(old, new, 1))
    argv = [str(agent), "tag", "-i", "ticket=x", "--replay", str(recording.parent.parent)]
    code = main(argv)
    err = capsys.readouterr().err
    assert code == 2, err
    assert f"{recording}:" in err and message in err, err
    assert "nothing was run" in err


# --- names and environment values that are not UTF-8 ----------------------------------------


def test_an_agent_file_whose_name_is_not_utf8_is_checked_and_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    name = os.fsdecode(b"\xff\xfe.yaml")  # what a shell passes: os keeps the bytes
    try:
        (tmp_path / name).write_text(AGENT, encoding="utf-8")
    except (OSError, UnicodeEncodeError):
        pytest.skip("this file system takes no such name")
    monkeypatch.chdir(tmp_path)
    for argv in (["check", name], [name, "tag", "-i", "ticket=x"], ["lock", name]):
        code = main(argv)
        captured = capsys.readouterr()
        assert code == 0, captured.err  # a UnicodeEncodeError hashing the name
    # PATH is part of the compile cache's key: a folder in it need not be UTF-8 either.
    monkeypatch.setenv("PATH", os.environ.get("PATH", "") + os.pathsep + os.fsdecode(b"/\xff"))
    code = main([name, "tag", "-i", "ticket=y"])
    assert code == 0, capsys.readouterr().err


def test_an_environment_value_that_is_not_utf8_is_a_positioned_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "agent.yaml"
    path.write_text(
        'version: 1\nname: e\nmodel: test\nmethods:\n  m:\n    prompt: "Hi ${env:GREETING}"\n',
        encoding="utf-8",
    )
    monkeypatch.setenv("GREETING", os.fsdecode(b"caf\xe9"))  # Latin-1, not UTF-8
    for argv in (["check", str(path)], [str(path), "m"], ["render", str(path), "m"]):
        err = _refused(capsys, argv)
        assert f"{path}:6:" in err, err
        assert "GREETING" in err and "not UTF-8" in err


# --- prompt tests files -----------------------------------------------------------------------


def test_dataset_cases_holding_line_separators_in_strings_are_one_line_each(
    agent: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "openprogram.yaml").write_text(
        "version: 1\nagents: ['agent.yaml']\ntests: ['tests/*.yaml']\n", encoding="utf-8"
    )
    (tmp_path / "tests" / "data").mkdir(parents=True)
    (tmp_path / "tests" / "t.yaml").write_text(
        "version: 1\nagent: tagger\ntests:\n  - name: d\n    method: tag\n"
        "    cases: data/cases.jsonl\n    expect: {contains: reply}\n",
        encoding="utf-8",
    )
    # json.dumps(ensure_ascii=False) writes U+2028, U+2029 and U+0085 raw: JSON allows it.
    rows = [{"ticket": f"a{c}b"} for c in ("\u2028", "\u2029", "\x85")]
    lines = [json.dumps(row, ensure_ascii=False) for row in rows]
    cases = tmp_path / "tests" / "data" / "cases.jsonl"
    cases.write_text("\n".join([*lines, '{"bad']) + "\n", encoding="utf-8")
    err = _refused(capsys, ["check", str(tmp_path)])
    # One error, at the line that is broken (the 4th), not one per separator.
    assert err.count("error:") == 1, err
    assert "cases.jsonl:4:1: error: not a JSON object" in err
    cases.write_text("\r\n".join(lines) + "\r\n", encoding="utf-8")
    code = main(["test", str(tmp_path), "--json"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert len(json.loads(captured.out)["results"]) == 3


# --- inputs no record can carry ---------------------------------------------------------------


@pytest.mark.parametrize(
    "argv",
    [
        ["--input-json", '{"ticket": "\\ud800"}'],  # half of a UTF-16 pair
        ["--input-json", '{"ticket": {"k\\ud800": ["ok"]}}'],  # in a key
        ["-i", "ticket=" + os.fsdecode(b"caf\xe9")],  # a Latin-1 byte on the command line
        ["-i", "ticket=ok", "--input-json", '{"n": NaN}'],
        ["-i", "ticket=ok", "-i", "n=Infinity"],
        ["-i", "ticket=ok", "-i", "n=1e999"],
    ],
)
def test_an_input_no_record_can_carry_is_refused_before_the_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    path = tmp_path / "agent.yaml"
    path.write_text(AGENT.replace("priority:", "n: {type: number}\n      priority:"))
    records = tmp_path / "records.jsonl"
    err = _refused(capsys, [str(path), "tag", *argv, "--records", str(records)])
    assert "are not JSON text" in err, err  # was a UnicodeEncodeError writing the record
    assert not records.exists() or records.read_text(encoding="utf-8") == ""


@pytest.mark.parametrize(
    ("row", "problem"),
    [
        ('{"ticket": "\\ud800"}', "ticket: text that is not valid Unicode"),
        ('{"ticket": "ok", "priority": NaN}', "priority: nan is not a JSON number"),
    ],
)
def test_a_batch_row_no_record_can_carry_stops_the_batch_at_its_line(
    agent: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], row: str, problem: str
) -> None:
    rows = tmp_path / "in.jsonl"
    rows.write_text('{"ticket": "fine"}\n' + row + "\n", encoding="utf-8")
    out = tmp_path / "out.jsonl"
    err = _refused(capsys, _batch(agent, rows, out, "--concurrency", "1"))
    assert f"{rows}:2: {problem}" in err, err
    lines = out.read_text(encoding="utf-8").splitlines()
    assert [json.loads(line)["status"] for line in lines] == ["ok"]


def test_a_surrogate_pair_is_text_and_runs(agent: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main([str(agent), "tag", "--input-json", '{"ticket": "\\ud83d\\ude00"}'])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert "\U0001f600" in captured.out


# --- tool results holding lone surrogates -----------------------------------------------------


def test_a_python_tool_returning_a_lone_surrogate_does_not_break_the_record(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    module = f"surrogate_tool_{os.getpid()}"
    (tmp_path / f"{module}.py").write_text(
        "def t(text: str) -> str:\n    return 'half \\ud800 of a pair, ' + text\n",
        encoding="utf-8",
    )
    path = tmp_path / "agent.yaml"
    path.write_text(
        "version: 1\nname: a\nmodel: test\n"
        f"tools:\n  t: {{description: x, python: '{module}:t'}}\n"
        "methods:\n  m: {prompt: go}\n",
        encoding="utf-8",
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    records = tmp_path / "records.jsonl"
    code = main([str(path), "m", "--records", str(records)])
    captured = capsys.readouterr()
    assert code == 0, captured.err  # a UnicodeEncodeError writing the record
    assert "half \ufffd of a pair" in records.read_text(encoding="utf-8")


@pytest.mark.parametrize(
    ("content_type", "body", "expected"),
    [
        ("text/plain; charset=utf-7", b"a +2AA- b", "a \ufffd b"),
        ("text/plain; charset=unicode_escape", b"a \\ud800 b", "a \ufffd b"),
        ("application/json", b'{"k\\udfff": ["\\ud800", "\\ud83d\\ude00"]}', None),
    ],
)
def test_an_http_reply_decoding_to_lone_surrogates_is_made_text(
    tmp_path: Path, content_type: str, body: bytes, expected: str | None
) -> None:
    import asyncio

    from loopback import LoopbackServer, Reply

    from openprogram_yaml.compile.project import compile_path

    with LoopbackServer() as server:
        server.add(Reply(200, body, {"content-type": content_type}))
        path = tmp_path / "agent.yaml"
        path.write_text(
            "version: 1\nname: a\nmodel: test\n"
            f"tools:\n  fetch: {{description: x, http: {{url: '{server.url}/x'}}}}\n"
            "methods:\n  m: {prompt: go}\n",
            encoding="utf-8",
        )
        tool = next(t for t in compile_path(path).agent().tools if t.name == "fetch")

        async def go() -> object:
            try:
                return await tool.execute()
            finally:
                await tool.aclose()

        result = asyncio.run(go())
    if expected is None:
        assert result == {"k\ufffd": ["\ufffd", "\U0001f600"]}
    else:
        assert result == expected
    json.dumps(result, ensure_ascii=False).encode("utf-8")  # writable


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full here")
def test_a_batch_output_that_fills_up_is_an_error_naming_it(
    agent: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = tmp_path / "in.jsonl"
    rows.write_text('{"ticket": "a"}\n', encoding="utf-8")
    err = _refused(capsys, _batch(agent, rows, "/dev/full"))  # an OSError traceback before
    assert "cannot write /dev/full (--output): No space left on device" in err


@pytest.mark.parametrize("dangling", [False, True])
def test_a_session_store_that_is_a_link_is_not_written_through(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], dangling: bool
) -> None:
    victim = tmp_path / "elsewhere" / "victim"
    victim.parent.mkdir()
    if not dangling:
        victim.write_text("precious\n", encoding="utf-8")
    link = tmp_path / "project" / ".openprogram" / "sessions.db"
    link.parent.mkdir(parents=True)
    link.symlink_to(victim)
    with SessionStore(link) as store, pytest.raises(UsageError, match="a symbolic link"):
        store.open("s1", "bot", "talk")
    # Neither written into (SQLite made it a store) nor created where the link points.
    if dangling:
        assert not victim.exists()
    else:
        assert victim.read_text(encoding="utf-8") == "precious\n"


def _one_record(records: Path) -> dict[str, object]:
    lines = records.read_text(encoding="utf-8").splitlines()
    assert len(lines) == 1
    record: dict[str, object] = json.loads(lines[0])
    return record


def test_a_recording_label_folder_linked_elsewhere_is_not_written_through(
    agent: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    folder = tmp_path / "rec"
    folder.mkdir()
    (folder / "tagger.tag").symlink_to(elsewhere)  # as a repository may hold it
    records = tmp_path / "runs.jsonl"
    argv = [str(agent), "tag", "-i", "ticket=x", "--record", str(folder), "--records"]
    err = _refused(capsys, [*argv, str(records)])  # exit 1 before, as a failed model call
    assert f"{folder / 'tagger.tag'}: error: is a symbolic link; recordings are not " in err
    assert "remove the link or record into another folder" in err
    assert list(elsewhere.iterdir()) == []
    # The run is still kept where runs go, saying why it stopped.
    record = _one_record(records)
    assert record["status"] == "failed"
    assert "is a symbolic link" in str(record["error"])


def test_a_file_in_the_place_of_a_recording_label_folder_is_a_config_error(
    agent: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "rec"
    folder.mkdir()
    (folder / "tagger.tag").write_text("mine\n", encoding="utf-8")
    records = tmp_path / "runs.jsonl"
    argv = [str(agent), "tag", "-i", "ticket=x", "--record", str(folder), "--records"]
    err = _refused(capsys, [*argv, str(records)])  # exit 1 before ("File exists")
    assert f"{folder / 'tagger.tag'}: error: cannot hold recordings (is not a folder)" in err
    assert (folder / "tagger.tag").read_text(encoding="utf-8") == "mine\n"
    assert _one_record(records)["status"] == "failed"


def _broken_recordings(kind: str, tmp_path: Path) -> tuple[Path, str]:
    """A recordings folder broken as ``kind`` says, and what the error must name."""
    folder = tmp_path / "recordings"
    if kind == "file":
        folder.write_text("not a folder\n", encoding="utf-8")
        return folder, f"{folder}: error: not a folder"
    if kind == "missing":
        return folder, f"{folder}: error: no recordings folder here"
    (folder / "tagger.tag").mkdir(parents=True)
    if kind == "malformed":
        (folder / "tagger.tag" / "0.yaml").write_text("request: [\n", encoding="utf-8")
        return folder, f"{folder / 'tagger.tag' / '0.yaml'}:2:1: error: invalid YAML"
    if kind == "not a recording":
        (folder / "tagger.tag" / "0.yaml").write_text("request: {}\n", encoding="utf-8")
        return folder, f"{folder / 'tagger.tag' / '0.yaml'}:1:1: error: not a recording"
    assert kind == "fifo"
    os.mkfifo(folder / "tagger.tag" / "0.yaml")
    return folder, f"{folder / 'tagger.tag' / '0.yaml'}: error: not a regular file"


@pytest.mark.parametrize("kind", ["file", "missing", "malformed", "not a recording", "fifo"])
def test_a_broken_replay_model_folder_is_a_config_error_naming_it(
    agent: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], kind: str
) -> None:
    folder, named = _broken_recordings(kind, tmp_path)
    records = tmp_path / "runs.jsonl"
    argv = [str(agent), "tag", "-i", "ticket=x", "--model", f"replay:{folder}"]
    err = _refused(capsys, [*argv, "--records", str(records)])  # exit 1 before
    assert named in err
    record = _one_record(records)
    assert (record["status"], record["model"]) == ("failed", f"replay:{folder}")
    assert named in str(record["error"])


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads any folder")
@pytest.mark.parametrize("level", ["folder", "label folder"])
def test_an_unreadable_replay_folder_is_a_config_error_not_an_empty_one(
    agent: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], level: str
) -> None:
    folder = tmp_path / "recordings"
    (folder / "tagger.tag").mkdir(parents=True)
    locked = folder if level == "folder" else folder / "tagger.tag"
    locked.chmod(0)
    try:
        argv = [str(agent), "tag", "-i", "ticket=x", "--model", f"replay:{folder}"]
        err = _refused(capsys, argv)  # "no recordings for 'tagger.tag'" and exit 1 before
    finally:
        locked.chmod(0o755)
    assert f"{locked}: error: cannot read this recordings folder (Permission denied)" in err


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full here")
@pytest.mark.parametrize("buffered", [True, False])
@pytest.mark.parametrize(
    "argv", [["--version"], ["check", "AGENT"], ["AGENT", "tag", "-i", "ticket=x"]]
)
def test_standard_output_that_cannot_be_written_is_said_in_a_line(
    agent: Path, argv: list[str], buffered: bool
) -> None:
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    if not buffered:
        env["PYTHONUNBUFFERED"] = "1"
    code = "from openprogram_yaml.runner.cli import entrypoint; entrypoint()"
    with open("/dev/full", "w") as full:
        proc = subprocess.run(
            [sys.executable, "-c", code, *(str(agent) if a == "AGENT" else a for a in argv)],
            stdout=full,
            stderr=subprocess.PIPE,
            text=True,
            timeout=60,
            env=env,
        )
    assert proc.returncode == 1, proc.stderr  # a traceback before
    assert proc.stderr == "error: cannot write the output: No space left on device\n"


@pytest.mark.parametrize(
    ("regex", "shape"),
    [
        ("(a+)+$", "nests unbounded repetitions"),
        # Passed before, and the run was still searching when the 60 s ran out.
        ("(a|aa)+$", "repeats alternatives that can match the same text"),
    ],
)
def test_a_tests_file_regex_nesting_repetitions_is_refused_not_searched_for_minutes(
    agent: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], regex: str, shape: str
) -> None:
    (tmp_path / "openprogram.yaml").write_text(
        "version: 1\nagents: ['agent.yaml']\ntests: ['t.yaml']\n", encoding="utf-8"
    )
    tests = tmp_path / "t.yaml"
    tests.write_text(
        "version: 1\nagent: tagger\ntests:\n  - name: d\n    method: tag\n"
        "    inputs: {ticket: " + "a" * 40 + "!}\n    expect: {regex: '" + regex + "'}\n",
        encoding="utf-8",
    )
    import subprocess
    import sys

    # In a child process: a search that backtracks holds the interpreter's lock, so no
    # thread of this one could give up on it. (The test model echoes the ticket.)
    proc = subprocess.run(
        [sys.executable, "-m", "openprogram_yaml", "test", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2, proc.stderr
    assert f"{tests}:7:" in proc.stderr and shape in proc.stderr
    assert "Traceback" not in proc.stderr
