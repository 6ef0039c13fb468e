"""Stopping a front end that runs on: the grace runs in flight get, and the signals that
start it. Shared by ``serve`` and ``--watch``."""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import Iterator

__all__ = ["DEFAULT_GRACE_S", "stop_on_signals"]

#: Seconds runs in flight get to finish on Ctrl-C or SIGTERM before they are interrupted.
#: Below Docker's 10 s stop timeout, so interrupted runs are recorded before a SIGKILL.
DEFAULT_GRACE_S = 8.0


@contextlib.contextmanager
def stop_on_signals(stop: asyncio.Event, force: asyncio.Event) -> Iterator[None]:
    """First Ctrl-C or SIGTERM: ``stop`` (finish runs in flight). Second: ``force``."""
    loop = asyncio.get_running_loop()

    def on_signal() -> None:
        if stop.is_set():
            force.set()
        stop.set()

    installed: list[signal.Signals] = []
    for sig in (signal.SIGINT, signal.SIGTERM):
        try:
            loop.add_signal_handler(sig, on_signal)
        except (NotImplementedError, RuntimeError):  # Windows, or not the main thread
            continue
        installed.append(sig)
    try:
        yield
    finally:
        for sig in installed:
            loop.remove_signal_handler(sig)
