"""``openprogram-run lock``: the prompt versions of a repository, written down and checked.

``openprogram.lock`` maps every method ("agent.method") to the hash of what shapes its
requests (templates with their includes, response format, choices, options). CI runs
``openprogram-run lock --check``: a prompt changed without its lock (and its recordings)
being updated fails the build, naming what changed.
"""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path
from typing import Any

from .._file_writes import write_atomically
from ..compile.program import Program
from ..errors import ConfigError, Diagnostic
from ..json_types import parse_json
from ..shown_text import shown_on_terminal
from ..spec.textfile import UnreadableFile, read_text

__all__ = ["LOCK_FILE", "check_lock", "lock_data", "write_lock"]

LOCK_FILE = "openprogram.lock"
_REWRITE = "write it again with `openprogram-run lock`"


def lock_data(program: Program) -> dict[str, Any]:
    """What the lock file holds for ``program``."""
    prompts = {
        f"{agent.name}.{method.name}": method.prompt_version
        for agent in program.agents.values()
        for method in agent.methods.values()
    }
    return {"version": 1, "prompts": dict(sorted(prompts.items()))}


def write_lock(program: Program, path: Path | None = None) -> Path:
    """Write the lock file (at the project root unless ``path``); returns where.

    Raises ``OSError`` when it cannot be written; the old lock is then left as it was."""
    target = path or program.root / LOCK_FILE
    text = json.dumps(lock_data(program), indent=2, sort_keys=False) + "\n"
    write_atomically(target, text)
    return target


def check_lock(program: Program, path: Path | None = None) -> list[str]:
    """Differences between the program and its lock file, one line each (empty: in sync; a
    lock that is not there is one). A lock that cannot be read, or is not a lock, raises
    ``ConfigError`` naming it (``path:line:col`` where there is one): it is bad input, not a
    difference."""
    target = path or program.root / LOCK_FILE
    if not os.path.lexists(target):
        return [f"{target} does not exist; write it with `openprogram-run lock`"]
    old = _read_lock(target)
    new = lock_data(program)["prompts"]
    problems = []
    # The lock's names and versions are the repository's text, shown as text: a control
    # character among them would drive the terminal the check prints to.
    for name in sorted(old.keys() | new.keys()):
        shown = shown_on_terminal(name)
        if name not in new:
            problems.append(f"{shown}: in the lock, but no longer in the project")
        elif name not in old:
            problems.append(f"{shown}: new, not in the lock")
        elif old[name] != new[name]:
            problems.append(
                f"{shown}: prompt changed ({shown_on_terminal(old[name])} -> {new[name]})"
            )
    return problems


def _read_lock(target: Path) -> dict[str, str]:
    """The prompt versions the lock file ``target`` holds; ``ConfigError`` when it cannot be
    read or is not a lock. A lock is a file of the repository: a FIFO in its place must not
    hang the check, nor a link to a device be read without end (``read_text``)."""
    try:
        text = read_text(target)
    except UnreadableFile as exc:
        raise ConfigError([_rewrite(d) for d in exc.diagnostics]) from None
    shown = str(target)
    try:
        locked = parse_json(text)
    except json.JSONDecodeError as exc:
        message = f"not valid JSON: {exc.msg}"
        raise ConfigError(_rewrite(Diagnostic(shown, exc.lineno, exc.colno, message))) from None
    prompts = locked.get("prompts") if isinstance(locked, dict) else None
    if not isinstance(prompts, dict) or not all(isinstance(v, str) for v in prompts.values()):
        message = 'not a lock: it holds {"version": 1, "prompts": {"agent.method": "VERSION", …}}'
        raise ConfigError(_rewrite(Diagnostic(shown, 0, 0, message)))
    return {name: str(version) for name, version in prompts.items()}


def _rewrite(diagnostic: Diagnostic) -> Diagnostic:
    return replace(diagnostic, message=f"{diagnostic.message}; {_REWRITE}")
