"""File inputs through ``serve``: a data URL or plain base64 in the body of ``POST /run``,
against a real server on 127.0.0.1 and the offline model."""

from __future__ import annotations

import asyncio
import base64
from pathlib import Path
from typing import Any

from test_server import served

from openprogram_yaml.runtime.content import MAX_MEDIA_BYTES
from openprogram_yaml.serve.app import MAX_BODY

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 16
PNG_B64 = base64.b64encode(PNG).decode()

AGENT = """\
version: 1
name: look
model: test
methods:
  describe:
    inputs:
      photo: {type: string, format: image}
    prompt: "What is in {{ photo }}?"
"""


def post(tmp_path: Path, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    agent = tmp_path / "look.yaml"
    agent.write_text(AGENT)

    async def scenario() -> tuple[int, dict[str, Any]]:
        async with served(agent) as (_, client):
            response = await client.post("/run/look/describe", json=body)
            return response.status_code, response.json()

    return asyncio.run(scenario())


def test_a_data_url_input_runs_and_is_recorded(tmp_path: Path) -> None:
    status, record = post(tmp_path, {"photo": f"data:image/png;base64,{PNG_B64}"})
    assert status == 200, record
    assert record["status"] == "ok"
    assert record["inputs"]["photo"] == f"data:image/png;base64,{PNG_B64}"
    # The offline model echoes the prompt's text; the image is a block of its own.
    assert record["output"] == "test reply to: What is in ?"


def test_plain_base64_takes_the_type_its_bytes_show(tmp_path: Path) -> None:
    status, record = post(tmp_path, {"photo": PNG_B64})
    assert status == 200, record
    assert record["status"] == "ok"


def test_a_file_of_the_wrong_type_is_a_clear_400(tmp_path: Path) -> None:
    pdf = base64.b64encode(b"%PDF-1.4").decode()
    status, reply = post(tmp_path, {"photo": f"data:application/pdf;base64,{pdf}"})
    assert status == 400
    assert "input 'photo' is application/pdf; this input takes image/*" in str(reply)


def test_the_body_limit_leaves_room_for_a_file_at_its_cap() -> None:
    assert MAX_BODY > MAX_MEDIA_BYTES * 4 // 3 + 64 * 1024
