"""``openprogram-run chat`` and ``openprogram-run sessions``: a conversation with a method on
the terminal, kept as a session (``run.sessions``) that can be resumed, listed, shown,
exported and deleted.

The one home of ``prompt_toolkit`` (line editing and the input history), imported only when
a chat starts. Each message is one run (``RunService``) on the current version of the files,
which reload while the chat goes (``ProgramHolder``); the run is sent the session's earlier
messages as its history. The answer streams through ``runner.display.RunDisplay``. Ctrl-C
while an answer comes cancels it (the run ends ``interrupted`` and the session is left as
it was); Ctrl-C at the prompt clears the line; Ctrl-D leaves.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import ConfigError, UsageError
from ..redaction import redact
from ..run.record import run_secrets
from ..run.sessions import (
    SessionStore,
    chat_input,
    check_name,
    private_file,
    private_folder,
    sessions_path,
    turn_text,
)

if TYPE_CHECKING:
    from prompt_toolkit import PromptSession
    from prompt_toolkit.history import FileHistory, InMemoryHistory

    from ..compile.program import Program
    from ..json_types import JSONValue
    from ..run.record import RunRecord
    from ..run.reload import ProgramHolder, ReloadEvent
    from ..run.service import RunService

__all__ = ["chat_command", "sessions_command"]

HELP = """\
Type a message and press Enter; the answer streams below it.
  /help          this text
  /reset         start a new session (the current one is kept)
  /model [NAME]  show the model, or answer with NAME from now on (e.g. openai:gpt-4o)
  /file NAME=@PATH  attach a file (an image, a PDF, audio) as the file input NAME of
                 your next message (the session keeps the messages' text only)
  /save [FILE]   write the session as JSON Lines to FILE (default: SESSION.jsonl)
  /exit          leave (as Ctrl-D does)
Ctrl-C cancels an answer while it comes; Ctrl-D leaves."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        self.print_usage(sys.stderr)
        self.exit(2, f"{self.prog}: error: {message}\n")


def _chat_parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="openprogram-run chat",
        description="Talk with a method of an agent: each message is a run of the method, "
        "sent the conversation so far. The conversation is kept as a session in the "
        "project's .openprogram/sessions.db; --session NAME resumes one (or starts it). "
        "The agent's files reload while you chat.",
    )
    p.add_argument("path", metavar="PATH", help="an agent file (or a folder of agents)")
    p.add_argument(
        "method",
        metavar="METHOD",
        nargs="?",
        help="the method to talk to (AGENT.METHOD in a project); your message goes into its "
        "one input",
    )
    p.add_argument("--agent", help="which agent, when PATH holds several")
    p.add_argument("--session", metavar="NAME", help="resume session NAME, or start it")
    p.add_argument("--model", metavar="PROVIDER:MODEL", help="override the model")
    p.add_argument(
        "-i",
        "--input",
        metavar="NAME=VALUE",
        action="append",
        default=[],
        help="fix another input of the method for the whole chat (VALUE is JSON when it "
        "parses and the input is not a string; @FILE for a file or image input)",
    )
    p.add_argument(
        "--records", metavar="FILE", type=Path, help="append each run's record (JSON Lines)"
    )
    p.add_argument(
        "--live-tools",
        action="store_true",
        help="run http and command tools for real under the offline `test` model too",
    )
    p.add_argument("-y", "--yes", action="store_true", help="approve every tool confirmation")
    return p


def _say(text: str, secrets: frozenset[str] = frozenset()) -> None:
    """A line of the chat's own (not an answer) on stderr, redacted, and shown on a terminal,
    never obeyed: it may quote what a session store or a reload holds."""
    from ..shown_text import shown_on_terminal

    sys.stderr.write(shown_on_terminal(redact(text, secrets)) + "\n")
    sys.stderr.flush()


def chat_command(argv: Sequence[str]) -> int:
    """``openprogram-run chat``: the exit status (0 when left with Ctrl-D or /exit)."""
    args = _chat_parser().parse_args(argv)
    from ..run.reload import ProgramHolder

    ignore = [args.records] if args.records is not None else []
    holder = ProgramHolder(Path(args.path), ignore=ignore)
    try:
        program = holder.load()
    except ConfigError as exc:
        for diag in exc.diagnostics:
            _say(str(diag))
        n = len(exc.diagnostics)
        _say(f"{n} error{'s' if n != 1 else ''} found; nothing was run.")
        return 2
    try:
        chat = _Chat(args, holder, program)
    except UsageError as exc:
        _say(f"error: {exc}")
        return 2
    if not (sys.stdin.isatty() and sys.stdout.isatty()):
        _say("error: chat needs a terminal; to run a method once, use openprogram-run PATH")
        return 2
    try:
        chat.store.open(chat.session, chat.agent, chat.method)
        return asyncio.run(chat.run())
    except UsageError as exc:
        _say(f"error: {exc}")
        return 2
    finally:
        chat.store.close()


