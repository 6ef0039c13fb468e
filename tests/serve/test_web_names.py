"""Agent, method and input names on the web page that JavaScript objects hold already
(``__proto__``, ``constructor``): the page treats them as any other name. Driven in a real
browser (see test_web_page.py) against the server on 127.0.0.1 and the offline model."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from browser import launch_chromium, page_of
from playwright.sync_api import Browser, Page, expect
from test_web_page import WAIT_MS, Served, _serve

#: Names the spec allows (identifiers) that every JavaScript object answers to.
AGENT = """\
version: 1
name: __proto__
model: test
methods:
  constructor:
    inputs: {__proto__: {type: string}, toString: {type: string, format: constructor}}
    prompt: "{{ __proto__ }} and {{ toString }}"
  hello:
    prompt: Hello.
"""


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Served]:
    agent = tmp_path / "odd.yaml"
    agent.write_text(AGENT)
    with _serve(agent) as serving:
        yield serving


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    yield from launch_chromium()


@pytest.fixture
def page(browser: Browser, served: Served) -> Iterator[Page]:
    with page_of(browser, served.url + "/") as opened:
        opened.locator('[data-method="__proto__.constructor"]').click()
        expect(opened.locator("#method-title")).to_have_text("__proto__.constructor")
        yield opened


def test_an_input_named_proto_is_sent_with_the_others(page: Page) -> None:
    # Set as inputs["__proto__"], it became the object's prototype and was never sent: the
    # run failed "'__proto__' is a required property". (And format "constructor", looked
    # up among the file formats, made toString a file picker.)
    page.locator("#input-__proto__").fill("first")
    page.locator("#input-toString").fill("second")
    page.get_by_role("button", name="Run", exact=True).click()
    result = page.locator("#result")
    expect(result.locator(".badge")).to_have_text("ok", timeout=WAIT_MS)
    expect(result.locator(".output")).to_contain_text("first and second")


def test_a_method_named_constructor_that_is_gone_closes_its_form(
    page: Page, served: Served
) -> None:
    # Looked up as agents[agent].methods[method], "constructor" was found on every object:
    # the form of the method gone stayed open, and the page asked the server for it.
    served.agent.write_text(AGENT.replace("  constructor:", "  renamed:"))
    expect(page.locator('[data-method="__proto__.renamed"]')).to_be_visible(timeout=WAIT_MS)
    expect(page.locator("#method")).to_be_hidden()
    expect(page.locator("#form-error")).to_have_text("")
