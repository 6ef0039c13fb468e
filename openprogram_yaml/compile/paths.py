"""Paths named in config: relative to the file that names them, never outside the project."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["PROJECT_FILE", "display_path", "find_project_root", "resolve_inside"]

#: The file that marks the root of a prompt repository.
PROJECT_FILE = "openprogram.yaml"


def find_project_root(start: Path) -> Path:
    """The project an agent file belongs to.

    The nearest folder holding ``openprogram.yaml``; else the root of the git checkout it is
    in; else the file's own folder.
    """
    start = start.resolve()
    folder = start if start.is_dir() else start.parent
    for candidate in (folder, *folder.parents):
        if (candidate / PROJECT_FILE).is_file():
            return candidate
    for candidate in (folder, *folder.parents):
        if (candidate / ".git").exists():
            return candidate
    return folder


def resolve_inside(base_file: Path, relative: str, root: Path) -> tuple[Path | None, str | None]:
    """``(path, None)`` for a path inside ``root``, else ``(None, problem)``.

    Symlinks are resolved before the check, so a link cannot smuggle a path out.
    """
    if relative.startswith(("http://", "https://", "file://")) or "://" in relative:
        return None, f"'{relative}' is a URL; only files inside the project can be referenced"
    if os.path.isabs(relative):
        return None, f"'{relative}' is absolute; write it relative to {base_file.name}"
    resolved = Path(os.path.realpath(os.path.join(base_file.parent, relative)))
    if not resolved.is_relative_to(root):
        return None, f"'{relative}' leaves the project root {root}; keep files inside it"
    return resolved, None


def display_path(path: Path) -> Path:
    """A path as users see it: relative to the working directory when it is inside it."""
    try:
        return path.relative_to(Path.cwd())
    except ValueError:
        return path
