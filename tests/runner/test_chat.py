"""``openprogram-run chat``: a real child process on a pseudo-terminal (its controlling
terminal, so that Ctrl-C is a signal as at a shell), talking to the loopback chat server or
the offline ``test`` model; and ``openprogram-run sessions`` on what the chats kept.

No sleeps: every wait is for output on the terminal, bounded by a limit a healthy run never
reaches."""

from __future__ import annotations

import base64
import contextlib
import fcntl
import json
import os
import re
import select
import subprocess
import sys
import termios
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from loopback import Gated, LoopbackServer, Reply, openai_sse, sse_reply

from openprogram_yaml.runner.cli import main

AGENT = """\
version: 1
name: pal
model: local:llama3
retry: {max_retries: 1}
runtimes:
  - {match: "local:*", runtime: openai, options: {base_url: "%s", api_key_env: PAL_KEY}}
methods:
  talk:
    inputs: {message: {type: string}}
    prompt: "{{ message }}"
"""

OFFLINE = """\
version: 1
name: pal
model: test
methods:
  talk:
    inputs: {message: {type: string}}
    prompt: "%s {{ message }}"
  brief:
    inputs: {topic: {type: string}, tone: {type: string}}
    prompt: "{{ topic }} {{ tone }}"
"""

#: The prompt as the terminal shows it (prompt_toolkit moves the cursor over the space).
PROMPT = "\n>"
SECRET = "sk-pal-0123456789abcdef"
_ANSI = re.compile(rb"\x1b\[[0-?]*[ -/]*[@-~]|\x1b[()][0-9A-Za-z]|\x1b[=>]|\r")


def _chunk(text: str) -> dict[str, object]:
    return {"choices": [{"index": 0, "delta": {"content": text}, "finish_reason": None}]}


def _done() -> dict[str, object]:
    return {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}


def _answer(*pieces: str) -> Reply:
    return sse_reply(openai_sse([*map(_chunk, pieces), _done()]))


class _Terminal:
    """``openprogram-run chat ARGS`` on a pty that is its controlling terminal."""

    def __init__(self, args: list[str], cwd: Path) -> None:
        controller, terminal = os.openpty()
        env = {**os.environ, "PAL_KEY": SECRET, "PROMPT_TOOLKIT_NO_CPR": "1", "TERM": "xterm"}

        def own_terminal() -> None:  # in the child, after setsid: Ctrl-C becomes SIGINT
            fcntl.ioctl(0, termios.TIOCSCTTY, 0)

        self.proc = subprocess.Popen(
            [sys.executable, "-m", "openprogram_yaml", "chat", *args],
            stdin=terminal,
            stdout=terminal,
            stderr=terminal,
            cwd=cwd,
            env=env,
            start_new_session=True,
            preexec_fn=own_terminal,
        )
        os.close(terminal)
        self.fd = controller
        #: Everything shown so far, escape sequences removed.
        self.shown = b""
        self._seen = 0

    def wait_for(self, wanted: str, limit_s: float = 60.0) -> str:
        """What the terminal showed up to and including ``wanted`` (after what earlier
        waits consumed)."""
        want = wanted.encode()
        end = time.monotonic() + limit_s
        while want not in self.shown[self._seen :]:
            left = end - time.monotonic()
            assert left > 0, f"no {wanted!r} on the terminal: {self.shown[self._seen :]!r}"
            ready, _, _ = select.select([self.fd], [], [], left)
            if ready:
                try:
                    chunk = os.read(self.fd, 4096)
                except OSError:
                    chunk = b""
                assert chunk, f"the terminal closed before {wanted!r}: {self.shown!r}"
                self.shown += _ANSI.sub(b"", chunk)
        start = self._seen
        self._seen = self.shown.index(want, self._seen) + len(want)
        return self.shown[start : self._seen].decode(errors="replace")

    def type(self, text: str) -> None:
        os.write(self.fd, text.encode())

    def close(self, limit_s: float = 60.0) -> int:
        """Ctrl-D at the prompt, and the exit status."""
        self.type("\x04")
        try:
            code = self.proc.wait(limit_s)
        finally:
            self.proc.kill()
            os.close(self.fd)
        return code


