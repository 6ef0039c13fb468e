"""Keeping secrets out of what is printed, recorded or traced: one rule for every layer."""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["REDACTED", "redact"]

REDACTED = "***"

#: Shorter values are not treated as secrets: replacing them would mangle ordinary text.
MIN_SECRET_LEN = 4


def redact(text: str, secrets: Iterable[str | None]) -> str:
    """``text`` with every secret replaced by ``***`` (longest first, so a secret that
    contains another is hidden whole)."""
    for secret in sorted((s for s in secrets if s), key=len, reverse=True):
        if len(secret) >= MIN_SECRET_LEN and secret in text:
            text = text.replace(secret, REDACTED)
    return text
