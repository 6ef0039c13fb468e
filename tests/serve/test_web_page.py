"""The web page served at ``/``, driven in a real browser: Playwright's Python API and the
system's ``chromium`` (Playwright's own browser download is not used), against the server on
127.0.0.1 with the offline ``test`` model: in a thread with its own event loop, and once as
``openprogram-run serve`` in a subprocess.

Each test saves screenshots under its temporary folder. Without chromium the browser tests
are skipped, except in CI (``CI`` set), where that is a failure: ``.ci/run`` installs it.
The page's JSON APIs (``serve/web.py``) are also checked over plain HTTP.
"""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
import threading
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from browser import launch_chromium
from playwright.sync_api import Browser, Page, expect

from openprogram_yaml.run.questions import PendingQuestions
from openprogram_yaml.run.reload import ProgramHolder
from openprogram_yaml.run.service import RunService
from openprogram_yaml.runtimes.protocol import Message, RuntimeDelta, RuntimeResult, Usage
from openprogram_yaml.runtimes.registry import register_runtime, unregister_runtime
from openprogram_yaml.serve.app import Server, ServeState

#: How long the page may take to show what a test waits for (a run, a reload), in ms.
WAIT_MS = 20_000

TOOLS = '''
def remove(path: str) -> str:
    """Remove a file."""
    return f"removed {path}"
'''

AGENT = """\
version: 1
name: greeter
description: Greets people.
model: test
instructions: You greet people. The key is ${env:WEB_PAGE_TEST_KEY}.
ask_user: true
runtimes:
  - {match: "slow:*", runtime: web-page-slow}
tools:
  remove:
    python: greeter_tools:remove
    confirm: "Remove {{ path }}?"
methods:
  greet:
    description: Say hello.
    inputs:
      name: {type: string, description: Who to greet}
      style: {type: string, enum: [plain, loud], default: plain}
      times: {type: integer, default: 1, minimum: 1}
      tags: {type: array, items: {type: string}, default: []}
    prompt: "Say hello to {{ name }} ({{ style }}, {{ times }}x, {{ tags | length }} tags)"
    toolset: none
  tidy:
    description: Tidy up, asking first.
    prompt: Tidy up.
  route:
    prompt: Where next?
    toolset: none
    choices:
      finish: {description: Nothing more to do, value: finished}
  slow:
    model: slow:words
    prompt: Greet slowly.
    toolset: none
  label:
    inputs: {text: {type: string}}
    prompt: "Label {{ text }}"
    toolset: none
    response_schema:
      type: object
      properties: {label: {type: string, enum: [spam, ham]}}
      required: [label]
"""

SECRET = "sk-web-page-secret-0123456789"
TOKEN = "web-page-token-9876543210"


class SlowStream:
    """A runtime that streams ``Hello, `` at once and ``world`` only once the test says so."""

    runtime_id = "web-page-slow"

    def __init__(self) -> None:
        self.go_on = threading.Event()

    def supports(self, model_ref: str | None = None) -> bool:
        return bool(model_ref and model_ref.startswith("slow:"))

    async def run_turn(
        self, prompt: str | Sequence[Message], *, model_ref: str | None = None, **kwargs: Any
    ) -> RuntimeResult:
        on_delta = kwargs["on_delta"]
        on_delta(RuntimeDelta("text", "Hello, "))
        await asyncio.to_thread(self.go_on.wait, 30)  # a wait for the test, not a sleep
        on_delta(RuntimeDelta("text", "world"))
        return RuntimeResult(content="Hello, world", usage=Usage(5, 2))

    async def stream_turn(
        self, prompt: str | Sequence[Message], **kwargs: Any
    ) -> AsyncIterator[RuntimeDelta]:
        pieces: list[RuntimeDelta] = []
        await self.run_turn(prompt, **{**kwargs, "on_delta": pieces.append})
        for piece in pieces:
            yield piece


@pytest.fixture
def slow() -> Iterator[SlowStream]:
    runtime = SlowStream()
    register_runtime(runtime.runtime_id, runtime)
    yield runtime
    runtime.go_on.set()
    unregister_runtime(runtime.runtime_id)


@dataclass
class Served:
    """A server on 127.0.0.1: its address, the agent file it serves, and what it printed
    (the subprocess only)."""

    url: str
    agent: Path
    lines: list[str] = field(default_factory=list)


