"""``openprogram-run``: run, check and inspect YAML agents.

Exit status: 0 success, 1 the run failed (an ``LLMError``, a ``DecisionError``, …),
2 usage or config error. Imports are lazy so ``--help`` stays fast.
"""

from __future__ import annotations

import argparse
import errno
import sys
from pathlib import Path

# `typing` and `json` cost milliseconds that `--help` need not pay: type names are for the
# checker only (mypy reads TYPE_CHECKING by name), and json is imported where it is used.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Coroutine, Sequence
    from typing import NoReturn, TextIO

    from ..compile.program import Agent, Method, Program
    from ..errors import ConfigError, Diagnostic
    from ..json_types import JSONValue
    from ..run.record import RunRecord
    from ..runtime.retry import RetryInfo
    from ..runtimes.protocol import SelectorWrapper
    from .display import RunDisplay
    from .terminal_asker import TerminalAsker
    from .testing import TestOutcome

__all__ = ["main"]

SUBCOMMANDS = (
    "batch",
    "chat",
    "check",
    "diff",
    "lock",
    "mcp",
    "render",
    "runtimes",
    "schema",
    "serve",
    "sessions",
    "test",
)

_DESCRIPTION = """\
Run a method of a YAML agent:
  openprogram-run PATH [METHOD] [-i NAME=VALUE]... [--input-json JSON|@FILE]
                  [--model PROVIDER:MODEL] [--json] [--trace FILE]
                  [--records FILE] [--record DIR | --replay DIR] [--watch]
                  [--live-tools] [--yes] [--quiet] [--otel [--otel-content]]
  PATH is an agent file or a project folder (with openprogram.yaml); in a project,
  METHOD may be AGENT.METHOD. --watch re-runs with the same inputs whenever a file
  of the agent changes. Under the offline `test` model no http or command tool runs
  unless --live-tools is given. Tools declared `confirm` ask on the terminal first
  (--yes approves them all; with no terminal and no --yes they are refused).
  --otel exports OpenTelemetry spans of each run (also `serve` and `test`).

Other commands:
  openprogram-run serve PATH [--port N] [--host H --token T] [--records FILE]
                                   serve runs over HTTP (127.0.0.1), reloading on change
  openprogram-run mcp PATH [--http [--port N] [--host H --token T]] [--records FILE]
                                   serve the methods as MCP tools and prompts (stdio)
  openprogram-run batch PATH METHOD --input FILE --output FILE [--resume]
                  [--concurrency N] [--rpm N] [--tpm N] [--max-failures N] [--map COL=INPUT]
                                   run a method over every row of a dataset (JSONL out)
  openprogram-run chat PATH [METHOD] [--session NAME]
                                   talk with a method; the conversation is kept as a session
  openprogram-run sessions [list|show|export|delete] [NAME]
                                   the chat sessions of a project
  openprogram-run check PATH...    validate, report every problem, run nothing
  openprogram-run test PATH        run the tests kept with the prompts (offline by default)
  openprogram-run render PATH [METHOD] [-i NAME=VALUE]...
                                   print what the method would send; call no model
  openprogram-run lock PATH [--check]
                                   write (or check) openprogram.lock, the prompt versions
  openprogram-run diff [REV_A] [REV_B] PATH [--test] [--format markdown] [--json]
                                   what changed between two git versions (default: HEAD
                                   against the work tree): prompts, lock, test outcomes
  openprogram-run runtimes         list registered runtimes, built-in or plugin
  openprogram-run schema [KIND]    print the JSON Schema of agent, project or tests files

  openprogram-run --version        print the version

Exit status: 0 success, 1 the run failed, 2 usage or config error
(`test`: 5 when no test ran).
"""


_LIVE_TOOLS_HELP = "run http and command tools for real under the offline `test` model too"
_YES_HELP = (
    "approve every tool confirmation of the run (without it, and with no terminal to ask "
    "on, tools declared `confirm` are refused)"
)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(2, f"{self.prog}: error: {message}\n")


def _run_parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="openprogram-run",
        description=_DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _add_method_options(p)
    p.add_argument("--trace", metavar="FILE", type=Path, help="append the session trace (JSONL)")
    p.add_argument(
        "--watch", action="store_true", help="re-run on every change to the agent's files"
    )
    p.add_argument(
        "--records", metavar="FILE", type=Path, help="append each run's record (JSON Lines)"
    )
    p.add_argument(
        "--record", metavar="DIR", type=Path, help="store every model request and reply in DIR"
    )
    p.add_argument("--replay", metavar="DIR", type=Path, help="answer from the recordings in DIR")
    p.add_argument("--live-tools", action="store_true", help=_LIVE_TOOLS_HELP)
    p.add_argument("-y", "--yes", action="store_true", help=_YES_HELP)
    p.add_argument(
        "-q", "--quiet", action="store_true", help="print no line on stderr when a call is retried"
    )
    p.add_argument(
        "--no-stream",
        action="store_true",
        help="on a terminal, print the answer at the end (by default it shows as it streams, "
        "with tool calls and a spinner)",
    )
    _add_otel_options(p)
    return p


def _add_method_options(p: argparse.ArgumentParser) -> None:
    """What names a method and its inputs: shared by a run and ``render``."""
    p.add_argument("path", metavar="PATH", help="an agent file (or a folder of agents)")
    p.add_argument("method", metavar="METHOD", nargs="?", help="the method to run")
    p.add_argument(
        "-i",
        "--input",
        metavar="NAME=VALUE",
        action="append",
        default=[],
        help="an input; VALUE is JSON when it parses and the input is not a string",
    )
    p.add_argument("--input-json", metavar="JSON|@FILE", help="all inputs as one JSON object")
    p.add_argument("--agent", help="which agent, when PATH holds several")
    p.add_argument("--model", metavar="PROVIDER:MODEL", help="override the model")
    p.add_argument("--json", action="store_true", help="print one JSON object")


def _add_otel_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--otel",
        action="store_true",
        help="export OpenTelemetry spans of every run over OTLP/HTTP (OTEL_EXPORTER_OTLP_* "
        "configure it; on whenever OTEL_EXPORTER_OTLP_ENDPOINT is set)",
    )
    p.add_argument(
        "--otel-content",
        action="store_true",
        help="with --otel, export prompts, completions and tool arguments too (secrets redacted)",
    )


