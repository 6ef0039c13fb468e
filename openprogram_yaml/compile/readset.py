"""What a compile read, as plain data, and whether it still reads the same.

Every read that can change what a compile gives is recorded in a ``ReadSet``: the files
read (with their stamp and sha256), each path looked at and what was there (nothing
included: a project file or a template appearing later changes the result; for a path
that resolved through a symbolic link, where it led: ``paths.LINK``), the files
each project pattern matched, the environment variables named (a digest of each value),
and the installed libraries that shape the result. The compile cache keeps a read-set as
JSON beside its entry and checks it before anything is unpickled; a ``Build``
(``compile.build``) keeps one per compiled agent. A cached run needs this module, not the
build's.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import stat
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from .paths import LINK, entry_kind, glob_file_names, link_kind

__all__ = [
    "RACY_NS",
    "Checked",
    "FileRead",
    "ReadSet",
    "env_digest",
    "file_digest",
    "file_reads",
    "library_stamps",
    "settled",
]

#: The libraries whose version can change what a compile gives (messages, checks).
_LIBRARIES = ("jinja2", "jsonschema", "referencing", "pydantic", "pydantic_core", "yaml")

#: A file changed less than this long before it was compiled may change again within the
#: same timestamp tick, unseen (git calls this "racy"); its stamp cannot vouch for it.
RACY_NS = 50_000_000

#: A stamp in whole seconds may come from a file system that keeps no finer ones (two
#: seconds on FAT): the file may have been saved up to a tick later than it says.
_COARSE_TICK_NS = 2_000_000_000


def settled(mtime_ns: int, now_ns: int) -> bool:
    """Whether a file whose stamp says ``mtime_ns`` can no longer change unseen (within the
    same tick, keeping its size) after ``now_ns``: its stamp then vouches for what it holds."""
    coarse = 0 if mtime_ns % 1_000_000_000 else _COARSE_TICK_NS
    return mtime_ns < now_ns - RACY_NS - coarse


#: ``(path, mtime_ns, size, sha256 hex)``.
FileRead = tuple[str, int, int, str]


@dataclass(frozen=True, slots=True)
class ReadSet:
    """Everything a compile read, as plain data (see the module docstring)."""

    files: tuple[FileRead, ...] = ()
    #: Paths looked at, each with what was there (``paths.entry_kind``; "" for nothing).
    lookups: tuple[tuple[str, str], ...] = ()
    #: ``(root, pattern, files matched)`` for each project pattern globbed.
    globs: tuple[tuple[str, str, tuple[str, ...]], ...] = ()
    #: ``(name, sha256 hex of the value)``; None for a variable that was not set.
    env: tuple[tuple[str, str | None], ...] = ()
    libraries: tuple[tuple[str, str], ...] = ()

    def changed(self, environ: Mapping[str, str], checked: Checked | None = None) -> str | None:
        """The first read that would read differently now, or None when all still hold.

        ``checked`` remembers, within one compile, paths already found unchanged: agents
        share templates and schemas.
        """
        memo = checked if checked is not None else Checked()
        for name, value in self.env:
            if env_digest(environ.get(name)) != value:
                return f"${name}"
        for path, kind in self.lookups:
            if memo.kind(path) != kind and memo.link(path) != kind:
                return path
        for read in self.files:
            if not memo.same_file(read):
                return read[0]
        for root, pattern, matched in self.globs:
            if tuple(glob_file_names(root, pattern)) != matched:
                return f"{root}/{pattern}"
        if self.libraries and self.libraries != library_stamps():
            return "installed libraries"
        return None

    def merged(self, others: Iterable[ReadSet]) -> ReadSet:
        """This read-set and ``others`` as one (what a whole program read).

        A file read by several agents is one entry: all saw the same contents (each
        read-set was checked), perhaps under different stamps; the latest stamp is kept,
        so that later checks settle it by its stamp.
        """
        files = {read[0]: read for read in self.files}
        lookups = dict(self.lookups)
        globs = dict.fromkeys(self.globs)
        env = dict(self.env)
        for other in others:
            for read in other.files:
                known = files.get(read[0])
                if known is None or read[1] > known[1]:
                    files[read[0]] = read
            lookups.update(other.lookups)
            globs.update(dict.fromkeys(other.globs))
            env.update(other.env)
        return ReadSet(
            tuple(sorted(files.values())),
            tuple(sorted(lookups.items())),
            tuple(globs),
            tuple(sorted(env.items())),
            self.libraries,
        )

    def version(self, root: Path) -> str:
        """A content hash of the files read: which version of the prompts a run used."""
        digest = hashlib.sha256()
        prefix = str(root) + os.sep
        for path, _, _, sha in sorted(self.files):
            rel = path[len(prefix) :] if path.startswith(prefix) else path
            # A file name need not be UTF-8 (os keeps such bytes as surrogates).
            name = rel.replace(os.sep, "/").encode("utf-8", "surrogateescape")
            digest.update(name + b"\0" + sha.encode() + b"\0")
        return digest.hexdigest()[:16]

    def to_data(self) -> dict[str, object]:
        """The read-set as JSON data."""
        return {
            "files": self.files,
            "lookups": self.lookups,
            "globs": self.globs,
            "env": self.env,
            "libraries": self.libraries,
        }

    @classmethod
    def from_data(cls, data: object) -> ReadSet:
        """The read-set ``to_data`` gave (read back from JSON); ``ValueError`` otherwise."""
        try:
            assert isinstance(data, dict)
            return cls(
                files=tuple((str(p), int(m), int(s), str(h)) for p, m, s, h in data["files"]),
                lookups=tuple((str(p), str(k)) for p, k in data["lookups"]),
                globs=tuple((str(r), str(p), tuple(map(str, m))) for r, p, m in data["globs"]),
                env=tuple((str(n), None if v is None else str(v)) for n, v in data["env"]),
                libraries=tuple((str(n), str(v)) for n, v in data["libraries"]),
            )
        except (AssertionError, KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"not a read-set: {exc!r}") from exc


class Checked:
    """Paths already checked during one validation pass (a stat each, not one per agent)."""

    def __init__(self) -> None:
        self._kinds: dict[str, str] = {}
        self._files: dict[FileRead, bool] = {}
        #: The digests of settled files hashed in this pass, by path and stamp
        #: (``file_reads``).
        self.digests: dict[tuple[str, int, int], str] = {}

    def kind(self, path: str) -> str:
        found = self._kinds.get(path)
        if found is None:
            found = self._kinds[path] = entry_kind(path)
        return found

    def link(self, path: str) -> str:
        """``link_kind(path)``: what a path recorded as resolved through a link finds now."""
        key = LINK + path
        found = self._kinds.get(key)
        if found is None:
            found = self._kinds[key] = link_kind(path)
        return found

    def same_file(self, read: FileRead) -> bool:
        same = self._files.get(read)
        if same is None:
            same = self._files[read] = _same_file(read)
        return same


def _same_file(read: FileRead) -> bool:
    path, mtime_ns, size, sha = read
    try:
        st = os.stat(path)
    except OSError:
        return False
    if (st.st_mtime_ns, st.st_size) == (mtime_ns, size):
        return True
    # A touch, a checkout, or a save that changed nothing: the contents decide.
    return st.st_size == size and file_digest(path) == sha


def file_digest(path: str) -> str:
    """The sha256 of a regular file's contents; "" for anything else (as ``read_text``, a
    FIFO put where a file was must not block the check: it is opened without waiting)."""
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        with open(os.open(path, flags), "rb") as stream:
            if not stat.S_ISREG(os.fstat(stream.fileno()).st_mode):
                return ""
            return hashlib.sha256(stream.read()).hexdigest()
    except OSError:
        return ""


def env_digest(value: str | None) -> str | None:
    # A hash, not the value: a read-set kept on disk must not hold what the environment said.
    if value is None:
        return None
    # A value need not be UTF-8 (os keeps such bytes as surrogates).
    return hashlib.sha256(value.encode("utf-8", "surrogateescape")).hexdigest()


def file_reads(
    paths: Iterable[Path | str],
    started_ns: int,
    known: dict[tuple[str, int, int], str] | None = None,
    texts: Mapping[str, str] | None = None,
    stamps: Mapping[str, tuple[int, int] | None] | None = None,
) -> tuple[tuple[FileRead, ...], bool]:
    """What each file holds now, for a compile that started at ``started_ns``; and whether
    all are settled.

    A file modified less than ``RACY_NS`` before the compile began, or after, is not: it
    may change again within the same timestamp tick, unseen, so its stamp cannot vouch for
    what the compile read (nor can a file that is gone; see ``settled``). ``known`` holds
    the settled reads made so far in this compile: a file many agents read (a shared
    template or schema) is hashed once while its stamp holds, as a later compile's check
    trusts that stamp. ``texts``: what this compile read from some paths (an agent's own
    file), as UTF-8 text; a settled file has not changed since before the compile began,
    so it still holds that text, which is hashed instead of reading the file again.
    ``stamps``: the stamps the compile took of some paths before reading them
    (``Collector.stamp``, or the descriptor a text was read from); a settled one whose
    digest ``known`` holds, or whose text ``texts`` holds, is what the compile read, and is
    taken as it is, without looking at the file again (which another may have taken the
    place of since, even with an older time).
    """
    out = []
    all_settled = True
    for path in sorted(map(str, paths)):
        seen = stamps.get(path) if stamps is not None else None
        if seen is not None and settled(seen[0], started_ns):
            digest = known.get((path, *seen)) if known is not None else None
            text = texts.get(path) if texts is not None and digest is None else None
            if text is not None:
                digest = hashlib.sha256(text.encode("utf-8")).hexdigest()
            if digest is not None:
                out.append((path, *seen, digest))
                continue
        try:
            st = os.stat(path)
        except OSError:
            out.append((path, -1, -1, ""))
            all_settled = False
            continue
        stamp = (path, st.st_mtime_ns, st.st_size)
        if not settled(st.st_mtime_ns, started_ns):
            all_settled = False
            out.append((*stamp, file_digest(path)))
            continue
        digest = known.get(stamp) if known is not None else None
        if digest is None:
            text = texts.get(path) if texts is not None else None
            if text is None:
                digest = file_digest(path)
            else:
                digest = hashlib.sha256(text.encode("utf-8")).hexdigest()
            if known is not None:
                known[stamp] = digest
        out.append((*stamp, digest))
    return tuple(out), all_settled


_library_stamps: list[tuple[tuple[str, str], ...]] = []


def library_stamps() -> tuple[tuple[str, str], ...]:
    """Each library of ``_LIBRARIES`` as installed: where its package lies and that file's
    stamp. Found without importing them (a program served from the compile cache needs
    neither YAML nor pydantic)."""
    if not _library_stamps:
        found = []
        for name in _LIBRARIES:
            spec = importlib.util.find_spec(name)
            origin = spec.origin if spec is not None else None
            try:
                st = os.stat(origin) if origin else None
            except OSError:
                st = None
            found.append((name, f"{origin}:{st.st_mtime_ns}:{st.st_size}" if st else ""))
        _library_stamps.append(tuple(found))
    return _library_stamps[0]