@contextmanager
def _serve(agent: Path) -> Iterator[Served]:
    """The server in a thread with its own event loop, reloading the agent as it changes."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    stop = asyncio.Event()

    async def start() -> tuple[Server, asyncio.Task[None], int]:
        holder = ProgramHolder(agent)
        holder.load()
        server = Server(ServeState(holder, RunService(holder.snapshot, asker=PendingQuestions())))
        watcher = asyncio.create_task(holder.watch(stop))
        await holder.watching.wait()
        return server, watcher, await server.start(0)

    async def close(server: Server, watcher: asyncio.Task[None]) -> None:
        stop.set()
        await server.close(grace_s=0)
        await watcher

    server, watcher, port = asyncio.run_coroutine_threadsafe(start(), loop).result(30)
    try:
        yield Served(f"http://127.0.0.1:{port}", agent)
    finally:
        asyncio.run_coroutine_threadsafe(close(server, watcher), loop).result(30)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(30)
        loop.close()


@contextmanager
def _serve_cli(agent: Path, *extra: str, env: dict[str, str] | None = None) -> Iterator[Served]:
    """``openprogram-run serve`` in a subprocess."""
    process = subprocess.Popen(
        [sys.executable, "-m", "openprogram_yaml", "serve", str(agent), "--port", "0", *extra],
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})},
        cwd=agent.parent,
    )
    stderr = process.stderr
    assert stderr is not None
    first = stderr.readline()
    match = re.search(r"http://127\.0\.0\.1:(\d+)/", first)
    if match is None:
        process.kill()
        raise AssertionError(f"serve did not start: {first}{stderr.read()}")
    served = Served(f"http://127.0.0.1:{match.group(1)}", agent, [first])
    # Drained for the whole run, so the server never blocks on a full pipe.
    drain = threading.Thread(
        target=lambda: served.lines.extend(iter(stderr.readline, "")), daemon=True
    )
    drain.start()
    try:
        yield served
    finally:
        process.terminate()
        process.wait(timeout=30)
        drain.join(timeout=5)


@pytest.fixture
def agent(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("WEB_PAGE_TEST_KEY", SECRET)
    (tmp_path / "greeter_tools.py").write_text(TOOLS)
    path = tmp_path / "greeter.yaml"
    path.write_text(AGENT)
    return path


@pytest.fixture
def served(agent: Path) -> Iterator[Served]:
    with _serve(agent) as serving:
        yield serving


# --- the page's JSON APIs, over plain HTTP -----------------------------------------------


def test_the_method_api_gives_the_full_inputs_schema(served: Served) -> None:
    reply = httpx.get(f"{served.url}/api/methods/greeter/greet")
    assert reply.status_code == 200
    info = reply.json()
    schema = info["input_schema"]
    assert schema["required"] == ["name"]
    assert schema["properties"]["style"] == {
        "type": "string",
        "enum": ["plain", "loud"],
        "default": "plain",
    }
    assert info["model"] == "test"
    missing = httpx.get(f"{served.url}/api/methods/greeter/nope")
    assert missing.status_code == 404
    assert missing.json() == {"error": "no method 'nope' of 'greeter'; GET /agents lists them"}


def test_render_api_shows_the_request_with_secrets_hidden_and_runs_nothing(
    served: Served,
) -> None:
    reply = httpx.post(f"{served.url}/api/render/greeter/greet", json={"name": "Ada"})
    assert reply.status_code == 200, reply.text
    request = reply.json()["request"]
    assert request["system"] == "You greet people. The key is ***."
    assert request["messages"] == [
        {"role": "user", "content": "Say hello to Ada (plain, 1x, 0 tags)"}
    ]
    assert SECRET not in reply.text
    assert httpx.get(f"{served.url}/runs").json()["runs"] == []  # nothing ran

    bad = httpx.post(f"{served.url}/api/render/greeter/greet", json={"times": 0})
    assert bad.status_code == 400
    assert bad.json()["error"].startswith("nothing to render: inputs of method 'greet'")
    assert any("'name' is a required property" in p for p in bad.json()["problems"])
    form = httpx.post(f"{served.url}/api/render/greeter/greet", data={"name": "Ada"})
    assert form.status_code == 415


def test_the_page_and_its_files_are_served_with_a_strict_policy(served: Served) -> None:
    page = httpx.get(f"{served.url}/")
    assert page.status_code == 200
    assert page.headers["content-type"].startswith("text/html")
    assert "script-src 'self'" in page.headers["content-security-policy"]
    script = httpx.get(f"{served.url}/static/app.js")
    assert script.headers["content-type"].startswith("text/javascript")
    for name in ("..%2Fweb.py", "web.py", "nothing.js"):
        assert httpx.get(f"{served.url}/static/{name}").status_code == 404


def test_the_sessions_api_lists_sessions_and_shows_one_with_secrets_hidden(
    served: Served,
) -> None:
    assert httpx.get(f"{served.url}/api/sessions").json() == {"sessions": []}
    for name in ("Ada", SECRET):
        ran = httpx.post(f"{served.url}/run/greeter/greet?session=s1", json={"name": name})
        assert ran.status_code == 200, ran.text
    httpx.post(f"{served.url}/run/greeter/label?session=s2", json={"text": "hi"})

    listed = httpx.get(f"{served.url}/api/sessions").json()["sessions"]
    assert {s["name"]: (s["method"], s["messages"]) for s in listed} == {
        "s1": ("greet", 4),
        "s2": ("label", 2),
    }
    assert set(listed[0]) == {"name", "agent", "method", "messages", "updated_at"}
    only = httpx.get(f"{served.url}/api/sessions", params={"agent": "greeter", "method": "label"})
    assert [s["name"] for s in only.json()["sessions"]] == ["s2"]

    reply = httpx.get(f"{served.url}/api/sessions/s1")
    assert reply.status_code == 200
    body = reply.json()
    assert body["session"]["messages"] == 4
    assert [m["role"] for m in body["messages"]] == ["user", "assistant"] * 2
    assert "Ada" in body["messages"][0]["content"]
    assert "***" in body["messages"][2]["content"]
    assert SECRET not in reply.text

    missing = httpx.get(f"{served.url}/api/sessions/nope")
    assert missing.status_code == 404
    assert missing.json() == {"error": "no session 'nope'; GET /api/sessions lists them"}
    assert httpx.get(f"{served.url}/api/sessions/a%20b").status_code == 400


# --- the page, in a browser -------------------------------------------------------------


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
    yield opened
    context.close()
    assert errors == []


def _open_method(page: Page, name: str) -> None:
    page.locator(f'[data-method="{name}"]').click()


def test_a_form_from_the_inputs_schema_runs_the_method_and_streams_the_answer(
    page: Page, served: Served, tmp_path: Path
) -> None:
    _open_method(page, "greeter.greet")
    # One control per input, of the input's type, with its default and help text.
    name = page.get_by_label("name")
    expect(name).to_have_attribute("required", "")
    expect(page.get_by_text("Who to greet")).to_be_visible()
    expect(page.get_by_label("style")).to_have_value("0")  # the default, "plain"
    expect(page.get_by_label("times")).to_have_value("1")
    expect(page.get_by_label("tags")).to_have_value("[]")
    page.screenshot(path=tmp_path / "form.png", full_page=True)

    name.fill("Ada")
    page.get_by_label("style").select_option(label="loud")
    page.get_by_label("times").fill("3")
    page.get_by_label("tags").fill('["a", "b"]')
    page.get_by_role("button", name="Run", exact=True).click()

    result = page.locator("#result")
    expect(result.locator(".badge")).to_have_text("ok", timeout=WAIT_MS)
    expected = "test reply to: Say hello to Ada (loud, 3x, 2 tags)"
    expect(result.locator(".output")).to_have_text(expected)
    expect(result.get_by_text("method greeter.greet")).to_be_visible()
    expect(page.locator("#runs .run-link")).to_have_count(1)
    page.screenshot(path=tmp_path / "run.png", full_page=True)


def test_the_answer_is_shown_as_it_streams(page: Page, slow: SlowStream) -> None:
    _open_method(page, "greeter.slow")
    page.get_by_role("button", name="Run", exact=True).click()
    result = page.locator("#result")
    expect(result.locator("pre.answer")).to_have_text("Hello, ", timeout=WAIT_MS)
    expect(result.locator(".badge")).to_have_text("running")
    slow.go_on.set()
    expect(result.locator(".badge")).to_have_text("ok", timeout=WAIT_MS)
    expect(result.locator(".output")).to_have_text("Hello, world")


def test_a_structured_output_is_shown_as_json_after_the_streamed_reply(page: Page) -> None:
    _open_method(page, "greeter.label")
    page.get_by_label("text").fill("Buy now")
    page.get_by_role("button", name="Run", exact=True).click()
    result = page.locator("#result")
    expect(result.locator(".badge")).to_have_text("ok", timeout=WAIT_MS)
    expect(result.locator(".output")).to_have_text('{\n  "label": "spam"\n}')
    expect(result.locator("details.streamed pre.answer")).to_have_count(1)


def test_a_required_input_left_empty_is_asked_for_before_anything_is_sent(
    page: Page, served: Served
) -> None:
    _open_method(page, "greeter.greet")
    page.get_by_role("button", name="Run", exact=True).click()
    expect(page.locator("#form-error")).to_have_text("Some inputs need a value.")
    assert httpx.get(f"{served.url}/runs").json()["runs"] == []


def test_render_shows_the_messages_and_no_model_is_called(
    page: Page, served: Served, tmp_path: Path
) -> None:
    _open_method(page, "greeter.greet")
    page.get_by_label("name").fill("Grace")
    page.get_by_role("button", name="Render").click()
    result = page.locator("#result")
    expect(result.locator(".message.system pre")).to_have_text("You greet people. The key is ***.")
    expect(result.locator(".message.user pre")).to_have_text(
        "Say hello to Grace (plain, 1x, 0 tags)"
    )
    expect(result.get_by_text("no model was called")).to_be_visible()
    page.screenshot(path=tmp_path / "render.png", full_page=True)
    assert httpx.get(f"{served.url}/runs").json()["runs"] == []


def test_the_trace_of_a_run_shows_its_spans(page: Page, served: Served, tmp_path: Path) -> None:
    _open_method(page, "greeter.greet")
    page.get_by_label("name").fill("Ada")
    page.get_by_role("button", name="Run", exact=True).click()
    expect(page.locator("#result .badge")).to_have_text("ok", timeout=WAIT_MS)
    page.locator("#runs .run-link").first.click()

    trace = page.locator("#trace")
    expect(trace.locator("h2")).to_contain_text("Trace of greeter.greet")
    kinds = trace.locator(".tree .kind")
    expect(kinds).to_have_text(["run", "method", "exec"])
    expect(trace.locator(".span.exec summary").first).to_contain_text(re.compile(r"\d+→\d+ tok"))
    expect(trace.locator(".span.run summary").first).to_contain_text(re.compile(r"\d+ ms"))
    page.screenshot(path=tmp_path / "trace.png", full_page=True)


def test_a_pick_is_shown_in_the_run_and_in_its_trace(page: Page) -> None:
    _open_method(page, "greeter.route")
    page.get_by_role("button", name="Run", exact=True).click()
    result = page.locator("#result")
    expect(result.locator(".badge")).to_have_text("ok", timeout=WAIT_MS)
    expect(result.locator(".event.pick")).to_have_text("picked finish")
    expect(result.locator(".output")).to_have_text("finished")
    result.get_by_role("button", name="Trace").click()
    expect(page.locator("#trace .span.exec .event.pick")).to_have_text("picked finish")


def test_two_runs_in_one_session_from_the_page_are_one_conversation(
    page: Page, served: Served, tmp_path: Path
) -> None:
    _open_method(page, "greeter.greet")
    page.get_by_label("Session").fill("talk")
    for name in ("Ada", "<b>Grace</b>"):
        page.get_by_label("name").fill(name)
        page.get_by_role("button", name="Run", exact=True).click()
        expect(page.locator("#result .badge")).to_have_text("ok", timeout=WAIT_MS)
        expect(page.locator("#result .output")).to_contain_text(name)
    # The session is listed, and offered beside Run for this method.
    link = page.locator('#sessions [data-session="talk"]')
    expect(link).to_contain_text("greeter.greet · 4 messages", timeout=WAIT_MS)
    expect(page.locator("#session-names option")).to_have_attribute("value", "talk")

    link.click()
    view = page.locator("#session-view")
    expect(view.locator("h2")).to_have_text("Session talk")
    expect(view.locator(".message .role")).to_have_text(["user", "assistant"] * 2)
    texts = view.locator(".message pre")
    expect(texts.nth(0)).to_contain_text("Ada")
    expect(texts.nth(2)).to_contain_text("<b>Grace</b>")  # shown as text, not markup
    expect(texts.nth(3)).to_contain_text("test reply to:")
    assert view.locator("b").count() == 0
    page.screenshot(path=tmp_path / "session.png", full_page=True)


def test_model_output_that_looks_like_html_is_shown_as_text_and_never_runs(
    page: Page, served: Served, tmp_path: Path
) -> None:
    hostile = '<img src=x onerror="window.pwned=1"><script>window.pwned=2</script>'
    _open_method(page, "greeter.greet")
    page.get_by_label("name").fill(hostile)
    page.get_by_role("button", name="Run", exact=True).click()
    output = page.locator("#result .output")
    expect(output).to_contain_text(hostile, timeout=WAIT_MS)
    page.locator("#runs .run-link").first.click()
    expect(page.locator("#trace .output")).to_contain_text(hostile)
    page.get_by_role("button", name="Render").click()
    expect(page.locator("#result .message.user pre")).to_contain_text(hostile)

    assert page.evaluate("window.pwned") is None
    assert page.locator("main img, main script").count() == 0
    page.screenshot(path=tmp_path / "hostile.png", full_page=True)


def test_an_edit_shows_a_reload_notice_and_a_broken_one_its_diagnostic(
    page: Page, served: Served, tmp_path: Path
) -> None:
    notice = page.locator("#notice")
    expect(page.locator("#version")).to_contain_text("version ")
    before = page.locator("#version").inner_text()

    served.agent.write_text(AGENT.replace("  tidy:\n", "  wave:\n    prompt: Wave.\n  tidy:\n"))
    expect(notice).to_contain_text("Reloaded", timeout=WAIT_MS)
    expect(page.locator('[data-method="greeter.wave"]')).to_be_visible()
    expect(page.locator("#version")).not_to_have_text(before)
    page.screenshot(path=tmp_path / "reloaded.png", full_page=True)

    _open_method(page, "greeter.wave")
    expect(page.locator("#method-title")).to_have_text("greeter.wave")
    served.agent.write_text(AGENT)  # wave is gone again: so is its form
    expect(page.locator('[data-method="greeter.wave"]')).to_have_count(0, timeout=WAIT_MS)
    expect(page.locator("#method")).to_be_hidden()

    served.agent.write_text(AGENT.replace("    prompt: Tidy up.\n", "    promt: Tidy up.\n"))
    expect(notice).to_contain_text("Reload failed", timeout=WAIT_MS)
    expect(notice.locator(".diagnostics")).to_contain_text(
        re.compile(r"greeter\.yaml:\d+:\d+: error: .*promt")
    )
    expect(notice).to_contain_text("still serving version")
    page.screenshot(path=tmp_path / "reload-failed.png", full_page=True)


def test_questions_are_answered_on_the_page_and_the_run_goes_on(
    page: Page, served: Served, tmp_path: Path
) -> None:
    _open_method(page, "greeter.tidy")
    page.get_by_role("button", name="Render").click()  # the tools it would offer
    expect(page.locator("#result .tools code")).to_have_text(["remove", "ask_user"])
    page.get_by_role("button", name="Run", exact=True).click()

    # The model calls both tools: the confirmation of `remove`, and `ask_user` with options.
    confirm = page.locator("#questions .question.confirm")
    expect(confirm.locator(".prompt")).to_have_text("Remove test?", timeout=WAIT_MS)
    page.screenshot(path=tmp_path / "questions.png", full_page=True)
    confirm.get_by_role("button", name="Yes").click()
    ask = page.locator("#questions .question.ask")
    ask.get_by_role("button", name="test", exact=True).click(timeout=WAIT_MS)

    result = page.locator("#result")
    expect(result.locator(".badge")).to_have_text("ok", timeout=WAIT_MS)
    expect(result.locator(".event.tool").filter(has_text="← remove")).to_contain_text(
        "remove removed test"
    )
    expect(result.locator(".event.tool").filter(has_text="← ask_user")).to_contain_text("test")
    expect(page.locator("#questions")).to_be_hidden()
    assert httpx.get(f"{served.url}/questions").json() == {"questions": []}


def test_with_a_token_the_page_opens_once_from_a_link_carrying_it(
    browser: Browser, agent: Path, tmp_path: Path
) -> None:
    with _serve_cli(agent, env={"OPENPROGRAM_SERVE_TOKEN": TOKEN}) as served:
        context = browser.new_context()
        page = context.new_page()
        refused = page.goto(served.url + "/")
        assert refused is not None and refused.status == 401

        page.goto(f"{served.url}/?token={TOKEN}")
        expect(page).to_have_url(served.url + "/")  # the token left the address bar
        _open_method(page, "greeter.greet")
        page.get_by_label("name").fill("Ada")
        page.get_by_role("button", name="Run", exact=True).click()
        expect(page.locator("#result .badge")).to_have_text("ok", timeout=WAIT_MS)
        page.screenshot(path=tmp_path / "with-token.png", full_page=True)
        assert TOKEN not in page.content()
        context.close()
    assert SECRET not in "".join(served.lines)
