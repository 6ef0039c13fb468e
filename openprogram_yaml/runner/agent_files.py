"""What ``check`` checks in a folder that is not a project: every agent file under it."""

from __future__ import annotations

import os
import re
from pathlib import Path

from ..compile.paths import PROJECT_FILE, display_path
from ..errors import ConfigError, Diagnostic

__all__ = ["agent_files"]

#: An agent file holds ``methods:`` at its top level; tests files, prompt data and other
#: YAML (a CI workflow, a compose file) do not.
_AGENT_KEY = re.compile(rb"^methods[ \t]*:", re.MULTILINE)

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
    try:
        return _AGENT_KEY.search(file.read_bytes()) is not None
    except OSError:
        return True  # compiling it reports why it cannot be read