class _Chat:
    """One chat: the method it talks to, the session, and the loop of prompts and runs."""

    def __init__(self, args: argparse.Namespace, holder: ProgramHolder, program: Program) -> None:
        from .cli import input_items  # -i read as a run reads it (@FILE for a file input)

        self.args = args
        self.holder = holder
        self.path = Path(args.path)
        agent, name = program.select(args.method, agent=args.agent, path=self.path)
        method = agent.method(name or None)
        self.agent, self.method = agent.name, method.name
        self.fixed = input_items(args.input, method)
        #: Files attached (``/file``) to the next message, by input name.
        self.attached: dict[str, JSONValue] = {}
        self.message_input = chat_input(method, self.fixed)
        self.model: str | None = args.model
        self.store = SessionStore(sessions_path(program.root))
        self.session = check_name(args.session) if args.session else self.store.new_name()
        found = self.store.get(self.session)
        if found is not None and (found.agent, found.method) != (self.agent, self.method):
            self.store.open(self.session, self.agent, self.method)  # says which it talks to
        self.history_file = program.root / ".openprogram" / "chat_history"
        self.turn: asyncio.Task[RunRecord] | None = None
        self.prompt: PromptSession[str] | None = None
        #: What must not be shown or kept (the agent's secrets, read again each turn).
        self.secrets = run_secrets(agent)

    @property
    def where(self) -> str:
        return f"{self.agent}.{self.method}"

    async def run(self) -> int:
        from prompt_toolkit import PromptSession

        from ..run.record import RecordLog
        from ..run.service import RunService
        from .terminal_asker import TerminalAsker

        records = RecordLog(self.args.records) if self.args.records is not None else None
        self.display_clear: Callable[[], None] = lambda: None
        asker = TerminalAsker(
            sys.stdin.fileno(),
            _Redacting(lambda: self.secrets),
            before=lambda: self.display_clear(),
        )
        service = RunService(
            self.holder.snapshot,
            records,
            live_tools=self.args.live_tools,
            asker=asker,
            approve_all=self.args.yes,
        )
        loop = asyncio.get_running_loop()
        # Ctrl-C is a key while the prompt reads a line (raw mode); while an answer comes it
        # is a signal, and cancels that answer only.
        loop.add_signal_handler(signal.SIGINT, self._interrupt)
        stop = asyncio.Event()
        self.holder.listeners.append(self._reloaded)
        watcher = asyncio.create_task(self.holder.watch(stop))
        # Greeted once the files are watched: an edit from then on is seen.
        watching = asyncio.create_task(self.holder.watching.wait())
        await asyncio.wait({watching, watcher}, return_when=asyncio.FIRST_COMPLETED)
        watching.cancel()
        history = _input_history(self.history_file, lambda: self.secrets)
        prompt: PromptSession[str] = PromptSession(history=history)
        self.prompt = prompt
        self._greet()
        try:
            while True:
                try:
                    line = await prompt.prompt_async("> ", handle_sigint=False)
                except KeyboardInterrupt:  # Ctrl-C at the prompt: the line is dropped
                    continue
                except EOFError:  # Ctrl-D
                    break
                line = line.strip()
                if not line:
                    continue
                if line.startswith("/"):
                    if not self._command(line):
                        break
                    continue
                await self._answer(service, line)
        finally:
            loop.remove_signal_handler(signal.SIGINT)
            stop.set()
            with contextlib.suppress(asyncio.CancelledError):
                await watcher
            await service.shutdown(0)
        return 0

    def _greet(self) -> None:
        known = len(self.store.messages(self.session))
        state = f"resumed, {known} messages" if known else "new"
        _say(f"chatting with {self.where} · session {self.session} ({state}) · /help")

    def _interrupt(self) -> None:
        if self.turn is not None and not self.turn.done():
            self.turn.cancel()

    def _reloaded(self, event: ReloadEvent) -> None:
        from prompt_toolkit.application import run_in_terminal

        from ..run.reload import describe_reload

        text = describe_reload(event)
        if self.prompt is not None and self.prompt.app.is_running:
            # Printed above the prompt, which is drawn again below it.
            run_in_terminal(lambda: _say(text))
        else:
            _say(text)

    # --- a message ----------------------------------------------------------------------

    async def _answer(self, service: RunService, line: str) -> None:
        from ..shown_text import shown_on_terminal
        from .display import RunDisplay

        program, _ = self.holder.snapshot()
        try:
            agent = program.agent(self.agent)
            agent.method(self.method)
        except UsageError as exc:  # the method is gone from the files
            _say(f"error: {exc}")
            return
        # The store is shared (another chat, a server, `sessions delete`): a step it cannot
        # take now is said, and the chat goes on, as serve answers and goes on.
        try:
            history = self.store.begin_turn(self.session, self.agent, self.method)
        except UsageError as exc:
            _say(f"error: {exc}")
            return
        secrets = self.secrets = run_secrets(agent)
        display = RunDisplay(
            self.where,
            out=sys.stdout,
            err=sys.stderr,
            secrets=secrets,
            streams_text=lambda a, m: _answers_text(program, a, m),
        )
        self.display_clear = display.clear
        inputs = {**self.fixed, **self.attached, self.message_input: line}
        self.attached = {}  # they go with this message only
        task = service.start(
            self.agent, self.method, inputs, model=self.model, on_event=display, history=history
        )
        self.turn = task
        try:
            record = await task
        finally:
            self.turn = None
        shown = display.finish(record.output if record.status == "ok" else None)
        if record.status == "ok":
            if not shown:  # a structured answer: shown, never obeyed, as a streamed one is
                text = redact(turn_text(record.output), record.secrets)
                sys.stdout.write(shown_on_terminal(text) + "\n")
                sys.stdout.flush()
            try:
                self.store.end_turn(self.session, line, record)
            except UsageError as exc:
                _say(f"error: {exc}")
        elif record.status == "interrupted":
            _say("(cancelled; the session is as it was)")
        else:
            from .run_errors import describe_error

            # As a plain run says it: a schema failure's issues and repairs too.
            _say(describe_error(record.error or {}), secrets)

    # --- commands -----------------------------------------------------------------------

    def _attach(self, item: str) -> None:
        """``/file NAME=@PATH``: the file read as ``-i NAME=@PATH`` reads it, kept for the
        next message."""
        from ..runtime.content import MediaError, read_media_file

        program, _ = self.holder.snapshot()
        files = _file_inputs(program, self.agent, self.method)
        name, sep, value = item.partition("=")
        if not sep or not value.startswith("@"):
            known = f" (file inputs: {', '.join(files)})" if files else ""
            _say(f"usage: /file NAME=@PATH{known}")
            return
        if name not in files:
            takes = f"its file inputs: {', '.join(files)}" if files else "it takes no file"
            _say(f"error: /file {name}: {self.where} has no file input '{name}'; {takes}")
            return
        try:
            self.attached[name] = read_media_file(value[1:], files[name])
        except MediaError as exc:
            _say(f"error: /file {name}: {exc}", self.secrets)
            return
        _say(f"attached {value[1:]} as {name}; it goes with your next message", self.secrets)

    def _command(self, line: str) -> bool:
        """Do a /command; False when the chat should end."""
        name, _, rest = line.partition(" ")
        rest = rest.strip()
        if name in ("/exit", "/quit"):
            return False
        if name == "/help":
            _say(HELP)
        elif name == "/reset":
            try:
                session = self.store.new_name()
                self.store.open(session, self.agent, self.method)
            except UsageError as exc:  # the store cannot be used now: the session stays
                _say(f"error: {exc}")
            else:
                self.session = session
                _say(f"new session {self.session}; the previous one is kept")
        elif name == "/model":
            if rest:
                self.model = rest
            program, _ = self.holder.snapshot()
            _say(f"model: {self.model or _method_model(program, self.agent, self.method)}")
        elif name == "/file":
            self._attach(rest)
        elif name == "/save":
            target = Path(rest or f"{self.session}.jsonl")
            try:
                target.write_text(
                    "".join(line + "\n" for line in self.store.export_jsonl(self.session)),
                    encoding="utf-8",
                )
            except OSError as exc:
                _say(f"error: cannot write {target}: {exc.strerror}")
            except UsageError as exc:  # the store cannot be read
                _say(f"error: {exc}")
            else:
                _say(f"saved session {self.session} to {target}")
        else:
            _say(f"unknown command {name}; /help lists them")
        return True


