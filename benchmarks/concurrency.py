"""Concurrency: 1,000 concurrent runs through ``Runtime`` (``async_exec``, the core that
``exec`` wraps) against the loopback server with 100 ms latency, beside bare aiohttp doing
the same 1,000 requests in the same run. Both sides may open up to 1,000 connections.

Also a compiled agent's method run the same way, as the batch engine runs rows
(``execute_run``, the version's runtimes shared, the provider's default pool).

Goals: wall time within 1.3x of bare aiohttp's; every run succeeding; memory per in-flight
run under 100 KB (Python heap, traced in a separate pass so tracing does not skew the time).

The pool-size question (what the openai runtime's default ``max_connections`` should be):
the same runs at each size in ``--pools``, and at the runtime's default, interleaved with
the bare side in every round. A pool smaller than the runs in flight queues the rest, so
the wall time grows by about one latency per extra wave.

    python benchmarks/concurrency.py [--runs 1000] [--rounds 5] [--httpx]
        [--pools 100,200,500,1000]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import TYPE_CHECKING

import aiohttp
from _common import chat_server, median, report

from openprogram_yaml.providers.openai import OpenAIRuntime
from openprogram_yaml.runtime.runtime import Runtime

if TYPE_CHECKING:
    from openprogram_yaml.compile.program import Program

BODY = json.dumps({"model": "bench", "messages": [{"role": "user", "content": "ping"}]})
HEADERS = {"content-type": "application/json"}


async def bare_aiohttp(url: str, runs: int) -> tuple[float, int]:
    connector = aiohttp.TCPConnector(limit=runs)
    async with aiohttp.ClientSession(connector=connector) as session:

        async def one() -> bool:
            async with session.post(f"{url}/chat/completions", data=BODY, headers=HEADERS) as r:
                data = json.loads(await r.read())
            return bool(data["choices"][0]["message"]["content"] == "pong")

        start = time.perf_counter()
        results = await asyncio.gather(*(one() for _ in range(runs)), return_exceptions=True)
        return time.perf_counter() - start, sum(r is True for r in results)


async def through_runtime(
    url: str, runs: int, transport: object = None, pool: int | None = -1
) -> tuple[float, int]:
    """``runs`` concurrent runs; ``pool`` connections at most (-1: as many as runs; None:
    the runtime's default)."""
    sized = {} if pool is None else {"max_connections": runs if pool == -1 else pool}
    provider = OpenAIRuntime(base_url=url, transport=transport, **sized)  # type: ignore[arg-type]
    runtime = Runtime(model="openai:bench", runtimes=provider)

    async def one() -> bool:
        return bool(await runtime.async_exec("ping", timeout_s=120) == "pong")

    start = time.perf_counter()
    results = await asyncio.gather(*(one() for _ in range(runs)), return_exceptions=True)
    elapsed = time.perf_counter() - start
    await provider.aclose()
    return elapsed, sum(r is True for r in results)


async def through_method(program: Program, runs: int) -> tuple[float, int]:
    """``runs`` concurrent runs of a compiled agent's method, as the batch engine runs rows:
    ``execute_run`` with the version's runtimes shared (the provider's default pool)."""
    from openprogram_yaml.run.execute import execute_run
    from openprogram_yaml.run.shared_runtimes import SharedRuntimes
    from openprogram_yaml.run.version import VersionStamp

    stamp = VersionStamp(program.version)
    runtimes = SharedRuntimes()
    shared = runtimes.acquire(program)

    async def one() -> bool:
        record = await execute_run(program, stamp, "bench", "plain", {"q": "ping"}, shared=shared)
        return record.output == "pong"

    start = time.perf_counter()
    results = await asyncio.gather(*(one() for _ in range(runs)), return_exceptions=True)
    elapsed = time.perf_counter() - start
    await runtimes.release(shared)
    await runtimes.aclose()
    return elapsed, sum(r is True for r in results)


def compiled(folder: Path, url: str) -> Program:
    """``per_call.py``'s project (plain, schema and tool methods) against ``url``."""
    from per_call import PROJECT, SCHEMA

    from openprogram_yaml.compile.project import compile_path

    for name, text in PROJECT.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text % {"url": url, "schema": json.dumps(SCHEMA)})
    return compile_path(folder)


async def traced_peak(url: str, runs: int) -> float:
    """Bytes of Python heap per in-flight run at the peak of a concurrent batch."""
    await through_runtime(url, 10)  # imports and first-use caches are not per run
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    await through_runtime(url, runs)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return (peak - base) / runs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument(
        "--httpx", action="store_true", help="also time httpx's default transport (slow)"
    )
    parser.add_argument("--pools", default="100,200,500,1000", help="pool sizes to compare")
    args = parser.parse_args()
    n = args.runs
    pools: list[int | None] = [int(p) for p in args.pools.split(",") if p]
    pools.append(None)
    by_pool: dict[int | None, list[float]] = {p: [] for p in pools}
    methods: list[float] = []
    bare: list[float] = []
    ours: list[float] = []
    ratios: list[float] = []
    failures = 0
    with chat_server(latency_ms=100) as url, tempfile.TemporaryDirectory() as tmp:
        asyncio.run(through_runtime(url, 10))  # warm imports
        program = compiled(Path(tmp), url)
        asyncio.run(through_method(program, 10))
        for _ in range(args.rounds):
            t_bare, ok_bare = asyncio.run(bare_aiohttp(url, n))
            t_ours, ok_ours = asyncio.run(through_runtime(url, n))
            bare.append(t_bare)
            ours.append(t_ours)
            ratios.append(t_ours / t_bare)
            failures += (n - ok_bare) + (n - ok_ours)
            for pool in pools:
                t_pool, ok_pool = asyncio.run(through_runtime(url, n, pool=pool))
                by_pool[pool].append(t_pool / t_bare)
                failures += n - ok_pool
            t_method, ok_method = asyncio.run(through_method(program, n))
            methods.append(t_method / t_bare)
            failures += n - ok_method
        per_run = asyncio.run(traced_peak(url, n))
        httpx_s = None
        if args.httpx:
            import httpx

            try:
                httpx_s, _ = asyncio.run(
                    asyncio.wait_for(through_runtime(url, n, httpx.AsyncHTTPTransport()), 120)
                )
            except TimeoutError:
                httpx_s = float("inf")
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(
        f"concurrency: {n} concurrent runs at 100 ms latency, median of {args.rounds} rounds; "
        f"load average {load} (a shared machine: other work runs beside)"
    )
    report("bare aiohttp wall time", f"{median(bare):.3f} s", "(baseline)")
    report("Runtime.async_exec wall time", f"{median(ours):.3f} s")
    ratio = median(ratios)
    report("Runtime / bare aiohttp", f"{ratio:.2f}x", "<= 1.3x", ratio <= 1.3)
    ratio = median(methods)
    report("compiled method (batch) / bare aiohttp", f"{ratio:.2f}x", "<= 1.3x", ratio <= 1.3)
    report("failed runs (all rounds, both sides)", str(failures), "0", failures == 0)
    report("Python heap per in-flight run", f"{per_run / 1024:.1f} KB", "< 100 KB", per_run < 100e3)
    for pool, pool_ratios in by_pool.items():
        name = "default" if pool is None else str(pool)
        if pool is None:
            name = f"the runtime's default ({OpenAIRuntime().settings.max_connections})"
        report(f"pool of {name} / bare aiohttp", f"{median(pool_ratios):.2f}x", "(pool size)")
    if httpx_s is not None:
        report("Runtime over httpx default transport", f"{httpx_s:.2f} s", "(for comparison)")


if __name__ == "__main__":
    main()
