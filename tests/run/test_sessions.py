"""Chat sessions: the store (SQLite), the history a run is sent, and how much of it a
method takes (``history:``)."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest

from openprogram_yaml.compile.program import HistoryLimit
from openprogram_yaml.compile.project import compile_path
from openprogram_yaml.errors import ConfigError, UsageError
from openprogram_yaml.providers.test import ScriptedRuntime
from openprogram_yaml.run.history import trim_history
from openprogram_yaml.run.service import RunService
from openprogram_yaml.run.sessions import (
    FILE_NOT_KEPT,
    SessionInfo,
    SessionMismatchError,
    SessionStore,
    chat_input,
    sessions_path,
    user_text,
)
from openprogram_yaml.run.version import VersionStamp
from openprogram_yaml.runtime import Runtime
from openprogram_yaml.runtimes.protocol import Message

CHAT = """
version: 1
name: pal
model: test
methods:
  talk:
    inputs: {message: {type: string}}
    prompt: "{{ message }}"
    history: {max_messages: 2}
  brief:
    inputs: {topic: {type: string}, tone: {type: string}, length: {type: integer, default: 3}}
    prompt: "{{ topic }} {{ tone }} {{ length }}"
  fixed:
    prompt: "Say hi."
"""


def _store(tmp_path: Path) -> SessionStore:
    return SessionStore(sessions_path(tmp_path))


def test_async_exec_sends_the_history_before_the_new_message() -> None:
    model = ScriptedRuntime(["fine"])
    history = [Message("user", "hi"), Message("assistant", "hello")]
    assert asyncio.run(Runtime(runtimes=model).async_exec("how are you?", history=history)) == (
        "fine"
    )
    sent = [(m.role, m.text()) for m in model.requests[0].messages]
    assert sent == [("user", "hi"), ("assistant", "hello"), ("user", "how are you?")]


def test_history_is_cut_to_the_newest_messages_and_never_opens_with_an_answer() -> None:
    talk = [Message("user", "a" * 40), Message("assistant", "b" * 40)] * 3
    assert trim_history(talk, HistoryLimit(max_messages=2)) == tuple(talk[-2:])
    # Three messages fit; the cut would open with an answer, so that one goes too.
    assert trim_history(talk, HistoryLimit(max_messages=3)) == tuple(talk[-2:])
    assert trim_history(talk, HistoryLimit(max_messages=0)) == ()
    # 40 characters are about 10 tokens: 25 tokens hold two messages.
    assert trim_history(talk, HistoryLimit(max_tokens=25)) == tuple(talk[-2:])
    assert trim_history(talk, HistoryLimit(max_tokens=5)) == ()


def test_a_method_declares_how_much_history_it_takes(write) -> None:  # type: ignore[no-untyped-def]
    agent = compile_path(write("pal.yaml", CHAT)).agent()
    assert agent.method("talk").history == HistoryLimit(max_messages=2)
    assert agent.method("fixed").history is None


def test_a_history_without_a_limit_is_a_positioned_error(write) -> None:  # type: ignore[no-untyped-def]
    bad = CHAT.replace("history: {max_messages: 2}", "history: {}")
    with pytest.raises(ConfigError) as info:
        compile_path(write("pal.yaml", bad))
    [diag] = info.value.diagnostics
    assert diag.line == 8
    assert "'history' needs 'max_messages' or 'max_tokens'" in diag.message


def test_the_store_keeps_sessions_and_their_messages(tmp_path: Path) -> None:
    with _store(tmp_path) as store:
        assert store.sessions() == []
        store.open("work", "pal", "talk")
        store.add_turn("work", "hi", "hello", run_id="r1", version="v1")
        store.add_turn("work", "and?", "fine", run_id="r2", version="v1")
        [info] = store.sessions()
        assert (info.name, info.agent, info.method, info.messages) == ("work", "pal", "talk", 4)
        assert [(m.role, m.text()) for m in store.history("work")] == [
            ("user", "hi"),
            ("assistant", "hello"),
            ("user", "and?"),
            ("assistant", "fine"),
        ]
        lines = [json.loads(line) for line in store.export_jsonl("work")]
        assert lines[0]["session"]["name"] == "work"
        assert [(m["role"], m["content"], m["run_id"]) for m in lines[1:]][:2] == [
            ("user", "hi", "r1"),
            ("assistant", "hello", "r1"),
        ]
        with pytest.raises(UsageError, match=r"talks to pal\.talk, not pal\.brief"):
            store.open("work", "pal", "brief")
        with pytest.raises(UsageError, match="session name 'a b' is not allowed"):
            store.open("a b", "pal", "talk")
        store.delete("work")
        assert store.sessions() == []
        with pytest.raises(UsageError, match=r"no session 'work'.*there are no sessions yet"):
            store.delete("work")
    # WAL, so that a chat and a `sessions` command can use the file at once.
    mode = sqlite3.connect(sessions_path(tmp_path)).execute("PRAGMA journal_mode").fetchone()
    assert mode == ("wal",)


def test_the_message_goes_into_the_one_input_left(write) -> None:  # type: ignore[no-untyped-def]
    agent = compile_path(write("pal.yaml", CHAT)).agent()
    assert chat_input(agent.method("talk")) == "message"
    with pytest.raises(UsageError, match=r"several inputs \(topic, tone, length\).*-i NAME"):
        chat_input(agent.method("brief"))
    assert chat_input(agent.method("brief"), {"tone"}) == "topic"
    with pytest.raises(UsageError, match="no input left for the message"):
        chat_input(agent.method("fixed"))


def test_a_turn_is_sent_the_history_and_kept_when_its_run_ends_ok(write, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    program = compile_path(write("pal.yaml", CHAT))
    stamp = VersionStamp(program.version)

    async def turn(service: RunService, store: SessionStore, text: str, model: str) -> bool:
        history = store.begin_turn("s", "pal", "talk")
        task = service.start("pal", "talk", {"message": text}, model=model, history=history)
        return store.end_turn("s", text, await task)

    async def main() -> None:
        service = RunService(lambda: (program, stamp))
        with _store(tmp_path) as store:
            assert [await turn(service, store, t, "test") for t in ("one", "two")] == [True] * 2
            # A failed run (no such model) leaves the session as it was.
            assert not await turn(service, store, "three", "nope:model")
            messages = store.messages("s")
        await service.shutdown(0)
        assert [m.role for m in messages] == ["user", "assistant"] * 2
        assert [m.content for m in messages] == [
            "one",
            "test reply to: one",
            "two",
            "test reply to: two",
        ]
        assert messages[-1].version == program.version

    asyncio.run(main())


def test_a_turn_keeps_no_secret(write, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("PAL_API_KEY", "sk-pal-0123456789abcdef")
    program = compile_path(write("pal.yaml", CHAT))

    async def main() -> None:
        service = RunService(lambda: (program, VersionStamp(program.version)))
        with _store(tmp_path) as store:
            history = store.begin_turn("s", "pal", "talk")
            inputs = {"message": "my key is sk-pal-0123456789abcdef"}
            record = await service.start("pal", "talk", inputs, history=history)
            assert store.end_turn("s", str(inputs["message"]), record)
            assert "sk-pal" not in json.dumps([m.to_dict() for m in store.messages("s")])
        await service.shutdown(0)

    asyncio.run(main())


def test_serve_runs_a_turn_of_the_session_its_query_names(
    write: Callable[[str, str], Path], tmp_path: Path
) -> None:
    import httpx

    from openprogram_yaml.run.reload import ProgramHolder
    from openprogram_yaml.serve.app import Server, ServeState

    path = write("pal.yaml", CHAT)

    async def main() -> list[tuple[int, str]]:
        holder = ProgramHolder(path)
        holder.load()
        state = ServeState(holder, RunService(holder.snapshot))
        server = Server(state)
        port = await server.start(0)
        replies = []
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client:
            try:
                for url, body in [
                    ("/run/pal/talk?session=s", {"message": "one"}),
                    ("/run/pal/talk?session=s", {"message": "two"}),
                    ("/run/pal/talk", {"message": "not kept"}),
                    ("/run/pal/brief?session=s", {"topic": "a", "tone": "b"}),
                    ("/run/pal/talk?session=a%20b", {"message": "x"}),
                ]:
                    response = await client.post(url, json=body)
                    replies.append((response.status_code, response.text))
            finally:
                await server.close(grace_s=0)
        return replies

    replies = asyncio.run(main())
    assert [status for status, _ in replies] == [200, 200, 200, 409, 400]
    assert "talks to pal.talk, not pal.brief" in replies[3][1]
    with _store(tmp_path) as store:
        assert [m.content for m in store.messages("s")] == [
            "one",
            "test reply to: one",
            "two",
            "test reply to: two",
        ]
        assert [m.run_id for m in store.messages("s")][2] == json.loads(replies[1][1])["id"]


def test_the_store_and_the_chat_history_stay_out_of_git(tmp_path: Path) -> None:
    # Conversations are private: the folder the store makes tells git to leave them out
    # (a project's own .openprogram/skills stay in it).
    import subprocess

    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    (tmp_path / ".openprogram" / "skills").mkdir(parents=True)
    (tmp_path / ".openprogram" / "skills" / "style.md").write_text("Be brief.")
    with _store(tmp_path) as store:
        store.open("work", "pal", "talk")
        store.add_turn("work", "my address is 1 Main St", "noted", run_id="r1", version="v1")
    (tmp_path / ".openprogram" / "chat_history").write_text("my address is 1 Main St\n")
    status = subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=all"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split("\n")
    assert sorted(line for line in status if line) == [
        "?? .openprogram/.gitignore",
        "?? .openprogram/skills/style.md",
    ]


def test_a_gitignore_of_the_projects_own_in_the_folder_is_left_as_it_is(tmp_path: Path) -> None:
    (tmp_path / ".openprogram").mkdir()
    (tmp_path / ".openprogram" / ".gitignore").write_text("mine\n")
    with _store(tmp_path) as store:
        store.open("work", "pal", "talk")
    assert (tmp_path / ".openprogram" / ".gitignore").read_text() == "mine\n"


def test_a_store_another_process_keeps_locked_is_a_clear_error(tmp_path: Path) -> None:
    # A write that cannot get the store (held past the wait) says which store and why,
    # as a UsageError (serve answers it, the chat says it), not a sqlite3 traceback.
    with _store(tmp_path) as store:
        store.open("work", "pal", "talk")
    holder = sqlite3.connect(sessions_path(tmp_path), isolation_level=None)
    try:
        holder.execute("BEGIN EXCLUSIVE")
        with SessionStore(sessions_path(tmp_path), busy_timeout_s=0) as store:
            with pytest.raises(UsageError, match=r"store .*sessions\.db cannot be used: .*locked"):
                store.add_turn("work", "hi", "hello", run_id="r1", version="v1")
            assert store.messages("work") == []  # WAL: reading goes on meanwhile
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    with _store(tmp_path) as store:
        assert store.messages("work") == []


def test_the_store_is_readable_by_its_owner_alone(tmp_path: Path) -> None:
    with _store(tmp_path) as store:
        store.open("work", "pal", "talk")
        store.add_turn("work", "my address is 1 Main St", "noted", run_id="r1", version="v1")
        files = sorted((tmp_path / ".openprogram").glob("sessions.db*"))
        assert [f.name for f in files][:2] == ["sessions.db", "sessions.db-shm"]
        assert {f.name: f.stat().st_mode & 0o777 for f in files} == {f.name: 0o600 for f in files}


def test_a_locked_store_is_busy_and_retryable(tmp_path: Path) -> None:
    from openprogram_yaml.run.sessions import SessionStoreBusy

    with _store(tmp_path) as store:
        store.open("work", "pal", "talk")
    holder = sqlite3.connect(sessions_path(tmp_path), isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        with (
            SessionStore(sessions_path(tmp_path), busy_timeout_s=0) as store,
            pytest.raises(SessionStoreBusy, match="try again later"),
        ):
            store.open("new", "pal", "talk")
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    with _store(tmp_path) as store:  # free again: the same step succeeds
        assert store.open("new", "pal", "talk").name == "new"


def _served_session_runs(
    write: Callable[[str, str], Path],
    tmp_path: Path,
    busy_timeout_s: float,
    release_after_others: bool,
) -> tuple[int, str, list[int], int]:
    """Serve the CHAT agent while another connection holds its session store locked: a run
    of session 'new' is posted, then /health and a run without a session; the lock is
    released before (``release_after_others``) or after the session run's reply. Gives the
    session run's status and text, the two others' statuses, and the status of the same run
    tried again."""
    import httpx

    from openprogram_yaml.run.reload import ProgramHolder
    from openprogram_yaml.serve.app import Server, ServeState

    path = write("pal.yaml", CHAT)
    with _store(tmp_path) as store:
        store.open("old", "pal", "talk")
    locker = sqlite3.connect(sessions_path(tmp_path), isolation_level=None)

    async def main() -> tuple[int, str, list[int], int]:
        holder = ProgramHolder(path)
        holder.load()
        state = ServeState(
            holder, RunService(holder.snapshot), sessions_busy_timeout_s=busy_timeout_s
        )
        server = Server(state)
        port = await server.start(0)
        turn = {"message": "hi"}
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=60) as client:
            try:
                locker.execute("BEGIN EXCLUSIVE")
                waiting = asyncio.ensure_future(client.post("/run/pal/talk?session=new", json=turn))
                health = await client.get("/health")
                unsaved = await client.post("/run/pal/talk", json={"message": "x"})
                if release_after_others:
                    locker.execute("ROLLBACK")
                response = await waiting
            finally:
                if locker.in_transaction:
                    locker.execute("ROLLBACK")
            again = await client.post("/run/pal/talk?session=new", json=turn)
            await server.close(grace_s=0)
        return (
            response.status_code,
            response.text,
            [health.status_code, unsaved.status_code],
            again.status_code,
        )

    try:
        return asyncio.run(main())
    finally:
        locker.close()


def test_serve_answers_503_at_once_for_a_locked_store_and_serves_others(
    write: Callable[[str, str], Path], tmp_path: Path
) -> None:
    # A store another process keeps locked past the wait (0 s here: no real wait) is "try
    # again later", 503, not 400; other requests are served; tried again once free, it runs.
    status, text, others, again = _served_session_runs(
        write, tmp_path, busy_timeout_s=0, release_after_others=False
    )
    assert others == [200, 200]
    assert status == 503
    assert "sessions.db cannot be used" in text and "try again later" in text
    assert again == 200


def test_serve_answers_others_while_the_store_waits_for_a_lock(
    write: Callable[[str, str], Path], tmp_path: Path
) -> None:
    # The store waits for another process's lock in a worker thread: /health and other runs
    # are answered meanwhile, and the session run goes on once the lock is released (within
    # SQLite's short polls; the 5 s timeout is never reached).
    status, text, others, again = _served_session_runs(
        write, tmp_path, busy_timeout_s=60, release_after_others=True
    )
    assert others == [200, 200]
    assert status == 200, text
    assert again == 200
    with _store(tmp_path) as store:
        assert [m.content for m in store.messages("new")][:2] == ["hi", json.loads(text)["output"]]


PHOTOS = """
version: 1
name: eye
model: test
methods:
  look:
    inputs: {photo: {type: string, format: image}}
    prompt: "What is this?"
  compare:
    inputs: {photo: {type: string, format: image}, topic: {type: string}, tone: {type: string}}
    prompt: "{{ topic }} {{ tone }}"
