"""Rows of a batch: read from JSON Lines, CSV or a JSON array, one row = one method's inputs.

Files are read as a stream (a JSON array excepted, which is read whole: give a large
dataset as JSON Lines), so a million-row input costs no more memory than a few rows, and a
line of JSON Lines or CSV is read at most ``MAX_LINE_CHARS`` at a time (``input_lines``): a
file that is one endless line is an error, not read whole into memory. A line that is not
what its format says stops the batch with ``FILE:LINE: what is wrong`` (``BatchInputError``,
exit 2): rows already finished are kept, and ``--resume`` goes on from them once the line is
fixed.

Lines are read as they are written (the file opened with ``newline=""``, as the csv module
requires): a quoted CSV value keeps its ``\r\n`` or ``\r``, and a JSON Lines file written
with ``\r\n`` reads as one written with ``\n``.
"""

from __future__ import annotations

import collections
import csv
import hashlib
import json
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import TextIO

from ...compile.program import unfit_input
from ...errors import UsageError
from ...json_types import JSONObject, JSONValue, parse_json

__all__ = [
    "MAX_LINE_CHARS",
    "BatchInputError",
    "BatchRow",
    "input_digest",
    "input_lines",
    "make_rows",
    "read_rows",
    "row_values",
    "sniff_format",
    "unreadable",
]

#: A row's key: its index (0-based) or the value of its ``--key`` column.
Key = str | int | float | bool | None


class BatchInputError(UsageError):
    """A row of the input cannot be read; the message starts with ``FILE:LINE:``."""


@dataclass(frozen=True, slots=True)
class BatchRow:
    """One row to run: its key, the method's inputs, their digest and where it came from."""

    key: Key
    inputs: JSONObject
    digest: str
    #: ``FILE:LINE`` (``FILE:#INDEX`` in a JSON array), for messages.
    where: str


