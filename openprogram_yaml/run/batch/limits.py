"""Client-side rate limits for a batch: model calls per minute and tokens per minute.

``RateLimiter`` spaces calls out evenly rather than letting a minute's worth go at once:
with ``rpm`` 600 a call starts at most every 0.1 s, so a provider that also counts per
second never sees a burst. Tokens are known only once a call has answered, so ``tpm``
charges each call's tokens after it ends: the next call waits until the tokens spent so far
fit the rate (the long-run rate holds; a single call is never refused for being large).

Every model call of a row counts, retries included: the limiter stands in front of the
runtime (``LimitedSelector``), below the retry loop of ``runtime.engine``. A provider's
Retry-After still wins: the runtime sleeps it out before the retry asks for its slot.

The clock and the sleep are injected (``providers.test.FakeClock`` in tests), as the
runtime's retries take them.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from ...runtimes.protocol import (
    AgentRuntimeProtocol,
    Message,
    RuntimeResult,
    RuntimeSelectorProtocol,
)
from ...runtimes.wrapping import WrappedRuntime

__all__ = ["LimitedRuntime", "LimitedSelector", "RateLimiter"]


class RateLimiter:
    """Spaces call starts ``60 / rpm`` seconds apart and keeps tokens under ``tpm``."""

    def __init__(
        self,
        rpm: float | None = None,
        tpm: float | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.rpm = rpm
        self.tpm = tpm
        self._clock = clock
        self._sleep = sleep
        #: When the next call may start by ``rpm``, and by the tokens spent (``tpm``).
        self._next_call = clock()
        self._tokens_free_at = clock()

    @property
    def active(self) -> bool:
        return bool(self.rpm or self.tpm)

    async def acquire(self) -> None:
        """Wait for this call's slot (taken at once, in the order calls ask)."""
        now = self._clock()
        start = max(now, self._tokens_free_at)
        if self.rpm:
            start = max(start, self._next_call)
            self._next_call = start + 60.0 / self.rpm
        if start > now:
            await self._sleep(start - now)

    def spend(self, tokens: int) -> None:
        """Charge a finished call's tokens: later calls wait until they fit ``tpm``."""
        if self.tpm and tokens > 0:
            base = max(self._clock(), self._tokens_free_at)
            self._tokens_free_at = base + tokens * 60.0 / self.tpm


class LimitedRuntime(WrappedRuntime):
    """A runtime whose turns each wait for a slot of ``limiter`` before they are sent."""

    def __init__(self, inner: AgentRuntimeProtocol, limiter: RateLimiter) -> None:
        super().__init__(inner)
        self.limiter = limiter

    def __repr__(self) -> str:
        return f"LimitedRuntime({self.inner!r})"

    async def run_turn(
        self,
        prompt: str | Sequence[Message],
        *,
        system_prompt: str | None = None,
        model_ref: str | None = None,
        **kwargs: Any,
    ) -> RuntimeResult:
        await self.limiter.acquire()
        result = await self.inner.run_turn(
            prompt, system_prompt=system_prompt, model_ref=model_ref, **kwargs
        )
        if result.usage is not None:
            self.limiter.spend(result.usage.total_tokens)
        return result

    async def aclose(self) -> None:
        """Nothing: the selector behind it closes the runtimes it made."""


class LimitedSelector:
    """A selector whose runtimes wait on one shared ``RateLimiter``; everything else (the
    ``explain`` recordings read, ``aclose``) is the inner selector's."""

    def __init__(self, inner: RuntimeSelectorProtocol, limiter: RateLimiter) -> None:
        self.inner = inner
        self.limiter = limiter

    def __repr__(self) -> str:
        return f"LimitedSelector({self.inner!r})"

    def __getattr__(self, name: str) -> Any:
        if name == "inner":  # not set yet (a copy being made): no endless recursion
            raise AttributeError(name)
        return getattr(self.inner, name)

    def select(self, model_ref: str) -> LimitedRuntime:
        return LimitedRuntime(self.inner.select(model_ref), self.limiter)

    async def aclose(self) -> None:
        await self.inner.aclose()
