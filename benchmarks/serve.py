"""Serving: ``openprogram-run serve`` under 64 concurrent clients, beside a bare
``aiohttp.web`` handler doing the same upstream call, interleaved round by round; and what
sharing a version's runtimes across runs saves per run.

Over HTTP (each server in its own process, the clients in this one):

- ``POST /run/offline/echo`` on the offline ``test`` model, beside a bare handler answering
  a fixed JSON body (the floor of any aiohttp.web handler; no goal);
- ``POST /run/chat/ask`` and ``POST /v1/chat/completions`` (model ``chat.ask``) against the
  loopback chat server, beside a bare handler that makes the same upstream call through one
  pooled ``aiohttp.ClientSession`` and answers its JSON.
  Goals: at least 0.8x the bare handler's requests per second, p99 at most 1.3x its p99;

In this process, through ``RunService`` against the loopback chat server, a runtime opened
per run (as before issue 15) beside the version's shared runtimes:

- sequential ms per run, and the Python heap per run in flight (tracemalloc, 500 runs at
  100 ms latency).

    python benchmarks/serve.py [--requests 2000] [--rounds 5] [--clients 64]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import aiohttp
from _common import ROOT, chat_server, median, report

if TYPE_CHECKING:
    from openprogram_yaml.compile.program import Program
    from openprogram_yaml.run.record import RunRecord

HEADERS = {"content-type": "application/json"}
RUN_BODY = json.dumps({"q": "ping"}).encode()
CHAT_BODY = json.dumps(
    {"model": "chat.ask", "messages": [{"role": "user", "content": "ping"}]}
).encode()
UPSTREAM_BODY = json.dumps({"model": "bench", "messages": [{"role": "user", "content": "ping"}]})

PROJECT = {
    "openprogram.yaml": """\
