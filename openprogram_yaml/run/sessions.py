"""Chat sessions: conversations with a method, kept in SQLite so that they can be resumed.

The one home of the session store. A project's sessions live in
``<project>/.openprogram/sessions.db`` (stdlib ``sqlite3``, WAL, so a chat and a
``sessions`` command or a server may read it at once). A session is a name, the agent and
method it talks to, and its messages: the person's (``user``) and the method's answers
(``assistant``), each with its time, the run that answered it and the version that run
used (the hash of the files, as in its record). What is stored is redacted with the run's
secrets, as records are.

A front end takes two steps around each run: ``store.begin_turn(name, agent, method)``
gives the prior messages to pass to the run (``RunService.start(history=…)``), and
``store.end_turn(name, user, record)`` keeps the exchange when the run ends ok. Async code
(serve) calls ``async_begin_turn`` and ``async_end_turn`` (other steps: ``in_worker``): the
same steps in the store's own worker thread, so a store another process keeps locked (a
write waits up to ``busy_timeout_s``) never stalls the event loop, nor holds the loop's
default executor. A store still locked after the wait is ``SessionStoreBusy``: try again
later (serve answers 503).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import functools
import json
import os
import re
import sqlite3
import threading
from collections.abc import Callable, Collection, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, ParamSpec, TypeVar

from ..errors import UsageError
from ..redaction import redact
from ..runtime.content import media_types
from ..runtimes.protocol import Message

if TYPE_CHECKING:
    from ..compile.program import Method
    from ..json_types import JSONValue
    from .record import RunRecord

__all__ = [
    "DEFAULT_BUSY_TIMEOUT_S",
    "FILE_NOT_KEPT",
    "SESSIONS_FILE",
    "SessionInfo",
    "SessionMessage",
    "SessionMismatchError",
    "SessionStore",
    "SessionStoreBusy",
    "chat_input",
    "check_name",
    "private_file",
    "private_folder",
    "sessions_path",
    "turn_text",
    "user_text",
]

#: Where a project keeps its sessions, relative to the project's folder.
SESSIONS_FILE = Path(".openprogram") / "sessions.db"

#: What ``.openprogram/`` holds that is private (the conversations, and the chat's input
#: history beside them): a ``.gitignore`` there keeps it out of git. The folder may hold a
#: project's own files too (``skills/``), so it names these alone.
_GITIGNORE = """\
# Written by openprogram-run: chat sessions and input history are private.
sessions.db
sessions.db-*
chat_history
"""

#: A session name: letters, digits, ``.``, ``_``, ``-`` (it is typed on command lines and
#: put in URLs).
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS sessions (
    name       TEXT PRIMARY KEY,
    agent      TEXT NOT NULL,
    method     TEXT NOT NULL,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS messages (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    session    TEXT NOT NULL REFERENCES sessions(name) ON DELETE CASCADE,
    role       TEXT NOT NULL CHECK (role IN ('user', 'assistant')),
    content    TEXT NOT NULL,
    created_at TEXT NOT NULL,
    run_id     TEXT,
    version    TEXT
);
CREATE INDEX IF NOT EXISTS messages_by_session ON messages(session, id);
"""


class SessionMismatchError(UsageError):
    """A session was resumed with another method than the one it talks to."""


class SessionStoreBusy(UsageError):
    """The store stayed locked by another process (a chat, a server) past the wait: the
    same step may succeed when tried again later."""


#: SQLite's primary result codes for a database another connection holds.
_BUSY_CODES = (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)


def _is_busy(exc: sqlite3.Error) -> bool:
    code = getattr(exc, "sqlite_errorcode", None)
    return isinstance(code, int) and code & 0xFF in _BUSY_CODES


def sessions_path(project_root: Path) -> Path:
    """The session store of the project in ``project_root`` (``Program.root``)."""
    return project_root / SESSIONS_FILE


