"""``openprogram-run batch PATH METHOD --input FILE --output FILE``: one method over every row
of a dataset (the engine and its output: ``run.batch``).

Progress shows on stderr when it is a terminal (``rich``): rows done and failed, the rate,
tokens, cost and, for a file, the time left; nothing when piped or with ``--quiet``. The
summary at the end goes to stderr, or to stdout as JSON with ``--json``.

Exit status: 0 every row ok, 1 a row failed (or ``--max-failures`` stopped the batch),
2 a usage error or an input line that cannot be read, 130 interrupted (Ctrl-C; SIGTERM
gives 143): the rows finished are kept, and ``--resume`` goes on from them.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import errno
import itertools
import json
import os
import signal
import stat
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from ..errors import UsageError
from ..json_types import JSONObject
from ..redaction import redact
from ..run.batch.driver import BatchSummary, drive_batch
from ..run.batch.engine import DEFAULT_CONCURRENCY, BatchEngine, BatchJob, LocalEngine, RowResult
from ..run.batch.output import DoneRows, OutputWriter
from ..run.batch.rows import (
    MAX_LINE_CHARS,
    BatchRow,
    Key,
    input_lines,
    make_rows,
    read_rows,
    row_values,
    sniff_format,
    unreadable,
)
from ..run.costs import cost_text, usage_line
from ..shown_text import shown_on_terminal
from .json_text import safe_json_text

if TYPE_CHECKING:
    from rich.progress import Progress, TaskID

    from ..compile.program import Program

__all__ = ["batch_command"]

_DESCRIPTION = f"""\
Run METHOD once for every row of --input and write one JSON line per row to --output:
  key, digest, status (ok | failed), inputs, output or error, model, usage, cost,
  latency_s, version. Rows run {DEFAULT_CONCURRENCY} at a time by default (--concurrency).

Input: JSON Lines, CSV (a header line naming the columns) or a JSON array of objects;
`-` reads standard input. Each row holds the method's inputs (--map COLUMN=INPUT renames a
column, --map COLUMN= drops it). A line that cannot be read stops the batch naming it
(FILE:LINE), after the rows already started are written.