@contextlib.contextmanager
def _chat(args: list[str], cwd: Path) -> Iterator[_Terminal]:
    term = _Terminal(args, cwd)
    try:
        yield term
    finally:
        if term.proc.poll() is None:
            term.proc.kill()
            term.proc.wait()


def test_a_conversation_streams_answers_and_a_resume_sends_the_history(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with LoopbackServer() as server:
        (tmp_path / "pal.yaml").write_text(AGENT % (server.url + "/v1"))
        server.add(_answer("Hello, ", "Ada!"), _answer("Fine, ", "thanks."))
        with _chat(["pal.yaml", "--session", "work"], tmp_path) as term:
            term.wait_for("session work (new)")
            term.wait_for(PROMPT)
            term.type("hi, I am Ada\r")
            term.wait_for("Hello, Ada!")
            term.wait_for(PROMPT)
            term.type(f"how are you? my key is {SECRET}\r")
            term.wait_for("Fine, thanks.")
            term.wait_for(PROMPT)
            assert term.close() == 0
        server.add(_answer("You are Ada."))
        with _chat(["pal.yaml", "--session", "work"], tmp_path) as term:
            term.wait_for("session work (resumed, 4 messages)")
            term.wait_for(PROMPT)
            term.type("who am I?\r")
            term.wait_for("You are Ada.")
            term.wait_for(PROMPT)
            assert term.close() == 0
        requests = server.requests
    assert [r.json["stream"] for r in requests] == [True, True, True]
    sent = [
        (m["role"], m["content"]) for m in requests[2].json["messages"] if m["role"] != "system"
    ]
    assert sent == [
        ("user", "hi, I am Ada"),
        ("assistant", "Hello, Ada!"),
        ("user", "how are you? my key is ***"),  # kept redacted
        ("assistant", "Fine, thanks."),
        ("user", "who am I?"),
    ]
    kept = tmp_path / ".openprogram"
    for name in ("sessions.db", "sessions.db-wal", "chat_history"):
        if (kept / name).exists():
            assert SECRET.encode() not in (kept / name).read_bytes(), name
    assert "my key is ***" in (kept / "chat_history").read_text()
    # One person's conversations: readable by their owner alone, as a shell's history is.
    assert (kept / "chat_history").stat().st_mode & 0o777 == 0o600

    # What the chats kept, through `openprogram-run sessions`.
    assert main(["sessions", "-p", str(tmp_path)]) == 0
    assert "work  pal.talk  6 messages" in capsys.readouterr().out
    assert main(["sessions", "show", "work", "-p", str(tmp_path)]) == 0
    shown = capsys.readouterr().out
    assert "you:\nwho am I?\n\npal:\nYou are Ada.\n" in shown
    assert main(["sessions", "export", "work", "-p", str(tmp_path)]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert lines[0]["session"]["messages"] == 6
    assert [line["role"] for line in lines[1:]] == ["user", "assistant"] * 3
    assert main(["sessions", "delete", "work", "-p", str(tmp_path)]) == 0
    assert main(["sessions", "show", "work", "-p", str(tmp_path)]) == 2
    assert "no session 'work'" in capsys.readouterr().err


def _story_held_then_short(server: LoopbackServer, tmp_path: Path, gate: threading.Event) -> None:
    """The chat agent on ``server``, which answers "Once upon ", holds "a time" until
    ``gate`` is set, then answers "Short." to the next message."""
    (tmp_path / "pal.yaml").write_text(AGENT % (server.url + "/v1"))
    events = openai_sse([_chunk("Once upon "), _chunk("a time"), _done()])
    reply = sse_reply([])
    server.add(Reply(reply.status, b"", reply.headers, events=Gated(events, 1, gate)))
    server.add(_answer("Short."))


def _a_short_one_then(term: _Terminal) -> None:
    """The next message, answered "Short.", then Ctrl-D: the chat went on, and ends well."""
    term.wait_for(PROMPT)
    term.type("a short one then\r")
    term.wait_for("Short.")
    term.wait_for(PROMPT)
    assert term.close() == 0


def test_ctrl_c_cancels_the_answer_and_the_run_is_recorded_as_interrupted(
    tmp_path: Path,
) -> None:
    gate = threading.Event()
    with LoopbackServer() as server:
        _story_held_then_short(server, tmp_path, gate)
        try:
            with _chat(["pal.yaml", "--session", "s", "--records", "runs.jsonl"], tmp_path) as term:
                term.wait_for(PROMPT)
                term.type("tell me a story\r")
                term.wait_for("Once upon ")
                term.type("\x03")  # Ctrl-C while the answer comes
                term.wait_for("(cancelled; the session is as it was)")
                gate.set()
                _a_short_one_then(term)
        finally:
            gate.set()
        second = server.requests[-1].json["messages"]
    records = [json.loads(line) for line in (tmp_path / "runs.jsonl").read_text().splitlines()]
    assert [r["status"] for r in records] == ["interrupted", "ok"]
    # The cancelled exchange is not part of the conversation.
    assert [m["content"] for m in second if m["role"] != "system"] == ["a short one then"]


def test_the_files_reload_while_chatting_and_commands_answer(tmp_path: Path) -> None:
    agent = tmp_path / "pal.yaml"
    agent.write_text(OFFLINE % "v1")
    with _chat(["pal.yaml", "talk"], tmp_path) as term:
        term.wait_for("(new)")
        term.wait_for(PROMPT)
        term.type("hi\r")
        term.wait_for("test reply to: v1 hi")
        term.wait_for(PROMPT)
        agent.write_text(OFFLINE % "v2")
        term.wait_for("reloaded (pal.yaml changed)")
        term.type("hi\r")
        term.wait_for("test reply to: v2 hi")
        term.wait_for(PROMPT)
        term.type("/model\r")
        term.wait_for("model: test")
        term.type("/model nope:x\r")
        term.wait_for("model: nope:x")
        term.wait_for(PROMPT)
        term.type("hi\r")
        shown = term.wait_for("nope:x")
        assert "error: " in shown and "Traceback" not in shown, shown
        term.wait_for(PROMPT)
        term.type("/model test\r")
        term.wait_for("model: test")
        term.wait_for(PROMPT)
        term.type("dropped\x03")  # Ctrl-C at the prompt drops the line
        term.wait_for(PROMPT)
        term.type("again\r")
        term.wait_for("test reply to: v2 again")
        term.wait_for(PROMPT)
        term.type("/help\r")
        term.wait_for("/reset")
        term.type("/save saved.jsonl\r")
        term.wait_for("to saved.jsonl")
        term.type("/reset\r")
        term.wait_for("new session chat-")
        term.type("/nope\r")
        term.wait_for("unknown command /nope; /help lists them")
        term.wait_for(PROMPT)
        assert term.close() == 0
    saved = [json.loads(line) for line in (tmp_path / "saved.jsonl").read_text().splitlines()]
    assert [m["content"] for m in saved[1:]] == [
        "hi",
        "test reply to: v1 hi",
        "hi",
        "test reply to: v2 hi",
        "again",
        "test reply to: v2 again",
    ]
    assert main(["sessions", "-p", str(tmp_path)]) == 0


def test_a_method_with_several_inputs_asks_to_fix_the_others(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "pal.yaml").write_text(OFFLINE % "v1")
    assert main(["chat", str(tmp_path / "pal.yaml"), "brief"]) == 2
    err = capsys.readouterr().err
    assert "takes several inputs (topic, tone): give all but the one the message" in err
    # With the others fixed the chat would start; here stdin is no terminal.
    assert main(["chat", str(tmp_path / "pal.yaml"), "brief", "-i", "tone=dry"]) == 2
    assert "error: chat needs a terminal" in capsys.readouterr().err
    assert not (tmp_path / ".openprogram" / "sessions.db").exists()


TOOLS_AGENT = """\
version: 1
name: helper
model: test
tools:
  lookup:
    python: helper_tools:lookup
methods:
  ask:
    inputs: {question: {type: string}}
    prompt: "{{ question }}"
"""


def test_tool_calls_show_as_one_line_events_in_the_chat(tmp_path: Path) -> None:
    (tmp_path / "helper_tools.py").write_text(
        'def lookup(topic: str) -> str:\n    """Look a topic up."""\n    return "found 3 notes"\n'
    )
    (tmp_path / "helper.yaml").write_text(TOOLS_AGENT)
    with _chat(["helper.yaml"], tmp_path) as term:
        term.wait_for(PROMPT)
        term.type("what do we know?\r")
        term.wait_for("→ lookup({")
        term.wait_for("← lookup returned: found 3 notes")
        term.wait_for("tool results: lookup: found 3 notes")
        term.wait_for(PROMPT)
        assert term.close() == 0


PHOTO_AGENT = """\
version: 1
name: looker
model: test
methods:
  ask:
    inputs:
      photo: {type: string, contentMediaType: image/png}
      question: {type: string}
    prompt: "{{ question }}"
"""


def test_a_file_input_is_read_from_at_file_as_a_run_reads_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # -i NAME=@FILE reads the file in a chat as in a run: a missing one is a clear error
    # (it was taken as the text '@missing.png').
    (tmp_path / "looker.yaml").write_text(PHOTO_AGENT)
    missing = str(tmp_path / "missing.png")
    assert main(["chat", str(tmp_path / "looker.yaml"), "-i", f"photo=@{missing}"]) == 2
    err = capsys.readouterr().err
    assert "error: -i photo: " in err and "missing.png" in err


def test_sessions_show_on_a_terminal_shows_escape_sequences_as_text(tmp_path: Path) -> None:
    from openprogram_yaml.run.sessions import SessionStore, sessions_path

    with SessionStore(sessions_path(tmp_path)) as store:
        store.open("work", "pal", "talk")
        store.add_turn("work", "hi", "\x1b]52;c;ZXZpbA==\x07hello", run_id="r1", version="v1")
    controller, terminal = os.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "openprogram_yaml", "sessions", "show", "work", "-p", str(tmp_path)],
        stdin=subprocess.DEVNULL,
        stdout=terminal,
        stderr=subprocess.PIPE,
    )
    os.close(terminal)
    try:
        _, err = proc.communicate(timeout=60)
        out = bytearray()
        while True:
            try:
                chunk = os.read(controller, 4096)
            except OSError:
                break
            if not chunk:
                break
            out += chunk
    finally:
        proc.kill()
        os.close(controller)
    assert proc.returncode == 0, err
    assert b"\x1b" not in out and b"\x07" not in out
    assert b"pal:\r\n\\x1b]52;c;ZXZpbA==\\x07hello\r\n" in out