def _file_inputs(program: Program, agent: str, method: str) -> dict[str, tuple[str, ...]]:
    """The file inputs of ``agent.method`` and the media types each takes (none when the
    method is gone from the files)."""
    from ..runtime.content import media_types

    try:
        found = program.agent(agent).method(method)
    except UsageError:
        return {}
    return {n: a for n, s in found.inputs.items() if (a := media_types(s)) is not None}


def _input_history(
    path: Path, secrets: Callable[[], frozenset[str]]
) -> FileHistory | InMemoryHistory:
    """The chat's input history, kept in ``path`` (made private when missing) when that is
    a regular file; else, after saying why, kept for this chat only. A FIFO there hung the
    chat at its first message (prompt_toolkit opens it to append, waiting for a reader), a
    folder showed a traceback."""
    import stat

    from prompt_toolkit.history import InMemoryHistory

    try:
        private_file(private_folder(path.parent) / path.name)
        mode = os.stat(path).st_mode
        problem = "" if stat.S_ISREG(mode) else "it is not a regular file"
    except OSError as exc:
        problem = exc.strerror or str(exc)
    if problem:
        _say(f"(input history not kept: {path}: {problem})")
        return InMemoryHistory()
    return _redacted_history(str(path), secrets)


def _redacted_history(path: str, secrets: Callable[[], frozenset[str]]) -> FileHistory:
    """prompt_toolkit's input history in ``path``, which never keeps a secret typed in a
    message (as the session and the records keep none)."""
    from prompt_toolkit.history import FileHistory

    class RedactedHistory(FileHistory):
        def store_string(self, string: str) -> None:
            super().store_string(redact(string, secrets()))

    return RedactedHistory(path)


