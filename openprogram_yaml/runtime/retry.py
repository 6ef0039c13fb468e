"""Transport retries: classifying failures, backoff with jitter, Retry-After, the shared budget.

The rules (DESIGN.md, "Settled points"): ``max_retries`` counts every attempt; the delay before
retry ``n`` (0-based) is ``base * 2**n`` with ±25% jitter; a ``Retry-After`` hint is a lower
bound, jittered upwards only so that many clients told the same time do not return together.
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Callable, Mapping

from openprogram_yaml._fast_dataclass import fast_dataclass
from openprogram_yaml.errors import ErrorReason, LLMError
from openprogram_yaml.runtimes.failures import (
    classify_status,
    parse_retry_after,
    retry_after_from_headers,
)
from openprogram_yaml.runtimes.protocol import TurnFailure

__all__ = [
    "DEFAULT_BACKOFF_BASE_S",
    "DEFAULT_MAX_RETRIES",
    "MAX_BACKOFF_S",
    "PERMANENT_REASONS",
    "RecoveryBudget",
    "RetryInfo",
    "backoff_delay",
    "classify_error_text",
    "classify_exception",
    "classify_status",
    "is_retryable",
    "parse_retry_after",
    "resolve_backoff_base",
    "resolve_max_retries",
    "retry_after_from_headers",
]

DEFAULT_MAX_RETRIES = 6
DEFAULT_BACKOFF_BASE_S = 1.5
#: The exponential part stops growing here; a server's Retry-After may still ask for longer.
MAX_BACKOFF_S = 60.0

#: Failures no retry can fix. A runtime's ``retryable=True`` does not override these.
PERMANENT_REASONS = frozenset(
    {
        ErrorReason.AUTH.value,
        ErrorReason.INVALID_REQUEST.value,
        ErrorReason.QUOTA.value,
        ErrorReason.TRANSPORT_EXHAUSTED.value,
    }
)


@fast_dataclass(frozen=True)
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


# Ordered: the first pattern that matches decides. Checked against "ClassName: message".
_TEXT_PATTERNS: tuple[tuple[str, ErrorReason, bool], ...] = (
    (r"transport.?exhausted", ErrorReason.TRANSPORT_EXHAUSTED, False),
    (r"insufficient.?quota|quota.{0,20}exceeded|billing|\b402\b", ErrorReason.QUOTA, False),
    (
        r"invalid.{0,10}api.?key|unauthori[sz]ed|authentication|permission.?denied|forbidden|"
        r"expired.{0,20}(key|token|credential)|\b40[13]\b",
        ErrorReason.AUTH,
        False,
    ),
    (r"rate.?limit|too many requests|\b429\b", ErrorReason.RATE_LIMIT, True),
    (r"timed? ?out|timeout", ErrorReason.TIMEOUT, True),
    (
        r"overloaded|server.?error|bad gateway|unavailable|\b5\d\d\b",
        ErrorReason.SERVER_ERROR,
        True,
    ),
    (r"connect|network|reset by peer|broken pipe|eof", ErrorReason.CONNECTION, True),
    (
        r"bad.?request|invalid.?request|invalid image|unprocessable|\b4(00|04|13|22)\b",
        ErrorReason.INVALID_REQUEST,
        False,
    ),
)


@functools.cache
def _text_rules() -> tuple[tuple[re.Pattern[str], str, bool], ...]:
    # Compiled on the first failure, not at import: most runs never need them.
    return tuple(
        (re.compile(pattern, re.IGNORECASE), reason.value, retryable)
        for pattern, reason, retryable in _TEXT_PATTERNS
    )


def classify_error_text(text: str) -> TurnFailure:
    """Classify an error known only by its text.

    Only errors known to be transient are retried: an unrecognised one is far more often a
    deterministic fault (a bad pattern, a bug) than a flaky network, and retrying it six
    times only delays the same error by a minute.
    """
    for pattern, reason, retryable in _text_rules():
        if pattern.search(text):
            return TurnFailure(reason=reason, message=text, retryable=retryable)
    return TurnFailure(reason=ErrorReason.UNKNOWN.value, message=text, retryable=False)


def _int_attr(obj: object, *names: str) -> int | None:
    for name in names:
        value = getattr(obj, name, None)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return None


def classify_exception(exc: BaseException) -> TurnFailure:
    """Classify an exception a runtime or a ``call=`` function raised.

    Honours, when present: ``LLMError`` fields, an HTTP status (``status_code`` /
    ``http_status`` / ``status``, or on ``exc.response``), ``retryable``, ``retry_after_s``
    and ``transport_exhausted`` attributes. Anything unrecognised counts as transient.
    """
    message = f"{type(exc).__name__}: {exc}"
    if isinstance(exc, LLMError):
        return TurnFailure(
            reason=str(exc.reason),
            message=message,
            retryable=exc.retryable,
            http_status=exc.http_status,
            retry_after_s=exc.retry_after_s,
        )
    response = getattr(exc, "response", None)
    status = _int_attr(exc, "status_code", "http_status", "status")
    if status is None and response is not None:
        status = _int_attr(response, "status_code", "status")
    retry_after = getattr(exc, "retry_after_s", None)
    if not isinstance(retry_after, int | float) or isinstance(retry_after, bool):
        retry_after = None
        headers = getattr(response, "headers", None)
        if isinstance(headers, Mapping):
            retry_after = retry_after_from_headers(headers)
    if getattr(exc, "transport_exhausted", False) is True:
        failure = TurnFailure(ErrorReason.TRANSPORT_EXHAUSTED.value, message, False)
    elif status is not None:
        reason, retryable = classify_status(status, message)
        failure = TurnFailure(reason, message, retryable, http_status=status)
    elif isinstance(exc, TimeoutError):
        failure = TurnFailure(ErrorReason.TIMEOUT.value, message, True)
    elif isinstance(exc, ConnectionError):
        failure = TurnFailure(ErrorReason.CONNECTION.value, message, True)
    else:
        failure = classify_error_text(message)
    marked = getattr(exc, "retryable", None)
    if marked is False:
        failure.retryable = False
    elif marked is True and failure.reason not in PERMANENT_REASONS:
        failure.retryable = True
    failure.retry_after_s = float(retry_after) if retry_after is not None else None
    return failure


def is_retryable(failure: TurnFailure) -> bool:
    """Whether another attempt could succeed."""
    return failure.retryable and failure.reason not in PERMANENT_REASONS


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
