"""Skill discovery for the system prompt: an ``<available_skills>`` block.

A skill is a folder holding ``SKILL.md`` whose front matter (between ``---`` lines) gives
``name:`` and ``description:``. Only those two simple ``key: value`` lines are read, so no
YAML parser is needed here. A ``SKILL.md`` that is not a regular UTF-8 file of at most
``MAX_SKILL_BYTES`` (a FIFO, a device, a huge file) is left out, never waited on.
"""

from __future__ import annotations

from collections.abc import Sequence
from html import escape
from pathlib import Path

from openprogram_yaml._file_reads import FileRefused, read_regular_file

__all__ = ["MAX_SKILL_BYTES", "default_skill_dirs", "skills_block"]

#: The largest ``SKILL.md`` read: its front matter is a name and a line of description.
MAX_SKILL_BYTES = 1024 * 1024


def default_skill_dirs() -> list[Path]:
    """The user's and the current repository's skill folders."""
    return [Path.home() / ".openprogram" / "skills", Path.cwd() / ".openprogram" / "skills"]


def _front_matter(text: str) -> dict[str, str]:
    lines = text.splitlines()
    if not lines or lines[0].strip() != "---":
        return {}
    fields: dict[str, str] = {}
    for line in lines[1:]:
        if line.strip() == "---":
            break
        key, sep, value = line.partition(":")
        if sep and key.strip() in ("name", "description"):
            fields[key.strip()] = value.strip().strip("\"'")
    return fields


def skills_block(dirs: Sequence[str | Path]) -> str:
    """The block listing every skill found under ``dirs``; empty when there are none."""
    entries: list[str] = []
    for base in dirs:
        root = Path(base).expanduser()
        if not root.is_dir():
            continue
        for skill_file in sorted(root.glob("*/SKILL.md")):
            try:
                text = read_regular_file(skill_file, limit=MAX_SKILL_BYTES).decode("utf-8")
            except (FileRefused, UnicodeDecodeError):
                continue
            fields = _front_matter(text)
            name = fields.get("name") or skill_file.parent.name
            entries.append(
                f"  <skill><name>{escape(name, quote=False)}</name>"
                f"<description>{escape(fields.get('description', ''), quote=False)}</description>"
                f"<location>{escape(str(skill_file), quote=False)}</location></skill>"
            )
    if not entries:
        return ""
    return "<available_skills>\n" + "\n".join(entries) + "\n</available_skills>"