def test_sessions_of_a_path_that_does_not_exist_is_a_clear_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # It named the store of whatever folder the search ended in ('/.openprogram/...').
    missing = tmp_path / "nope"
    assert main(["sessions", "-p", str(missing)]) == 2
    err = capsys.readouterr().err
    assert f"error: {missing}: no such file or folder" in err


MOOD_AGENT = """\
version: 1
name: pal
model: local:llama3
retry: {max_retries: 1}
runtimes:
  - {match: "local:*", runtime: openai, options: {base_url: "%s", api_key_env: PAL_KEY}}
methods:
  mood:
    inputs: {message: {type: string}}
    prompt: "{{ message }}"
    response_schema:
      name: mood
      schema:
        type: object
        additionalProperties: false
        required: [mood]
        properties: {mood: {type: string}}
"""


def test_a_structured_answer_shows_control_characters_as_text(tmp_path: Path) -> None:
    # JSON escapes C0 controls, not C1 ones: U+009B is a CSI to some terminals.
    with LoopbackServer() as server:
        server.add(_answer('{"mood": "a\\u009b31mb"}'))
        (tmp_path / "pal.yaml").write_text(MOOD_AGENT % (server.url + "/v1"))
        with _chat(["pal.yaml", "mood"], tmp_path) as term:
            term.wait_for(PROMPT)
            term.type("how are you?\r")
            shown = term.wait_for(PROMPT)
            assert term.close() == 0
    assert "\x9b" not in shown
    assert '{"mood": "a\\x9b31mb"}' in shown