def private_folder(folder: Path) -> Path:
    """``folder`` (``.openprogram/``) made when missing, with a ``.gitignore`` that keeps the
    sessions and the chat's input history out of git; a ``.gitignore`` already there is the
    project's own and stays as it is. Raises ``OSError``, also when ``folder`` is a symbolic
    link (wherever it points, as ``private_file`` does): a repository holding
    ``.openprogram`` linked to ``~`` had the store, the input history and a ``.gitignore``
    written there."""
    if folder.is_symlink():
        raise OSError(
            errno.ELOOP,
            f"{folder} is a symbolic link, which is not followed for private files; make it "
            "a folder",
        )
    folder.mkdir(parents=True, exist_ok=True)
    with (
        contextlib.suppress(FileExistsError),
        (folder / ".gitignore").open("x", encoding="utf-8") as ignore,
    ):
        ignore.write(_GITIGNORE)
    return folder


def private_file(path: Path) -> Path:
    """``path`` created empty when missing, readable by its owner alone (0600, as a shell's
    history is): the sessions and the chat's input history are one person's conversations
    (SQLite gives the store's WAL files the store's mode). Raises ``OSError``, also when
    ``path`` is a symbolic link: a repository holding ``.openprogram/chat_history`` linked
    to ``~/.bashrc`` had every message typed in a chat appended to that file (and a
    dangling ``sessions.db`` link had SQLite create the store wherever it pointed)."""
    with contextlib.suppress(FileExistsError):
        os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
    if os.path.islink(path):
        raise OSError(errno.ELOOP, "a symbolic link, which is not followed for private files")
    return path


def check_name(name: str) -> str:
    """``name`` if it can name a session; else a ``UsageError`` saying what can."""
    if not _NAME.fullmatch(name):
        raise UsageError(
            f"session name {name!r} is not allowed: use up to 64 letters, digits, '.', '_' "
            "or '-', starting with a letter or digit"
        )
    return name


@dataclass(frozen=True, slots=True)
class SessionInfo:
    """One session, as ``sessions`` lists it."""

    name: str
    agent: str
    method: str
    created_at: str
    updated_at: str
    messages: int

    def to_dict(self) -> dict[str, object]:
        return {
            "name": self.name,
            "agent": self.agent,
            "method": self.method,
            "created_at": self.created_at,
            "updated_at": self.updated_at,
            "messages": self.messages,
        }


@dataclass(frozen=True, slots=True)
class SessionMessage:
    """One message of a session."""

    role: str
    content: str
    created_at: str
    run_id: str | None
    version: str | None

    def to_dict(self) -> dict[str, object]:
        return {
            "role": self.role,
            "content": self.content,
            "created_at": self.created_at,
            "run_id": self.run_id,
            "version": self.version,
        }


#: What a session keeps of a file input's data (an image, a PDF, audio) in a message.
FILE_NOT_KEPT = "(a file, not kept in the session)"

_P = ParamSpec("_P")
_T = TypeVar("_T")

#: How long a step waits for another process (a chat, a server) to end its write.
DEFAULT_BUSY_TIMEOUT_S = 5.0


