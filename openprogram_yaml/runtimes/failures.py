"""How a failed turn is classified: its reason, whether it is retryable, what makes it final.

The one home of these rules. Providers turn HTTP replies and client exceptions into
``TurnFailure``s (``failure_from_status``, ``failure_from_body_error``,
``failure_from_redirect``, ``failure_from_exception``); ``Runtime.exec`` classifies what a
runtime, plugin or ``call=`` function raises or reports (``classify_exception``,
``classify_error_text``) and asks ``is_retryable`` before another attempt. When to retry
and how long to wait belongs to ``runtime.retry``.
"""

from __future__ import annotations

import asyncio
import email.utils
import functools
import json
import math
import re
import sys
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from ..errors import ErrorReason, LLMError
from ..json_types import parse_json
from ..redaction import redact
from .protocol import TurnFailure

__all__ = [
    "FALLBACK_REASONS",
    "MAX_ERROR_TEXT",
    "MAX_RETRY_AFTER_S",
    "PERMANENT_MARKERS",
    "PERMANENT_REASONS",
    "classify_error_text",
    "classify_exception",
    "classify_status",
    "failure_from_body_error",
    "failure_from_exception",
    "failure_from_redirect",
    "failure_from_status",
    "falls_back",
    "is_permanent_text",
    "is_quota_text",
    "is_retryable",
    "parse_retry_after",
    "retry_after_from_headers",
]

_NUMBER = r"^\s*(\d+(?:\.\d+)?)\s*(ms|s)?\s*$"  # compiled (and cached by re) on first use
# A 429 saying one of these is an exhausted quota or plan, not a rate limit: waiting a few
# seconds does not bring credit back.
_QUOTA_MARKERS = (
    "insufficient_quota",
    "quota",
    "billing",
    "usage_limit_reached",
    "usage limit reached",
    "credit balance is too low",
)
#: Words that make any failure final, whatever its status or a runtime's ``retryable``
#: (the seed's list: bad image data, expired or failed login, re-auth, bad credentials).
PERMANENT_MARKERS = (
    "not a valid image",
    "invalid image",
    "image data is not",
    "login expired",
    "login failed",
    "re-auth",
    "unauthorized",
    "invalid api key",
    "invalid_api_key",
)


def parse_retry_after(value: str | float | None, *, now: float | None = None) -> float | None:
    """Seconds from a Retry-After value: seconds, ``"<n>ms"`` or an HTTP-date; None if unusable.

    ``now`` is the wall-clock time (``time.time()``) an HTTP-date is measured from.
    """
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value) if 0 <= value < math.inf else None
    match = re.match(_NUMBER, value, re.IGNORECASE)
    if match:
        number = float(match.group(1))  # 400 nines make inf: no wait at all, not a forever
        if number == math.inf:
            return None
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
            if 0 <= value < math.inf:  # "inf" and "nan" are no number of milliseconds
                return value / 1000.0
    return parse_retry_after(lowered.get("retry-after"), now=now)


def is_quota_text(text: str) -> bool:
    """Whether an error body speaks of an exhausted quota or billing (not worth retrying)."""
    lowered = text.lower()
    return any(marker in lowered for marker in _QUOTA_MARKERS)


def is_permanent_text(text: str) -> bool:
    """Whether an error message names a failure no retry can fix (``PERMANENT_MARKERS``)."""
    lowered = text.lower()
    return any(marker in lowered for marker in PERMANENT_MARKERS)


def _final_if_permanent(failure: TurnFailure) -> TurnFailure:
    if failure.retryable and is_permanent_text(failure.message):
        failure.retryable = False
        failure.retry_after_s = None
    return failure


