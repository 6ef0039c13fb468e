"""Time to the first streamed byte, beside bare aiohttp reading the same stream.

Two figures, each measured against its own baseline in the same run, interleaved:

- ``Runtime`` (in a warm process): from the call to the first ``text`` event its
  ``on_stream`` gets, against a bare ``aiohttp`` POST with ``"stream": true`` read to its
  first content piece. Goal: at most 1.3x the bare time plus 5 ms.
- the command line (``openprogram-run agent.yaml greet`` with a pseudo-terminal as stdout,
  so that it streams): from starting the process to the first byte of the answer on the
  terminal, against a ``python`` process that imports aiohttp, makes the same request and
  writes the first piece to the same kind of terminal. Goal: the same.

The loopback chat server (``chat_server.py``) answers ``"pong"`` in ``--chunks`` pieces.
This package's bytecode is compiled first, as an installed package's would be (as
``startup.py`` does): with ``PYTHONDONTWRITEBYTECODE`` set, a module edited since its last
compile would otherwise be compiled from source in every CLI process.

    python benchmarks/stream.py [--calls 200] [--rounds 5] [--cli-runs 15]
"""

from __future__ import annotations

import argparse
import asyncio
import compileall
import json
import os
import select
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import aiohttp
from _common import chat_server, median, report

from openprogram_yaml.json_types import JSONObject
from openprogram_yaml.runtime.runtime import Runtime
from openprogram_yaml.runtimes.rules import RuntimeRule
from openprogram_yaml.runtimes.select import RuntimeSelector

ROOT = Path(__file__).resolve().parent.parent

BODY = {"model": "bench", "messages": [{"role": "user", "content": "ping"}], "stream": True}

#: The goal: the streamed side's first byte within this many times the bare side's, plus
#: ``SLACK_S`` (a fixed cost: the run's setup, which a one-call baseline does not have).
GOAL_RATIO = 1.3
SLACK_S = 0.005

AGENT = """\
version: 1
name: bench
model: local:bench
runtimes:
  - {match: "local:*", runtime: openai, options: {base_url: "%s"}}
methods:
  greet:
    prompt: ping
"""

# The CLI's baseline: a process that does what the CLI does on the wire, and no more.
BARE_CLIENT = """\
import asyncio, json, sys
import aiohttp

async def main(url):
    body = {"model": "bench", "messages": [{"role": "user", "content": "ping"}], "stream": True}
    async with aiohttp.ClientSession() as session:
        async with session.post(url + "/chat/completions", json=body) as r:
            async for line in r.content:
                if line.startswith(b"data: {"):
                    delta = json.loads(line[6:])["choices"][0]["delta"]
                    if delta.get("content"):
                        sys.stdout.write(delta["content"])
                        sys.stdout.flush()
    sys.stdout.write("\\n")

asyncio.run(main(sys.argv[1]))
"""


class BareStream:
    """Streamed POSTs with a bare aiohttp session on a loop of its own."""

    def __init__(self, url: str) -> None:
        self.loop = asyncio.new_event_loop()
        self.url = f"{url}/chat/completions"
        self.session = self.loop.run_until_complete(self._open())

    async def _open(self) -> aiohttp.ClientSession:
        return aiohttp.ClientSession()

    async def _one(self) -> float:
        start = time.perf_counter()
        first = 0.0
        async with self.session.post(self.url, json=BODY) as r:
            async for line in r.content:
                starts = not first and line.startswith(b"data: {")
                if starts and json.loads(line[6:])["choices"][0]["delta"].get("content"):
                    first = time.perf_counter() - start
        return first

    def first_bytes(self, calls: int) -> list[float]:
        return [self.loop.run_until_complete(self._one()) for _ in range(calls)]

    def close(self) -> None:
        self.loop.run_until_complete(self.session.close())
        self.loop.close()


class RuntimeStream:
    """``Runtime.exec`` with an ``on_stream`` observer that notes the first text piece."""

    def __init__(self, url: str) -> None:
        self._start = 0.0
        self._first = 0.0
        selector = RuntimeSelector(rules=[RuntimeRule("openai:*", "openai", {"base_url": url})])
        self.runtime = Runtime(model="openai:bench", runtimes=selector, on_stream=self._event)

    def _event(self, event: JSONObject) -> None:
        if event.get("type") == "text" and not self._first:
            self._first = time.perf_counter() - self._start

    def first_bytes(self, calls: int) -> list[float]:
        out = []
        for _ in range(calls):
            self._first = 0.0
            self._start = time.perf_counter()
            assert self.runtime.exec("ping") == "pong"
            out.append(self._first)
        return out

    def close(self) -> None:
        self.runtime.close()