class SessionStore:
    """The sessions of one project, in one SQLite file (created when first written).

    Safe to use from several threads: one step at a time holds the connection.
    """

    def __init__(self, path: Path, *, busy_timeout_s: float = DEFAULT_BUSY_TIMEOUT_S) -> None:
        self.path = path
        #: How long a write waits for another process's (a chat's, a server's) to end.
        self.busy_timeout_s = busy_timeout_s
        self._db: sqlite3.Connection | None = None
        # Reentrant: a step (``open``) runs others (``get``) while holding it.
        self._lock = threading.RLock()
        # The async faces' one thread (steps take turns on the lock anyway): a store waiting
        # on another process's lock never holds the loop's default executor, which has 6
        # threads on 2 CPUs and runs the server's reloads and sync model functions.
        self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="session-store")

    def _connect(self) -> sqlite3.Connection:
        if self._db is None:
            try:
                private_file(private_folder(self.path.parent) / self.path.name)
                # Autocommit; writes that belong together use an explicit transaction.
                db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
                db.execute("PRAGMA journal_mode=WAL")
                db.execute("PRAGMA foreign_keys=ON")
                db.execute(f"PRAGMA busy_timeout={int(self.busy_timeout_s * 1000)}")
                db.executescript(_SCHEMA)
                foreign = _foreign_schema(db)
            except sqlite3.Error as exc:
                error = SessionStoreBusy if _is_busy(exc) else UsageError
                raise error(f"cannot open the session store {self.path}: {exc}") from None
            except OSError as exc:
                reason = exc.strerror or exc
                raise UsageError(f"cannot open the session store {self.path}: {reason}") from None
            if foreign is not None:
                db.close()
                raise UsageError(
                    f"the session store {self.path} holds {foreign} that openprogram-run did "
                    "not write; delete the store"
                )
            self._db = db
        return self._db

    @contextlib.contextmanager
    def _using(self) -> Iterator[sqlite3.Connection]:
        """The store's connection; a SQLite error while using it (a full disk, a store that
        another process kept locked past the wait: ``SessionStoreBusy``) is a ``UsageError``
        naming the store."""
        with self._lock:
            db = self._connect()
            try:
                yield db
            except sqlite3.Error as exc:
                message = f"the session store {self.path} cannot be used: {exc}"
                if _is_busy(exc):
                    raise SessionStoreBusy(f"{message}; try again later") from None
                raise UsageError(message) from None

    def close(self) -> None:
        with self._lock:
            if self._db is not None:
                self._db.close()
                self._db = None

    def __enter__(self) -> SessionStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- reading ------------------------------------------------------------------------

    def sessions(self) -> list[SessionInfo]:
        """Every session, the most recently used first."""
        if not self.path.exists():
            return []
        with self._using() as db:
            rows = db.execute(
                "SELECT s.name, s.agent, s.method, s.created_at, s.updated_at, COUNT(m.id) "
                "FROM sessions s LEFT JOIN messages m ON m.session = s.name "
                "GROUP BY s.name ORDER BY s.updated_at DESC, s.name"
            ).fetchall()
        return [self._info(row) for row in rows]

    def get(self, name: str) -> SessionInfo | None:
        """The session called ``name``, or None."""
        if not self.path.exists():
            return None
        with self._using() as db:
            row = db.execute(
                "SELECT s.name, s.agent, s.method, s.created_at, s.updated_at, "
                "(SELECT COUNT(*) FROM messages m WHERE m.session = s.name) "
                "FROM sessions s WHERE s.name = ?",
                (name,),
            ).fetchone()
        return None if row is None else self._info(row)

    # SQLite keeps any value in any column: a store written by other code (or edited) may
    # hold a blob or a number where text belongs. Such a row is an error naming it, not
    # bytes passed on to a model, or a TypeError out of `sessions export`.

    def _info(self, row: tuple[object, ...]) -> SessionInfo:
        name, agent, method, created_at, updated_at, count = row
        if (
            isinstance(name, str)
            and isinstance(agent, str)
            and isinstance(method, str)
            and isinstance(created_at, str)
            and isinstance(updated_at, str)
            and isinstance(count, int)
        ):
            return SessionInfo(name, agent, method, created_at, updated_at, count)
        raise UsageError(
            f"the session store {self.path} holds a session that is not text "
            f"({_shown(name)}); delete it, or the store"
        )

    def _message(self, name: str, row: tuple[object, ...]) -> SessionMessage:
        row_id, role, content, created_at, run_id, version = row
        if (
            isinstance(role, str)
            and isinstance(content, str)
            and isinstance(created_at, str)
            and (run_id is None or isinstance(run_id, str))
            and (version is None or isinstance(version, str))
        ):
            return SessionMessage(role, content, created_at, run_id, version)
        raise UsageError(
            f"the session store {self.path} holds a message of session '{name}' that is "
            f"not text (message {_shown(row_id)}); delete the session, or the store"
        )

    def require(self, name: str) -> SessionInfo:
        """The session called ``name``; a ``UsageError`` listing the others when missing."""
        found = self.get(name)
        if found is None:
            names = [s.name for s in self.sessions()]
            known = f"; sessions: {', '.join(names)}" if names else "; there are no sessions yet"
            raise UsageError(f"no session '{name}' in {self.path}{known}")
        return found

    def messages(self, name: str) -> list[SessionMessage]:
        """The messages of session ``name``, oldest first."""
        if not self.path.exists():
            return []
        with self._using() as db:
            rows = db.execute(
                "SELECT id, role, content, created_at, run_id, version FROM messages "
                "WHERE session = ? ORDER BY id",
                (name,),
            ).fetchall()
        return [self._message(name, row) for row in rows]

    def history(self, name: str) -> tuple[Message, ...]:
        """Session ``name``'s messages as the prior messages of its next run."""
        return tuple(Message("user" if m.role == "user" else "assistant", m.content)
                     for m in self.messages(name))  # fmt: skip

    def export_jsonl(self, name: str) -> Iterator[str]:
        """Session ``name`` as JSON Lines: a first line describing it, then its messages."""
        info = self.require(name)
        yield json.dumps({"session": info.to_dict()}, ensure_ascii=False)
        for message in self.messages(name):
            yield json.dumps(message.to_dict(), ensure_ascii=False)

    # --- writing ------------------------------------------------------------------------

    def open(self, name: str, agent: str, method: str) -> SessionInfo:
        """Session ``name``, created for ``agent.method`` when it does not exist yet.

        A session belongs to the method it was started with: resuming it with another is a
        ``SessionMismatchError`` (its history was shaped by that method's prompt).
        """
        check_name(name)
        with self._lock:  # no other thread's step between looking and creating
            found = self.get(name)
            while found is None:
                now = _now()
                with self._using() as db:
                    created = db.execute(
                        "INSERT INTO sessions (name, agent, method, created_at, updated_at) "
                        "VALUES (?, ?, ?, ?, ?) ON CONFLICT (name) DO NOTHING",
                        (name, agent, method, now, now),
                    ).rowcount
                if created:
                    return SessionInfo(name, agent, method, now, now, 0)
                # Another process (a chat, a server) made it since this one looked.
                found = self.get(name)
            if (found.agent, found.method) != (agent, method):
                raise SessionMismatchError(
                    f"session '{name}' talks to {found.agent}.{found.method}, not "
                    f"{agent}.{method}: resume it with that method or pick another name"
                )
            return found

    def add_turn(
        self, name: str, user: str, answer: str, *, run_id: str | None, version: str | None
    ) -> None:
        """Keep one exchange: the person's message and the answer, in one transaction; a
        ``UsageError`` when the session is gone (another process deleted it meanwhile)."""
        now = _now()
        with self._using() as db, _transaction(db):
            found = db.execute(
                "UPDATE sessions SET updated_at = ? WHERE name = ?", (now, name)
            ).rowcount
            if not found:
                raise UsageError(
                    f"session '{name}' was deleted while its turn ran; the turn is not kept"
                )
            for role, content in (("user", user), ("assistant", answer)):
                db.execute(
                    "INSERT INTO messages (session, role, content, created_at, run_id, version) "
                    "VALUES (?, ?, ?, ?, ?, ?)",
                    (name, role, content, now, run_id, version),
                )

    def begin_turn(self, name: str, agent: str, method: str) -> tuple[Message, ...]:
        """Session ``name`` opened for ``agent.method`` (created when new, see ``open``),
        and its history: the prior messages of the run that is its next turn."""
        with self._lock:
            self.open(name, agent, method)
            return self.history(name)

    async def in_worker(self, step: Callable[_P, _T], *args: _P.args, **kwargs: _P.kwargs) -> _T:
        """``step(*args, **kwargs)``, a step using this store, in the store's own worker
        thread: the event loop runs on while the store waits."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._worker, functools.partial(step, *args, **kwargs))

    async def async_begin_turn(self, name: str, agent: str, method: str) -> tuple[Message, ...]:
        """``begin_turn`` in the store's worker thread (``in_worker``)."""
        return await self.in_worker(self.begin_turn, name, agent, method)

    def end_turn(self, name: str, user: str, record: RunRecord) -> bool:
        """Keep a turn (the person's message ``user`` and the run's answer), redacted with
        the run's secrets, when its run ended ``ok``: a failed or interrupted run leaves the
        session as it was. Whether the turn was kept."""
        if record.status != "ok":
            return False
        self.add_turn(
            name,
            redact(user, record.secrets),
            redact(turn_text(record.output), record.secrets),
            run_id=record.id,
            version=record.version.hash,
        )
        return True

    async def async_end_turn(self, name: str, user: str, record: RunRecord) -> bool:
        """``end_turn`` in the store's worker thread (``in_worker``)."""
        return await self.in_worker(self.end_turn, name, user, record)

    def delete(self, name: str) -> None:
        """Remove session ``name`` and its messages (a ``UsageError`` when there is none)."""
        self.require(name)
        with self._using() as db, _transaction(db):
            db.execute("DELETE FROM messages WHERE session = ?", (name,))
            db.execute("DELETE FROM sessions WHERE name = ?", (name,))

    def new_name(self, prefix: str = "chat") -> str:
        """A name no session has yet: ``chat-YYYYMMDD-HHMMSS`` (with ``-2``… when taken)."""
        base = f"{prefix}-{datetime.now(UTC).strftime('%Y%m%d-%H%M%S')}"
        taken = {s.name for s in self.sessions()}
        name, n = base, 1
        while name in taken:
            n += 1
            name = f"{base}-{n}"
        return name


