"""Paths shared by tests (tests/ is on sys.path through pytest's rootdir conftest)."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = REPO / "examples"