version: 1
agents: [agents/*.yaml]
providers:
  bench: {runtime: openai, base_url: "%(upstream)s"}
""",
    "agents/offline.yaml": """\
version: 1
name: offline
model: test
methods:
  echo: {inputs: {q: {type: string}}, prompt: "{{ q }}"}
""",
    "agents/chat.yaml": """\
version: 1
name: chat
model: bench:bench
methods:
  ask: {inputs: {q: {type: string}}, prompt: "{{ q }}"}
""",
}


# --- the bare handler (this script, run with --bare UPSTREAM) ---------------------------


async def bare_server(upstream: str) -> None:
    """A bare aiohttp.web server: ``/static`` answers a fixed body, every other POST makes
    the upstream Chat Completions call and answers with what it got."""
    from aiohttp import web

    session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=100))
    fixed = json.dumps({"status": "ok", "output": "ping"}).encode()

    async def static(request: web.Request) -> web.Response:
        await request.read()
        return web.Response(body=fixed, content_type="application/json")

    async def proxy(request: web.Request) -> web.Response:
        await request.json()
        async with session.post(
            f"{upstream}/chat/completions", data=UPSTREAM_BODY, headers=HEADERS
        ) as reply:
            data = json.loads(await reply.read())
        content = data["choices"][0]["message"]["content"]
        return web.json_response({"status": "ok", "output": content, "usage": data["usage"]})

    app = web.Application()
    app.router.add_post("/static", static)
    app.router.add_post("/{tail:.*}", proxy)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, backlog=4096)
    await site.start()
    print(f"PORT {runner.addresses[0][1]}", flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
    await session.close()
    await runner.cleanup()


# --- starting the servers -----------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Server:
    """A server process: where it listens, and the CPU time it has used."""

    def __init__(self, port: int, pid: int) -> None:
        self.url = f"http://127.0.0.1:{port}"
        self.pid = pid

    def cpu_s(self) -> float:
        """User and system CPU seconds so far (Linux: ``/proc/PID/stat``)."""
        fields = Path(f"/proc/{self.pid}/stat").read_text().rpartition(")")[2].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@contextlib.contextmanager
def _process(argv: list[str], port: int | None) -> Iterator[Server]:
    """Start ``argv`` and yield it once it accepts connections at ``port``, or at the one
    it prints first (``PORT n``). Its stderr goes to a file (a full pipe would stall it),
    shown if it does not start."""
    with tempfile.TemporaryFile("w+") as errors:
        proc = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=errors, text=True
        )
        try:
            assert proc.stdout is not None
            if port is None:
                line = proc.stdout.readline()
                port = int(line.split()[1]) if line.startswith("PORT ") else None
            deadline = time.monotonic() + 60
            while not _accepts(port):
                if proc.poll() is not None or time.monotonic() > deadline:
                    errors.seek(0)
                    raise RuntimeError(f"{argv[2:4]} did not start: {errors.read()}")
                time.sleep(0.05)
            assert port is not None
            yield Server(port, proc.pid)
        finally:
            for pipe in (proc.stdin, proc.stdout):
                if pipe is not None:
                    pipe.close()
            proc.terminate()
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def _accepts(port: int | None) -> bool:
    if port is None:
        return False
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


def write_project(folder: Path, upstream: str) -> Path:
    for name, text in PROJECT.items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text % {"upstream": upstream} if "%(" in text else text)
    return folder


def serve_process(project: Path) -> contextlib.AbstractContextManager[Server]:
    """``openprogram-run serve`` on ``project`` (no reload watch: nothing changes)."""
    port = _free_port()
    argv = [sys.executable, "-m", "openprogram_yaml", "serve", str(project)]
    return _process([*argv, "--port", str(port), "--no-watch"], port)


def bare_process(upstream: str) -> contextlib.AbstractContextManager[Server]:
    return _process([sys.executable, __file__, "--bare", upstream], None)


# --- load ---------------------------------------------------------------------------------


class Load:
    """What one batch of requests gave: requests per second and latency percentiles."""

    def __init__(self, elapsed: float, latencies: list[float], failures: int) -> None:
        self.elapsed = elapsed
        self.latencies = sorted(latencies)
        self.failures = failures
        #: CPU seconds the server used per request.
        self.cpu_per_request = 0.0

    @property
    def rps(self) -> float:
        return len(self.latencies) / self.elapsed

    def percentile(self, p: float) -> float:
        return self.latencies[min(len(self.latencies) - 1, int(p * len(self.latencies)))]


async def load(url: str, body: bytes, clients: int, total: int) -> Load:
    """``total`` POSTs from ``clients`` concurrent clients, each on its own connection,
    after a warm-up that opens every connection and fills first-use caches on both sides."""
    connector = aiohttp.TCPConnector(limit=clients)
    async with aiohttp.ClientSession(connector=connector) as session:
        latencies: list[float] = []
        failures = 0

        async def client(jobs: Iterator[int]) -> None:
            nonlocal failures
            for _ in jobs:
                started = time.perf_counter()
                async with session.post(url, data=body, headers=HEADERS) as reply:
                    await reply.read()
                    if reply.status != 200:
                        failures += 1
                latencies.append(time.perf_counter() - started)

        warm = iter(range(clients * 2))
        await asyncio.gather(*(client(warm) for _ in range(clients)))
        latencies.clear()
        failures = 0
        jobs = iter(range(total))
        started = time.perf_counter()
        await asyncio.gather(*(client(jobs) for _ in range(clients)))
        return Load(time.perf_counter() - started, latencies, failures)


def measure(server: Server, path: str, body: bytes, clients: int, total: int) -> Load:
    """``load`` against ``server``, with the server's CPU time per request."""
    before = server.cpu_s()
    result = asyncio.run(load(server.url + path, body, clients, total))
    # The warm-up's requests are counted too: CPU is read before and after both.
    result.cpu_per_request = (server.cpu_s() - before) / (total + 2 * clients)
    return result


async def probe(url: str, body: bytes) -> int:
    async with (
        aiohttp.ClientSession() as session,
        session.post(url, data=body, headers=HEADERS) as reply,
    ):
        await reply.read()
        return reply.status


# --- in process: runtimes per run against shared ------------------------------------------


async def _runs(program: Program, runs: int, concurrent: bool, shared: bool) -> float:
    """Wall time of ``runs`` runs of chat.ask: through ``RunService`` (shared runtimes) or
    ``execute_run`` opening a runtime per run (what ``RunService`` did before issue 15)."""
    from openprogram_yaml.run.execute import execute_run
    from openprogram_yaml.run.service import RunService
    from openprogram_yaml.run.version import VersionStamp

    stamp = VersionStamp(program.version)
    service = RunService(lambda: (program, stamp))

    def one() -> Awaitable[RunRecord]:
        if shared:
            return service.start("chat", "ask", {"q": "ping"})
        return execute_run(program, stamp, "chat", "ask", {"q": "ping"})

    started = time.perf_counter()
    if concurrent:
        records = await asyncio.gather(*(one() for _ in range(runs)))
    else:
        records = [await one() for _ in range(runs)]
    elapsed = time.perf_counter() - started
    await service.shutdown(0)
    bad = [r for r in records if r.status != "ok"]
    if bad:
        raise RuntimeError(f"{len(bad)} runs failed: {bad[0].error}")
    return elapsed


def heap_per_run(program: Program, runs: int, shared: bool) -> float:
    """Bytes of Python heap per run at the peak of ``runs`` concurrent runs."""
    asyncio.run(_runs(program, 10, True, shared))  # first-use caches are not per run
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        asyncio.run(_runs(program, runs, True, shared))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    return (peak - base) / runs


# --- main -----------------------------------------------------------------------------------


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.2f} ms"


#: What is measured over HTTP: name, our path and body, the bare handler's path, and
#: whether the goals apply (they do where both sides make the upstream call).
CASES: list[tuple[str, str, bytes, str, bool]] = [
    ("POST /run (test model)", "/run/offline/echo", RUN_BODY, "/static", False),
    ("POST /run (loopback chat)", "/run/chat/ask", RUN_BODY, "/proxy", True),
    ("POST /v1/chat/completions", "/v1/chat/completions", CHAT_BODY, "/proxy", True),
]


def http_rounds(args: argparse.Namespace, upstream: str, folder: Path) -> None:
    project = write_project(folder / "http", upstream)
    n, clients = args.requests, args.clients
    with serve_process(project) as ours, bare_process(upstream) as bare:
        served = []
        for case in CASES:
            status = asyncio.run(probe(ours.url + case[1], case[2]))
            if status == 200:
                served.append(case)
            else:
                report(case[0], f"HTTP {status}", "(not served: skipped)")
        results: dict[str, list[tuple[Load, Load]]] = {c[0]: [] for c in served}
        sequential: dict[str, list[tuple[Load, Load]]] = {c[0]: [] for c in served}
        for round_ in range(args.rounds):
            for name, path, body, bare_path, _ in served:
                # One client alone measures overhead; behind a slow upstream it would only
                # measure the upstream's latency, slowly.
                batches = [(results, clients, n)]
                if args.latency_ms == 0:
                    batches.append((sequential, 1, n // 4))
                for batch, width, total in batches:
                    if round_ % 2 == 0:
                        mine = measure(ours, path, body, width, total)
                        theirs = measure(bare, bare_path, body, width, total)
                    else:
                        theirs = measure(bare, bare_path, body, width, total)
                        mine = measure(ours, path, body, width, total)
                    batch[name].append((mine, theirs))
    alone = f" (and {n // 4} from one)" if args.latency_ms == 0 else ""
    print(
        f"serve: {n} requests from {clients} concurrent clients{alone}, upstream latency "
        f"{args.latency_ms:g} ms, median of {args.rounds} interleaved rounds"
    )
    for name, _, _, _, goal in served:
        _report_case(name, results[name], sequential[name], goal)


def _report_case(
    name: str,
    pairs: list[tuple[Load, Load]],
    one_client: list[tuple[Load, Load]],
    goal: bool,
) -> None:
    def mid(figure: Callable[[Load], float], side: int) -> float:
        return median([figure(pair[side]) for pair in pairs])

    def ratio(figure: Callable[[Load], float]) -> float:
        return median([figure(ours) / figure(bare) for ours, bare in pairs])

    def p50(load: Load) -> float:
        return load.percentile(0.5)

    def p99(load: Load) -> float:
        return load.percentile(0.99)

    def rps(load: Load) -> float:
        return load.rps

    def cpu(load: Load) -> float:
        return load.cpu_per_request

    print(f"  {name}")
    report("requests/s: serve / bare", f"{mid(rps, 0):.0f} / {mid(rps, 1):.0f}")
    report("p50: serve / bare", f"{_ms(mid(p50, 0))} / {_ms(mid(p50, 1))}")
    report("p99: serve / bare", f"{_ms(mid(p99, 0))} / {_ms(mid(p99, 1))}")
    report("server CPU per request: serve / bare", f"{_ms(mid(cpu, 0))} / {_ms(mid(cpu, 1))}")
    if one_client:
        seq = median([o.elapsed / len(o.latencies) for o, _ in one_client])
        bare_seq = median([b.elapsed / len(b.latencies) for _, b in one_client])
        report("one client: serve / bare", f"{_ms(seq)} / {_ms(bare_seq)}")
    failures = sum(o.failures + b.failures for o, b in pairs + one_client)
    if goal:
        report("throughput / bare", f"{ratio(rps):.2f}x", ">= 0.8x", ratio(rps) >= 0.8)
        report("p99 / bare p99", f"{ratio(p99):.2f}x", "<= 1.3x", ratio(p99) <= 1.3)
    else:
        report("throughput / bare", f"{ratio(rps):.2f}x", "(no goal: no upstream call)")
        report("p99 / bare p99", f"{ratio(p99):.2f}x", "(no goal)")
    report("failed requests (all rounds)", str(failures), "0", failures == 0)


def in_process(args: argparse.Namespace, folder: Path) -> None:
    from openprogram_yaml.compile.project import compile_path

    print("RunService against the loopback chat server: a runtime per run (before) / shared")
    with chat_server(latency_ms=0) as upstream:
        program = compile_path(write_project(folder / "fast", upstream))
        asyncio.run(_runs(program, 50, False, True))  # warm
        own: list[float] = []
        shared: list[float] = []
        runs = args.sequential
        for round_ in range(args.rounds):
            for side in (True, False) if round_ % 2 else (False, True):
                elapsed = asyncio.run(_runs(program, runs, False, side)) / runs
                (shared if side else own).append(elapsed)
    report("sequential, runtime per run (before)", f"{median(own) * 1000:.3f} ms/run")
    report("sequential, shared runtimes", f"{median(shared) * 1000:.3f} ms/run")
    ratio = median([s / o for s, o in zip(shared, own, strict=True)])
    report("  shared / per run", f"{ratio:.2f}x", "< 1x", ratio < 1)
    n = args.in_flight
    with chat_server(latency_ms=100) as upstream:
        program = compile_path(write_project(folder / "slow", upstream))
        per_own = heap_per_run(program, n, False)
        per_shared = heap_per_run(program, n, True)
    report(f"heap per run, {n} in flight, runtime per run", f"{per_own / 1024:.1f} KB")
    report(
        f"heap per run, {n} in flight, shared",
        f"{per_shared / 1024:.1f} KB",
        "< 100 KB",
        per_shared < 100e3,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=2000, help="per side and round")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--clients", type=int, default=64)
    parser.add_argument("--latency-ms", type=float, default=0.0, help="the chat server's")
    parser.add_argument("--sequential", type=int, default=1000, help="runs per in-process round")
    parser.add_argument("--in-flight", type=int, default=500, help="runs for the heap figure")
    parser.add_argument("--skip-http", action="store_true", help="only the in-process figures")
    parser.add_argument("--skip-in-process", action="store_true", help="only the HTTP figures")
    parser.add_argument("--bare", metavar="UPSTREAM", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.bare:
        asyncio.run(bare_server(args.bare))
        return
    os.chdir(ROOT)
    with tempfile.TemporaryDirectory(prefix="bench-serve-") as tmp:
        folder = Path(tmp)
        if not args.skip_http:
            with chat_server(latency_ms=args.latency_ms) as upstream:
                http_rounds(args, upstream, folder)
        if not args.skip_in_process:
            in_process(args, folder)


if __name__ == "__main__":
    main()
