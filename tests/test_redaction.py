"""``redaction``: secrets hidden in text, whole or streamed piece by piece."""

from __future__ import annotations

import pytest

from openprogram_yaml.redaction import StreamRedactor


@pytest.mark.parametrize("size", [1, 2, 3, 5, 100])
def test_a_secret_split_across_streamed_pieces_is_still_redacted(size: int) -> None:
    secrets = {"sk-live-0123456789", "sk-live-01"}
    text = "key sk-live-0123456789 and sk-live-01x and sk-live-0 at the end ***23"
    redactor = StreamRedactor(secrets)
    pieces = [redactor.feed(text[i : i + size]) for i in range(0, len(text), size)]
    out = "".join(pieces) + redactor.flush()
    assert out == "key *** and ***x and sk-live-0 at the end ***23"
    assert StreamRedactor(()).feed("sk-live-0123456789") == "sk-live-0123456789"