"""


def test_a_served_turn_keeps_the_text_of_its_inputs_not_their_files(
    write: Callable[[str, str], Path], tmp_path: Path
) -> None:
    # A served run's message is all its inputs as JSON when no single one takes it: a file
    # among them is stored as a note, not as megabytes of base64 sent again every turn.
    agent = compile_path(write("eye.yaml", PHOTOS)).agent()
    photo = "data:image/png;base64," + "iVBORw0KGgo" * 1000
    look = user_text(agent.method("look"), {"photo": photo})
    compare = user_text(agent.method("compare"), {"photo": photo, "topic": "t", "tone": "dry"})
    assert json.loads(look) == {"photo": FILE_NOT_KEPT}
    assert json.loads(compare) == {"photo": FILE_NOT_KEPT, "topic": "t", "tone": "dry"}


def test_a_store_waiting_on_a_lock_never_holds_the_loops_default_executor(
    tmp_path: Path,
) -> None:
    # More new sessions wait on a locked store (their first write) than the default executor
    # has threads: the server's work that uses that executor (reloads, sync model functions)
    # still runs at once.
    import os

    with _store(tmp_path) as store:
        store.open("s", "pal", "talk")
    locker = sqlite3.connect(sessions_path(tmp_path), isolation_level=None)
    waiting_turns = min(32, (os.cpu_count() or 1) + 4) + 1

    async def main() -> tuple[int, list[int]]:
        with SessionStore(sessions_path(tmp_path), busy_timeout_s=60) as store:
            locker.execute("BEGIN EXCLUSIVE")
            try:
                turns = [
                    asyncio.ensure_future(store.async_begin_turn(f"new-{n}", "pal", "talk"))
                    for n in range(waiting_turns)
                ]
                await asyncio.sleep(0)  # each turn is queued for its thread
                other = await asyncio.wait_for(asyncio.to_thread(lambda: 42), timeout=30)
            finally:
                locker.execute("ROLLBACK")
            return other, [len(history) for history in await asyncio.gather(*turns)]

    try:
        other, histories = asyncio.run(main())
    finally:
        locker.close()
    assert other == 42
    assert histories == [0] * waiting_turns


class _OvertakenStore(SessionStore):
    """A store whose first look at a session is followed, before its next step, by another
    process's store creating that session: the interleaving of two servers (or a server and
    a chat) opening the same new session at once, made to happen every time."""

    def __init__(self, path: Path, other: SessionStore, agent: str, method: str) -> None:
        super().__init__(path)
        self._other: SessionStore | None = other
        self._made_for = (agent, method)

    def get(self, name: str) -> SessionInfo | None:
        found = super().get(name)
        other, self._other = self._other, None
        if other is not None:
            other.open(name, *self._made_for)
        return found


@pytest.mark.parametrize("other_method", ["talk", "brief"])
def test_a_session_another_process_creates_meanwhile_is_opened_not_an_error(
    tmp_path: Path, other_method: str
) -> None:
    """Both looked, found nothing and created: the second INSERT failed its UNIQUE
    constraint, a UsageError (a 400 from serve) for a request that did nothing wrong."""
    path = sessions_path(tmp_path)
    with SessionStore(path) as other, _OvertakenStore(path, other, "pal", other_method) as store:
        if other_method == "talk":
            assert store.open("work", "pal", "talk") == other.require("work")
        else:  # made for another method meanwhile: the same error as had it been there before
            with pytest.raises(SessionMismatchError, match=r"talks to pal\.brief, not pal\.talk"):
                store.open("work", "pal", "talk")
        assert [s.name for s in store.sessions()] == ["work"]