LOOKER = """\
version: 1
name: looker
model: local:llama3
retry: {max_retries: 1}
runtimes:
  - {match: "local:*", runtime: openai, options: {base_url: "%s", api_key_env: PAL_KEY}}
methods:
  ask:
    inputs:
      question: {type: string}
      photo: {type: string, format: image}
    prompt: "{{ question }}"
"""


def test_a_file_attached_with_slash_file_goes_with_the_next_message_only(tmp_path: Path) -> None:
    png = b"\x89PNG\r\n\x1a\n" + bytes(24)
    (tmp_path / "cat.png").write_bytes(png)
    with LoopbackServer() as server:
        (tmp_path / "looker.yaml").write_text(LOOKER % (server.url + "/v1"))
        server.add(_answer("A cat."))
        with _chat(["looker.yaml"], tmp_path) as term:
            term.wait_for(PROMPT)
            term.type("/file photo=@missing.png\r")
            term.wait_for("error: /file photo: cannot read file 'missing.png': file not found")
            term.wait_for(PROMPT)
            term.type("/file question=@cat.png\r")
            term.wait_for("has no file input 'question'; its file inputs: photo")
            term.wait_for(PROMPT)
            term.type("/file photo=@cat.png\r")
            term.wait_for("attached cat.png as photo; it goes with your next message")
            term.wait_for(PROMPT)
            term.type("what is this?\r")
            term.wait_for("A cat.")
            term.wait_for(PROMPT)
            term.type("and this?\r")  # no file attached again: the method needs one
            term.wait_for("'photo' is a required property")
            term.wait_for(PROMPT)
            assert term.close() == 0
        requests = server.requests
    assert len(requests) == 1
    [asked] = [m for m in requests[0].json["messages"] if m["role"] == "user"]
    parts = {part["type"]: part for part in asked["content"]}
    assert parts["text"]["text"] == "what is this?"
    assert parts["image_url"]["image_url"]["url"] == (
        "data:image/png;base64," + base64.b64encode(png).decode()
    )


