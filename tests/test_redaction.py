"""``redaction``: secrets hidden in text, whole or streamed piece by piece."""

from __future__ import annotations

import os

import pytest

from openprogram_yaml.redaction import StreamRedactor, env_secrets


@pytest.mark.parametrize("size", [1, 2, 3, 5, 100])
def test_a_secret_split_across_streamed_pieces_is_still_redacted(size: int) -> None:
    secrets = {"sk-live-0123456789", "sk-live-01"}
    text = "key sk-live-0123456789 and sk-live-01x and sk-live-0 at the end ***23"
    redactor = StreamRedactor(secrets)
    pieces = [redactor.feed(text[i : i + size]) for i in range(0, len(text), size)]
    out = "".join(pieces) + redactor.flush()
    assert out == "key *** and ***x and sk-live-0 at the end ***23"
    assert StreamRedactor(()).feed("sk-live-0123456789") == "sk-live-0123456789"


def test_the_kept_walk_of_the_environment_agrees_with_a_fresh_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``env_secrets()`` reuses its last walk of ``os.environ`` while it is unchanged: as
    secret-looking variables are set, changed and removed it must read as a fresh walk of
    a copy does (differential)."""

    def agree() -> frozenset[str]:
        kept = env_secrets()
        assert kept == env_secrets(dict(os.environ))
        assert env_secrets() is kept  # unchanged: the same walk handed back
        return kept

    agree()
    monkeypatch.setenv("SHOP_API_TOKEN", "tok-first-value-1")
    assert "tok-first-value-1" in agree()
    monkeypatch.setenv("SHOP_API_TOKEN", "tok-second-value-2")
    assert "tok-first-value-1" not in agree() and "tok-second-value-2" in agree()
    monkeypatch.setenv("PLAIN_SETTING", "not-a-secret-value")
    assert "not-a-secret-value" not in agree()
    monkeypatch.delenv("SHOP_API_TOKEN")
    assert "tok-second-value-2" not in agree()