def classify_status(status: int, text: str = "") -> tuple[str, bool]:
    """``(reason, retryable)`` for an HTTP status code (``text`` is the error body, if any).

    401/403 are bad credentials and 400/404/413/422 bad requests: final. 429 is a retryable
    rate limit unless the body speaks of an exhausted quota, plan or credit (final, as is
    any 4xx that does); 408 is a timeout; 409, 425 and 5xx are the server's trouble and
    retryable.
    """
    if status in (401, 403):
        return ErrorReason.AUTH.value, False
    # Anthropic says "credit balance is too low" with a 400: an exhausted quota all the same.
    if status == 402 or (400 <= status < 500 and is_quota_text(text)):
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


#: Failures no retry can fix. A runtime's ``retryable=True`` does not override these.
PERMANENT_REASONS = frozenset(
    {
        ErrorReason.AUTH.value,
        ErrorReason.INVALID_REQUEST.value,
        ErrorReason.QUOTA.value,
        ErrorReason.TRANSPORT_EXHAUSTED.value,
    }
)


#: The longest ``Retry-After`` waited for (one hour). A server asking for more (a broken or
#: hostile one can ask for years) makes the failure final, so that a fallback model gets the
#: exec, instead of the run sleeping that long.
MAX_RETRY_AFTER_S = 3600.0


def is_retryable(failure: TurnFailure) -> bool:
    """Whether another attempt could succeed: not when the runtime said no, the reason is
    permanent, the message names a permanent failure, or the server asks to be retried only
    after more than ``MAX_RETRY_AFTER_S``."""
    return (
        failure.retryable
        and failure.reason not in PERMANENT_REASONS
        and not is_permanent_text(failure.message)
        and not (failure.retry_after_s is not None and failure.retry_after_s > MAX_RETRY_AFTER_S)
    )


#: The final failures after which a fallback model gets the same exec: the model or its
#: provider could not answer (retries exhausted on a rate limit, a 5xx, a dropped
#: connection or a timeout; an exhausted quota; a rejected key). Not a request the provider
#: refused for what it holds (``invalid_request``: another model would likely refuse it
#: too), nor a loop that ran out of iterations, a closed runtime or an unknown exception.
FALLBACK_REASONS = frozenset(
    {
        ErrorReason.TIMEOUT.value,
        ErrorReason.RATE_LIMIT.value,
        ErrorReason.SERVER_ERROR.value,
        ErrorReason.CONNECTION.value,
        ErrorReason.QUOTA.value,
        ErrorReason.TRANSPORT_EXHAUSTED.value,
        ErrorReason.AUTH.value,
    }
)


def falls_back(error: LLMError) -> bool:
    """Whether the failed exec behind ``error`` should be given to the next model."""
    return str(error.reason) in FALLBACK_REASONS


# --- what a runtime raised or reported ---------------------------------------------------


