"""What ``check`` checks in a folder that is not a project: every agent file under it."""

from __future__ import annotations

import os
import re
from pathlib import Path

from .._file_reads import open_regular
from ..compile.paths import PROJECT_FILE, display_path
from ..errors import ConfigError, Diagnostic
from ..spec.textfile import MAX_TEXT_BYTES

__all__ = ["agent_files"]

#: An agent file holds ``methods:`` at its top level; tests files, prompt data and other
#: YAML (a CI workflow, a compose file) do not.
_AGENT_KEY = re.compile(rb"methods[ \t]*:")

#: How much of a line is read at a time while looking for ``methods:``.
_CHUNK = 64 * 1024

#: Folders a linter walks past: hidden ones (.git, .venv) and other tools' caches.
_SKIPPED = frozenset({"node_modules", "__pycache__", "venv"})


def agent_files(path: Path) -> list[Path]:
    """What to compile for ``path``: an agent file or a project as it is; for any other
    folder, each agent file under it, in name order. A folder with none is a
    ``ConfigError`` saying what an agent file is."""
    if not path.is_dir() or (path / PROJECT_FILE).is_file():
        return [path]
    found = []
    for folder, subfolders, names in os.walk(path):
        subfolders[:] = sorted(d for d in subfolders if not d.startswith(".") and d not in _SKIPPED)
        for name in sorted(names):
            if name.endswith((".yaml", ".yml")) and name != PROJECT_FILE:
                file = Path(folder, name)
                if _is_agent_file(file):
                    found.append(file)
    if not found:
        raise ConfigError(
            Diagnostic(
                str(display_path(path.resolve())),
                0,
                0,
                f"no agent files here: an agent file is a YAML file with 'methods:', and a "
                f"project folder holds {PROJECT_FILE}",
            )
        )
    return found


def _is_agent_file(file: Path) -> bool:
    """Whether ``file`` has ``methods:`` at the start of a line, read a line at a time (a
    folder may hold large YAML data beside its agents) and only as far as a file is read
    at all (``MAX_TEXT_BYTES``: compiling a larger one reports it)."""
    try:
        # Opened without blocking and looked at first: a FIFO named like an agent file
        # hung `check` of its folder, waiting for a writer. Nor is a device (a link to
        # /dev/zero) an agent file.
        descriptor = open_regular(file)
        if descriptor is None:
            return False
        with os.fdopen(descriptor, "rb") as stream:
            at_line_start, read = True, 0
            while read <= MAX_TEXT_BYTES:
                line = stream.readline(_CHUNK)
                if not line:
                    return False
                if at_line_start and _AGENT_KEY.match(line):
                    return True
                at_line_start = line.endswith(b"\n")
                read += len(line)
            return False
    except OSError:
        return True  # compiling it reports why it cannot be read
