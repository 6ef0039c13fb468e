"""A runtime's default pool does not make a batch's runs queue: 250 runs in flight get 250
connections at once (the default was 200: the last 50 waited for a free connection)."""

from __future__ import annotations

import asyncio

from aiohttp import web
from loopback import chat_completion

from openprogram_yaml.providers.openai import OpenAIRuntime
from openprogram_yaml.runtime.runtime import Runtime

IN_FLIGHT = 250


async def _all_at_once() -> list[object]:
    arrived = 0
    everyone = asyncio.Event()

    async def reply(request: web.Request) -> web.Response:
        # Answers only once every run's request is here, so each needs its own connection.
        nonlocal arrived
        await request.read()
        arrived += 1
        if arrived == IN_FLIGHT:
            everyone.set()
        await everyone.wait()
        return web.json_response(chat_completion("pong"))

    app = web.Application()
    app.router.add_post("/v1/chat/completions", reply)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, backlog=1024)
    await site.start()
    port = runner.addresses[0][1]
    provider = OpenAIRuntime(base_url=f"http://127.0.0.1:{port}/v1")
    runtime = Runtime(model="openai:llama3", runtimes=provider)
    try:
        runs = (runtime.async_exec("ping") for _ in range(IN_FLIGHT))
        # The deadline only bounds a failure (a pool too small never lets the last ones in).
        return list(await asyncio.wait_for(asyncio.gather(*runs), 60))
    finally:
        await provider.aclose()
        await runner.cleanup()


def test_the_default_pool_holds_a_batch_of_250_runs_in_flight() -> None:
    assert OpenAIRuntime().settings.max_connections == 1000
    assert asyncio.run(_all_at_once()) == ["pong"] * IN_FLIGHT