#: Whether this command switched OpenTelemetry on (``main`` switches it off at the end).
_telemetry_started = False


def _start_telemetry(args: argparse.Namespace) -> bool:
    """Switch OpenTelemetry on when asked; False, after saying why, when it cannot be."""
    global _telemetry_started
    from ..errors import UsageError
    from ..telemetry import active, requested, start

    try:
        start(requested(args.otel, args.otel_content))
    except UsageError as exc:
        _emit(sys.stderr, f"error: {exc}")
        return False
    _telemetry_started = active() is not None
    return True


def _stop_telemetry() -> None:
    """Export the spans still pending (before the process ends) and switch it off."""
    global _telemetry_started
    if _telemetry_started:
        from ..telemetry import stop

        _telemetry_started = False
        stop()


def _emit(stream: TextIO, text: str, secrets: frozenset[str] = frozenset()) -> None:
    if secrets:
        from ..redaction import redact

        text = redact(text, secrets)
    stream.write(text if text.endswith("\n") else text + "\n")


def _print_config_error(exc: ConfigError) -> int:
    _print_problems(exc.diagnostics, "found; nothing was run.")
    return 2


def _print_problems(diagnostics: Sequence[Diagnostic], found: str) -> None:
    """Each problem on stderr, then how many were ``found``. A problem quotes the
    repository's files (a key, a recording's name): shown as text, never obeyed (an escape
    sequence among them would drive the terminal)."""
    from ..shown_text import shown_on_terminal

    for d in diagnostics:
        _emit(sys.stderr, shown_on_terminal(str(d)))
    _emit(sys.stderr, f"{_count(len(diagnostics), 'error')} {found}")


def _parse_inputs(args: argparse.Namespace, method: Method) -> dict[str, JSONValue]:
    import json

    from ..errors import UsageError
    from ..json_types import parse_json

    inputs: dict[str, JSONValue] = {}
    if args.input_json:
        raw = args.input_json
        if raw.startswith("@"):
            raw = _input_json_file(raw[1:])
        try:
            loaded = parse_json(raw)
        except json.JSONDecodeError as exc:
            raise UsageError(
                f"--input-json is not valid JSON: {exc.msg} at column {exc.colno}"
            ) from None
        if not isinstance(loaded, dict):
            raise UsageError("--input-json must be a JSON object of input names to values")
        inputs.update(loaded)
    inputs.update(input_items(args.input, method))
    return inputs


#: The largest ``--input-json @FILE`` read: what ``serve`` takes as one body (inputs may
#: carry files as base64, at most 20 MiB each raw).
MAX_INPUT_JSON_BYTES = 28 << 20


def _input_json_file(name: str) -> str:
    """The text of ``--input-json @FILE``: a regular file or a pipe (``@<(command)``), of
    at most ``MAX_INPUT_JSON_BYTES``, in UTF-8; else a ``UsageError`` naming the file (and
    the line and column of a byte that is not UTF-8). A device (/dev/zero, /dev/urandom)
    or a folder is refused, never read without end."""
    import os
    import stat

    from .._file_reads import FileRefused, FileTooLarge, read_regular_file
    from ..errors import UsageError
    from ..spec.textfile import UnreadableFile, decode_text

    limit = MAX_INPUT_JSON_BYTES
    too_large = f"--input-json: {name} is larger than {limit >> 20} MiB"
    try:
        # A pipe the person named (a shell's process substitution is one) is read as it
        # comes. Looked at without opening it: a probe's open and close could break the
        # pipe for a writer already waiting on it.
        piped = stat.S_ISFIFO(os.stat(name).st_mode)
    except OSError:
        piped = False  # read_regular_file says why
    try:
        if piped:
            with open(name, "rb") as stream:
                data = stream.read(limit + 1)
            if len(data) > limit:
                raise FileTooLarge(len(data), limit)
        else:
            data = read_regular_file(name, limit=limit)
    except FileTooLarge:
        raise UsageError(too_large) from None
    except FileRefused as exc:
        raise UsageError(f"--input-json: cannot read {name}: {exc.reason}") from None
    except OSError as exc:
        raise UsageError(f"--input-json: cannot read {name}: {exc.strerror or exc}") from None
    try:
        return decode_text(data, name)
    except UnreadableFile as exc:
        where = exc.diagnostics[0]
        raise UsageError(
            f"--input-json: {where.path}:{where.line}:{where.col}: {where.message}"
        ) from None


def input_items(items: Sequence[str], method: Method) -> dict[str, JSONValue]:
    """``-i NAME=VALUE`` items as inputs of ``method``: a file input's ``@FILE`` is read,
    a string input takes VALUE as it is, any other takes it as JSON when it parses (a run
    and a chat read them so)."""
    import json

    from ..errors import UsageError
    from ..json_types import parse_json
    from ..runtime.content import MediaError, media_types, read_media_file

    inputs: dict[str, JSONValue] = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise UsageError(f"-i {item!r}: write -i NAME=VALUE")
        schema = method.inputs.get(name)
        accepted = media_types(schema)
        if accepted is not None and value.startswith("@"):
            # A file input: -i photo=@cat.png reads the file (a data URL or base64 is
            # taken as given).
            try:
                inputs[name] = read_media_file(value[1:], accepted)
            except MediaError as exc:
                raise UsageError(f"-i {name}: {exc}") from None
            continue
        wants_string = isinstance(schema, dict) and schema.get("type") == "string"
        if wants_string:
            inputs[name] = value
            continue
        try:
            inputs[name] = parse_json(value)
        except json.JSONDecodeError:
            inputs[name] = value
    return inputs


def _format_output(output: object) -> str:
    import json

    if isinstance(output, str):
        return output
    return json.dumps(output, indent=2, ensure_ascii=False)


def _usage_failed(exc: Exception, secrets: frozenset[str]) -> int:
    """Report a usage error (redacted; its control characters shown as text, since it may
    quote the repository's files or a dataset); the exit status 2."""
    from ..shown_text import shown_on_terminal

    _emit(sys.stderr, shown_on_terminal(f"error: {exc}"), secrets)
    return 2


