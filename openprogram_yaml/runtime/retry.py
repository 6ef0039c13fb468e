"""Transport retries: how many attempts, backoff with jitter, Retry-After, the shared budget.

The rules (DESIGN.md, "Settled points"): ``max_retries`` counts every attempt; the delay before
retry ``n`` (0-based) is ``base * 2**n`` with ±25% jitter; a ``Retry-After`` hint is a lower
bound, jittered upwards only so that many clients told the same time do not return together.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass

__all__ = [
    "DEFAULT_BACKOFF_BASE_S",
    "DEFAULT_MAX_RETRIES",
    "MAX_BACKOFF_S",
    "RecoveryBudget",
    "RetryInfo",
    "backoff_delay",
    "resolve_backoff_base",
    "resolve_max_retries",
]

DEFAULT_MAX_RETRIES = 6
DEFAULT_BACKOFF_BASE_S = 1.5
#: The exponential part stops growing here; a server's Retry-After may still ask for longer.
MAX_BACKOFF_S = 60.0


@dataclass(frozen=True, slots=True)
class RetryInfo:
    """What ``on_retry`` receives before each backoff sleep."""

    attempt: int
    """The 1-based number of the attempt that just failed."""
    max_retries: int
    delay_s: float
    reason: str
    message: str
    retryable: bool
    http_status: int | None
    retry_after_s: float | None
    elapsed_s: float
    model: str
    provider: str | None


def _env_number(name: str) -> str | None:
    raw = os.environ.get(name)
    return raw.strip() if raw and raw.strip() else None


def resolve_max_retries(value: int | None) -> int:
    """``value``, else ``OPENPROGRAM_MAX_RETRIES``, else 6; always an int >= 1."""
    if value is None:
        raw = _env_number("OPENPROGRAM_MAX_RETRIES")
        if raw is None:
            return DEFAULT_MAX_RETRIES
        try:
            value = int(raw)
        except ValueError:
            raise ValueError(
                f"OPENPROGRAM_MAX_RETRIES must be an integer >= 1, not {raw!r}"
            ) from None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(
            f"max_retries must be an integer >= 1 (it counts all attempts), not {value!r}"
        )
    return value


def resolve_backoff_base(value: float | None) -> float:
    """``value``, else ``OPENPROGRAM_RETRY_BACKOFF_BASE``, else 1.5 seconds."""
    if value is None:
        raw = _env_number("OPENPROGRAM_RETRY_BACKOFF_BASE")
        if raw is None:
            return DEFAULT_BACKOFF_BASE_S
        try:
            value = float(raw)
        except ValueError:
            raise ValueError(
                f"OPENPROGRAM_RETRY_BACKOFF_BASE must be a number, not {raw!r}"
            ) from None
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        raise ValueError(f"backoff_base_s must be a number >= 0, not {value!r}")
    return float(value)


def backoff_delay(
    retry_index: int,
    *,
    base_s: float,
    rand: Callable[[], float],
    retry_after_s: float | None = None,
) -> float:
    """Seconds to wait before retry ``retry_index`` (0 for the first retry).

    ``rand`` returns a float in [0, 1); 0.5 means "no jitter".
    """
    delay = min(base_s * 2.0**retry_index, MAX_BACKOFF_S) * (0.75 + 0.5 * rand())
    if retry_after_s is not None and retry_after_s > 0:
        delay = max(delay, retry_after_s * (1.0 + 0.25 * rand()))
    return delay


class RecoveryBudget:
    """The exec's one allowance of recoveries, shared by transport retries and repairs.

    It starts at ``max_retries - 1``. A repair spends for good. Transport retries spend
    provisionally and are refunded when their request finally succeeds, so transport
    recovery is bounded per request rather than across a whole tool loop.
    """

    __slots__ = ("_pending", "_spent", "total")

    def __init__(self, total: int) -> None:
        self.total = total
        self._spent = 0
        self._pending = 0

    @property
    def remaining(self) -> int:
        return self.total - self._spent - self._pending

    def take_transport(self) -> bool:
        if self.remaining <= 0:
            return False
        self._pending += 1
        return True

    def settle_transport(self) -> None:
        """The request succeeded: its transport retries go back into the allowance."""
        self._pending = 0

    def take_repair(self) -> bool:
        if self.remaining <= 0:
            return False
        self._spent += 1
        return True