--resume skips the rows --output already holds with status ok (same key, same inputs);
failed rows run again and their new line follows the old one (the last line of a key wins).
Without --resume an --output that holds lines is refused.
"""


def _parser() -> argparse.ArgumentParser:
    from .cli import _Parser, _positive

    p = _Parser(
        prog="openprogram-run batch",
        description=_DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("path", metavar="PATH", help="an agent file or a project folder")
    p.add_argument("method", metavar="METHOD", help="the method to run (AGENT.METHOD in a project)")
    p.add_argument("--input", metavar="FILE", required=True, help="the rows (`-`: stdin)")
    p.add_argument("--output", metavar="FILE", required=True, type=Path, help="JSON Lines out")
    p.add_argument(
        "--format", choices=("jsonl", "csv", "json"), help="the input's format (default: guessed)"
    )
    p.add_argument(
        "--map",
        metavar="COLUMN=INPUT",
        action="append",
        default=[],
        help="fill INPUT from COLUMN (empty INPUT: drop the column)",
    )
    p.add_argument("--key", metavar="COLUMN", help="the column that names a row (default: index)")
    p.add_argument("--agent", help="which agent, when PATH holds several")
    p.add_argument("--model", metavar="PROVIDER:MODEL", help="override the model")
    p.add_argument(
        "--concurrency",
        metavar="N",
        type=_positive(int),
        default=DEFAULT_CONCURRENCY,
        help=f"rows in flight at once (default {DEFAULT_CONCURRENCY})",
    )
    p.add_argument(
        "--rpm", metavar="N", type=_positive(float), help="model calls a minute, at most"
    )
    p.add_argument("--tpm", metavar="N", type=_positive(float), help="tokens a minute, at most")
    p.add_argument(
        "--max-failures", metavar="N", type=_positive(int), help="stop after N failed rows"
    )
    p.add_argument("--resume", action="store_true", help="skip rows --output already holds")
    p.add_argument("--replay", metavar="DIR", type=Path, help="answer from the recordings in DIR")
    p.add_argument(
        "--live-tools",
        action="store_true",
        help="run http and command tools for real under the offline `test` model too",
    )
    p.add_argument(
        "--engine",
        choices=("local", "ray"),
        default="local",
        help="where rows run: this process (default) or a Ray cluster (the ray extra)",
    )
    p.add_argument(
        "--address",
        metavar="ADDR",
        help="--engine ray: the cluster (default: RAY_ADDRESS, else one `ray start` began here, "
        "else a new local Ray instance)",
    )
    p.add_argument(
        "--workers",
        metavar="N",
        type=_positive(int),
        help="--engine ray: actors running rows (default: one per free CPU of the cluster)",
    )
    p.add_argument("--json", action="store_true", help="print the summary as JSON on stdout")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress, no summary text")
    return p


def batch_command(argv: Sequence[str], *, engine: BatchEngine | None = None) -> int:
    """The ``batch`` subcommand; returns the exit status. ``engine`` runs the rows (default:
    the local engine on the compiled program)."""
    args = _parser().parse_args(argv)
    from ..run.git_stamp import GitStamper
    from .cli import select_method

    selected = select_method(args)
    if isinstance(selected, int):
        return selected
    program, agent, method, secrets = selected
    try:
        renames = _renames(args.map)
        _not_the_input(args.input, args.output)
        done = _resumed(args.output, args.resume)
    except UsageError as exc:
        return _fail(f"error: {exc}", secrets)
    if args.replay is not None:
        from ..errors import ConfigError
        from ..recording.replay import ReplaySelector
        from .cli import _print_config_error

        try:  # a broken recording is said once, not as every row's failure
            ReplaySelector(args.replay).check()
        except ConfigError as exc:
            return _print_config_error(exc)
    if engine is None and args.engine == "ray":
        try:
            engine = _ray_engine(program, args)
        except UsageError as exc:
            return _fail(f"error: {exc}", secrets)
    job = BatchJob(
        path=Path(args.path),
        agent=agent.name,
        method=method.name,
        model=args.model,
        concurrency=int(args.concurrency),
        rpm=args.rpm,
        tpm=args.tpm,
        replay=args.replay,
        live_tools=args.live_tools,
        version=GitStamper().stamp(program),
    )
    try:
        source = _open_input(args.input)
    except OSError as exc:
        return _fail(f"error: cannot read {args.input} (--input): {exc.strerror or exc}")
    name_shown = "<stdin>" if args.input == "-" else args.input

    try:
        first = source.readline(MAX_LINE_CHARS + 1)  # its start tells the format
    except (OSError, UnicodeDecodeError) as exc:
        source.close()
        return _fail(f"error: {unreadable(name_shown, exc)}")
    kind = args.format or sniff_format(name_shown, first)
    # A JSON array is read whole, however long its lines (``json.dump`` writes one); the
    # lines of the other formats are rows, each read at most MAX_LINE_CHARS at a time.
    lines = (
        itertools.chain([first], source)
        if kind == "json"
        else input_lines(source, name_shown, first=first)
    )

    def convert(row: JSONObject, where: str) -> tuple[Key, JSONObject]:
        return row_values(
            row,
            where,
            inputs=method.inputs,
            renames=renames,
            key_column=args.key,
            from_text=kind == "csv",
        )

    rows = make_rows(read_rows(lines, name_shown, kind), convert)
    progress = None
    if not args.quiet and sys.stderr.isatty():
        progress = _Progress(_count_rows(args.input, kind))
    started = time.perf_counter()
    summary = BatchSummary()
    try:
        writer = OutputWriter(args.output)
    except OSError as exc:
        return _fail(f"error: cannot write {args.output} (--output): {exc.strerror or exc}")
    code = 0
    try:
        code = _drive(
            engine or LocalEngine(program),
            job,
            rows,
            writer,
            done=done,
            max_failures=args.max_failures,
            summary=summary,
            on_result=None if progress is None else progress.update,
        )
    except UsageError as exc:  # a row that cannot be read: said after the rows before it
        code = 2
        if progress is not None:
            progress.stop()
            progress = None
        _fail(f"error: {exc}", secrets)
    finally:
        if progress is not None:
            progress.stop()
        try:
            writer.close()
        except UsageError as exc:  # the last lines could not be synced
            code = code or 2
            _fail(f"error: {exc}", secrets)
        source.close()
    elapsed = time.perf_counter() - started
    if code in (130, 143):
        summary.stopped = summary.stopped or "interrupted"
    if args.json:
        data = summary.to_dict()
        data["elapsed_s"] = round(elapsed, 3)
        data["output"] = str(args.output)
        print(safe_json_text(redact(json.dumps(data, ensure_ascii=False), secrets)))
    elif not args.quiet:
        print(redact(_summary_text(summary, elapsed), secrets), file=sys.stderr)
    if code:
        return code
    return 1 if summary.failed or summary.stopped else 0


def _ray_engine(program: Program, args: argparse.Namespace) -> BatchEngine:
    """The Ray engine (``run.batch.ray_engine``); a ``UsageError`` when ray is not installed.
    The batch's own input and output stay behind when they are in the project folder."""
    from ..run.batch.ray_engine import RayEngine, import_ray

    import_ray()
    root = program.root.resolve()
    excludes: list[str] = []
    for name in (args.input, str(args.output)):
        path = Path(name).resolve()
        if name != "-" and path.is_relative_to(root):
            excludes.append("/" + path.relative_to(root).as_posix())
    return RayEngine(program, address=args.address, workers=args.workers, excludes=excludes)