class _Redacting:
    """stdout for questions asked during a turn, redacted with that turn's secrets."""

    def __init__(self, secrets: Callable[[], frozenset[str]]) -> None:
        self.secrets = secrets

    def write(self, text: str) -> int:
        return sys.stdout.write(redact(text, self.secrets()))

    def flush(self) -> None:
        sys.stdout.flush()


def _answers_text(program: Program, agent: str, method: str) -> bool:
    """Whether a method's answer is text (streamed as it comes) rather than JSON."""
    try:
        found = program.agent(agent).method(method)
    except UsageError:
        return False
    return found.response_format is None and not found.choices


def _method_model(program: Program, agent: str, method: str) -> str:
    try:
        found = program.agent(agent)
        return str(found.method(method).options.model or found.model or "(none)")
    except UsageError:
        return "(none)"


# --- openprogram-run sessions -------------------------------------------------------------


def _sessions_parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="openprogram-run sessions",
        description="The chat sessions of a project (its .openprogram/sessions.db).",
    )
    p.add_argument(
        "action",
        choices=("list", "show", "export", "delete"),
        nargs="?",
        default="list",
        help="list them (the default); show, export (JSON Lines) or delete session NAME",
    )
    p.add_argument("name", metavar="NAME", nargs="?", help="the session")
    p.add_argument(
        "-p",
        "--path",
        type=Path,
        default=Path("."),
        help="the project folder or an agent file in it (default: the working folder)",
    )
    p.add_argument("-o", "--output", type=Path, help="export: write to FILE, not stdout")
    p.add_argument("--json", action="store_true", help="list: one JSON object a session")
    return p


def sessions_command(argv: Sequence[str]) -> int:
    """``openprogram-run sessions``: the exit status."""
    from ..compile.paths import find_project_root

    args = _sessions_parser().parse_args(argv)
    if args.action != "list" and not args.name:
        _say(f"error: sessions {args.action} needs a session NAME (sessions list shows them)")
        return 2
    if not args.path.exists():
        _say(
            f"error: {args.path}: no such file or folder (-p names the project folder or an "
            "agent file in it)"
        )
        return 2
    with SessionStore(sessions_path(find_project_root(args.path))) as store:
        try:
            return _sessions_action(store, args)
        except UsageError as exc:
            _say(f"error: {exc}")
            return 2


def _sessions_action(store: SessionStore, args: argparse.Namespace) -> int:
    from ..shown_text import shown_on_terminal
    from .json_text import safe_json_text

    out = sys.stdout
    # What a store holds (a model's messages; names, when another program wrote it) is
    # shown on a terminal, never obeyed (its escape sequences); JSON escapes them anyway.
    shown = shown_on_terminal if out.isatty() else str
    if args.action == "list":
        sessions = store.sessions()
        if args.json:
            out.writelines(
                safe_json_text(json.dumps(s.to_dict(), ensure_ascii=False)) + "\n" for s in sessions
            )
            return 0
        if not sessions:
            _say(f"no sessions in {store.path}")
        for s in sessions:
            count = f"{s.messages} message{'s' if s.messages != 1 else ''}"
            out.write(shown(f"{s.name}  {s.agent}.{s.method}  {count}  last {s.updated_at}") + "\n")
        return 0
    if args.action == "show":
        info = store.require(args.name)
        out.write(shown(f"session {info.name} · {info.agent}.{info.method}") + "\n")
        for m in store.messages(args.name):
            who = "you" if m.role == "user" else info.agent
            out.write(f"\n{shown(who)}:\n{shown(m.content)}\n")
        return 0
    if args.action == "export":
        lines = [line + "\n" for line in store.export_jsonl(args.name)]
        if args.output is None:
            out.writelines(safe_json_text(line) for line in lines)
            return 0
        try:
            args.output.write_text("".join(lines), encoding="utf-8")
        except OSError as exc:
            _say(f"error: cannot write {args.output}: {exc.strerror}")
            return 1
        return 0
    store.delete(args.name)
    _say(f"deleted session {args.name}")
    return 0
