"""What the benchmark scripts share: the loopback server, medians, and goal lines."""

from __future__ import annotations

import contextlib
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent


@contextlib.contextmanager
def chat_server(latency_ms: float = 0.0, chunks: int = 4) -> Iterator[str]:
    """Start ``chat_server.py`` in its own process; yield its ``/v1`` base URL."""
    proc = subprocess.Popen(
        [
            sys.executable,
            str(HERE / "chat_server.py"),
            f"--latency-ms={latency_ms}",
            f"--chunks={chunks}",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        deadline = time.monotonic() + 30
        line = proc.stdout.readline()
        if not line.startswith("PORT ") or time.monotonic() > deadline:
            raise RuntimeError(f"benchmark server did not start: {line!r}")
        yield f"http://127.0.0.1:{int(line.split()[1])}/v1"
    finally:
        for pipe in (proc.stdin, proc.stdout):
            if pipe is not None:
                pipe.close()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def median(values: list[float]) -> float:
    return statistics.median(values)


def verdict(ok: bool) -> str:
    return "PASS" if ok else "MISS"


def report(name: str, figure: str, goal: str = "", ok: bool | None = None) -> None:
    """One line: what was measured, the goal beside it, and whether it is met.

    A figure that is only a side of a ratio (a baseline, a comparison) has no goal and no
    verdict of its own.
    """
    if ok is None:
        print(f"  {name:<44} {figure:>22}   {goal}".rstrip(), flush=True)
        return
    print(f"  {name:<44} {figure:>22}   goal {goal:<22} {verdict(ok)}", flush=True)