def select_method(
    args: argparse.Namespace,
) -> tuple[Program, Agent, Method, frozenset[str]] | int:
    """The compiled program (``args.path``), the agent and method the command line names
    (``args.agent``, ``args.method``) and the agent's secrets; or the exit status after
    reporting why not. ``run``, ``render`` and ``batch`` start here."""
    from ..compile.cache import compile_cached
    from ..errors import ConfigError, UsageError
    from ..run.record import run_secrets

    try:
        program = compile_cached(Path(args.path))
    except ConfigError as exc:
        return _print_config_error(exc)
    secrets: frozenset[str] = frozenset()
    try:
        agent, name = program.select(args.method, agent=args.agent, path=Path(args.path))
        secrets = run_secrets(agent)
        method = agent.method(name or None)
    except UsageError as exc:
        return _usage_failed(exc, secrets)
    return program, agent, method, secrets


def _load_method(
    args: argparse.Namespace,
) -> tuple[Program, Agent, Method, dict[str, JSONValue]] | int:
    """The compiled program, the agent and method the command line names, and its inputs
    (checked); or the exit status after reporting why not."""
    from ..errors import UsageError

    selected = select_method(args)
    if isinstance(selected, int):
        return selected
    program, agent, method, secrets = selected
    try:
        inputs = _parse_inputs(args, method)
        method.prepare_inputs(inputs)
    except UsageError as exc:
        return _usage_failed(exc, secrets)
    return program, agent, method, inputs


def _cmd_run(argv: Sequence[str]) -> int:
    args = _run_parser().parse_args(argv)
    if args.watch and (args.record is not None or args.replay is not None):
        # The runs --watch starts took neither: a replay asked for ran the live model.
        _emit(sys.stderr, "error: --watch does not go together with --record or --replay")
        return 2
    if _refused_outputs(args) or not _start_telemetry(args):
        return 2
    if args.watch:
        return _cmd_watch(args)

    loaded = _load_method(args)
    if isinstance(loaded, int):
        return loaded
    program, agent, method, inputs = loaded

    from ..errors import ConfigError
    from ..run.execute import execute_run
    from ..run.record import RecordLog, append_trace, run_secrets
    from ..run.version import VersionStamp

    secrets = run_secrets(agent)

    # git is asked only when a record is shown or kept: plain runs stay fast.
    stamp = VersionStamp(program.version)
    if args.json or args.records is not None:
        from ..run.git_stamp import GitStamper

        stamp = GitStamper().stamp(program)
    trace = None
    if args.trace:
        from ..runtime.trace import SessionTrace

        trace = SessionTrace()
    if args.record is not None and args.replay is not None:
        _emit(sys.stderr, "error: --record and --replay do not go together")
        return 2
    try:
        wrap = _selector_wrapper(args.record, args.replay, secrets)
    except ConfigError as exc:
        return _print_config_error(exc)
    display = _display(args, program, f"{agent.name}.{method.name}", secrets)
    status: _Status | RunDisplay = display or _Status(f"{agent.name}.{method.name}")
    # Ready everything the first turn needs while the collector is still off. A failure
    # here is left to the run, which records it.
    import contextlib

    with contextlib.suppress(Exception):
        method.prepare_templates()
    try:
        record, code = _run_to_the_end(
            execute_run(
                program,
                stamp,
                agent.name,
                method.name,
                inputs,
                model=args.model,
                trace=trace,
                wrap_selector=wrap,
                live_tools=args.live_tools,
                # A display shows retries from the run's events, on its own line.
                on_retry=None if args.quiet or display else _RetryLine(status, secrets),
                asker=_terminal_asker(status, secrets),
                approve_all=args.yes,
                on_event=display,
            )
        )
    finally:
        status.clear()
        kept = trace is None or _wrote(args.trace, lambda: append_trace(args.trace, trace, secrets))
    if args.records is not None:
        kept &= _wrote(args.records, lambda: RecordLog(args.records).append(record))
    shown = display is not None and display.finish(record.output)
    if args.json:
        from .json_text import safe_json_text

        _emit(sys.stdout, safe_json_text(record.to_json()))
    elif record.error is None and not shown:
        text = _format_output(record.output)
        if sys.stdout.isatty():  # what the model wrote is shown there, never obeyed
            from ..shown_text import shown_on_terminal

            text = shown_on_terminal(text)
        _emit(sys.stdout, text, secrets)
    if record.tools_not_run and not args.json:
        _emit(sys.stderr, _not_run_note(record.tools_not_run))
    if record.fallbacks and not args.json and display is None:  # a display showed them
        from ..run.fallback import fallback_lines

        _emit(sys.stderr, fallback_lines(record.fallbacks), secrets)
    if record.error is not None:
        from .run_errors import describe_error

        _emit(sys.stderr, describe_error(record.error), secrets)
    # A run that succeeded but whose trace or record was lost did not do all it was asked.
    return code or (0 if kept else 1)


def _display(
    args: argparse.Namespace, program: Program, title: str, secrets: frozenset[str]
) -> RunDisplay | None:
    """The live display of the run when stdout is a terminal (not with ``--json`` or
    ``--no-stream``); None keeps the output exactly as a pipe gets it."""
    if args.json or args.no_stream or not sys.stdout.isatty():
        return None
    from .display import RunDisplay

    def streams_text(agent: str, method: str) -> bool:
        found = program.agent(agent).method(method)
        return found.response_format is None and found.choices is None

    return RunDisplay(
        title,
        out=sys.stdout,
        err=sys.stderr,
        secrets=secrets,
        streams_text=streams_text,
        quiet=args.quiet,
    )


def _terminal_asker(status: _Status | RunDisplay, secrets: frozenset[str]) -> TerminalAsker | None:
    """The terminal to ask the person on, when stdin and stdout are one; else nobody.
    A question may hold a secret (a confirmation templated with one): it is shown redacted."""
    if not (sys.stdin.isatty() and sys.stdout.isatty()):
        return None
    from .terminal_asker import TerminalAsker

    out = _RedactingStream(sys.stdout, secrets)
    return TerminalAsker(sys.stdin.fileno(), out, before=status.clear)


