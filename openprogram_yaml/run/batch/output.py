"""A batch's output file: one JSON line per finished row, never torn, and read back to resume.

Only the driver writes (whatever the engine): each line goes out in one ``write`` of the
complete line on a file opened for appending, so a line is in the file whole or not at all
as far as the process is concerned. A kill (even ``kill -9``) loses only the rows in
flight: everything written is in the system's cache and reaches the disk.

fsync policy: the file is synced at most once a second (``sync_every_s``) and when it is
closed. A machine that loses power may lose the last second of lines; ``--resume`` runs
those rows again. Syncing each line would cap a batch at the disk's sync rate (a few
hundred a second on many disks), which a fast provider exceeds.

A line left torn at the end (the machine stopped mid-write) is cut off when the file is
opened to resume (``DoneRows.read``), so the next line starts on a line of its own.
"""

from __future__ import annotations

import errno
import json
import os
import stat
import time
from collections.abc import Callable
from pathlib import Path

from ...errors import UsageError
from ...json_types import parse_json

__all__ = ["DoneRows", "OutputWriter", "done_key"]


def done_key(key: object, digest: str) -> str:
    """What identifies a finished row: its key (as JSON, so 1 and "1" differ) and digest."""
    return json.dumps(key, ensure_ascii=False) + "\0" + digest


class DoneRows:
    """The rows an output file already holds with a result (``status`` ok)."""

    def __init__(self) -> None:
        self.ok: set[str] = set()
        #: Lines dropped: a torn last line cut off, or lines that are not rows.
        self.dropped = 0

    def __contains__(self, key: str) -> bool:
        return key in self.ok

    @classmethod
    def read(cls, path: Path) -> DoneRows:
        """The finished rows of ``path`` (none when it does not exist); a torn last line is
        cut off the file, so appending goes on from a whole line."""
        done = cls()
        try:
            handle = path.open("rb+")
        except FileNotFoundError:
            return done
        except OSError as exc:
            raise UsageError(f"cannot read {path} (--resume): {exc.strerror or exc}") from None
        with handle:
            if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
                # A device (/dev/zero) would be read without end, and none holds rows.
                raise UsageError(f"cannot read {path} (--resume): not a regular file")
            whole = 0  # the offset after the last complete line
            for raw in handle:
                if not raw.endswith(b"\n"):
                    break
                whole += len(raw)
                done._add(raw)
            handle.seek(0, os.SEEK_END)
            if handle.tell() > whole:
                handle.truncate(whole)
                done.dropped += 1
        return done

    def _add(self, raw: bytes) -> None:
        try:
            line = parse_json(raw.decode("utf-8"))
        except ValueError:  # not UTF-8 or not JSON: a line torn by a crash
            line = None
        if not isinstance(line, dict) or not {"key", "digest", "status"} <= line.keys():
            self.dropped += 1
            return
        key, digest, status = line["key"], line["digest"], line["status"]
        if status == "ok" and isinstance(digest, str):
            self.ok.add(done_key(key, digest))


class OutputWriter:
    """Appends complete lines to the output file (made when missing)."""

    def __init__(
        self,
        path: Path,
        *,
        sync_every_s: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.path = path
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
        self._sync_every_s = sync_every_s
        self._clock = clock
        self._synced_at = clock()
        self._unsynced = False

    def write(self, line: str) -> None:
        """Write ``line`` (a newline is added) whole, in one write where the system allows."""
        data = memoryview((line + "\n").encode("utf-8"))
        try:
            while data:
                data = data[os.write(self._fd, data) :]
            self._unsynced = True
            if self._clock() - self._synced_at >= self._sync_every_s:
                self._sync()
        except OSError as exc:  # a full disk: a usage error naming the file, no traceback
            raise self._failed(exc) from None

    def _failed(self, exc: OSError) -> UsageError:
        return UsageError(f"cannot write {self.path} (--output): {exc.strerror or exc}")

    def _sync(self) -> None:
        try:
            os.fsync(self._fd)
        except OSError as exc:
            # A file that cannot be synced (a pipe, a terminal, /dev/null) was written: EINVAL
            # is no failure. A full disk or an I/O error is.
            if exc.errno not in (errno.EINVAL, errno.EROFS, errno.ENOTSUP):
                raise
        self._synced_at = self._clock()
        self._unsynced = False

    def close(self) -> None:
        """Sync what is not yet on disk and close the file; ``UsageError`` when that fails."""
        try:
            if self._unsynced:
                self._sync()
        except OSError as exc:
            raise self._failed(exc) from None
        finally:
            os.close(self._fd)
