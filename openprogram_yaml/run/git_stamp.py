"""The git side of a ``VersionStamp``: the commit a Program's files are at, and whether they
differ from it. Asking git takes a process or three, so only the runs that keep or show a
record come here; a plain run stamps the content hash alone (``run.version``)."""

from __future__ import annotations

import subprocess
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from .._git import run_git
from .version import VersionStamp

if TYPE_CHECKING:
    from ..compile.program import Program

__all__ = ["GitStamper"]


@dataclass(frozen=True, slots=True)
class _GitInfo:
    """The git checkout a program's files are in."""

    toplevel: Path
    git_dir: Path


def _git(args: list[str], cwd: Path) -> str | None:
    try:
        proc = run_git(args, cwd, timeout_s=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return proc.stdout if proc.returncode == 0 else None


class GitStamper:
    """Computes ``VersionStamp``s, caching git's answer per Program version.

    The cache key also holds the modification times of git's index and HEAD log, so a
    commit made while the runner serves an unchanged Program is still noticed; a run pays
    for ``git`` only on the first run of a version or after such a commit.

    The cache keeps the ``max_stamps`` most recently used stamps: a long-lived server sees a
    new key at every edit and every commit, and an old one is rarely asked for again.
    """

    def __init__(self, *, max_stamps: int = 32) -> None:
        self._lock = threading.Lock()
        self._info: dict[Path, _GitInfo | None] = {}
        self._stamps: dict[tuple[str, tuple[int, ...]], VersionStamp] = {}
        self.max_stamps = max_stamps

    def _git_info(self, root: Path) -> _GitInfo | None:
        if root not in self._info:
            out = _git(["rev-parse", "--show-toplevel", "--absolute-git-dir"], root)
            lines = out.splitlines() if out else []
            self._info[root] = (
                _GitInfo(Path(lines[0]).resolve(), Path(lines[1])) if len(lines) == 2 else None
            )
        return self._info[root]

    @staticmethod
    def _markers(info: _GitInfo) -> tuple[int, ...]:
        stamps: list[int] = []
        for name in ("index", "HEAD", "logs/HEAD"):
            try:
                stamps.append((info.git_dir / name).stat().st_mtime_ns)
            except OSError:
                stamps.append(0)
        return tuple(stamps)

    def stamp(self, program: Program) -> VersionStamp:
        """The stamp of ``program``; blocking (runs ``git`` on a cache miss)."""
        with self._lock:
            info = self._git_info(program.root)
            if info is None:
                return VersionStamp(program.version)
            key = (program.version, self._markers(info))
            cached = self._stamps.pop(key, None)
            if cached is not None:
                self._stamps[key] = cached  # the most recently used last
                return cached
            head = _git(["rev-parse", "--verify", "-q", "HEAD"], info.toplevel)
            if head is None:  # a repository without commits
                stamp = VersionStamp(program.version)
            else:
                stamp = VersionStamp(program.version, head.strip(), self._dirty(program, info))
            self._stamps[key] = stamp
            while len(self._stamps) > self.max_stamps:
                del self._stamps[next(iter(self._stamps))]  # the least recently used
            return stamp

    @staticmethod
    def _dirty(program: Program, info: _GitInfo) -> bool:
        inside: list[str] = []
        for path in program.files:
            try:
                inside.append(path.resolve().relative_to(info.toplevel).as_posix())
            except ValueError:
                return True  # a file the commit cannot hold
        if not inside:
            return True
        status = _git(
            ["status", "--porcelain", "--untracked-files=all", "--ignored", "--", *inside],
            info.toplevel,
        )
        return status is None or bool(status.strip())
