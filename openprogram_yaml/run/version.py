"""Which version of the prompts a run used: the Program's content hash and, in a git
checkout, the commit and whether the Program's files differ from it (``run.git_stamp``
asks git for those, when a record is kept or shown)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["VersionStamp"]


@dataclass(frozen=True, slots=True)
class VersionStamp:
    """Which version of the prompts a run used.

    ``commit`` and ``dirty`` are None outside a git checkout. ``dirty`` is True when any of
    the Program's files differs from the commit (modified, untracked, ignored, or outside the
    checkout), i.e. when the commit alone cannot reproduce the run.
    """

    hash: str
    commit: str | None = None
    dirty: bool | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"hash": self.hash}
        if self.commit is not None:
            out["commit"] = self.commit
            out["dirty"] = self.dirty
        return out