# Ordered: the first pattern that matches decides. Checked against "ClassName: message".
_TEXT_PATTERNS: tuple[tuple[str, ErrorReason, bool], ...] = (
    (r"transport.?exhausted", ErrorReason.TRANSPORT_EXHAUSTED, False),
    (
        r"insufficient.?quota|quota.{0,20}exceeded|billing|usage.?limit.?reached|"
        r"credit balance is too low|\b402\b",
        ErrorReason.QUOTA,
        False,
    ),
    (
        r"invalid.{0,10}api.?key|unauthori[sz]ed|authentication|permission.?denied|forbidden|"
        r"expired.{0,20}(key|token|credential)|login.?(expired|failed)|re-?auth|\b40[13]\b",
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
        r"bad.?request|invalid.?request|invalid image|not a valid image|image data is not|"
        r"unprocessable|\b4(00|04|13|22)\b",
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
    return _final_if_permanent(failure)


# --- HTTP replies and client exceptions -------------------------------------------------

#: The longest piece of a server's error body kept in a message.
MAX_ERROR_TEXT = 500


def _cut(text: str, secrets: Iterable[str | None]) -> str:
    """``text`` redacted, then cut to ``MAX_ERROR_TEXT`` (a cut first could keep the start of
    a secret the server echoed)."""
    return redact(text, secrets)[:MAX_ERROR_TEXT]


def _error_text(body: bytes | str) -> str:
    """The human part of an error body: ``error.message`` when it is JSON, else the text."""
    text = body.decode("utf-8", "replace") if isinstance(body, bytes) else body
    try:
        data = parse_json(text)
    except ValueError:
        return text.strip()
    error = data.get("error", data) if isinstance(data, dict) else data
    if isinstance(error, dict):
        message = error.get("message") or error.get("detail") or error.get("type")
        if isinstance(message, str) and message:
            return message
    if isinstance(error, str) and error:
        return error
    return text.strip()


def failure_from_status(
    status: int,
    headers: Mapping[str, str],
    body: bytes | str,
    *,
    provider: str,
    secrets: Iterable[str | None] = (),
    now: Callable[[], float] = time.time,
) -> TurnFailure:
    """Classify an HTTP error response for the retry loop.

    401/403 auth and 400/404/413/422 invalid requests are final; 429 is a retryable rate
    limit unless the body speaks of quota or billing; 408, 409 and 5xx are retryable.
    """
    secrets = tuple(secrets)
    text = body.decode("utf-8", "replace") if isinstance(body, bytes) else body
    retry_after = retry_after_from_headers(headers, now=now())
    detail = _cut(_error_text(body), secrets)
    reason, retryable = classify_status(status, text)
    message = f"{provider}: HTTP {status} {reason}"
    if detail:
        message += f": {detail}"
    too_long = retry_after is not None and retry_after > MAX_RETRY_AFTER_S
    if retry_after is not None and retryable:
        message += f" (retry after {retry_after:g}s"
        message += ": longer than the hour a retry waits at most, so final)" if too_long else ")"
    return _final_if_permanent(
        TurnFailure(
            reason=reason,
            message=redact(message, secrets),
            retryable=retryable and not too_long,
            http_status=status,
            retry_after_s=retry_after if retryable else None,
        )
    )


#: The longest error kind (a body error's ``code`` or ``type``) kept in a message.
MAX_KIND_TEXT = 100

#: Error ``type`` values providers send inside a body or an SSE ``error`` event.
_BODY_ERROR_TYPES: dict[str, tuple[ErrorReason, bool]] = {
    "overloaded_error": (ErrorReason.SERVER_ERROR, True),
    "api_error": (ErrorReason.SERVER_ERROR, True),
    "server_error": (ErrorReason.SERVER_ERROR, True),
    "rate_limit_error": (ErrorReason.RATE_LIMIT, True),
    "rate_limit_exceeded": (ErrorReason.RATE_LIMIT, True),
    "timeout_error": (ErrorReason.TIMEOUT, True),
    "insufficient_quota": (ErrorReason.QUOTA, False),
    "billing_error": (ErrorReason.QUOTA, False),
    "authentication_error": (ErrorReason.AUTH, False),
    "permission_error": (ErrorReason.AUTH, False),
    "invalid_request_error": (ErrorReason.INVALID_REQUEST, False),
    "not_found_error": (ErrorReason.INVALID_REQUEST, False),
    "request_too_large": (ErrorReason.INVALID_REQUEST, False),
}


def failure_from_body_error(
    error: Any, *, provider: str, secrets: Iterable[str | None] = ()
) -> TurnFailure:
    """Classify an ``{"error": …}`` object sent with a 200 or inside a stream."""
    secrets = tuple(secrets)
    if isinstance(error, dict):
        code = error.get("code")
        code = None if isinstance(code, bool) else code  # a flag, not a code
        kind = str(code or error.get("type") or "")
        detail = str(error.get("message") or kind or "error")
        # A number is a status only where one could be: not a JSON-RPC code (-32603).
        status = code if isinstance(code, int) and 100 <= code <= 599 else None
    else:
        kind, detail, status = "", str(error), None
    if status is not None:
        body = json.dumps({"error": error})
        return failure_from_status(status, {}, body, provider=provider, secrets=secrets)
    reason, retryable = _BODY_ERROR_TYPES.get(kind, (ErrorReason.SERVER_ERROR, True))
    if reason is not ErrorReason.AUTH and is_quota_text(f"{kind} {detail}"):
        reason, retryable = ErrorReason.QUOTA, False
    shown = _cut(kind, secrets)[:MAX_KIND_TEXT] or "error"
    message = f"{provider}: {shown}: {_cut(detail, secrets)}"
    return _final_if_permanent(TurnFailure(reason.value, redact(message, secrets), retryable))


def failure_from_redirect(
    status: int,
    headers: Mapping[str, str],
    *,
    provider: str,
    secrets: Iterable[str | None] = (),
) -> TurnFailure:
    """A 3xx reply: final, since the next attempt gets the same redirect.

    Redirects are not followed: they would carry the key to wherever ``Location`` points.
    """
    secrets = tuple(secrets)
    location = {k.lower(): v for k, v in headers.items()}.get("location")
    where = f"redirect to {_cut(location, secrets)}" if location else "redirect with no Location"
    message = (
        f"{provider}: HTTP {status} {where}; redirects are not followed, "
        "set base_url to the address that answers"
    )
    return TurnFailure(
        ErrorReason.INVALID_REQUEST.value,
        redact(message, secrets),
        False,
        http_status=status,
    )


def failure_from_exception(
    exc: BaseException,
    *,
    provider: str,
    secrets: Iterable[str | None] = (),
    read_timeout_s: float | None = None,
) -> TurnFailure:
    """Translate an exception raised while talking to a provider.

    Timeouts and network failures are transient; anything else is reported as unknown and
    final, since it is most likely a bug rather than a flaky network. ``read_timeout_s``
    (the bound in force) lets a read timeout say how long the server was silent.
    """
    secrets = tuple(secrets)
    transient = _transient_errors()
    if isinstance(exc, transient[0]):
        reason, retryable = ErrorReason.TIMEOUT, True
    elif isinstance(exc, transient[1]):
        reason, retryable = ErrorReason.CONNECTION, True
    else:
        reason, retryable = ErrorReason.UNKNOWN, False
    detail = str(exc) or type(exc).__name__
    message = f"{provider}: {reason.value}: {type(exc).__name__}: {_cut(detail, secrets)}"
    if read_timeout_s is not None and isinstance(exc, _read_timeouts()):
        message = f"{provider}: timeout: the server sent nothing for {read_timeout_s:g} s "
        message += "(read timeout)"
    return TurnFailure(reason.value, redact(message, secrets), retryable)


def _read_timeouts() -> tuple[type[BaseException], ...]:
    """The exceptions that mean "no byte arrived in time", of the HTTP libraries loaded."""
    found: list[type[BaseException]] = []
    httpx = sys.modules.get("httpx")
    if httpx is not None:
        found.append(httpx.ReadTimeout)
    aiohttp = sys.modules.get("aiohttp")
    if aiohttp is not None:
        found.append(getattr(aiohttp, "SocketTimeoutError", aiohttp.ServerTimeoutError))
    return tuple(found)


def _transient_errors() -> tuple[tuple[type[BaseException], ...], tuple[type[BaseException], ...]]:
    """(timeouts, connection failures) of the HTTP libraries in use; only loaded ones count."""
    timeouts: list[type[BaseException]] = [TimeoutError]  # aiohttp's timeouts are these
    network: list[type[BaseException]] = [ConnectionError, asyncio.IncompleteReadError]
    httpx = sys.modules.get("httpx")
    if httpx is not None:
        timeouts.append(httpx.TimeoutException)
        network.append(httpx.TransportError)
    aiohttp = sys.modules.get("aiohttp")
    if aiohttp is not None:
        network += [aiohttp.ClientConnectionError, aiohttp.ClientPayloadError]
    return tuple(timeouts), tuple(network)
