"""How a failed turn is classified: HTTP status, Retry-After hints, quota bodies.

The one home of these rules, for the providers (which turn responses into ``TurnFailure``s)
and for ``Runtime.exec`` (which classifies what a ``call=`` function or plugin raises).
"""

from __future__ import annotations

import email.utils
import re
import time
from collections.abc import Mapping

from ..errors import ErrorReason

__all__ = ["classify_status", "is_quota_text", "parse_retry_after", "retry_after_from_headers"]

_NUMBER = r"^\s*(\d+(?:\.\d+)?)\s*(ms|s)?\s*$"  # compiled (and cached by re) on first use
_QUOTA_MARKERS = ("insufficient_quota", "quota", "billing")


def parse_retry_after(value: str | float | None, *, now: float | None = None) -> float | None:
    """Seconds from a Retry-After value: seconds, ``"<n>ms"`` or an HTTP-date; None if unusable.

    ``now`` is the wall-clock time (``time.time()``) an HTTP-date is measured from.
    """
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value) if value >= 0 else None
    match = re.match(_NUMBER, value, re.IGNORECASE)
    if match:
        number = float(match.group(1))
        return number / 1000.0 if (match.group(2) or "").lower() == "ms" else number
    try:
        when = email.utils.parsedate_to_datetime(value.strip())
    except (TypeError, ValueError, IndexError):
        return None
    if when is None:
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


def retry_after_from_headers(
    headers: Mapping[str, str], *, now: float | None = None
) -> float | None:
    """The hint in ``retry-after-ms`` (milliseconds) or ``retry-after`` response headers."""
    lowered = {k.lower(): v for k, v in headers.items()}
    ms = lowered.get("retry-after-ms")
    if ms is not None:
        try:
            value = float(ms)
        except ValueError:
            pass
        else:
            if value >= 0:
                return value / 1000.0
    return parse_retry_after(lowered.get("retry-after"), now=now)


def is_quota_text(text: str) -> bool:
    """Whether an error body speaks of an exhausted quota or billing (not worth retrying)."""
    lowered = text.lower()
    return any(marker in lowered for marker in _QUOTA_MARKERS)


def classify_status(status: int, text: str = "") -> tuple[str, bool]:
    """``(reason, retryable)`` for an HTTP status code (``text`` is the error body, if any).

    401/403 are bad credentials and 400/404/413/422 bad requests: final. 429 is a retryable
    rate limit unless the body speaks of quota or billing; 408 is a timeout; 409, 425 and
    5xx are the server's trouble and retryable.
    """
    if status in (401, 403):
        return ErrorReason.AUTH.value, False
    if status == 402 or (status == 429 and is_quota_text(text)):
        return ErrorReason.QUOTA.value, False
    if status == 429:
        return ErrorReason.RATE_LIMIT.value, True
    if status == 408:
        return ErrorReason.TIMEOUT.value, True
    if status in (409, 425) or status >= 500:
        return ErrorReason.SERVER_ERROR.value, True
    if 400 <= status < 500:
        return ErrorReason.INVALID_REQUEST.value, False
    return ErrorReason.UNKNOWN.value, False
