"""A loopback Chat Completions server for the benchmarks, built on aiohttp's web server.

Run it as ``python benchmarks/chat_server.py --latency-ms 100``: it binds 127.0.0.1 on a
free port and prints ``PORT <n>`` once it serves. Each reply waits ``latency`` first (the
``x-bench-latency-ms`` request header overrides it); a request with ``"stream": true`` gets
server-sent ``chat.completion.chunk`` events, ``--chunks`` of them. A request offering tools
whose last message is not a tool result is answered (unstreamed) with one call of the first
tool, arguments ``{"text": "ping"}``; the next request (with the result) gets the text.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys

from aiohttp import web

_USAGE = {"prompt_tokens": 12, "completion_tokens": 3, "total_tokens": 15}


def _completion(model: str, content: str) -> dict[str, object]:
    return {
        "id": "chatcmpl-bench",
        "object": "chat.completion",
        "created": 0,
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": content},
                "finish_reason": "stop",
            }
        ],
        "usage": _USAGE,
    }


def _reply_text(body: dict[str, object]) -> str:
    # Structured output: answer with a valid object for the benchmark schema.
    if body.get("response_format"):
        return json.dumps({"label": "billing"})
    return "pong"


def _tool_call(model: str, name: str) -> dict[str, object]:
    call = {
        "id": "call_bench",
        "type": "function",
        "function": {"name": name, "arguments": json.dumps({"text": "ping"})},
    }
    reply = _completion(model, "")
    reply["choices"] = [
        {
            "index": 0,
            "message": {"role": "assistant", "content": None, "tool_calls": [call]},
            "finish_reason": "tool_calls",
        }
    ]
    return reply


def _wants_tool(body: dict[str, object]) -> str | None:
    """The first offered tool's name, when the model should call it now."""
    tools = body.get("tools")
    messages = body.get("messages")
    if not isinstance(tools, list) or not tools or not isinstance(messages, list):
        return None
    if messages and isinstance(messages[-1], dict) and messages[-1].get("role") == "tool":
        return None
    return str(tools[0]["function"]["name"])


def make_app(latency_s: float, chunks: int) -> web.Application:
    async def chat(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        header = request.headers.get("x-bench-latency-ms")
        delay = float(header) / 1000 if header else latency_s
        if delay > 0:
            await asyncio.sleep(delay)
        model = str(body.get("model", ""))
        tool = _wants_tool(body)
        if tool is not None:
            return web.json_response(_tool_call(model, tool))
        text = _reply_text(body)
        if not body.get("stream"):
            return web.json_response(_completion(model, text))
        response = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await response.prepare(request)
        pieces = [text[i::chunks] for i in range(chunks)] if chunks > 1 else [text]
        for piece in pieces:
            chunk = {
                "id": "chatcmpl-bench",
                "object": "chat.completion.chunk",
                "model": model,
                "choices": [{"index": 0, "delta": {"content": piece}, "finish_reason": None}],
            }
            await response.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
        last = {
            "id": "chatcmpl-bench",
            "object": "chat.completion.chunk",
            "model": model,
            "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
            "usage": _USAGE,
        }
        await response.write(b"data: " + json.dumps(last).encode() + b"\n\ndata: [DONE]\n\n")
        await response.write_eof()
        return response

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    return app


async def serve(latency_s: float, chunks: int) -> None:
    runner = web.AppRunner(make_app(latency_s, chunks), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, backlog=4096)
    await site.start()
    port = runner.addresses[0][1]
    print(f"PORT {port}", flush=True)
    # Serve until the parent closes our stdin (or kills us).
    loop = asyncio.get_running_loop()
    await loop.run_in_executor(None, sys.stdin.read)
    await runner.cleanup()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--latency-ms", type=float, default=0.0)
    parser.add_argument("--chunks", type=int, default=4)
    args = parser.parse_args()
    asyncio.run(serve(args.latency_ms / 1000, args.chunks))


if __name__ == "__main__":
    main()