def _fail(message: str, secrets: frozenset[str] = frozenset()) -> int:
    # The message may quote the dataset (a column's name): its control characters show as text.
    print(shown_on_terminal(redact(message, secrets)), file=sys.stderr)
    return 2


def _renames(items: Sequence[str]) -> dict[str, str]:
    renames: dict[str, str] = {}
    for item in items:
        column, sep, target = item.partition("=")
        if not sep or not column:
            raise UsageError(f"--map {item!r}: write --map COLUMN=INPUT (or COLUMN= to drop it)")
        renames[column] = target
    return renames


def _not_the_input(input_name: str, output: Path) -> None:
    """Refuses an output that is the input file (output lines would be appended to the
    dataset, and read back as rows)."""
    with contextlib.suppress(OSError):
        if input_name != "-" and os.path.samefile(input_name, output):
            raise UsageError(f"--output {output} is the input file: choose another file")


def _resumed(output: Path, resume: bool) -> DoneRows | None:
    """The rows ``output`` already holds (``--resume``); refuses to mix a new batch into an
    output that holds lines."""
    if resume:
        return DoneRows.read(output)
    with contextlib.suppress(OSError):
        if output.stat().st_size > 0:
            raise UsageError(
                f"{output} already holds rows: pass --resume to go on from them, or choose "
                "another --output"
            )
    return None


def _open_input(name: str) -> TextIO:
    """The dataset ``name`` (``-``: standard input) opened as UTF-8 text, its lines' endings
    kept as written (``newline=""``: the csv module needs them, a quoted value may hold
    one): a file or a pipe (a FIFO, ``<(command)``, read as it comes); a device named
    (/dev/zero, /dev/urandom) is refused, as it would be read as one line without end.
    Closing it leaves standard input open. Raises ``OSError``."""
    if name == "-":
        return open(sys.stdin.fileno(), encoding="utf-8", newline="", closefd=False)
    stream = open(name, encoding="utf-8", newline="")  # noqa: SIM115
    mode = os.fstat(stream.fileno()).st_mode
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        stream.close()
        raise OSError(errno.EINVAL, "a device, not a file of rows")
    return stream


