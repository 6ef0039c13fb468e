"""Where things are in the files a user wrote: positions of YAML nodes and of text inside them."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Position", "TextOrigin"]


@dataclass(frozen=True, slots=True)
class Position:
    """A 1-based line and column in a file (0 means unknown)."""

    path: str
    line: int
    col: int

    def __str__(self) -> str:
        return f"{self.path}:{self.line}:{self.col}"


@dataclass(frozen=True, slots=True)
class TextOrigin:
    """Where a piece of text (a template, say) starts in its file, and how it was written.

    ``style`` is the YAML scalar style: ``""`` plain, ``"'"`` / ``'"'`` quoted, ``"|"`` / ``">"``
    block, or ``"file"`` for a whole file. For a block scalar, ``line`` is the line of the
    indicator and ``indent`` the column (0-based) where its content lines start.
    ``locate`` maps a 1-based line and column inside the text back to the file.
    """

    path: str
    line: int
    col: int
    style: str = "file"
    indent: int = 0

    def locate(self, line: int, col: int = 1) -> Position:
        if self.style == "file":
            return Position(self.path, line, col)
        if self.style in ("|", ">"):
            return Position(self.path, self.line + line, self.indent + col)
        if line == 1:
            quote = 1 if self.style in ("'", '"') else 0
            return Position(self.path, self.line, self.col + quote + col - 1)
        # A multi-line flow scalar folds its lines; the line is right, the column approximate.
        return Position(self.path, self.line + line - 1, col)

    @property
    def start(self) -> Position:
        return Position(self.path, self.line, self.col)
