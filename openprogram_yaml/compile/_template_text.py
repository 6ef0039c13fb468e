"""Where things are inside template text: lines and columns Jinja does not report.

Jinja's nodes and errors carry a line but no column; these helpers find the column by
scanning the line, inside tags only. Pure text work: nothing here imports Jinja.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from openprogram_yaml.compile._jinja_analysis import Read, Reference

__all__ = [
    "code_identifiers",
    "column_of",
    "identifier_columns",
    "line_text",
    "reference_col",
    "syntax_error_position",
]

_TAG_OPEN = re.compile(r"\{\{|\{%|\{#")
_RAW_OPEN = re.compile(r"[-+]?\s*raw\s*[-+]?%\}")
_RAW_CLOSE = re.compile(r"\{%[-+]?\s*endraw\s*[-+]?%\}")
_BRACKETS = {"(": ")", "[": "]", "{": "}"}


class _Lines:
    """Offsets to 1-based (line, column)."""

    def __init__(self, source: str) -> None:
        self.starts = [0, *(m.end() for m in re.finditer("\n", source))]

    def position(self, offset: int) -> tuple[int, int]:
        line = bisect_right(self.starts, offset)
        return line, offset - self.starts[line - 1] + 1


def code_identifiers(source: str) -> dict[int, list[tuple[int, str]]]:
    """Identifiers inside ``{{ … }}`` and ``{% … %}``, by line, as (column, name).

    Prose, comments, ``{% raw %}`` blocks, string literals and attribute names after a dot
    are skipped, so that ``Label this ticket: {{ ticket }}`` finds the second ``ticket``.
    """
    lines = _Lines(source)
    found: dict[int, list[tuple[int, str]]] = {}
    size = len(source)
    i = 0
    while (opening := _TAG_OPEN.search(source, i)) is not None:
        start = opening.end()
        if opening.group() == "{#":
            end = source.find("#}", start)
            i = size if end < 0 else end + 2
            continue
        if opening.group() == "{%" and _RAW_OPEN.match(source, start):
            raw_end = _RAW_CLOSE.search(source, start)
            i = size if raw_end is None else raw_end.end()
            continue
        i = _scan_code(source, start, "}}" if opening.group() == "{{" else "%}", lines, found)
    return found


def _scan_code(
    source: str, j: int, close: str, lines: _Lines, found: dict[int, list[tuple[int, str]]]
) -> int:
    size = len(source)
    pending: list[str] = []  # closing brackets expected, innermost last
    last = ""  # the last significant character, to skip attribute names after "."
    while j < size:
        c = source[j]
        if not pending and source.startswith(close, j):
            return j + 2
        if c in "'\"":
            k = j + 1
            while k < size and source[k] != c:
                k += 2 if source[k] == "\\" else 1
            j, last = k + 1, c
        elif c.isalpha() or c == "_":
            k = j
            while k < size and (source[k].isalnum() or source[k] == "_"):
                k += 1
            if last != ".":
                line, col = lines.position(j)
                found.setdefault(line, []).append((col, source[j:k]))
            j, last = k, "a"
        elif c.isdigit():
            k = j
            while k < size and (source[k].isalnum() or source[k] in "_."):
                k += 1
            j, last = k, "0"
        else:
            if c in _BRACKETS:
                pending.append(_BRACKETS[c])
            elif pending and c == pending[-1]:
                pending.pop()
            if not c.isspace():
                last = c
            j += 1
    return size


# Read only when a template has a syntax error: left to re's cache, compiled on first use.
_GOT = r"(?:got|unexpected|unknown tag) '([^']+)'"
_CHAR_AT = r"unexpected char .+ at (\d+)$"
_INNERMOST = r"innermost block that needs to be closed is '(\w+)'"
_DESCRIBED_TOKENS = {
    "end of print statement": "}}",
    "end of statement block": "%}",
}


def syntax_error_position(source: str, message: str, lineno: int) -> tuple[int, int]:
    """Best (line, column) for a Jinja syntax error; Jinja itself gives only the line."""
    lines = _Lines(source)
    if (at := re.search(_CHAR_AT, message)) is not None:
        return lines.position(min(int(at.group(1)), len(source)))
    if (block := re.search(_INNERMOST, message)) is not None:
        opened = _unclosed_block(source, block.group(1))
        if opened is not None:
            return lines.position(opened)
    line = max(1, min(lineno, len(lines.starts)))
    start = lines.starts[line - 1]
    end = lines.starts[line] if line < len(lines.starts) else len(source)
    text = source[start:end]
    if (got := re.search(_GOT, message)) is not None:
        col = _offending_token(text, _DESCRIBED_TOKENS.get(got.group(1), got.group(1)))
        if col is not None:
            return line, col
    if message.startswith("unexpected end of template"):
        tag = max(text.rfind("{{"), text.rfind("{%"))
        if tag >= 0:
            return line, tag + 1
        return line, len(text.rstrip("\n")) + 1
    tag = min((p for p in (text.find("{{"), text.find("{%")) if p >= 0), default=0)
    return line, tag + 1


#: Where each "{{" or "{%" starts, overlapping ones too ("{{{" holds two).
_OPENERS = re.compile(r"(?=\{\{|\{%)")


def _offending_token(text: str, token: str) -> int | None:
    """Column of the first ``token`` on the line that follows something else inside a tag.

    The parser complains about a token that came after what it had read so far, so the
    token is never the first thing in its tag (except an unknown tag name).
    """
    word = token.isidentifier()
    pattern = rf"(?<!\w){re.escape(token)}(?!\w)" if word else re.escape(token)
    # Found once for the line: a line of many tokens before any tag is not searched back
    # from each of them.
    openers = [m.start() for m in _OPENERS.finditer(text)]
    fallback: int | None = None
    for match in re.finditer(pattern, text):
        # The last "{{" or "{%" ending before the token.
        at = bisect_right(openers, match.start() - 2) - 1
        if at < 0:
            continue
        opener = openers[at]
        before = text[opener + 2 : match.start()].strip(" \t-+")
        if before:
            return match.start() + 1
        fallback = fallback or match.start() + 1
    return fallback


def _unclosed_block(source: str, tag: str) -> int | None:
    """Offset of the innermost ``{% tag %}`` that has no ``{% endtag %}``."""
    pattern = re.compile(r"\{%[-+]?\s*(end)?" + re.escape(tag) + r"\b")
    stack: list[int] = []
    for match in pattern.finditer(source):
        if match.group(1):
            if stack:
                stack.pop()
        else:
            stack.append(match.start())
    return stack[-1] if stack else None


def identifier_columns(
    identifiers: Mapping[int, list[tuple[int, str]]],
) -> dict[tuple[int, str], list[int]]:
    """``code_identifiers`` by (line, name): the columns of each name on each line, in order."""
    columns: dict[tuple[int, str], list[int]] = {}
    for line, found in identifiers.items():
        for col, name in found:
            columns.setdefault((line, name), []).append(col)
    return columns


def column_of(
    read: Read,
    columns_of: Mapping[tuple[int, str], list[int]],
    lines: Sequence[str],
    hits: dict[tuple[int, str], int],
) -> int:
    """The column of ``read`` on its line (``columns_of`` from ``identifier_columns``,
    ``lines`` the source split at line breaks).

    Names are matched as whole identifiers inside tags only, so prose on the same line and
    attribute names after a dot do not count. When the line's identifiers line up one to one
    with the variable uses Jinja parsed there, the read's own ordinal picks the column (so
    ``{% for item in items %}…{{ item }}`` points at the last ``item``); otherwise the first
    use after the last one found.
    """
    columns = columns_of.get((read.line, read.name), [])
    if len(columns) == read.name_uses and read.ordinal < len(columns):
        return columns[read.ordinal]
    after = hits.get((read.line, read.name), 0)
    at = bisect_right(columns, after)
    if at < len(columns):
        hits[(read.line, read.name)] = columns[at]
        return columns[at]
    text = line_text(lines, read.line)
    match = re.search(rf"(?<![\w.]){re.escape(read.name)}(?!\w)", text)
    return match.start() + 1 if match else 1


def reference_col(text: str, ref: Reference, after: int = 0) -> int:
    """The column of ``ref`` on its line, whose text is ``text``: its name in quotes within
    its tag, else the tag's keyword. ``after`` is the column of the reference before it on
    the line (they come in order): the search starts there, so a line of many tags is read
    once, not once for each."""
    keyword = re.compile(rf"\b({ref.kind}|from)\b").search(text, after)
    if keyword is None and after:
        keyword = re.compile(rf"\b({ref.kind}|from)\b").search(text)
    start = keyword.start() if keyword is not None else 0
    if ref.name is not None:
        end = text.find("%}", start)
        end = len(text) if end < 0 else end
        for quote in "'\"":
            at = text.find(f"{quote}{ref.name}{quote}", start, end)
            if at >= 0:
                return at + 1
    return start + 1


def line_text(lines: Sequence[str], line: int) -> str:
    """Line ``line`` (1-based) of a source split at its line breaks, once for all its lines:
    a template may hold a hundred thousand tags, each asking for its line."""
    return lines[line - 1] if 0 < line <= len(lines) else ""
