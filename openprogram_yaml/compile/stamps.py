"""How the compiler tells whether a file changed: its stamp (modification time and size),
and its sha256 when the stamp cannot settle it.

The incremental recompile (``project``) and the compile cache (``cache``) both ask here.
Light on purpose: a program loaded from the compile cache checks its files with this
module alone.
"""

from __future__ import annotations

import contextlib
import contextvars
import hashlib
import os
import stat
import time
from collections.abc import Iterator
from pathlib import Path

__all__ = [
    "RACY_NS",
    "UNTRUSTED",
    "Stamp",
    "digest",
    "entry_kind",
    "stamp",
    "stamps_once",
    "trusted_stamp",
]

Stamp = tuple[int, int] | None

#: A file changed less than this long before it was compiled may change again within the
#: same timestamp tick, unseen (git calls this "racy"); such a stamp is not trusted.
RACY_NS = 50_000_000
UNTRUSTED: Stamp = (-1, -1)
_DIGESTS_KEPT = 20_000

#: Stats taken during the current compile: many agents share a template or a schema.
_seen: contextvars.ContextVar[dict[str, os.stat_result | None] | None] = contextvars.ContextVar(
    "openprogram_compile_stats", default=None
)


@contextlib.contextmanager
def stamps_once() -> Iterator[None]:
    """Within this block (one compile) each file is stat'ed once."""
    if _seen.get() is not None:
        yield
        return
    token = _seen.set({})
    try:
        yield
    finally:
        _seen.reset(token)


def _stat(path: Path | str) -> os.stat_result | None:
    key = os.fspath(path)  # str keys: a Path hashes its parts anew on every lookup
    seen = _seen.get()
    if seen is not None and key in seen:
        return seen[key]
    try:
        result: os.stat_result | None = os.stat(key)
    except OSError:
        result = None
    if seen is not None:
        seen[key] = result
    return result


def stamp(path: Path | str) -> Stamp:
    """``(mtime_ns, size)``, or None for a file that is not there."""
    st = _stat(path)
    return None if st is None else (st.st_mtime_ns, st.st_size)


def entry_kind(path: Path | str) -> str:
    """What is at ``path``, links followed: ``"file"``, ``"folder"``, ``"other"``, or ``""``
    for nothing. A lookup records it so that a later one can tell whether it would find
    the same (a file where nothing was, a folder where a file was)."""
    st = _stat(path)
    if st is None:
        return ""
    if stat.S_ISREG(st.st_mode):
        return "file"
    return "folder" if stat.S_ISDIR(st.st_mode) else "other"


def trusted_stamp(path: Path | str, now_ns: int) -> Stamp:
    """The stamp, or ``UNTRUSTED`` when the file changed too recently to rely on it."""
    found = stamp(path)
    if found is not None and now_ns - found[0] < RACY_NS:
        return UNTRUSTED
    return found


_digests: dict[str, tuple[Stamp, bytes]] = {}


def digest(path: Path | str) -> bytes:
    """The sha256 of a file, remembered while its size and modification time hold."""
    key = os.fspath(path)
    found = stamp(key)
    known = _digests.get(key)
    if known is not None and known[0] == found and found not in (None, UNTRUSTED):
        return known[1]
    try:
        with open(key, "rb") as stream:
            value = hashlib.sha256(stream.read()).digest()
    except OSError:
        value = b"<unreadable>"
    if len(_digests) >= _DIGESTS_KEPT:
        _digests.clear()
    _digests[key] = (trusted_stamp(key, time.time_ns()), value)
    return value