@pytest.mark.parametrize("kind", ["fifo", "folder", "link"])
def test_an_input_history_that_is_no_regular_file_is_not_kept_and_the_chat_goes_on(
    tmp_path: Path, kind: str
) -> None:
    (tmp_path / "pal.yaml").write_text(OFFLINE % "v1")
    history = tmp_path / ".openprogram" / "chat_history"
    history.parent.mkdir()
    victim = tmp_path / "bashrc"
    victim.write_text("precious\n")
    if kind == "fifo":
        os.mkfifo(history)  # appending to it waited for a reader: the chat hung
    elif kind == "folder":
        history.mkdir()  # a traceback on the terminal
    else:
        history.symlink_to(victim)  # each message typed was appended to the file linked
    with _chat(["pal.yaml", "talk"], tmp_path) as term:
        shown = term.wait_for(PROMPT)
        reason = "a symbolic link" if kind == "link" else "not a regular file"
        assert "input history not kept" in shown and reason in shown
        term.type("hi\r")
        term.wait_for("test reply to: v1 hi")
        term.type("again\r")
        shown = term.wait_for("test reply to: v1 again")
        term.wait_for(PROMPT)
        assert term.close() == 0
    assert "Traceback" not in term.shown.decode(errors="replace")
    assert victim.read_text() == "precious\n"


def test_a_session_deleted_while_its_answer_comes_is_said_and_the_chat_goes_on(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    gate = threading.Event()
    with LoopbackServer() as server:
        _story_held_then_short(server, tmp_path, gate)
        try:
            with _chat(["pal.yaml", "--session", "s"], tmp_path) as term:
                term.wait_for(PROMPT)
                term.type("tell me a story\r")
                term.wait_for("Once upon ")
                # Another process (here `sessions delete`) while the answer comes: the chat
                # ended on the turn it could not keep.
                assert main(["sessions", "delete", "s", "-p", str(tmp_path)]) == 0
                gate.set()
                term.wait_for("error: session 's' was deleted while its turn ran")
                _a_short_one_then(term)
        finally:
            gate.set()
    assert "Traceback" not in term.shown.decode(errors="replace")
    # The next turn began the session again, with its own exchange only.
    capsys.readouterr()
    assert main(["sessions", "show", "s", "-p", str(tmp_path)]) == 0
    shown = capsys.readouterr().out
    assert "a short one then" in shown and "tell me a story" not in shown
