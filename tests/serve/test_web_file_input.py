"""A file input on the web page: a file picker whose file is sent as a data URL, driven in
a real browser (see test_web_page.py) against the server on 127.0.0.1 and the offline model."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from browser import launch_chromium
from playwright.sync_api import Browser, Page, expect
from test_web_page import WAIT_MS, Served, _serve

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 16

AGENT = """\
version: 1
name: looker
model: test
methods:
  describe:
    inputs:
      photo: {type: string, contentMediaType: image/*, description: The picture}
      note: {type: string, default: "-"}
    prompt: "Describe {{ photo }} ({{ note }})"
"""


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Served]:
    agent = tmp_path / "looker.yaml"
    agent.write_text(AGENT)
    with _serve(agent) as serving:
        yield serving


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    yield from launch_chromium()


@pytest.fixture
def page(browser: Browser, served: Served) -> Iterator[Page]:
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    opened = context.new_page()
    errors: list[str] = []
    opened.on("pageerror", lambda exc: errors.append(str(exc)))
    opened.goto(served.url + "/")
    opened.locator('[data-method="looker.describe"]').click()
    yield opened
    context.close()
    assert errors == []


def test_a_picked_image_is_sent_as_a_data_url(page: Page, served: Served, tmp_path: Path) -> None:
    picker = page.get_by_label("photo")
    expect(picker).to_have_attribute("type", "file")
    expect(picker).to_have_attribute("accept", "image/*")
    picture = tmp_path / "cat.png"
    picture.write_bytes(PNG)
    picker.set_input_files(str(picture))
    expect(page.get_by_text("cat.png, 1 KiB")).to_be_visible(timeout=WAIT_MS)
    page.screenshot(path=tmp_path / "picked.png", full_page=True)

    # What would be sent: the image as a block of its own, where the prompt places it.
    page.get_by_role("button", name="Render").click()
    result = page.locator("#result")
    expect(result).to_contain_text('"type": "image"', timeout=WAIT_MS)
    expect(result).to_contain_text(base64.b64encode(PNG).decode())
    expect(result).to_contain_text('"text": "Describe "')

    page.get_by_role("button", name="Run", exact=True).click()
    expect(result.locator(".badge")).to_have_text("ok", timeout=WAIT_MS)
    expect(result.locator(".output")).to_have_text("test reply to: Describe  (-)")
    assert len(httpx.get(f"{served.url}/runs").json()["runs"]) == 1


def test_a_file_input_left_empty_is_asked_for(page: Page, served: Served) -> None:
    page.get_by_role("button", name="Run", exact=True).click()
    expect(page.locator("#form-error")).to_have_text("Some inputs need a value.")
    assert httpx.get(f"{served.url}/runs").json()["runs"] == []
