"""Running ``git`` on a repository that is untrusted input (a prompt repository someone
cloned): the one way the package calls it (``run.version`` stamps, ``runner.checkouts``).

Nothing the repository configures may run: its hooks are off (``core.hooksPath`` points at
the null device) and so is ``core.fsmonitor`` (which ``git status`` would run); no pager, no
prompt for credentials, no optional locks taken on someone's working tree.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

__all__ = ["run_git"]

_ENV = {"GIT_OPTIONAL_LOCKS": "0", "GIT_PAGER": "cat", "GIT_TERMINAL_PROMPT": "0"}
_SAFE = ("-c", "core.fsmonitor=false", "-c", f"core.hooksPath={os.devnull}")


def run_git(args: list[str], cwd: Path, *, timeout_s: float) -> subprocess.CompletedProcess[str]:
    """``git ARGS`` in ``cwd``, its output captured as text. Raises ``OSError`` (no git, no
    such folder) and ``subprocess.SubprocessError`` (the timeout); a failed command is a
    non-zero ``returncode``. Bytes that are not UTF-8 (a file's name as the file system
    holds it) are read as ``os.fsdecode`` reads them, so such a name still opens the file."""
    return subprocess.run(
        ["git", *_SAFE, *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        errors="surrogateescape",
        timeout=timeout_s,
        env={**os.environ, **_ENV},
    )
