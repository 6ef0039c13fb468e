"""Batch: ``openprogram-run batch`` over 10,000 rows against the loopback server at 100 ms
latency with ``--concurrency 200``, run as users run it (the console script, in its own
process).

Goals: the batch's wall time (from its ``--json`` summary: reading rows, running them,
writing every line) within 1.3x of the ideal, rows / concurrency x latency (5.0 s here);
the process's peak memory (max RSS) under 300 MB. The time of the whole command, start-up
and compile included, is reported beside it.

    python benchmarks/batch.py [--rows 10000] [--concurrency 200] [--latency-ms 100]
                               [--engine ray [--ray-address ADDR]]

``--engine ray`` runs the same batch on the Ray engine (the ray extra): without
``--ray-address`` the batch starts a local Ray instance (its start-up counts), with one it
connects to a running cluster (``ray start --head``). Ray's worker processes are not the
batch's children: the peak memory is the driver's only.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from _common import ROOT, chat_server, report

AGENT = """\
version: 1
name: bench
model: local:bench
retry: {max_retries: 2}
runtimes:
  - {match: "local:*", runtime: openai, options: {base_url: "%s"}}
methods:
  label:
    inputs: {ticket: {type: string}}
    prompt: "Label: {{ ticket }}"
"""


def run_batch(
    url: str, folder: Path, rows: int, concurrency: int, engine: Sequence[str] = ()
) -> tuple[dict[str, object], float, float]:
    """The batch's summary, the command's wall time, and its peak memory (MB)."""
    agent = folder / "agent.yaml"
    agent.write_text(AGENT % url, encoding="utf-8")
    source = folder / "rows.jsonl"
    with source.open("w", encoding="utf-8") as out:
        for i in range(rows):
            out.write(json.dumps({"ticket": f"ticket {i}: my invoice is wrong"}) + "\n")
    output = folder / "out.jsonl"
    output.unlink(missing_ok=True)
    command = [sys.executable, "-m", "openprogram_yaml", "batch", str(agent), "label"]
    command += ["--input", str(source), "--output", str(output)]
    command += ["--concurrency", str(concurrency), "--json", "--quiet", *engine]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OPENPROGRAM_CACHE_DIR": str(folder / "cache")}
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
    wall = time.perf_counter() - started
    peak_kb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    if done.returncode != 0:
        raise SystemExit(f"batch failed ({done.returncode}): {done.stderr[-2000:]}")
    lines = sum(1 for _ in output.open(encoding="utf-8"))
    if lines != rows:
        raise SystemExit(f"batch wrote {lines} lines for {rows} rows")
    # ru_maxrss of children is the largest of any child so far: the batch is the largest.
    return json.loads(done.stdout), wall, max(peak_kb, before) / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=10_000)
    parser.add_argument("--concurrency", type=int, default=200)
    parser.add_argument("--latency-ms", type=float, default=100.0)
    parser.add_argument("--engine", choices=("local", "ray"), default="local")
    parser.add_argument("--ray-address", metavar="ADDR", help="--engine ray: a running cluster")
    args = parser.parse_args()
    engine = ["--engine", args.engine]
    if args.ray_address:
        engine += ["--address", args.ray_address]
    ideal = args.rows / args.concurrency * args.latency_ms / 1000
    print(
        f"batch: {args.rows:,} rows, concurrency {args.concurrency}, "
        f"{args.latency_ms:g} ms latency (ideal {ideal:.2f} s), engine {args.engine}"
    )
    with chat_server(args.latency_ms) as url, tempfile.TemporaryDirectory() as tmp:
        summary, wall, peak_mb = run_batch(url, Path(tmp), args.rows, args.concurrency, engine)
    elapsed = float(summary["elapsed_s"])  # type: ignore[arg-type]
    latency = summary["latency_s"]
    report(
        "batch wall time / ideal",
        f"{elapsed / ideal:.2f}x ({elapsed:.2f} s)",
        "<= 1.3x",
        elapsed / ideal <= 1.3,
    )
    report("whole command (start-up, compile) / ideal", f"{wall / ideal:.2f}x ({wall:.2f} s)")
    report("peak memory (max RSS)", f"{peak_mb:.0f} MB", "< 300 MB", peak_mb < 300)
    report(
        "rows ok",
        f"{summary['ok']:,} of {args.rows:,}",
        f"{args.rows:,}",
        summary["ok"] == args.rows,
    )
    report("rows / s", f"{args.rows / elapsed:.0f}")
    report("row latency p50 / p95", f"{latency['p50']} s / {latency['p95']} s")  # type: ignore[index]


if __name__ == "__main__":
    main()
