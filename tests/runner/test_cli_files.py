"""Files and images as inputs on the command line: ``-i photo=@cat.png`` (offline model)."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest

from openprogram_yaml.runner.cli import main
from openprogram_yaml.runtime import content

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 16

AGENT = """\
version: 1
name: look
model: test
methods:
  describe:
    inputs:
      photo: {type: string, contentMediaType: image/*}
    prompt: "Here is the photo: {{ photo }} What is in it?"
  read:
    inputs:
      report: {type: string, format: pdf}
      who: {type: string}
    prompt: "Summarise for {{ who }}."
"""


@pytest.fixture
def agent(tmp_path: Path) -> Path:
    path = tmp_path / "look.yaml"
    path.write_text(AGENT)
    (tmp_path / "cat.png").write_bytes(PNG)
    (tmp_path / "report.pdf").write_bytes(b"%PDF-1.4 tiny")
    (tmp_path / "notes.txt").write_text("hello")
    return path


def test_an_image_file_is_read_and_recorded_as_a_data_url(agent: Path, capsys) -> None:
    photo = agent.parent / "cat.png"
    assert main([str(agent), "describe", "-i", f"photo=@{photo}", "--json"]) == 0
    record = json.loads(capsys.readouterr().out)
    url = record["inputs"]["photo"]
    assert url.startswith("data:image/png;name=cat.png;base64,")
    assert base64.b64decode(url.partition("base64,")[2]) == PNG


def test_render_places_the_image_where_the_prompt_says(agent: Path, capsys) -> None:
    photo = agent.parent / "cat.png"
    assert main(["render", str(agent), "describe", "-i", f"photo=@{photo}", "--json"]) == 0
    blocks = json.loads(capsys.readouterr().out)["messages"][0]["content"]
    assert [b["type"] for b in blocks] == ["text", "image", "text"]
    assert blocks[0]["text"] == "Here is the photo: "
    assert blocks[1] == {
        "type": "image",
        "data": base64.b64encode(PNG).decode(),
        "mime_type": "image/png",
    }


def test_a_pdf_the_prompt_does_not_place_follows_the_text(agent: Path, capsys) -> None:
    report = agent.parent / "report.pdf"
    args = ["render", str(agent), "read", "-i", f"report=@{report}", "-i", "who=@alice"]
    assert main([*args, "--json"]) == 0
    blocks = json.loads(capsys.readouterr().out)["messages"][0]["content"]
    # "@alice" is plain text: only a file input reads a file.
    assert blocks[0] == {"type": "text", "text": "Summarise for @alice."}
    assert blocks[1]["type"] == "file"
    assert (blocks[1]["mime_type"], blocks[1]["filename"]) == ("application/pdf", "report.pdf")


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("@notes.txt", "is text/plain; this input takes image/*"),
        ("@missing.png", "cannot read file"),
        ("not base64!", "neither a data URL nor base64"),
        ("data:image/gif;base64,@@@", "neither a data URL nor base64"),
    ],
)
def test_an_unusable_file_is_a_clear_error(
    agent: Path, capsys, monkeypatch, value: str, expected: str
) -> None:
    monkeypatch.chdir(agent.parent)
    assert main([str(agent), "describe", "-i", f"photo={value}"]) == 2
    err = capsys.readouterr().err
    assert expected in err
    assert "Traceback" not in err


def test_a_file_over_the_cap_is_refused_before_it_is_read(agent: Path, capsys) -> None:
    photo = agent.parent / "huge.png"
    with photo.open("wb") as fh:  # sparse: nothing is written but its size
        fh.truncate(content.MAX_MEDIA_BYTES + 1)
    assert main([str(agent), "describe", "-i", f"photo=@{photo}"]) == 2
    assert "a file input takes at most" in capsys.readouterr().err


def test_render_shows_a_files_data_as_a_short_note(agent: Path, capsys) -> None:
    photo = agent.parent / "big.png"
    photo.write_bytes(PNG + bytes(range(256)) * 4)
    assert main(["render", str(agent), "describe", "-i", f"photo=@{photo}"]) == 0
    out = capsys.readouterr().out
    assert '"data": "<1048 bytes, sha256 ' in out
    assert base64.b64encode(photo.read_bytes()).decode()[:100] not in out


def test_a_file_placed_in_the_instructions_is_an_error(tmp_path: Path, capsys) -> None:
    agent = tmp_path / "sysfile.yaml"
    agent.write_text(
        "version: 1\nname: sysfile\nmodel: test\ninstructions: 'Look at {{ photo }}'\n"
        "methods:\n  m:\n    inputs: {photo: {type: string, format: image}}\n    prompt: Go\n"
    )
    (tmp_path / "cat.png").write_bytes(PNG)
    assert main([str(agent), "-i", f"photo=@{tmp_path / 'cat.png'}"]) == 2
    err = capsys.readouterr().err
    assert "places a file input in its instructions" in err
    assert "Traceback" not in err