def _foreign_schema(db: sqlite3.Connection) -> str | None:
    """What ``db``'s schema holds beyond the store's own tables and index (``_SCHEMA``), as
    "a view 'sessions'", or None. A store is a file in the project's folder, which a
    repository may bring: a view or a trigger there runs on every read or write of the
    store (a recursive one without end: ``sessions list`` hung), and a table of another
    shape can hold what this code never checks."""
    own = sqlite3.connect(":memory:")
    try:
        own.executescript(_SCHEMA)
        expected = set(own.execute(_SCHEMA_ROWS).fetchall())
    finally:
        own.close()
    for kind, name, sql in db.execute(_SCHEMA_ROWS):
        if (kind, name, sql) not in expected:
            return f"a {kind} {_shown(name)}"
    return None


#: The objects of a store's schema, but those SQLite makes for itself (``sqlite_sequence``,
#: the primary key's index).
_SCHEMA_ROWS = (
    "SELECT type, name, sql FROM sqlite_master WHERE name NOT LIKE 'sqlite!_%' ESCAPE '!'"
)


class _transaction:
    """``BEGIN IMMEDIATE`` … ``COMMIT`` (or ``ROLLBACK`` on an error) on an autocommit
    connection, so that the writes of one step land together."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self.db = db

    def __enter__(self) -> None:
        self.db.execute("BEGIN IMMEDIATE")

    def __exit__(self, exc_type: type[BaseException] | None, *rest: object) -> None:
        self.db.execute("COMMIT" if exc_type is None else "ROLLBACK")


def _shown(value: object) -> str:
    """A value of the store as a message shows it: a name as it is, anything else by type."""
    return repr(value) if isinstance(value, str | int) else type(value).__name__


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


def chat_input(method: Method, fixed: Collection[str] = ()) -> str:
    """The input a person's message goes into: the one input of ``method`` not in ``fixed``
    (inputs given otherwise, ``-i NAME=VALUE``) that has no default. File inputs (images,
    PDFs, audio: ``runtime.content.media_types``) never take the message: a chat attaches
    files to a message (``/file``).

    Raises ``UsageError`` with a hint when there is not exactly one.
    """
    open_inputs = [
        name
        for name, schema in method.inputs.items()
        if name not in fixed and media_types(schema) is None
    ]
    if len(open_inputs) == 1:
        return open_inputs[0]
    required = [n for n in open_inputs if not _has_default(method.inputs[n])]
    if len(required) == 1:
        return required[0]
    where = f"{method.agent}.{method.name}"
    if not open_inputs:
        raise UsageError(
            f"method '{where}' has no input left for the message: chat with a method that "
            "takes one (inputs: {message: {type: string}}), or give fewer with -i"
        )
    raise UsageError(
        f"method '{where}' takes several inputs ({', '.join(open_inputs)}): give all but "
        "the one the message goes into with -i NAME=VALUE"
    )


def _has_default(schema: JSONValue) -> bool:
    return isinstance(schema, dict) and "default" in schema


def turn_text(output: JSONValue) -> str:
    """A run's output as the text of an assistant message (JSON for structured output)."""
    if isinstance(output, str):
        return output
    return json.dumps(output, ensure_ascii=False)


def user_text(method: Method, inputs: Mapping[str, JSONValue]) -> str:
    """The person's message of a run's ``inputs``: the method's chat input when it has
    one, else every input as JSON (a served run gives all of them in one body), a file
    input's data replaced by ``FILE_NOT_KEPT``: a session keeps text, not files (each would
    be stored, and sent again as text with every later turn)."""
    try:
        name = chat_input(method)
    except UsageError:
        return turn_text(
            {
                n: FILE_NOT_KEPT if media_types(method.inputs.get(n)) is not None else value
                for n, value in inputs.items()
            }
        )
    return turn_text(inputs.get(name))
