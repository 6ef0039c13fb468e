"""Two versions of a prompt repository side by side, without touching the user's checkout
(for ``openprogram-run diff``).

A commit is checked out with ``git worktree add --detach`` into a temporary folder and
removed after; the work tree (what ``diff`` compares against by default) is copied there:
its tracked files as they are on disk and its untracked files that are not ignored, so
uncommitted edits count, and nothing that compiling or running writes (``__pycache__``, a
replay's bookkeeping) can land in the user's folder. The user's files and index are never
written.

A repository is untrusted input: git runs with its hooks off (``core.hooksPath``: a
``post-checkout`` hook would run on ``worktree add``), no fsmonitor command, no pager and
no optional locks, as ``run/version.py`` runs it.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from .._git import run_git
from ..errors import UsageError

__all__ = ["Checkout", "GitRepository", "checkouts"]

#: How long one git command may take, seconds.
_TIMEOUT_S = 120


class GitError(UsageError):
    """A git command failed, or the path is not in a git repository (exit 2)."""


def _git(args: list[str], cwd: Path) -> str:
    try:
        proc = run_git(args, cwd, timeout_s=_TIMEOUT_S)
    except FileNotFoundError as exc:
        raise GitError("git is not installed (diff compares git revisions)") from exc
    except (OSError, subprocess.SubprocessError) as exc:
        raise GitError(f"git {args[0]} failed: {exc}") from exc
    if proc.returncode != 0:
        message = proc.stderr.strip().splitlines()
        raise GitError(f"git {args[0]} failed: {message[-1] if message else proc.returncode}")
    return proc.stdout


@dataclass(frozen=True, slots=True)
class Checkout:
    """One version of the project: where its copy is and what to call it."""

    #: "HEAD (1a2b3c4)", "main (…)", or "work tree".
    label: str
    #: The commit, None for the work tree.
    commit: str | None
    #: The top of the copy; the project is at ``top / project`` (``GitRepository``).
    top: Path


@dataclass(frozen=True, slots=True)
class GitRepository:
    """The repository a project path is in."""

    top: Path
    #: The project path (a folder or an agent file) relative to ``top``.
    project: Path

    @classmethod
    def of(cls, path: Path) -> GitRepository:
        """The repository holding ``path``; ``GitError`` when there is none."""
        path = path.resolve()
        if not path.exists():
            raise GitError(f"{path}: no such file or folder")
        folder = path if path.is_dir() else path.parent
        try:
            out = _git(["rev-parse", "--show-toplevel"], folder)
        except GitError as exc:
            raise GitError(
                f"{path} is not in a git repository: diff compares two git revisions"
            ) from exc
        top = Path(out.strip()).resolve()
        return cls(top, path.relative_to(top))

    def commit(self, rev: str) -> str:
        """The commit ``rev`` names; ``GitError`` for an unknown one."""
        if rev.startswith("-"):  # never an option to git
            raise GitError(f"unknown revision {rev!r}")
        try:
            return _git(
                ["rev-parse", "--verify", "--quiet", "--end-of-options", f"{rev}^{{commit}}"],
                self.top,
            ).strip()
        except GitError:
            raise GitError(
                f"unknown revision {rev!r} (a commit, branch or tag of {self.top})"
            ) from None

    def _add_worktree(self, commit: str, where: Path) -> None:
        _git(["worktree", "add", "--detach", "--quiet", str(where), commit], self.top)

    def _remove_worktree(self, where: Path) -> None:
        try:
            _git(["worktree", "remove", "--force", str(where)], self.top)
        except GitError:
            shutil.rmtree(where, ignore_errors=True)
            with contextlib.suppress(GitError):
                _git(["worktree", "prune"], self.top)

    def _copy_work_tree(self, where: Path) -> None:
        """The repository's files as they are on disk, as a checkout of a commit holds them
        all (a project may reach above PATH: an agent file's openprogram.yaml): tracked
        ones and untracked ones git does not ignore; a deleted file stays deleted."""
        out = _git(["ls-files", "-z", "--cached", "--others", "--exclude-standard"], self.top)
        for name in sorted(set(out.split("\0")) - {""}):
            source = self.top / name
            if not os.path.lexists(source) or source.is_dir():  # deleted, or a submodule
                continue
            target = where / name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target, follow_symlinks=False)

    @contextlib.contextmanager
    def checkout(self, rev: str | None, folder: Path) -> Iterator[Checkout]:
        """``rev`` (None: the work tree) copied into ``folder``; removed on leaving."""
        if rev is None:
            folder.mkdir()
            self._copy_work_tree(folder)
            yield Checkout("work tree", None, folder)
            return
        commit = self.commit(rev)
        self._add_worktree(commit, folder)
        try:
            yield Checkout(f"{rev} ({commit[:7]})", commit, folder)
        finally:
            self._remove_worktree(folder)


@contextlib.contextmanager
def checkouts(
    repository: GitRepository, rev_a: str | None, rev_b: str | None
) -> Iterator[tuple[Checkout, Checkout]]:
    """Both versions, each in a temporary folder, removed (with their worktrees) after."""
    with contextlib.ExitStack() as stack:
        temporary = Path(
            stack.enter_context(tempfile.TemporaryDirectory(prefix="openprogram-diff-"))
        )
        a = stack.enter_context(repository.checkout(rev_a, temporary / "a"))
        b = stack.enter_context(repository.checkout(rev_b, temporary / "b"))
        yield a, b
