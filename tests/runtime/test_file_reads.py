"""``_file_reads.read_regular_file``: what it reads is the file, whatever its size, and one
that holds more than its size says (``/proc``) is read whole or refused over the limit."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from openprogram_yaml._file_reads import FileTooLarge, read_regular_file


@pytest.mark.parametrize("size", [0, 1, 4095, 4096, 4097, 65_537, 1 << 20])
def test_a_file_reads_as_its_bytes(tmp_path: Path, size: int) -> None:
    data = random.Random(size).randbytes(size)
    (tmp_path / "f").write_bytes(data)
    assert read_regular_file(tmp_path / "f", limit=1 << 20) == data
    if size:
        with pytest.raises(FileTooLarge):
            read_regular_file(tmp_path / "f", limit=size - 1)


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="no /proc here")
def test_a_file_holding_more_than_its_size_says_is_read_whole_or_refused() -> None:
    status = Path("/proc/self/status")
    assert status.stat().st_size == 0
    text = read_regular_file(status, limit=1 << 20)
    assert text.startswith(b"Name:") and text.endswith(b"\n")
    with pytest.raises(FileTooLarge):
        read_regular_file(status, limit=10)