def _run_to_the_end(run: Coroutine[object, object, RunRecord]) -> tuple[RunRecord, int]:
    """The record ``run`` returns, and the exit status. SIGTERM ends the run as Ctrl-C does
    (asyncio cancels the run on SIGINT): it is recorded as interrupted, and its trace and
    record are still written; the status is then 143 (128 + SIGTERM), as a shell says.
    Start-up ends (``_startup_done``) when the run first waits: its first step readies the
    first request (a provider's HTTP library is imported then) with the collector still off."""
    import asyncio
    import signal

    terminated = False

    async def main() -> RunRecord:
        task = asyncio.ensure_future(run)
        asyncio.get_running_loop().call_soon(_startup_done)  # queued behind the run's first step

        def terminate() -> None:
            nonlocal terminated
            terminated = True
            task.cancel()

        loop = asyncio.get_running_loop()
        try:
            # Installed once the run's first step is scheduled: the handler's callback is
            # queued behind it, so a cancel always lands inside the run, which records it.
            loop.add_signal_handler(signal.SIGTERM, terminate)
        except (NotImplementedError, RuntimeError, ValueError):  # Windows, or not main thread
            return await task
        try:
            return await task
        finally:
            loop.remove_signal_handler(signal.SIGTERM)

    record = asyncio.run(main())
    return record, 128 + signal.SIGTERM if terminated else record.exit_code


def _wrote(path: Path, write: Callable[[], None]) -> bool:
    """Whether ``write`` wrote ``path``; when it could not, says why in one line."""
    try:
        write()
    except OSError as exc:
        from .._file_writes import cannot_write

        _emit(sys.stderr, cannot_write(path, exc))
        return False
    return True


def _refused_outputs(args: argparse.Namespace) -> bool:
    """Whether a file the command keeps (``--trace``, ``--records``, ``--record``) could not
    be written, after saying why. Checked before anything runs, so that a mistyped path
    costs no run."""
    from .._file_writes import unwritable_file, unwritable_folder

    checks = [
        ("--trace", getattr(args, "trace", None), unwritable_file),
        ("--records", getattr(args, "records", None), unwritable_file),
        ("--junit", getattr(args, "junit", None), unwritable_file),
        ("--report", getattr(args, "report", None), unwritable_file),
    ]
    if getattr(args, "replay", None) is None:  # with --replay, --record is refused anyway
        checks.append(("--record", getattr(args, "record", None), unwritable_folder))
    for option, path, problem in checks:
        reason = problem(path) if path is not None else None
        if reason is not None:
            _emit(sys.stderr, f"error: cannot write {path} ({option}): {reason}; nothing was run")
            return True
    return False


def _not_run_note(not_run: list[dict[str, str]]) -> str:
    """One line on stderr: which tools the model asked for that did not run, and why."""
    offline = sorted({e["name"] for e in not_run if e["reason"] == "offline"})
    replay = sorted({e["name"] for e in not_run if e["reason"] == "replay"})
    unconfirmed = sorted({e["name"] for e in not_run if e["reason"] == "unconfirmed"})
    parts = []
    if offline:
        parts.append(
            f"not run under the offline test model: {', '.join(offline)} "
            "(pass --live-tools to run them)"
        )
    if replay:
        parts.append(f"not run, no result in the recording: {', '.join(replay)}")
    if unconfirmed:
        parts.append(
            f"not run, nobody to confirm them: {', '.join(unconfirmed)} (pass --yes to approve)"
        )
    return "note: tools " + "; ".join(parts)


def _cmd_watch(args: argparse.Namespace) -> int:
    import asyncio

    from .watch import watch_and_run

    _startup_done()
    return asyncio.run(
        watch_and_run(
            Path(args.path),
            agent=args.agent,
            method=args.method,
            inputs_for=lambda method: _parse_inputs(args, method),
            model=args.model,
            json_output=args.json,
            records=args.records,
            trace=args.trace,
            live_tools=args.live_tools,
            approve_all=args.yes,
        )
    )


def _cmd_batch(argv: Sequence[str]) -> int:
    from .batch import batch_command

    _startup_done()
    return batch_command(argv)


def _cmd_chat(argv: Sequence[str]) -> int:
    from .chat import chat_command

    _startup_done()
    return chat_command(argv)


def _cmd_sessions(argv: Sequence[str]) -> int:
    from .chat import sessions_command

    return sessions_command(argv)


def _add_serving_options(p: argparse.ArgumentParser, grace_when: str) -> None:
    """What every long-running server (``serve``, ``mcp``) takes about its runs."""
    from ..run.shutdown import DEFAULT_GRACE_S

    p.add_argument("--model", metavar="PROVIDER:MODEL", help="override the model of every run")
    p.add_argument("--records", metavar="FILE", type=Path, help="append each run's record")
    p.add_argument(
        "--grace",
        metavar="SECONDS",
        type=float,
        default=DEFAULT_GRACE_S,
        help=f"{grace_when}, how long runs in flight may finish (default: %(default)s)",
    )
    p.add_argument("--no-watch", action="store_true", help="serve one version; do not reload")
    p.add_argument("--live-tools", action="store_true", help=_LIVE_TOOLS_HELP)


