"""Read a config, template or schema file as text: UTF-8, regular files only, never blocking.

Every file the compiler reads goes through ``read_text`` (over ``_file_reads``, which
``runtime/`` shares). Opening is non-blocking, so a FIFO
or a device named as a prompt file is refused instead of hanging the check; a file larger
than ``MAX_TEXT_BYTES`` is refused before it is read (a multi-gigabyte file took half a
minute and gigabytes of memory to be called "not UTF-8"); and text that is not UTF-8 is
reported at the line and column of its first bad byte.
"""

from __future__ import annotations

from pathlib import Path

from .._file_reads import FileRefused, FileTooLarge, NotRegularFile, read_stamped_file
from ..errors import ConfigError, Diagnostic

__all__ = ["MAX_TEXT_BYTES", "UnreadableFile", "decode_text", "read_stamped_text", "read_text"]

#: The largest config, template or schema file read. Far above any real one: a prompt this
#: long would be millions of tokens, and a YAML document past 100,000 values is refused anyway.
MAX_TEXT_BYTES = 16 * 1024 * 1024


class UnreadableFile(ConfigError):
    """A file that could not be read as text.

    ``inside`` is True when the problem is in the content (its diagnostic points into the
    file); otherwise the file could not be opened, and ``reason`` says why, for a caller that
    reports it at the place naming the file.
    """

    def __init__(self, diagnostic: Diagnostic, *, inside: bool) -> None:
        super().__init__(diagnostic)
        self.inside = inside
        self.reason = diagnostic.message


def read_text(path: Path | str, shown: str | None = None) -> str:
    """The text of the regular file ``path``; raises ``UnreadableFile``.

    ``shown`` is the path as messages name it (default: ``path``).
    """
    return read_stamped_text(path, shown)[0]


def read_stamped_text(path: Path | str, shown: str | None = None) -> tuple[str, tuple[int, int]]:
    """``read_text``, with the stamp of the file the text was read from
    (``_file_reads.read_stamped_file``)."""
    shown = str(path) if shown is None else shown
    try:
        data, stamp = read_stamped_file(path, limit=MAX_TEXT_BYTES)
    except FileTooLarge:
        mib = MAX_TEXT_BYTES // (1024 * 1024)
        message = (
            f"the file is larger than {mib} MiB, the limit for a config, template or schema file"
        )
        raise UnreadableFile(Diagnostic(shown, 0, 0, message), inside=False) from None
    except NotRegularFile as exc:
        message = f"{exc.reason}; name a file holding text"
        raise UnreadableFile(Diagnostic(shown, 0, 0, message), inside=False) from None
    except FileRefused as exc:
        message = exc.reason
        raise UnreadableFile(Diagnostic(shown, 0, 0, message), inside=False) from None
    return decode_text(data, shown), stamp


def decode_text(data: bytes, shown: str) -> str:
    """``data`` as UTF-8 text; raises ``UnreadableFile`` at the first byte that is not."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        at, problem = exc.start, f"byte 0x{data[exc.start]:02x} is not valid UTF-8"
    else:
        if "\x00" not in text:
            return text
        # Valid UTF-8 with NUL bytes is nearly always UTF-16 without a byte order mark.
        at = data.index(b"\x00")
        problem = "a NUL byte (0x00); text files hold none"
    if data.startswith((b"\xff\xfe", b"\xfe\xff")) or b"\x00" in data[:64]:
        problem += "; the file looks UTF-16 encoded"
    line_start = data.rfind(b"\n", 0, at) + 1
    line = data.count(b"\n", 0, at) + 1
    col = len(data[line_start:at].decode("utf-8", errors="replace")) + 1
    message = f"{problem}; save the file as UTF-8"
    raise UnreadableFile(Diagnostic(shown, line, col, message), inside=True)
