"""A file input's value (a data URL or base64, ``media_value``): wrapped base64 is read in
one pass, whatever white space wraps it, and never costs many times its own size."""

from __future__ import annotations

import base64
import random
import sys
import time
import tracemalloc
from urllib.parse import quote

import pytest

from openprogram_yaml.runtime.content import MediaError, media_value

PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 3
SPACES = [chr(c) for c in range(sys.maxunicode + 1) if chr(c).isspace()]


def _split_joined(value: str, accepted: list[str]) -> str:
    """media_value as it read wrapped base64 before: ``"".join(value.split())``."""
    prefix, sep, data = value.partition(";base64,")
    return media_value(prefix + sep + "".join(data.split()), accepted)


def test_wrapped_base64_reads_as_split_and_joined_does() -> None:
    # Differential: every white space character str.split drops, in seeded places.
    encoded = base64.b64encode(PNG).decode()
    rng = random.Random(7)
    for _ in range(200):
        pieces = list(encoded)
        for _ in range(rng.randrange(1, 40)):
            at = rng.randrange(len(pieces) + 1)
            pieces.insert(at, "".join(rng.choices(SPACES, k=rng.randrange(1, 4))))
        value = "data:image/png;base64," + "".join(pieces)
        assert media_value(value, ["image/*"]) == _split_joined(value, ["image/*"])
        assert media_value(value, ["image/*"]).endswith(encoded)


def test_text_that_is_not_base64_is_still_refused() -> None:
    for value in ["data:image/png;base64,AA\u200bAA", "data:image/png;base64,AAA", "@cat.png"]:
        with pytest.raises(MediaError):
            media_value(value, ["image/*"])


def test_base64_wrapped_in_many_pieces_costs_no_more_than_a_few_times_its_size() -> None:
    # "AA AA AA …": the old "".join(split()) held a str object per piece (about 20 times
    # the text: 680 MB for a body at serve's 28 MiB cap).
    value = "data:image/png;base64," + base64.b64encode(PNG).decode() + " AA" * 200_000
    tracemalloc.start()
    try:
        with pytest.raises(MediaError):  # not base64 once joined: the length is off
            media_value(value, ["image/*"])
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 4 * len(value)


@pytest.mark.parametrize("head", ["data:a/b" + ";" * (27 << 20), "data:a/" + "b" * (27 << 20)])
def test_a_data_url_whose_head_never_ends_is_refused_in_little_time(head: str) -> None:
    # A body at serve's cap that is all data URL head: matched whole, 2.6 s to 6 s of CPU.
    started = time.process_time()
    with pytest.raises(MediaError, match="without base64 data"):
        media_value(head, ["image/*"])
    assert time.process_time() - started < 1.0


def test_a_data_url_naming_a_long_file_is_read() -> None:
    name = "é" * 127 + ".png"  # 255 bytes of UTF-8: a file name at its longest
    value = f"data:image/png;name={quote(name, safe='')};base64," + base64.b64encode(PNG).decode()
    assert media_value(value, ["image/*"]) == value
