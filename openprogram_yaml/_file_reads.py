"""Reading a file named by a user or a config: regular files only, never blocking, capped.

``read_regular_file`` is the one way the package reads such a file's bytes (config,
template and schema files through ``spec/textfile.py``, files given as content blocks or
inputs through ``runtime/content.py``, ``SKILL.md`` files). Opening is non-blocking, so a
FIFO or a device named as a file is refused instead of hanging the caller; a file larger
than the caller's ``limit`` is refused before it is read whole.
"""

from __future__ import annotations

import os
import stat

__all__ = [
    "MAX_MEDIA_BYTES",
    "FileRefused",
    "FileTooLarge",
    "NotRegularFile",
    "file_stamp",
    "open_regular",
    "read_regular_file",
    "read_stamped_file",
]

#: The largest media file (an image, a PDF, audio) a run reads or carries: 20 MiB of raw
#: bytes. The providers take no more in one request, and every byte of it is held as base64
#: in memory and in the run record. (Here, below ``runtime`` and ``providers``, which both
#: read block files with it; ``runtime.content`` is its public home.)
MAX_MEDIA_BYTES = 20 * 1024 * 1024

_NOT_REGULAR = (
    (stat.S_ISDIR, "a folder"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a device"),
    (stat.S_ISBLK, "a device"),
)


class FileRefused(Exception):
    """A file that was not read; ``reason`` says why ("file not found", "not a regular
    file (a FIFO (named pipe))", …), for a caller that names the file in its own message."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class NotRegularFile(FileRefused):
    """A folder, FIFO, socket or device where a file was expected; ``kind`` says which."""

    def __init__(self, kind: str) -> None:
        super().__init__(f"not a regular file ({kind})")
        self.kind = kind


class FileTooLarge(FileRefused):
    """A file larger than the ``limit`` it was read with; ``size`` is at least ``limit + 1``."""

    def __init__(self, size: int, limit: int) -> None:
        super().__init__(f"the file is larger than {limit} bytes")
        self.size = size
        self.limit = limit


#: O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer, forever.
#: O_NOCTTY: a terminal named as a file must not become the controlling terminal of a
#: process without one (a server started with setsid), whose hang-up would then stop it.
_READ_FLAGS = os.O_RDONLY
for _flag in ("O_NONBLOCK", "O_NOCTTY", "O_CLOEXEC"):
    _READ_FLAGS |= getattr(os, _flag, 0)


def open_regular(path: str | os.PathLike[str]) -> int | None:
    """A descriptor for reading ``path`` when it is a regular file, None when it is a folder,
    FIFO, socket or device (opened without waiting, and closed again); ``OSError`` as
    ``os.open`` raises it."""
    descriptor = os.open(path, _READ_FLAGS)
    if stat.S_ISREG(os.fstat(descriptor).st_mode):
        return descriptor
    os.close(descriptor)
    return None


def read_regular_file(path: str | os.PathLike[str], *, limit: int) -> bytes:
    """The bytes of the regular file ``path``, at most ``limit`` of them.

    Raises ``FileTooLarge`` when it holds more, ``NotRegularFile`` for a folder, FIFO, socket
    or device, ``FileRefused`` when it is missing or cannot be opened or read.
    """
    return read_stamped_file(path, limit=limit)[0]


def read_stamped_file(path: str | os.PathLike[str], *, limit: int) -> tuple[bytes, tuple[int, int]]:
    """``read_regular_file``, with the file's stamp (``file_stamp``: modification time and
    size) as it was just before the bytes were read, from the descriptor read: what they
    are the contents of, whatever takes the file's name afterwards."""
    try:
        descriptor = os.open(path, _READ_FLAGS)
    except FileNotFoundError:
        raise FileRefused("file not found") from None
    except OSError as exc:
        raise FileRefused(f"cannot read file: {exc.strerror or exc}") from None
    try:
        mode, size, mtime_ns = _mode_and_size(descriptor)
        if not stat.S_ISREG(mode):
            kind = next((name for test, name in _NOT_REGULAR if test(mode)), "a special file")
            raise NotRegularFile(kind)
        if size > limit:
            raise FileTooLarge(size, limit)
        data = _read_upto(descriptor, size, limit)
    finally:
        os.close(descriptor)
    if len(data) > limit:
        raise FileTooLarge(len(data), limit)
    return data, (mtime_ns, size)


def _read_upto(descriptor: int, size: int, limit: int) -> bytes:
    """At most ``limit + 1`` bytes from ``descriptor``: as many as fstat said, + 1 to see a
    file that grew meanwhile (or one that says 0 and holds more, as /proc's do), then the
    rest up to ``limit + 1``. Read from the descriptor itself: a file object around it (its
    buffer and its own fstat) cost as much as reading a small file."""
    chunks: list[bytes] = []
    want = size + 1
    got = 0
    try:
        while got <= limit:
            chunk = os.read(descriptor, min(want, limit + 1 - got))
            if not chunk:
                break
            chunks.append(chunk)
            got += len(chunk)
            want = max(want - len(chunk), 64 * 1024)
    except OSError as exc:
        raise FileRefused(f"cannot read file: {exc.strerror or exc}") from None
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def _mode_and_size(descriptor: int) -> tuple[int, int, int]:
    try:
        info = os.fstat(descriptor)
    except OSError as exc:
        raise FileRefused(f"cannot read file: {exc.strerror or exc}") from None
    return info.st_mode, info.st_size, info.st_mtime_ns


def file_stamp(path: str | os.PathLike[str]) -> tuple[int, int] | None:
    """A file's modification time (ns) and size, links followed; None when it cannot be
    looked at. What tells a file read before from one changed since (by a save, or
    replaced by another, even one with an older time: the size is compared too)."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_mtime_ns, st.st_size
