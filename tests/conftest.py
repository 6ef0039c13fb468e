"""Shared fixtures. Tests never reach beyond 127.0.0.1 and never sleep for real."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture(autouse=True)
def _clean_env(
    monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[None]:
    """Keep the developer's model, key and OpenTelemetry settings out of tests, and give each
    test a compile cache of its own (never the developer's)."""
    for name in list(os.environ):
        if name.startswith(("OPENPROGRAM_", "OPENAI_", "ANTHROPIC_", "OTEL_")):
            monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("OPENPROGRAM_CACHE_DIR", str(tmp_path_factory.mktemp("compile-cache")))
    yield


@pytest.fixture
def write(tmp_path: Path):  # type: ignore[no-untyped-def]
    """Write a file under tmp_path (dedented) and return its path."""
    import textwrap

    def _write(name: str, text: str) -> Path:
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
        return path

    return _write