def in_process(url: str, calls: int, rounds: int) -> tuple[list[float], list[float]]:
    """Per round, the median first-byte time of each side (seconds), blocks interleaved."""
    bare, ours = BareStream(url), RuntimeStream(url)
    bare.first_bytes(10)  # warm: connections, first-use imports
    ours.first_bytes(10)
    bare_rounds, our_rounds = [], []
    for _ in range(rounds):
        b: list[float] = []
        o: list[float] = []
        for _ in range(max(1, calls // 50)):
            b += bare.first_bytes(50)
            o += ours.first_bytes(50)
        bare_rounds.append(median(b))
        our_rounds.append(median(o))
    bare.close()
    ours.close()
    return bare_rounds, our_rounds


def first_byte_on_a_terminal(argv: list[str], cwd: Path, wanted: bytes = b"p") -> float:
    """Seconds from starting ``argv`` to ``wanted`` on its terminal (a pty as stdout)."""
    controller, terminal = os.openpty()
    start = time.perf_counter()
    proc = subprocess.Popen(
        argv, stdin=subprocess.DEVNULL, stdout=terminal, stderr=subprocess.DEVNULL, cwd=cwd
    )
    os.close(terminal)
    seen = b""
    first = 0.0
    try:
        while wanted not in seen:
            ready, _, _ = select.select([controller], [], [], 30)
            if not ready:
                raise RuntimeError(f"no {wanted!r} within 30 s: {seen!r}")
            try:
                chunk = os.read(controller, 4096)
            except OSError:
                chunk = b""
            if not chunk:
                raise RuntimeError(f"{argv[0]} ended before {wanted!r}: {seen!r}")
            seen += chunk
        first = time.perf_counter() - start
        if proc.wait(timeout=30) != 0:
            raise RuntimeError(f"{argv} failed")
    finally:
        proc.kill()
        os.close(controller)
    return first


def cli(url: str, runs: int) -> dict[str, list[float]]:
    """First-byte times of the bare client process, the CLI, and the CLI with
    ``--no-stream`` (what the display costs or saves), run by run, alternating."""
    compileall.compile_dir(str(ROOT / "openprogram_yaml"), quiet=1)
    with tempfile.TemporaryDirectory() as folder:
        cwd = Path(folder)
        (cwd / "agent.yaml").write_text(AGENT % url)
        (cwd / "bare.py").write_text(BARE_CLIENT)
        script = Path(sys.executable).with_name("openprogram-run")
        ours = [str(script)] if script.exists() else [sys.executable, "-m", "openprogram_yaml"]
        sides: dict[str, Callable[[], float]] = {
            "bare": lambda: first_byte_on_a_terminal([sys.executable, "bare.py", url], cwd),
            "cli": lambda: first_byte_on_a_terminal([*ours, "agent.yaml", "greet"], cwd),
            "no_stream": lambda: first_byte_on_a_terminal(
                [*ours, "agent.yaml", "greet", "--no-stream"], cwd
            ),
        }
        for side in sides.values():  # warm: the compile cache, the page cache
            side()
        times: dict[str, list[float]] = {name: [] for name in sides}
        for _ in range(runs):
            for name, side in sides.items():
                times[name].append(side())
    return times


def _line(name: str, bare: list[float], ours: list[float]) -> None:
    b, o = median(bare), median(ours)
    limit = GOAL_RATIO * b + SLACK_S
    report(f"{name}: bare aiohttp", f"{b * 1000:.2f} ms", "(baseline)")
    report(
        f"{name}: first byte",
        f"{o * 1000:.2f} ms = {o / b:.2f}x",
        f"<= {limit * 1000:.2f} ms",
        o <= limit,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200, help="in-process calls a round")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--cli-runs", type=int, default=15, help="processes of each side")
    parser.add_argument("--chunks", type=int, default=4)
    parser.add_argument("--latency-ms", type=float, default=0.0)
    args = parser.parse_args()
    with chat_server(latency_ms=args.latency_ms, chunks=args.chunks) as url:
        bare, ours = in_process(url, args.calls, args.rounds)
        on_cli = cli(url, args.cli_runs)
    print(
        f"stream: time to the first streamed byte, loopback SSE in {args.chunks} pieces, "
        f"{args.latency_ms:g} ms latency (medians; goal {GOAL_RATIO}x + {SLACK_S * 1000:g} ms)"
    )
    _line(f"Runtime ({args.rounds} rounds x {args.calls})", bare, ours)
    _line(f"CLI on a pty ({args.cli_runs} runs)", on_cli["bare"], on_cli["cli"])
    # Beside the goal's figure (medians of each side): the same runs paired, each CLI run
    # against the bare run just before or after it, which a machine's drift moves less.
    paired = median([o / b for o, b in zip(on_cli["cli"], on_cli["bare"], strict=True)])
    report("CLI on a pty: median of per-run ratios", f"{paired:.2f}x", "(for comparison)")
    plain = median(on_cli["no_stream"])
    report("CLI --no-stream: the whole answer", f"{plain * 1000:.2f} ms", "(for comparison)")


if __name__ == "__main__":
    main()
