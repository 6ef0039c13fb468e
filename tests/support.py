"""Paths, git settings, agents, a pty helper, a FIFO guard and a hang guard shared by
tests.

``tests/`` is on sys.path through pytest's rootdir conftest.
"""

from __future__ import annotations

import asyncio
import os
import select
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TypeVar

import pytest

_T = TypeVar("_T")

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = REPO / "examples"

#: Environment for commits made by the tests: fixed names and dates, no user config, no
#: signing (``env={**os.environ, **GIT_ENV}``).
GIT_ENV = {
    "GIT_AUTHOR_NAME": "Reviewer",
    "GIT_AUTHOR_EMAIL": "reviewer@example.com",
    "GIT_COMMITTER_NAME": "Reviewer",
    "GIT_COMMITTER_EMAIL": "reviewer@example.com",
    "GIT_AUTHOR_DATE": "2026-01-01T00:00:00Z",
    "GIT_COMMITTER_DATE": "2026-01-01T00:00:00Z",
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_CONFIG_NOSYSTEM": "1",
}

#: A model behind a Chat Completions server on 127.0.0.1 (``%(url)s``, a loopback server's
#: url) that asks for an http tool on the same server, then answers.
SHOP_AGENT = """
version: 1
name: shop
model: local:llama3
retry: {max_retries: 1}
runtimes:
  - {match: "local:*", runtime: openai, options: {base_url: "%(url)s/v1"}}
tools:
  lookup_order:
    description: Fetch an order.
    parameters: {type: object, properties: {id: {type: string}}, required: [id]}
    http: {url: "%(url)s/orders/{{ id }}"}
methods:
  ask: {prompt: Where is order 42?}
"""


def read_until(fd: int, wanted: bytes, seen: bytearray, limit_s: float = 30.0) -> bytes:
    """What a terminal (the controller side of a pty) showed up to and including ``wanted``;
    what came after stays in ``seen`` for the next call. A bounded wait, no sleep."""
    end = time.monotonic() + limit_s
    while wanted not in seen:
        left = end - time.monotonic()
        assert left > 0, f"no {wanted!r} on the terminal: {bytes(seen)!r}"
        ready, _, _ = select.select([fd], [], [], left)
        if ready:
            try:
                chunk = os.read(fd, 4096)
            except OSError:  # the child closed the terminal
                chunk = b""
            assert chunk, f"the terminal closed before {wanted!r}: {bytes(seen)!r}"
            seen += chunk
    head, _, rest = bytes(seen).partition(wanted)
    seen[:] = rest
    return head + wanted


def without_blocking_on(fifo: Path, call: Callable[[], _T]) -> _T | BaseException:
    """What ``call`` returned, or the exception it raised; the test fails (instead of the
    suite hanging) when ``call`` blocks on opening ``fifo``, a FIFO nobody writes to."""
    outcome: list[_T | BaseException] = []

    def target() -> None:
        try:
            outcome.append(call())
        except BaseException as exc:
            outcome.append(exc)

    worker = threading.Thread(target=target, daemon=True)
    worker.start()
    worker.join(timeout=20)
    if worker.is_alive():
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))  # release the open, then fail
        worker.join(timeout=5)
        pytest.fail(f"opening the FIFO {fifo} blocked")
    [result] = outcome
    return result


#: How long a command may take before it counts as hung (it never waits when it works).
HUNG_AFTER_S = 20.0


def within_time(call: Callable[[], _T]) -> _T:
    """``call()``'s result; fails the test, instead of hanging it, when it does not end (in
    ``HUNG_AFTER_S``: it runs in a thread, left behind when it hangs)."""
    result: list[_T] = []
    thread = threading.Thread(target=lambda: result.append(call()), daemon=True)
    thread.start()
    thread.join(HUNG_AFTER_S)
    assert not thread.is_alive(), "the command hung"
    assert result, "the command raised"
    return result[0]


def loop_turns(awaitable: Awaitable[_T]) -> tuple[_T, int]:
    """``awaitable``'s result, and how many turns of a fresh event loop it took: one for
    work done on the loop in a single step, more when the loop ran on beside it (in a
    worker thread)."""

    async def counted() -> tuple[_T, int]:
        running = asyncio.ensure_future(awaitable)
        turns = 0
        while not running.done():
            turns += 1
            await asyncio.sleep(0)
        return running.result(), turns

    return asyncio.run(counted())


#: An agent whose tool is declared ``confirm``: a run of ``tidy`` asks before it removes
#: (serve's questions, MCP elicitation). Its tool module is ``JANITOR_TOOLS``, written as
#: ``janitor_tools.py`` beside it.
JANITOR_AGENT = """\
version: 1
name: janitor
model: test
tools:
  remove:
    python: janitor_tools:remove
    confirm: "Remove {{ path }}?"
methods:
  tidy:
    prompt: Tidy up.
"""

JANITOR_TOOLS = '''
def remove(path: str) -> str:
    """Remove a file."""
    return f"removed {path}"
'''


#: A method with a string input and one with a default, offline (batch and input tests).
TAGGER_AGENT = """\
version: 1
name: tagger
model: test
methods:
  tag:
    inputs:
      ticket: {type: string, minLength: 1}
      priority: {type: integer, default: 3}
    prompt: "Tag ({{ priority }}): {{ ticket }}"
"""

#: A method taking any JSON value as ``x``, offline (the hostile serve tests).
ANY_INPUT_AGENT = """\
version: 1
name: echo
model: test
methods:
  say:
    inputs: {x: {}}
    prompt: "p {{ x }}"
"""
