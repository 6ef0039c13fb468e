"""Files named by a content block's ``path`` (or an ``@file`` input): regular files only, capped.

A FIFO or a device named as an image must be refused, not waited on forever; a file over
``MAX_MEDIA_BYTES`` is refused before it is read whole.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from support import without_blocking_on

from openprogram_yaml import Runtime
from openprogram_yaml.providers.test import ScriptedRuntime
from openprogram_yaml.runtime import content
from openprogram_yaml.runtime.content import MediaError, read_block_file, read_media_file

needs_fifo = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")


def _exec_block(block: dict[str, object]) -> object:
    return Runtime(runtimes=ScriptedRuntime(["ok"])).exec([block])


@needs_fifo
def test_a_fifo_as_an_image_block_is_refused_and_never_blocks(tmp_path: Path) -> None:
    fifo = tmp_path / "shot.png"
    os.mkfifo(fifo)  # no writer: opening it for reading would wait forever
    raised = without_blocking_on(fifo, lambda: _exec_block({"type": "image", "path": str(fifo)}))
    assert isinstance(raised, MediaError)
    assert "not a regular file (a FIFO (named pipe))" in str(raised)


@needs_fifo
def test_a_fifo_as_a_file_input_is_refused_and_never_blocks(tmp_path: Path) -> None:
    fifo = tmp_path / "cat.png"
    os.mkfifo(fifo)
    raised = without_blocking_on(fifo, lambda: read_media_file(fifo, ["image/*"]))
    assert isinstance(raised, MediaError)
    assert "not a regular file" in str(raised)


def test_a_folder_as_a_file_block_is_refused(tmp_path: Path) -> None:
    with pytest.raises(MediaError, match=r"not a regular file \(a folder\)"):
        _exec_block({"type": "file", "path": str(tmp_path)})


def test_a_block_file_over_the_cap_is_refused_before_it_is_read(tmp_path: Path) -> None:
    huge = tmp_path / "huge.png"
    with huge.open("wb") as fh:  # sparse: nothing is written but its size
        fh.truncate(content.MAX_MEDIA_BYTES + 1)
    with pytest.raises(MediaError, match="a file input takes at most 20 MiB"):
        _exec_block({"type": "image", "path": str(huge)})


def test_a_missing_block_file_names_the_file(tmp_path: Path) -> None:
    with pytest.raises(MediaError, match=r"cannot read file '.*gone\.png': file not found"):
        _exec_block({"type": "image", "path": str(tmp_path / "gone.png")})


def test_a_file_at_the_cap_is_read_whole(tmp_path: Path) -> None:
    exact = tmp_path / "exact.bin"
    with exact.open("wb") as fh:
        fh.truncate(content.MAX_MEDIA_BYTES)
    assert len(read_block_file(exact)) == content.MAX_MEDIA_BYTES


_NAMES_A_TERMINAL = """
import os
from openprogram_yaml.runtime.content import MediaError, read_block_file
os.setsid()  # a session leader without a controlling terminal, as a daemon is
controller, follower = os.openpty()
try:
    read_block_file(os.ttyname(follower))
except MediaError as exc:
    print(exc)
try:
    os.close(os.open("/dev/tty", os.O_RDWR))
    print("a controlling terminal")
except OSError:
    print("no controlling terminal")
"""


@pytest.mark.skipif(not hasattr(os, "setsid") or not hasattr(os, "openpty"), reason="no ptys")
def test_a_terminal_named_as_a_file_is_refused_and_never_becomes_the_controlling_one() -> None:
    shown = subprocess.run(
        [sys.executable, "-c", _NAMES_A_TERMINAL],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout.splitlines()
    assert "not a regular file (a device)" in shown[0]
    assert shown[1] == "no controlling terminal"