def input_digest(inputs: Mapping[str, JSONValue]) -> str:
    """A short digest of ``inputs`` (canonical JSON, keys sorted): a resumed batch runs a row
    again when its inputs changed, even under the same key."""
    text = json.dumps(inputs, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


#: The longest line a row is read from: what ``--input-json @FILE`` and ``serve`` take as one
#: call's inputs (28 MiB), counted in characters.
MAX_LINE_CHARS = 28 << 20


def input_lines(
    stream: TextIO, name: str, *, first: str | None = None, limit: int = MAX_LINE_CHARS
) -> Iterator[str]:
    """The lines of ``stream`` (named ``name`` in messages; ``first``, its first, when it
    was already read, as ``stream.readline(limit + 1)``), each read at most ``limit``
    characters at a time: a longer line is a ``BatchInputError`` naming it, before more of
    it is read. Open a file with ``newline=""`` so a line keeps its ending as written."""
    number = 0
    line = stream.readline(limit + 1) if first is None else first
    while line:
        number += 1
        if len(line) > limit:
            raise BatchInputError(
                f"{name}:{number}: the line is longer than {limit:,} characters, the most a "
                "row may hold"
            )
        yield line
        line = stream.readline(limit + 1)


def sniff_format(name: str, first: str) -> str:
    """``jsonl``, ``csv`` or ``json`` from the file name, else from its first character."""
    lowered = name.lower()
    for suffix, kind in ((".jsonl", "jsonl"), (".ndjson", "jsonl"), (".csv", "csv")):
        if lowered.endswith(suffix):
            return kind
    stripped = first.lstrip("\ufeff \t\r\n")
    if lowered.endswith(".json") or stripped.startswith("["):
        return "json" if stripped.startswith("[") or not stripped else "jsonl"
    return "jsonl" if stripped.startswith("{") else "csv"


def read_rows(lines: Iterable[str], name: str, kind: str) -> Iterator[tuple[str, JSONObject]]:
    """``(where, row)`` for each row of ``lines`` (a file, or lines ending with newlines;
    named ``name`` in messages), in order. ``kind`` is ``jsonl``, ``csv`` or ``json``
    (``sniff_format`` guesses it). Blank lines are skipped. CSV values are strings
    (``row_values`` turns them into the inputs' types)."""
    readers = {"jsonl": _jsonl, "csv": _csv}
    try:
        if kind in readers:
            yield from readers[kind](lines, name)
        elif kind == "json":
            yield from _json_array("".join(lines), name)
        else:
            raise UsageError(f"unknown input format {kind!r} (jsonl, csv or json)")
    except (UnicodeDecodeError, OSError) as exc:
        raise unreadable(name, exc) from None


def unreadable(name: str, exc: UnicodeDecodeError | OSError) -> BatchInputError:
    """The error for an input that cannot be read as text: not UTF-8, or a read failed."""
    if isinstance(exc, UnicodeDecodeError):
        bad = exc.object[exc.start : exc.end]
        return BatchInputError(
            f"{name}: not UTF-8 text ({exc.reason} at byte {bad!r}); save it as UTF-8"
        )
    return BatchInputError(f"{name}: cannot read it: {exc.strerror or exc}")


def _jsonl(lines: Iterable[str], name: str) -> Iterator[tuple[str, JSONObject]]:
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        torn = not line.endswith("\n")
        try:
            value = parse_json(line)
        except json.JSONDecodeError as exc:
            what = "a torn line (it ends before its JSON does)" if torn else "not valid JSON"
            raise BatchInputError(
                f"{name}:{number}: {what}: {exc.msg} at column {exc.colno}"
            ) from None
        if not isinstance(value, dict):
            raise BatchInputError(
                f"{name}:{number}: a row must be a JSON object of input names to values, "
                f"not {_kind(value)}"
            )
        yield f"{name}:{number}", value


def _csv(lines: Iterable[str], name: str) -> Iterator[tuple[str, JSONObject]]:
    reader = csv.reader(lines)
    try:
        header = next(reader)
    except StopIteration:
        return
    except csv.Error as exc:
        raise BatchInputError(f"{name}:1: not valid CSV: {exc}") from None
    header = [h.lstrip("\ufeff").strip() for h in header]
    if not any(header):
        raise BatchInputError(f"{name}:1: the first line must name the columns")
    # Counted once (header.count for each column took minutes for 100,000 columns).
    twice = sorted(h for h, n in collections.Counter(header).items() if n > 1)
    if twice:
        # A row would keep the last of the two values and drop the other unseen.
        shown = ", ".join(repr(h[:80]) for h in twice[:5])
        more = f" (and {len(twice) - 5:,} more)" if len(twice) > 5 else ""
        raise BatchInputError(f"{name}:1: column {shown}{more} is named more than once")
    while True:
        try:
            cells = next(reader)
        except StopIteration:
            return
        except csv.Error as exc:
            raise BatchInputError(f"{name}:{reader.line_num}: not valid CSV: {exc}") from None
        if not cells:
            continue
        if len(cells) != len(header):
            raise BatchInputError(
                f"{name}:{reader.line_num}: {len(cells)} values for {len(header)} columns "
                f"({', '.join(header)})"
            )
        yield f"{name}:{reader.line_num}", dict(zip(header, cells, strict=True))


def _json_array(text: str, name: str) -> Iterator[tuple[str, JSONObject]]:
    try:
        value = parse_json(text)
    except json.JSONDecodeError as exc:
        raise BatchInputError(
            f"{name}:{exc.lineno}: not valid JSON: {exc.msg} at column {exc.colno}"
        ) from None
    if not isinstance(value, list):
        raise BatchInputError(
            f"{name}:1: a JSON input must be an array of rows, not {_kind(value)}"
        )
    for index, item in enumerate(value):
        if not isinstance(item, dict):
            raise BatchInputError(
                f"{name}:#{index}: a row must be a JSON object of input names to values, "
                f"not {_kind(item)}"
            )
        yield f"{name}:#{index}", item


def _kind(value: object) -> str:
    return {list: "an array", str: "a string", bool: "a boolean", type(None): "null"}.get(
        type(value), "a number"
    )


def row_values(
    row: JSONObject,
    where: str,
    *,
    inputs: Mapping[str, JSONValue],
    renames: Mapping[str, str],
    key_column: str | None,
    from_text: bool,
) -> tuple[Key, JSONObject]:
    """A row's key (None: use its index) and the method's inputs from its columns.

    ``renames`` maps a column to the input it fills (``--map col=input``; an empty input
    drops the column). The key column is left out of the inputs unless the method declares
    it. ``from_text`` (CSV): a value becomes JSON when it parses and its input is not a
    string, as ``-i NAME=VALUE`` does. A column the method does not declare is an error
    naming the line: a typo must not run a whole dataset with a value missing."""
    key: Key = None
    if key_column is not None:
        if key_column not in row:
            raise BatchInputError(f"{where}: no column '{key_column}' (--key)")
        raw = row[key_column]
        if isinstance(raw, dict | list):
            raise BatchInputError(f"{where}: the key column '{key_column}' holds {_kind(raw)}")
        key = raw
    values: JSONObject = {}
    filled_by: dict[str, str] = {}
    unknown: list[str] = []
    for column, value in row.items():
        target = renames.get(column, column)
        if not target:
            continue
        if target not in inputs:
            if column != key_column:
                unknown.append(column)
            continue
        if target in filled_by:
            # --map x=ticket beside a column 'ticket': one of the two values would be lost.
            raise BatchInputError(
                f"{where}: columns '{filled_by[target]}' and '{column}' both fill input "
                f"'{target}'; drop one with --map {column}= or rename it with --map"
            )
        filled_by[target] = column
        values[target] = _typed(value, inputs[target]) if from_text else value
    for name, value in values.items():
        # Checked before the row's digest is taken (its UTF-8 raised on a lone surrogate).
        problem = unfit_input(value, name)
        if problem:
            raise BatchInputError(f"{where}: {problem}")
    if unknown:
        declared = ", ".join(sorted(inputs)) or "none"
        raise BatchInputError(
            f"{where}: column {', '.join(repr(c) for c in unknown)} is no input of the method "
            f"(it declares: {declared}); rename it with --map {unknown[0]}=INPUT or drop it "
            f"with --map {unknown[0]}="
        )
    return key, values


def _typed(value: JSONValue, schema: JSONValue) -> JSONValue:
    if not isinstance(value, str) or (isinstance(schema, dict) and schema.get("type") == "string"):
        return value
    try:
        parsed: JSONValue = parse_json(value)
    except json.JSONDecodeError:
        return value
    return parsed


def make_rows(
    source: Iterable[tuple[str, JSONObject]],
    convert: Callable[[JSONObject, str], tuple[Key, JSONObject]],
    *,
    start: int = 0,
) -> Iterator[BatchRow]:
    """``BatchRow`` for each ``(where, row)``; a row without a key gets its index."""
    for index, (where, row) in enumerate(source, start=start):
        key, values = convert(row, where)
        yield BatchRow(index if key is None else key, values, input_digest(values), where)
