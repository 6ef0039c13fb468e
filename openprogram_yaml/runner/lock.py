"""``openprogram-run lock``: the prompt versions of a repository, written down and checked.

``openprogram.lock`` maps every method ("agent.method") to the hash of what shapes its
requests (templates with their includes, response format, choices, options). CI runs
``openprogram-run lock --check``: a prompt changed without its lock (and its recordings)
being updated fails the build, naming what changed.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from .._file_reads import FileRefused, read_regular_file
from .._file_writes import write_atomically
from ..compile.program import Program
from ..json_types import parse_json
from ..spec.textfile import MAX_TEXT_BYTES

__all__ = ["LOCK_FILE", "check_lock", "lock_data", "write_lock"]

LOCK_FILE = "openprogram.lock"


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
    """Differences between the program and its lock file, one line each (empty: in sync)."""
    target = path or program.root / LOCK_FILE
    try:
        # A lock is a file of the repository: a FIFO in its place must not hang the
        # check, nor a link to a device be read without end.
        locked: Any = parse_json(read_regular_file(target, limit=MAX_TEXT_BYTES))
        old: dict[str, str] = dict(locked.get("prompts", {}))
    except FileRefused as exc:
        if not os.path.lexists(target):
            return [f"{target} does not exist; write it with `openprogram-run lock`"]
        reason = exc.reason
    except (ValueError, AttributeError, TypeError) as exc:  # not {"prompts": {…}}
        reason = str(exc)
    else:
        reason = ""
    if reason:
        return [f"{target} cannot be read ({reason}); write it again with `openprogram-run lock`"]
    new = lock_data(program)["prompts"]
    problems = []
    for name in sorted(old.keys() | new.keys()):
        if name not in new:
            problems.append(f"{name}: in the lock, but no longer in the project")
        elif name not in old:
            problems.append(f"{name}: new, not in the lock")
        elif old[name] != new[name]:
            problems.append(f"{name}: prompt changed ({old[name]} -> {new[name]})")
    return problems
