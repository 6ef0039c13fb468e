"""Writing files so that nothing already written is lost.

Two ways to write, used by everything that keeps files (the lock, recordings, traces,
records, the compile cache):

- ``write_atomically``: a file replaced whole or not at all. The new contents go to a
  temporary file beside it, which is flushed to disk and renamed over it; a full disk or a
  crash leaves the old file as it was, never an empty or half-written one.
- ``append_lines``: JSON Lines appended and flushed to disk. After a torn last line (a crash
  or a full disk while it was written) the new lines start on a line of their own, so only
  the torn line is lost, not the next one too.

``unwritable_file`` and ``unwritable_folder`` tell, before a run, why its output could not
be kept, so that a mistyped path fails at once instead of after a long run.
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from pathlib import Path

__all__ = [
    "append_lines",
    "cannot_write",
    "unwritable_file",
    "unwritable_folder",
    "write_atomically",
]


def write_atomically(
    path: str | os.PathLike[str],
    data: str | bytes,
    *,
    sync: bool = True,
    mode: int | None = None,
) -> None:
    """Replace ``path`` with ``data`` (text is written as UTF-8) whole or not at all.

    With ``sync``, the data and then the rename are flushed to disk before returning, so a
    crash just after cannot leave an empty file (a cache that can be rebuilt may skip it).
    Without ``mode``, a file that exists keeps its permissions and a new one gets the
    umask's; with it, the file gets ``mode`` (less the umask) whatever it had before. A
    symbolic link at ``path`` is replaced, never written through: a link planted in a
    repository or a cache cannot aim the write at another file. Raises ``OSError`` naming
    ``path``.
    """
    target = os.fspath(path)
    payload = data.encode("utf-8") if isinstance(data, str) else data
    folder = os.path.dirname(target) or "."
    kept_mode: int | None = None
    if mode is None:
        with contextlib.suppress(OSError):
            info = os.lstat(target)
            kept_mode = stat.S_IMODE(info.st_mode) if stat.S_ISREG(info.st_mode) else None
    temporary = ""
    try:
        descriptor, temporary = _create_beside(target, 0o666 if mode is None else mode)
        with os.fdopen(descriptor, "wb") as stream:
            if kept_mode is not None:
                os.fchmod(stream.fileno(), kept_mode)
            stream.write(payload)
            stream.flush()
            if sync:
                os.fsync(stream.fileno())
        os.replace(temporary, target)
    except OSError as exc:
        if temporary:
            with contextlib.suppress(OSError):
                os.unlink(temporary)
        # The temporary file's name means nothing to the reader of the message.
        raise OSError(exc.errno, exc.strerror or str(exc), target) from exc
    if sync:
        _sync_folder(folder)


def _create_beside(target: str, mode: int) -> tuple[int, str]:
    """A new file in ``target``'s folder, open for writing: its descriptor and name."""
    folder, name = os.path.split(target)
    for _ in range(100):
        candidate = os.path.join(folder, f".{name}.{os.urandom(6).hex()}.tmp")
        try:
            # os.open, not mkstemp: the file gets the umask's permissions, not 0600.
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0)
            return os.open(candidate, flags, mode), candidate
        except FileExistsError:
            continue
    raise FileExistsError(f"no free temporary name beside {target}")


def _sync_folder(folder: str) -> None:
    """Flush a folder's entries (a rename) to disk, where the system allows it."""
    try:
        descriptor = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:  # Windows cannot open a folder; the rename is then as safe as it gets
        return
    try:
        os.fsync(descriptor)
    except OSError:
        pass  # some file systems refuse to sync a folder
    finally:
        os.close(descriptor)


def append_lines(path: str | os.PathLike[str], text: str) -> None:
    """Append ``text`` (whole lines, each ending with a newline) to ``path`` and flush it to
    disk, starting on a new line when the file does not end with one."""
    data = text.encode("utf-8")
    try:
        descriptor = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o666)
        readable = True
    except PermissionError:  # a file we may append to but not read
        descriptor = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
        readable = False
    try:
        info = os.fstat(descriptor)
        regular = stat.S_ISREG(info.st_mode)
        if regular and readable and info.st_size > 0:
            os.lseek(descriptor, -1, os.SEEK_END)
            if os.read(descriptor, 1) != b"\n":
                data = b"\n" + data
        view = memoryview(data)
        while view:
            view = view[os.write(descriptor, view) :]
        if regular:  # a pipe or a terminal (``--trace /dev/stdout``) cannot be synced
            os.fsync(descriptor)
    finally:
        os.close(descriptor)


def cannot_write(path: str | os.PathLike[str], exc: OSError) -> str:
    """The one line that says a write failed: ``error: cannot write PATH: reason``."""
    return f"error: cannot write {os.fspath(path)}: {exc.strerror or exc}"


def unwritable_file(path: Path) -> str | None:
    """Why lines could not be appended to ``path``, or None when they can. Leaves no file
    behind that was not there."""
    if path.is_dir():
        return "is a folder"
    parent = path.parent
    if not parent.exists():
        return f"folder {parent} does not exist"
    if not parent.is_dir():
        return f"{parent} is not a folder"
    existed = os.path.lexists(path)
    try:
        os.close(os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666))
    except OSError as exc:
        return exc.strerror or str(exc)
    if not existed:
        with contextlib.suppress(OSError):
            os.unlink(path)
    return None


def unwritable_folder(path: Path) -> str | None:
    """Why files could not be written in the folder ``path`` (made if missing), or None
    when they can."""
    if path.exists() and not path.is_dir():
        return "is not a folder"
    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=path):
            pass
    except OSError as exc:
        return exc.strerror or str(exc)
    return None
