"""``openprogram-run``: run, check and inspect YAML agents.

Exit status: 0 success, 1 the run failed (an ``LLMError``, a ``DecisionError``, …),
2 usage or config error. Imports are lazy so ``--help`` stays fast.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn, TextIO

__all__ = ["main"]

SUBCOMMANDS = ("check", "runtimes", "schema", "serve")

_DESCRIPTION = """\
Run a method of a YAML agent:
  openprogram-run PATH [METHOD] [-i NAME=VALUE]... [--input-json JSON|@FILE]
                  [--model PROVIDER:MODEL] [--json] [--trace FILE]
                  [--records FILE] [--watch]
  PATH is an agent file or a project folder (with openprogram.yaml); in a project,
  METHOD may be AGENT.METHOD. --watch re-runs with the same inputs whenever a file
  of the agent changes.

Other commands:
  openprogram-run serve PATH [--port N] [--records FILE]
                                   serve runs over HTTP on 127.0.0.1, reloading on change
  openprogram-run check PATH...    validate, report every problem, run nothing
  openprogram-run runtimes         list registered runtimes, built-in or plugin
  openprogram-run schema [project] print the JSON Schema of agent (or project) files

Exit status: 0 success, 1 the run failed, 2 usage or config error.
"""


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
    p.add_argument("--trace", metavar="FILE", type=Path, help="append the session trace (JSONL)")
    p.add_argument(
        "--watch", action="store_true", help="re-run on every change to the agent's files"
    )
    p.add_argument(
        "--records", metavar="FILE", type=Path, help="append each run's record (JSON Lines)"
    )
    return p


def _emit(stream: TextIO, text: str, secrets: frozenset[str] = frozenset()) -> None:
    for secret in secrets:
        text = text.replace(secret, "***")
    stream.write(text if text.endswith("\n") else text + "\n")


def _print_config_error(exc: Any) -> int:
    diags = exc.diagnostics
    for d in diags:
        _emit(sys.stderr, str(d))
    n = len(diags)
    _emit(sys.stderr, f"{n} error{'s' if n != 1 else ''} found; nothing was run.")
    return 2


def _parse_inputs(args: argparse.Namespace, method: Any) -> dict[str, Any]:
    from ..errors import UsageError

    inputs: dict[str, Any] = {}
    if args.input_json:
        raw = args.input_json
        if raw.startswith("@"):
            try:
                raw = Path(raw[1:]).read_text(encoding="utf-8")
            except OSError as exc:
                raise UsageError(f"--input-json: cannot read {raw[1:]}: {exc.strerror}") from None
        try:
            loaded = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise UsageError(
                f"--input-json is not valid JSON: {exc.msg} at column {exc.colno}"
            ) from None
        if not isinstance(loaded, dict):
            raise UsageError("--input-json must be a JSON object of input names to values")
        inputs.update(loaded)
    for item in args.input:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise UsageError(f"-i {item!r}: write -i NAME=VALUE")
        schema = method.inputs.get(name)
        wants_string = isinstance(schema, dict) and schema.get("type") == "string"
        if wants_string:
            inputs[name] = value
            continue
        try:
            inputs[name] = json.loads(value)
        except json.JSONDecodeError:
            inputs[name] = value
    return inputs


def _format_output(output: Any) -> str:
    if isinstance(output, str):
        return output
    return json.dumps(output, indent=2, ensure_ascii=False)


def _cmd_run(argv: Sequence[str]) -> int:
    args = _run_parser().parse_args(argv)
    import asyncio

    if args.watch:
        return _cmd_watch(args)

    from ..compile.project import compile_path
    from ..errors import ConfigError, UsageError

    try:
        program = compile_path(Path(args.path))
    except ConfigError as exc:
        return _print_config_error(exc)
    try:
        agent, args.method = program.select(args.method, agent=args.agent, path=Path(args.path))
    except UsageError as exc:
        _emit(sys.stderr, f"error: {exc}")
        return 2
    if args.method is None:
        if len(agent.methods) == 1:
            args.method = next(iter(agent.methods))
        else:
            _emit(
                sys.stderr,
                f"error: name a method of agent '{agent.name}': {', '.join(sorted(agent.methods))}",
            )
            return 2
    try:
        method = agent.method(args.method)
        inputs = _parse_inputs(args, method)
        method.prepare_inputs(inputs)
    except UsageError as exc:
        _emit(sys.stderr, f"error: {exc}", agent.secrets)
        return 2

    from .records import GitStamper, RecordLog, VersionStamp, append_trace, execute_run

    # git is asked only when a record is shown or kept: plain runs stay fast.
    wants_record = args.json or args.records is not None
    stamp = GitStamper().stamp(program) if wants_record else VersionStamp(program.version)
    trace = None
    if args.trace:
        from ..runtime.trace import SessionTrace

        trace = SessionTrace()
    status = _Status(f"{agent.name}.{method.name}")
    try:
        record = asyncio.run(
            execute_run(
                program, stamp, agent.name, method.name, inputs, model=args.model, trace=trace
            )
        )
    finally:
        status.clear()
        if trace is not None:
            append_trace(args.trace, trace, agent.secrets)
    if args.records is not None:
        log = RecordLog(args.records)
        try:
            log.append(record)
        finally:
            log.close()
    if args.json:
        _emit(sys.stdout, record.to_json())
    elif record.error is None:
        _emit(sys.stdout, _format_output(record.output), agent.secrets)
    if record.error is not None:
        kind = record.error.get("type", "error")
        _emit(sys.stderr, f"error: {kind}: {record.error.get('message', '')}", agent.secrets)
    return record.exit_code


def _cmd_watch(args: argparse.Namespace) -> int:
    import asyncio

    from .serve import watch_and_run

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
        )
    )


def _cmd_serve(argv: Sequence[str]) -> int:
    from .serve import DEFAULT_GRACE_S

    p = _Parser(
        prog="openprogram-run serve",
        description="Serve runs over HTTP on 127.0.0.1 while the agent's files change:\n"
        "  POST /run/AGENT/METHOD (inputs as a JSON object) → the run's record\n"
        "  GET /health, GET /version, GET /agents",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("path", metavar="PATH", help="an agent file, or a project folder")
    p.add_argument("--port", type=int, default=8765, help="port on 127.0.0.1 (0: any free one)")
    p.add_argument("--model", metavar="PROVIDER:MODEL", help="override the model of every run")
    p.add_argument("--records", metavar="FILE", type=Path, help="append each run's record")
    p.add_argument(
        "--grace",
        metavar="SECONDS",
        type=float,
        default=DEFAULT_GRACE_S,
        help="on Ctrl-C or SIGTERM, how long runs in flight may finish (default: %(default)s)",
    )
    p.add_argument("--no-watch", action="store_true", help="serve one version; do not reload")
    args = p.parse_args(argv)
    import asyncio

    from .serve import serve_path

    return asyncio.run(
        serve_path(
            Path(args.path),
            port=args.port,
            model=args.model,
            records=args.records,
            grace_s=args.grace,
            watch=not args.no_watch,
        )
    )


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


def _cmd_check(argv: Sequence[str]) -> int:
    p = _Parser(prog="openprogram-run check", description="Validate agent files; run nothing.")
    p.add_argument("paths", metavar="PATH", nargs="+")
    args = p.parse_args(argv)
    from ..compile.project import compile_path
    from ..errors import ConfigError, Diagnostic

    diagnostics: list[Diagnostic] = []
    agents = methods = 0
    for raw in args.paths:
        try:
            program = compile_path(Path(raw))
        except ConfigError as exc:
            diagnostics.extend(exc.diagnostics)
            continue
        agents += len(program.agents)
        methods += sum(len(a.methods) for a in program.agents.values())
    if diagnostics:
        for d in diagnostics:
            _emit(sys.stderr, str(d))
        n = len(diagnostics)
        _emit(sys.stderr, f"{n} error{'s' if n != 1 else ''} found.")
        return 2
    _emit(sys.stdout, f"ok: {agents} agent{'s' if agents != 1 else ''}, {methods} methods checked")
    return 0


def _cmd_schema(argv: Sequence[str]) -> int:
    p = _Parser(prog="openprogram-run schema", description="Print the JSON Schema of the format.")
    p.add_argument(
        "kind",
        nargs="?",
        choices=("agent", "project"),
        default="agent",
        help="agent files (default) or the project file openprogram.yaml",
    )
    args = p.parse_args(argv)
    from ..spec.schema import json_schema

    _emit(sys.stdout, json.dumps(json_schema(args.kind), indent=2))
    return 0


def _cmd_runtimes(argv: Sequence[str]) -> int:
    p = _Parser(prog="openprogram-run runtimes", description="List registered runtimes.")
    p.add_argument("--json", action="store_true", help="print JSON")
    args = p.parse_args(argv)
    from ..runtimes.registry import list_runtimes

    entries = list_runtimes()
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
        desc = f"  {e.description}" if e.description else ""
        _emit(sys.stdout, f"{e.runtime_id:<{width}}  [{origin}]{desc}")
    return 0


def _jsonable(value: Any) -> bool:
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return False
    return True


def main(argv: Sequence[str] | None = None) -> int:
    """The console script. Returns the exit status (also used by tests)."""
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        if args and args[0] in SUBCOMMANDS:
            command = {
                "check": _cmd_check,
                "runtimes": _cmd_runtimes,
                "schema": _cmd_schema,
                "serve": _cmd_serve,
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


def entrypoint() -> NoReturn:
    sys.exit(main())
