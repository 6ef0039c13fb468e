"""A headless browser for the tests that check pages: Playwright's Python API driving the
system's ``chromium`` (Playwright's own browser download cannot be fetched here).

Without chromium the browser tests are skipped, except in CI (``CI`` set), where that is a
failure: ``.ci/run`` installs it.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from playwright.sync_api import Browser, Page, sync_playwright

CHROMIUM = shutil.which("chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--headless=new",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


def launch_chromium() -> Iterator[Browser]:
    """A fixture's body: the browser, closed after (skips or fails without chromium)."""
    if CHROMIUM is None:
        if os.environ.get("CI"):
            pytest.fail("chromium is not installed; .ci/run installs it with apt")
        pytest.skip("chromium is not installed (apt-get install chromium); CI fails instead")
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield launched
        launched.close()


@contextmanager
def page_of(browser: Browser, url: str) -> Iterator[Page]:
    """``url`` opened in a fresh context of ``browser`` (1280x900); closed after, and the
    test fails when a script of the page raised."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    opened = context.new_page()
    errors: list[str] = []
    opened.on("pageerror", lambda exc: errors.append(str(exc)))
    opened.goto(url)
    yield opened
    context.close()
    assert errors == []
