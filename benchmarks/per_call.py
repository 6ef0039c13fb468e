"""Per-call overhead: 1,000 sequential calls through ``Runtime.exec`` in a warm process,
beside the same calls made with bare aiohttp in the same run (loopback server, no latency).

Goal: ``Runtime.exec`` at most 1.3x bare aiohttp's time per call. Also shown, for the
transport decision: httpx's default transport, bare and under ``Runtime.exec``.

    python benchmarks/per_call.py [--calls 1000] [--rounds 5]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time

import aiohttp
import httpx
from _common import chat_server, median, report

from openprogram_yaml.providers.openai import OpenAIRuntime
from openprogram_yaml.runtime.runtime import Runtime
from openprogram_yaml.runtimes.rules import RuntimeRule
from openprogram_yaml.runtimes.select import RuntimeSelector

BODY = json.dumps({"model": "bench", "messages": [{"role": "user", "content": "ping"}]})
HEADERS = {"content-type": "application/json"}


class Bare:
    """Sequential POSTs with a bare client on a loop of its own, timed block by block."""

    def __init__(self, url: str, kind: str) -> None:
        self.loop = asyncio.new_event_loop()
        self.url = url
        self.kind = kind
        self.session: aiohttp.ClientSession | httpx.AsyncClient = self.loop.run_until_complete(
            self._open()
        )

    async def _open(self) -> aiohttp.ClientSession | httpx.AsyncClient:
        if self.kind == "aiohttp":
            return aiohttp.ClientSession()
        return httpx.AsyncClient()

    async def _one(self) -> str:
        url = f"{self.url}/chat/completions"
        if isinstance(self.session, aiohttp.ClientSession):
            async with self.session.post(url, data=BODY, headers=HEADERS) as r:
                data = json.loads(await r.read())
        else:
            data = json.loads((await self.session.post(url, content=BODY, headers=HEADERS)).content)
        return str(data["choices"][0]["message"]["content"])

    async def _block(self, calls: int) -> float:
        start = time.perf_counter()
        for _ in range(calls):
            assert await self._one() == "pong"
        return time.perf_counter() - start

    def block(self, calls: int) -> float:
        return self.loop.run_until_complete(self._block(calls))

    def close(self) -> None:
        if isinstance(self.session, aiohttp.ClientSession):
            self.loop.run_until_complete(self.session.close())
        else:
            self.loop.run_until_complete(self.session.aclose())
        self.loop.close()


def exec_block(runtime: Runtime, calls: int) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        assert runtime.exec("ping") == "pong"
    return time.perf_counter() - start


def one_round(sides: dict[str, object], calls: int, block: int = 100) -> dict[str, float]:
    """Seconds per call for each side; the sides take turns, ``block`` calls at a time, so
    that noise from the rest of the machine falls on all of them alike."""
    totals = dict.fromkeys(sides, 0.0)
    for side in sides.values():  # warm: connections, first-use imports
        if isinstance(side, Bare):
            side.block(10)
        else:
            exec_block(side, 10)  # type: ignore[arg-type]
    done = 0
    while done < calls:
        n = min(block, calls - done)
        for name, side in sides.items():
            if isinstance(side, Bare):
                totals[name] += side.block(n)
            else:
                totals[name] += exec_block(side, n)  # type: ignore[arg-type]
        done += n
    return {name: total / calls for name, total in totals.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--no-httpx", action="store_true", help="skip the httpx comparison")
    args = parser.parse_args()
    n = args.calls
    figures: dict[str, list[float]] = {}
    with chat_server(latency_ms=0) as url:
        selector = RuntimeSelector(rules=[RuntimeRule("openai:*", "openai", {"base_url": url})])
        sides: dict[str, object] = {
            "aiohttp": Bare(url, "aiohttp"),
            "exec": Runtime(model="openai:bench", runtimes=selector),
        }
        if not args.no_httpx:
            sides["httpx"] = Bare(url, "httpx")
            sides["exec_httpx"] = Runtime(
                model="openai:bench",
                runtimes=OpenAIRuntime(base_url=url, transport=httpx.AsyncHTTPTransport()),
            )
        for _ in range(args.rounds):
            for name, value in one_round(sides, n).items():
                figures.setdefault(name, []).append(value)
        for side in sides.values():
            side.close()  # type: ignore[attr-defined]
    ms = {k: median(v) * 1000 for k, v in figures.items() if v}
    ratios = [e / a for e, a in zip(figures["exec"], figures["aiohttp"], strict=True)]
    ratio = median(ratios)
    print(f"per_call: {n} sequential calls, median of {args.rounds} rounds (ms per call)")
    report("bare aiohttp", f"{ms['aiohttp']:.3f} ms", "(baseline)")
    report("Runtime.exec (aiohttp transport)", f"{ms['exec']:.3f} ms")
    report("Runtime.exec / bare aiohttp", f"{ratio:.2f}x", "<= 1.3x", ratio <= 1.3)
    if "httpx" in ms:
        report("bare httpx (default transport)", f"{ms['httpx']:.3f} ms", "(for comparison)")
        r2 = median([e / a for e, a in zip(figures["exec_httpx"], figures["aiohttp"], strict=True)])
        report(
            "Runtime.exec over httpx default / aiohttp",
            f"{ms['exec_httpx']:.3f} ms {r2:.2f}x",
            "(for comparison)",
        )


if __name__ == "__main__":
    main()