def _count_rows(path: str, kind: str | None) -> int | None:
    """How many rows a file holds (lines, less a CSV header), for the time left; None for
    standard input, a pipe or a JSON array."""
    if path == "-" or kind == "json":
        return None
    try:
        # A pipe is not counted: a second reader of a FIFO takes rows from the batch's own.
        if not stat.S_ISREG(os.stat(path).st_mode):
            return None
        with open(path, "rb") as handle:
            lines = sum(chunk.count(b"\n") for chunk in iter(lambda: handle.read(1 << 20), b""))
    except OSError:
        return None
    return max(0, lines - 1) if kind == "csv" else lines


def _drive(
    engine: BatchEngine,
    job: BatchJob,
    rows: Iterator[BatchRow],
    writer: OutputWriter,
    *,
    done: DoneRows | None,
    max_failures: int | None,
    summary: BatchSummary,
    on_result: Callable[[RowResult, BatchSummary], None] | None,
) -> int:
    """Run the batch to its end; 0, or 130 (Ctrl-C) / 143 (SIGTERM) when it was stopped.
    Either way every row finished before the stop is written."""
    terminated = False

    async def main() -> None:
        task = asyncio.ensure_future(
            drive_batch(
                engine,
                job,
                rows,
                writer,
                done=done,
                max_failures=max_failures,
                on_result=on_result,
                summary=summary,
            )
        )

        def terminate() -> None:
            nonlocal terminated
            terminated = True
            task.cancel()

        loop = asyncio.get_running_loop()
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop.add_signal_handler(signal.SIGTERM, terminate)
        try:
            await task
        finally:
            with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                loop.remove_signal_handler(signal.SIGTERM)

    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        return 130
    except asyncio.CancelledError:
        return 143 if terminated else 130
    return 0


def _summary_text(summary: BatchSummary, elapsed: float) -> str:
    """What the batch did, for stderr. The errors quote what others wrote (a provider, a
    model, the dataset): control characters show as text (``\\x1b``), driving no terminal."""
    rate = summary.done / elapsed if elapsed > 0 else 0.0
    lines = [
        f"batch: {summary.ok} ok, {summary.failed} failed, {summary.skipped} skipped "
        f"in {elapsed:.1f} s ({rate:.1f} rows/s)"
    ]
    if summary.stopped:
        lines.append(f"stopped: {summary.stopped}")
    p50, p95 = summary.percentile(50), summary.percentile(95)
    if p50 is not None and p95 is not None:
        lines.append(f"latency: p50 {p50:.2f} s, p95 {p95:.2f} s")
    lines.append(usage_line(summary.cost) if summary.cost.get("models") else "tokens: 0")
    if summary.errors:
        lines.append("errors:")
        lines.extend(f"  {n}× {shown_on_terminal(text)}" for text, n in summary.errors.items())
    return "\n".join(lines)


class _Progress:
    """Rows done and failed, the rate, tokens, cost and the time left, on stderr (``rich``)."""

    def __init__(self, total: int | None) -> None:
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        self._progress: Progress = Progress(
            TextColumn("batch"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[detail]}"),
            TimeElapsedColumn(),
            TimeRemainingColumn(),
            console=Console(file=sys.stderr),
            transient=True,
        )
        self._task: TaskID = self._progress.add_task("batch", total=total, detail="")
        self._started = time.perf_counter()
        self._progress.start()

    def update(self, result: RowResult, summary: BatchSummary) -> None:
        elapsed = time.perf_counter() - self._started
        rate = summary.done / elapsed if elapsed > 0 else 0.0
        detail = (
            f"{summary.failed} failed · {rate:.1f}/s · "
            f"{summary.input_tokens + summary.output_tokens:,} tokens · {cost_text(summary.cost)}"
        )
        self._progress.update(self._task, completed=summary.done + summary.skipped, detail=detail)

    def stop(self) -> None:
        self._progress.stop()