def _cmd_serve(argv: Sequence[str]) -> int:
    from ..serve.guard import ServeLimits

    p = _Parser(
        prog="openprogram-run serve",
        description="Serve runs over HTTP (127.0.0.1 by default) while the agent's files change:\n"
        "  POST /run/AGENT/METHOD (inputs as a JSON object) → the run's record\n"
        "    (with Accept: text/event-stream: the run's events as they happen, then the record)\n"
        "  GET /health, GET /version, GET /agents, GET /runs, GET /runs/ID\n"
        "  GET /events (reload notices as server-sent events)\n"
        '  GET /questions; POST /questions/ID/answer ({"answer": ...}), /questions/ID/decline',
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("path", metavar="PATH", help="an agent file, or a project folder")
    _add_address_options(p, port=8765, what="", page="; a browser opens /?token=TOKEN once")
    _add_serving_options(p, "on Ctrl-C or SIGTERM")
    p.add_argument("-y", "--yes", action="store_true", help=_YES_HELP)
    limits = ServeLimits()
    p.add_argument(
        "--allow-host",
        metavar="NAME",
        action="append",
        default=[],
        help="also answer requests for this host name (any port), e.g. behind a proxy; "
        "by default only 127.0.0.1, localhost and [::1] at --port",
    )
    p.add_argument(
        "--allow-model-override",
        action="store_true",
        help="let ?model= name any model (by default only the models the project uses)",
    )
    p.add_argument(
        "--max-connections",
        metavar="N",
        type=_positive(int),
        default=limits.max_connections,
        help="connections served at once; more get 503 (default: %(default)s)",
    )
    p.add_argument(
        "--header-timeout",
        metavar="SECONDS",
        type=_positive(float),
        default=limits.header_timeout_s,
        help="time a request may take to start, and its headers to arrive; idle connections "
        "close after it (default: %(default)s)",
    )
    p.add_argument(
        "--body-timeout",
        metavar="SECONDS",
        type=_positive(float),
        default=limits.body_timeout_s,
        help="time a request's body may take to arrive (default: %(default)s)",
    )
    _add_otel_options(p)
    args = p.parse_args(argv)
    if _refused_outputs(args) or not _start_telemetry(args):
        return 2
    import asyncio

    from ..serve.driver import serve_path

    _startup_done()
    return asyncio.run(
        serve_path(
            Path(args.path),
            port=args.port,
            host=args.host,
            token=args.token,
            model=args.model,
            records=args.records,
            grace_s=args.grace,
            watch=not args.no_watch,
            live_tools=args.live_tools,
            approve_all=args.yes,
            limits=ServeLimits(
                allowed_hosts=tuple(args.allow_host),
                allow_model_override=args.allow_model_override,
                max_connections=args.max_connections,
                header_timeout_s=args.header_timeout,
                body_timeout_s=args.body_timeout,
            ),
        )
    )


def _cmd_mcp(argv: Sequence[str]) -> int:
    p = _Parser(
        prog="openprogram-run mcp",
        description="Serve a prompt repository over MCP while its files change: each method\n"
        "is a tool named AGENT.METHOD (its inputs schema as the tool's input schema) and\n"
        "a prompt of the same name, rendered by the repository's templates. stdio by\n"
        "default (stdout is the protocol; messages go to stderr); --http serves\n"
        "streamable HTTP at http://127.0.0.1:PORT/mcp.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("path", metavar="PATH", help="an agent file, or a project folder")
    p.add_argument("--http", action="store_true", help="serve streamable HTTP, not stdio")
    _add_address_options(p, port=8766, what="with --http, ")
    _add_serving_options(p, "at the end")
    p.add_argument(
        "-y",
        "--yes",
        action="store_true",
        help="approve every tool confirmation (without it, tools declared `confirm` ask the "
        "client's user when the client supports elicitation, and are refused otherwise)",
    )
    args = p.parse_args(argv)
    if not args.http and (args.token or args.host != "127.0.0.1" or args.port != 8766):
        p.error("--host, --port and --token apply to --http (stdio has no address)")
    if _refused_outputs(args):
        return 2
    import asyncio

    from ..mcp.driver import serve_repository

    _startup_done()
    return asyncio.run(
        serve_repository(
            Path(args.path),
            http=args.http,
            host=args.host,
            port=args.port,
            token=args.token,
            model=args.model,
            records=args.records,
            grace_s=args.grace,
            watch=not args.no_watch,
            live_tools=args.live_tools,
            approve_all=args.yes,
        )
    )


def _add_address_options(
    p: argparse.ArgumentParser, *, port: int, what: str, page: str = ""
) -> None:
    """``--port``, ``--host`` and ``--token`` of a server (``what``: which mode they are for)."""
    p.add_argument(
        "--port",
        type=int,
        default=port,
        help=f"{what or 'the '}port to listen on (0: any free one)",
    )
    p.add_argument(
        "--host",
        default="127.0.0.1",
        help=f"{what or 'the '}address to listen on (default: %(default)s); any other than "
        "loopback needs a token",
    )
    p.add_argument(
        "--token",
        help=f"{what}require 'Authorization: Bearer TOKEN' on every request (default: "
        f"$OPENPROGRAM_SERVE_TOKEN, which other users cannot read in the process list){page}",
    )


def _positive(kind: Callable[[str], float]) -> Callable[[str], float]:
    """An argparse ``type``: ``kind`` (int or float), above 0."""

    def parse(text: str) -> float:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
        if not value > 0:
            raise argparse.ArgumentTypeError(f"must be above 0: {text!r}")
        return value

    return parse


class _Status:
    """A one-line status on a terminal's stderr; silent when stderr is not a terminal."""

    def __init__(self, text: str) -> None:
        self.active = sys.stderr.isatty()
        if self.active:
            sys.stderr.write(f"\r… {text}")
            sys.stderr.flush()

    def clear(self) -> None:
        if self.active:
            sys.stderr.write("\r\033[K")
            sys.stderr.flush()
            self.active = False


class _RetryLine:
    """Prints ``HTTP 500 – retrying in 3.2 s (2/6)`` on stderr before each retry's sleep,
    so a run that waits on a failing server does not look hung."""

    def __init__(self, status: _Status | RunDisplay, secrets: frozenset[str]) -> None:
        self.status = status
        self.secrets = secrets

    def __call__(self, info: RetryInfo) -> None:
        what = f"HTTP {info.http_status}" if info.http_status is not None else info.reason
        self.status.clear()
        _emit(
            sys.stderr,
            f"{what} – retrying in {info.delay_s:.1f} s ({info.attempt + 1}/{info.max_retries})",
            self.secrets,
        )
        sys.stderr.flush()


def _selector_wrapper(
    record_dir: Path | None, replay_dir: Path | None, secrets: frozenset[str]
) -> SelectorWrapper | None:
    """What ``--record`` / ``--replay`` put between a run and its runtimes, if anything.
    The recordings of ``--replay`` are read now: a broken one is a ``ConfigError`` naming
    it (exit 2) before anything runs, not a failed model turn."""
    if replay_dir is not None:
        from ..recording.replay import ReplaySelector

        selector = ReplaySelector(replay_dir)
        selector.check()
        return lambda _inner: selector
    if record_dir is not None:
        from ..recording.record import RecordingSelector

        return lambda inner: RecordingSelector(inner, record_dir, secrets=secrets)
    return None


def _cmd_render(argv: Sequence[str]) -> int:
    import json

    p = _Parser(
        prog="openprogram-run render",
        description="Print the messages, tools and response format a method would send; "
        "call no model.",
    )
    _add_method_options(p)
    args = p.parse_args(argv)
    import asyncio

    from ..run.record import run_secrets
    from ..run.render import format_request, render_method
    from ..run.version import VersionStamp

    loaded = _load_method(args)
    if isinstance(loaded, int):
        return loaded
    program, agent, method, inputs = loaded
    rendered = asyncio.run(
        render_method(
            program,
            VersionStamp(program.version),
            agent.name,
            method.name,
            inputs,
            model=args.model,
        )
    )
    from ..redaction import redact
    from ..shown_text import shown_on_terminal

    data = rendered.request
    if data is None:
        # As a run's error: the secrets the agent read redacted (a template may have read
        # one as the name of an attribute), and what drives a terminal shown as text.
        error = rendered.record.error or {}
        message = f"error: nothing to render: {error.get('message', 'no request')}"
        _emit(sys.stderr, shown_on_terminal(redact(message, run_secrets(agent))))
        return rendered.record.exit_code or 1
    if not args.json:
        # The repository's prompts and tool descriptions are text under review: their
        # control characters show as text (``\x1b``) wherever they go, as diff's do.
        _emit(sys.stdout, shown_on_terminal(redact(format_request(data), run_secrets(agent))))
        return 0
    from .json_text import safe_json_text

    text = redact(json.dumps(data, indent=2, ensure_ascii=False), run_secrets(agent))
    _emit(sys.stdout, safe_json_text(text))
    return 0


def _cmd_lock(argv: Sequence[str]) -> int:
    p = _Parser(
        prog="openprogram-run lock",
        description="Write openprogram.lock (each method's prompt version), or check it.",
    )
    p.add_argument("path", metavar="PATH", help="a project folder or an agent file")
    p.add_argument(
        "--check",
        action="store_true",
        help="exit 1 when prompts differ from it (or it is missing), 2 when it does not read",
    )
    args = p.parse_args(argv)
    from ..compile.project import compile_path
    from ..errors import ConfigError
    from .lock import check_lock, write_lock

    try:
        program = compile_path(Path(args.path))
    except ConfigError as exc:
        return _print_config_error(exc)
    if args.check:
        try:
            problems = check_lock(program)
        except ConfigError as exc:
            return _print_config_error(exc)
        for problem in problems:
            _emit(sys.stderr, problem)
        if problems:
            _emit(
                sys.stderr,
                "prompts differ from openprogram.lock: re-record their tests, then run "
                "`openprogram-run lock` and commit both",
            )
            return 1
        _emit(sys.stdout, "openprogram.lock is up to date")
        return 0
    try:
        target = write_lock(program)
    except OSError as exc:
        from .._file_writes import cannot_write

        _emit(sys.stderr, cannot_write(exc.filename, exc))
        return 1
    count = sum(len(a.methods) for a in program.agents.values())
    _emit(sys.stdout, f"wrote {target} ({_count(count, 'method')})")
    return 0


def _cmd_diff(argv: Sequence[str]) -> int:
    p = _Parser(
        prog="openprogram-run diff",
        usage="%(prog)s [REV_A] [REV_B] PATH [--test] [--model PROVIDER:MODEL] "
        "[--format {text,markdown} | --json]",
        description="What changed between two git versions of a prompt repository: each "
        "method's prompt version and rendered request, the lock file, and with --test each "
        "test's outcome and judge score in both. Both versions are checked out in a temporary "
        "folder; your files and index are not touched. Exit status 1 when a test got worse "
        "or the newer version does not compile.",
    )
    p.add_argument(
        "revs_and_path",
        metavar="[REV_A] [REV_B] PATH",
        nargs="+",
        help="PATH: a project folder or agent file in a git repository; REV_A defaults to "
        "HEAD, REV_B to the work tree (uncommitted and untracked files included)",
    )
    p.add_argument("--test", action="store_true", help="run both versions' tests and compare")
    p.add_argument(
        "--model", metavar="PROVIDER:MODEL", help="with --test: run the tests on this model"
    )
    shown = p.add_mutually_exclusive_group()
    shown.add_argument(
        "--format",
        choices=("text", "markdown"),
        default="text",
        help="markdown: for a pull-request comment",
    )
    shown.add_argument("--json", action="store_true", help="print JSON")
    args = p.parse_args(argv)
    if len(args.revs_and_path) > 3:
        p.error("at most two revisions and a PATH")
    *revs, path = args.revs_and_path
    import asyncio
    import json

    from ..errors import UsageError
    from .diff import diff_versions, to_markdown, to_text

    try:
        diff = asyncio.run(
            diff_versions(
                Path(path),
                revs[0] if revs else None,
                revs[1] if len(revs) > 1 else None,
                with_tests=args.test,
                model=args.model,
            )
        )
    except UsageError as exc:
        _emit(sys.stderr, f"error: {exc}")
        return 2
    if args.json:
        from ..redaction import redact
        from .json_text import safe_json_text

        text = json.dumps(diff.to_dict(), indent=2, ensure_ascii=False)
        text = safe_json_text(redact(text, diff.secrets))
    else:
        text = to_markdown(diff) if args.format == "markdown" else to_text(diff)
    _emit(sys.stdout, text.rstrip("\n"), diff.secrets)
    return 1 if diff.failed else 0


def _cmd_test(argv: Sequence[str]) -> int:
    p = _Parser(
        prog="openprogram-run test",
        description=(
            "Run the tests kept with the prompts. Offline by default: recorded replies are "
            "replayed when the project keeps recordings, else the offline `test` model answers."
        ),
    )
    p.add_argument("path", metavar="PATH", help="an agent file or a project folder")
    p.add_argument("-k", metavar="TEXT", dest="keyword", help="only tests whose name has TEXT")
    p.add_argument("-v", "--verbose", action="store_true", help="list the tests that pass too")
    p.add_argument("--model", metavar="PROVIDER:MODEL", help="run every test on this model")
    p.add_argument("--live", action="store_true", help="use the models the agents name")
    p.add_argument("--record", metavar="DIR", type=Path, help="live, and record every reply")
    p.add_argument("--replay", metavar="DIR", type=Path, help="answer from recordings in DIR")
    p.add_argument("--live-tools", action="store_true", help=_LIVE_TOOLS_HELP)
    p.add_argument(
        "--models",
        metavar="A,B,C",
        type=_model_list,
        help="run every test on each of these models (live) and compare them in a table",
    )
    p.add_argument(
        "--repeat",
        metavar="N",
        type=_positive_int,
        default=1,
        help="run each test N times and report the ones that pass only sometimes",
    )
    p.add_argument(
        "--json", action="store_true", help="print every result and each model's summary as JSON"
    )
    p.add_argument(
        "--junit", metavar="FILE", type=Path, help="also write the outcomes as JUnit XML for CI"
    )
    p.add_argument(
        "--report",
        metavar="FILE.html",
        type=Path,
        help="also write a self-contained HTML page: the models, each failure, its prompt",
    )
    _add_otel_options(p)
    args = p.parse_args(argv)
    if _refused_outputs(args) or not _start_telemetry(args):
        return 2
    import asyncio

    from ..compile.project import compile_path
    from ..errors import ConfigError
    from ..run.record import run_secrets
    from .testing import run_tests

    try:
        program = compile_path(Path(args.path))
    except ConfigError as exc:
        return _print_config_error(exc)
    _startup_done()
    tests = [t for t in program.tests if not args.keyword or args.keyword in t.id]
    if not tests:
        _emit(sys.stderr, _no_tests_hint(args.path, args.keyword, [t.id for t in program.tests]))
        _emit(sys.stdout, "0 passed, 0 failed")
        return NO_TESTS
    if args.record and args.replay:
        _emit(sys.stderr, "error: --record and --replay do not go together")
        return 2
    if args.model and args.models:
        _emit(sys.stderr, "error: --model and --models do not go together (--models A,B)")
        return 2
    replay = args.replay
    model: str | None = args.model
    # Graders (judge, embeddings) answer offline when the tests do.
    judge_model: str | None = None
    live = args.live or args.record is not None or args.models is not None
    if replay is None and model is None and not live:
        if program.recordings is not None and program.recordings.is_dir():
            replay = program.recordings
        else:
            model = judge_model = "test"
    secrets = frozenset().union(*(run_secrets(a) for a in program.agents.values()))
    try:
        wrap = _selector_wrapper(args.record, replay, secrets)
    except ConfigError as exc:
        return _print_config_error(exc)
    out = sys.stderr if args.json else sys.stdout  # --json: stdout holds the JSON alone
    outcomes = asyncio.run(
        run_tests(
            program,
            tests,
            model=model,
            models=args.models,
            repeat=args.repeat,
            judge_model=judge_model,
            wrap_selector=wrap,
            live_tools=args.live_tools,
            stream=_RedactingStream(out, secrets),
            progress=sys.stderr if sys.stderr.isatty() and not args.json else None,
            verbose=args.verbose,
        )
    )
    if args.json:
        import json

        from ..redaction import redact
        from .json_text import safe_json_text
        from .testing import results_json

        text = json.dumps(results_json(outcomes), ensure_ascii=False, default=repr)
        _emit(sys.stdout, safe_json_text(redact(text, secrets)))
    if not _wrote_reports(args, outcomes, secrets):
        return 1
    return 0 if all(o.passed for o in outcomes) else 1


def _wrote_reports(
    args: argparse.Namespace, outcomes: list[TestOutcome], secrets: frozenset[str]
) -> bool:
    """Write ``test --junit`` and ``--report`` (when asked); whether every one was written."""
    from .reports import html_report, junit_xml, write_report

    wrote = True
    if args.junit is not None:
        xml = junit_xml(outcomes, secrets)
        wrote &= _wrote(args.junit, lambda: write_report(args.junit, xml))
    if args.report is not None:
        page = html_report(outcomes, secrets, title=f"openprogram-run test {args.path}")
        wrote &= _wrote(args.report, lambda: write_report(args.report, page))
    return wrote


def _model_list(text: str) -> list[str]:
    """``--models a,b,c`` as a list (empty names left out)."""
    models = [m.strip() for m in text.split(",") if m.strip()]
    if not models:
        raise argparse.ArgumentTypeError("name a model, e.g. --models gpt-4o,gpt-4o-mini")
    return models


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number of at least 1, got {text!r}")
    return value


#: ``test``'s exit status when no test ran (pytest's too): neither a pass nor a failure,
#: and a CI job that runs none should notice.
NO_TESTS = 5


def _no_tests_hint(path: str, keyword: str | None, names: list[str]) -> str:
    """Why ``test`` ran nothing, and what to do: the filter matched none, or there are none."""
    if keyword and names:
        shown = ", ".join(names[:5]) + (", …" if len(names) > 5 else "")
        return (
            f"no test name contains {keyword!r} ({_count(len(names), 'test')} in {path}: "
            f"{shown}); -k keeps the tests whose 'agent: name' contains TEXT"
        )
    return (
        f"no tests in {path}: add 'tests:' to an agent file (a list of {{name, method, inputs, "
        "expect}), or tests files to openprogram.yaml's 'tests:'"
    )


class _RedactingStream:
    """A text stream that never lets a secret through."""

    def __init__(self, inner: TextIO, secrets: frozenset[str]) -> None:
        self.inner = inner
        self.secrets = secrets

    def write(self, text: str) -> int:
        from ..redaction import redact

        return self.inner.write(redact(text, self.secrets))

    def flush(self) -> None:
        self.inner.flush()


def _cmd_check(argv: Sequence[str]) -> int:
    p = _Parser(
        prog="openprogram-run check",
        description="Validate agent files and report every problem; run nothing.",
    )
    p.add_argument(
        "paths",
        metavar="PATH",
        nargs="+",
        help="an agent file, a project folder (with openprogram.yaml: its agents and tests), "
        "or any other folder: every agent file under it (a YAML file with 'methods:')",
    )
    p.add_argument(
        "--connect",
        action="store_true",
        help="also start each MCP server (then stop it) and check that it offers every tool "
        "the toolsets and allow/deny lists name",
    )
    args = p.parse_args(argv)
    from ..compile.project import compile_path
    from ..errors import ConfigError
    from .agent_files import agent_files

    diagnostics: list[Diagnostic] = []
    agents = methods = 0
    for raw in args.paths:
        try:
            targets = agent_files(Path(raw))
        except ConfigError as exc:
            diagnostics.extend(exc.diagnostics)
            continue
        for target in targets:
            try:
                program = compile_path(target)
            except ConfigError as exc:
                diagnostics.extend(exc.diagnostics)
                continue
            agents += len(program.agents)
            methods += sum(len(a.methods) for a in program.agents.values())
            if args.connect:
                diagnostics.extend(_connect_servers(program))
    if diagnostics:
        _print_problems(diagnostics, "found.")
        return 2
    _emit(sys.stdout, f"ok: {_count(agents, 'agent')}, {_count(methods, 'method')} checked")
    return 0


def _connect_servers(program: Program) -> list[Diagnostic]:
    """``check --connect``: what starting the program's MCP servers finds wrong."""
    import asyncio

    from ..tools.mcp import check_servers

    async def check() -> list[Diagnostic]:
        found: list[Diagnostic] = []
        for agent in program.agents.values():
            found.extend(await check_servers(agent.tool_servers, agent.secrets))
        return found

    return asyncio.run(check())


def _count(n: int, noun: str) -> str:
    """``1 method``, ``2 methods``."""
    return f"{n} {noun}{'' if n == 1 else 's'}"


def _cmd_schema(argv: Sequence[str]) -> int:
    import json

    p = _Parser(prog="openprogram-run schema", description="Print the JSON Schema of the format.")
    p.add_argument(
        "kind",
        nargs="?",
        choices=("agent", "project", "tests"),
        default="agent",
        help="agent files (default), the project file openprogram.yaml, or test files",
    )
    args = p.parse_args(argv)
    from ..spec.schema import json_schema

    _emit(sys.stdout, json.dumps(json_schema(args.kind), indent=2))
    return 0


def _cmd_runtimes(argv: Sequence[str]) -> int:
    import json

    p = _Parser(prog="openprogram-run runtimes", description="List registered runtimes.")
    p.add_argument("--json", action="store_true", help="print JSON")
    args = p.parse_args(argv)
    from ..runtimes.registry import runtime_entries

    entries = runtime_entries()
    if args.json:
        rows = [
            {
                "id": e.runtime_id,
                "name": e.display_name,
                "description": e.description,
                "builtin": e.is_builtin,
                "metadata": {k: v for k, v in e.metadata.items() if _jsonable(v)},
            }
            for e in entries
        ]
        _emit(sys.stdout, json.dumps(rows, indent=2))
        return 0
    width = max((len(e.runtime_id) for e in entries), default=2)
    for e in entries:
        origin = e.metadata.get("origin") or ("built-in" if e.is_builtin else "registered")
        desc = f"  {e.description.replace('``', '')}" if e.description else ""
        _emit(sys.stdout, f"{e.runtime_id:<{width}}  [{origin}]{desc}")
    return 0


def _jsonable(value: object) -> bool:
    import json

    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return False
    return True


def main(argv: Sequence[str] | None = None) -> int:
    """The console script. Returns the exit status (also used by tests)."""
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        if args in (["--version"], ["-V"]):
            from .._version import __version__

            _emit(sys.stdout, f"openprogram-run {__version__}")
            return 0
        if args and args[0] in SUBCOMMANDS:
            command = {
                "batch": _cmd_batch,
                "chat": _cmd_chat,
                "sessions": _cmd_sessions,
                "check": _cmd_check,
                "runtimes": _cmd_runtimes,
                "schema": _cmd_schema,
                "serve": _cmd_serve,
                "mcp": _cmd_mcp,
                "test": _cmd_test,
                "render": _cmd_render,
                "lock": _cmd_lock,
                "diff": _cmd_diff,
            }
            return command[args[0]](args[1:])
        if not args:
            _run_parser().print_help(sys.stderr)
            return 2
        return _cmd_run(args)
    except KeyboardInterrupt:
        _emit(sys.stderr, "interrupted")
        return 130
    except SystemExit as exc:  # argparse
        return int(exc.code) if isinstance(exc.code, int) else 2
    finally:
        _stop_telemetry()


# Start-up makes tens of thousands of objects that live as long as the process does:
# modules, classes, the compiled program. Cyclic collections over them find nothing yet
# cost about a tenth of an offline run, so the console script keeps the collector off until
# the run is about to start (`_startup_done`: the program built, the inputs checked; for a
# plain run, once its first step has readied the first request and it waits), then
# freezes what start-up made, so that no later collection walks it, and turns the collector
# back on for the run, which may be long. Commands that run no model (check, render, lock,
# schema, runtimes) keep it off to the end. At exit the survivors are frozen too: the
# process is ending, and a last full pass over them would only delay it. Tests call
# `main()` and keep their collector as it is.
_quiet_startup = False


def _startup_done() -> None:
    global _quiet_startup
    if _quiet_startup:
        import gc

        _quiet_startup = False
        gc.freeze()
        gc.enable()


def entrypoint() -> NoReturn:
    import contextlib
    import gc
    import os

    global _quiet_startup
    gc.disable()
    _quiet_startup = True
    try:
        code = main()
        sys.stdout.flush()  # here, where a failure is said, not at exit
    except OSError as exc:
        # Standard output that cannot be written (a full disk: `> out.txt`, /dev/full) is
        # said in a line, not a traceback. Any other OSError is a bug and shows as one.
        if exc.filename is not None or exc.errno not in _OUTPUT_FAILURES:
            raise
        with contextlib.suppress(OSError):
            sys.stderr.write(f"error: cannot write the output: {exc.strerror}\n")
        os._exit(1)  # no flush at exit: it would fail, and say so, again
    gc.freeze()
    sys.exit(code)


#: What writing the standard output fails with when it has nowhere to go.
_OUTPUT_FAILURES = frozenset(
    getattr(errno, name) for name in ("ENOSPC", "EDQUOT", "EFBIG", "EIO") if hasattr(errno, name)
)
