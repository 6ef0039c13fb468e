"""The one exception tree of openprogram_yaml.

    OpenProgramError                      exit_code 1 unless noted
    ├── ConfigError                       exit 2: bad YAML/config; carries .diagnostics
    ├── UsageError                        exit 2: bad command line or inputs
    │   └── InputValidationError          inputs that fail a method's input schema
    ├── LLMError (RuntimeError)           a model call failed: .reason, .retryable, .attempts …
    ├── StructuredOutputError (ValueError)  stable .code and bounded .issues
    │   ├── StructuredOutputSchemaError       code "invalid_schema"
    │   ├── StructuredOutputUnsupportedError  code "unsupported"
    │   ├── StructuredOutputValidationError   "invalid_json" | "validation_failed" |
    │   │                                     "missing_submission" | "mixed_submission"
    │   └── StructuredOutputGenerationError   "refusal" | "incomplete"
    ├── DecisionError (ValueError)        a `choices` pick that stayed invalid
    ├── BudgetExceededError               a run's budget: spent, or not countable (no price)
    ├── UserDeclined                      the person declined a question (Runtime.ask …)
    ├── AskTimeout (TimeoutError)         no answer in time, or nobody to ask, and no default
    └── ToolError                         a tool failed (seen by the model as an error result)

Foreign exceptions (httpx, jsonschema, yaml, pydantic) are translated at the boundary
with ``raise … from exc`` so that callers only ever catch these.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

__all__ = [
    "AskTimeout",
    "BudgetExceededError",
    "ConfigError",
    "DecisionError",
    "Diagnostic",
    "ErrorReason",
    "InputValidationError",
    "LLMError",
    "OpenProgramError",
    "StructuredOutputError",
    "StructuredOutputGenerationError",
    "StructuredOutputSchemaError",
    "StructuredOutputUnsupportedError",
    "StructuredOutputValidationError",
    "ToolError",
    "UsageError",
    "UserDeclined",
]

#: At most this many issues are kept on an error, so messages stay readable.
MAX_ISSUES = 20


@dataclass(frozen=True, slots=True)
class Diagnostic:
    """One problem in a file, printed as ``path:line:col: error: message``.

    ``line`` and ``col`` are 1-based; 0 means the position is unknown.
    """

    path: str
    line: int
    col: int
    message: str
    severity: str = "error"

    def __str__(self) -> str:
        if self.line <= 0:  # the problem is the file (or folder) itself
            return f"{self.path}: {self.severity}: {self.message}"
        return f"{self.path}:{self.line}:{self.col}: {self.severity}: {self.message}"


class OpenProgramError(Exception):
    """Base of every error this package raises on purpose."""

    exit_code: int = 1


class ConfigError(OpenProgramError):
    """The configuration is invalid. Every problem found is in ``diagnostics``."""

    exit_code = 2

    def __init__(self, diagnostics: Sequence[Diagnostic] | Diagnostic | str) -> None:
        if isinstance(diagnostics, str):
            diagnostics = [Diagnostic("<config>", 0, 0, diagnostics)]
        elif isinstance(diagnostics, Diagnostic):
            diagnostics = [diagnostics]
        self.diagnostics: list[Diagnostic] = sorted(
            diagnostics, key=lambda d: (d.path, d.line, d.col)
        )
        super().__init__("\n".join(str(d) for d in self.diagnostics))


class UsageError(OpenProgramError):
    """The command line or the call was wrong (unknown method, bad -i value, …)."""

    exit_code = 2


class InputValidationError(UsageError):
    """Inputs given to a method do not match its declared ``inputs`` schema."""

    def __init__(self, message: str, issues: Iterable[str] = ()) -> None:
        self.issues: list[str] = list(issues)[:MAX_ISSUES]
        text = (
            message
            if not self.issues
            else message + "\n" + "\n".join(f"  - {i}" for i in self.issues)
        )
        super().__init__(text)


class ErrorReason(StrEnum):
    """Why a model call failed; stable values for ``LLMError.reason``."""

    TIMEOUT = "timeout"
    RATE_LIMIT = "rate_limit"
    SERVER_ERROR = "server_error"
    CONNECTION = "connection"
    AUTH = "auth"
    INVALID_REQUEST = "invalid_request"
    QUOTA = "quota"
    TRANSPORT_EXHAUSTED = "transport_exhausted"
    MAX_ITERATIONS = "max_iterations"
    CLOSED = "closed"
    UNKNOWN = "unknown"


class LLMError(OpenProgramError, RuntimeError):
    """A model call failed for good: retries exhausted, or an error not worth retrying."""

    def __init__(
        self,
        message: str,
        *,
        reason: ErrorReason | str = ErrorReason.UNKNOWN,
        retryable: bool = False,
        http_status: int | None = None,
        retry_after_s: float | None = None,
        attempts: int = 1,
        elapsed_s: float = 0.0,
        provider: str | None = None,
        model: str | None = None,
    ) -> None:
        super().__init__(message)
        self.reason = ErrorReason(reason) if reason in ErrorReason._value2member_map_ else reason
        self.retryable = retryable
        self.http_status = http_status
        self.retry_after_s = retry_after_s
        self.attempts = attempts
        self.elapsed_s = elapsed_s
        self.provider = provider
        self.model = model

    def to_dict(self) -> dict[str, Any]:
        """The structured fields, for JSON output and traces."""
        return {
            "type": type(self).__name__,
            "message": str(self),
            "reason": str(self.reason),
            "retryable": self.retryable,
            "http_status": self.http_status,
            "retry_after_s": self.retry_after_s,
            "attempts": self.attempts,
            "elapsed_s": round(self.elapsed_s, 6),
            "provider": self.provider,
            "model": self.model,
        }


class StructuredOutputError(OpenProgramError, ValueError):
    """Structured output failed. ``code`` is stable; ``issues`` is bounded."""

    code: str = "structured_output"
    #: How many repair turns the model was given before the exec gave up.
    repairs: int = 0

    def __init__(
        self, message: str, *, code: str | None = None, issues: Iterable[str] = ()
    ) -> None:
        if code is not None:
            self.code = code
        self.issues: list[str] = list(issues)[:MAX_ISSUES]
        super().__init__(message)

    def to_dict(self) -> dict[str, Any]:
        """The structured fields, for JSON output and traces."""
        return {
            "type": type(self).__name__,
            "message": str(self),
            "code": self.code,
            "issues": self.issues,
            "repairs": self.repairs,
        }


class StructuredOutputSchemaError(StructuredOutputError):
    """The response schema or its envelope is invalid."""

    code = "invalid_schema"


class StructuredOutputUnsupportedError(StructuredOutputError):
    """No lossless way to get structured output from this provider and fallback setting."""

    code = "unsupported"


class StructuredOutputValidationError(StructuredOutputError):
    """The reply was not valid JSON, did not match the schema, or broke the submit contract."""

    code = "validation_failed"


class StructuredOutputGenerationError(StructuredOutputError):
    """The provider refused or stopped before finishing the structured reply."""

    code = "refusal"


class DecisionError(OpenProgramError, ValueError):
    """The model's ``choices`` pick stayed invalid after the allowed re-picks.

    ``kind`` names the failure (``no_pick``, ``unknown_call``, ``missing_args``, ...);
    ``reply`` is the head of the reply that held the last invalid pick.
    """

    def __init__(
        self, message: str, *, kind: str = "invalid", issues: Iterable[str] = (), reply: str = ""
    ) -> None:
        self.kind = kind
        self.issues: list[str] = list(issues)[:MAX_ISSUES]
        self.reply = reply
        super().__init__(message)


class ToolError(OpenProgramError):
    """A tool could not run or failed. Inside the tool loop the model sees it as a result."""


class BudgetExceededError(OpenProgramError):
    """A run's ``budget`` stopped it before a model call: the cost so far reached
    ``max_cost_usd`` (``kind`` "spent"), or the model's price is unknown, so the cost
    cannot be counted (``kind`` "unpriced"). Never a reason to try a fallback model."""

    def __init__(
        self, message: str, *, kind: str, spent_usd: float | None, max_cost_usd: float
    ) -> None:
        super().__init__(message)
        self.kind = kind
        self.spent_usd = spent_usd
        self.max_cost_usd = max_cost_usd

    def to_dict(self) -> dict[str, Any]:
        """The structured fields, for JSON output and records."""
        return {
            "type": type(self).__name__,
            "message": str(self),
            "kind": self.kind,
            "spent_usd": self.spent_usd,
            "max_cost_usd": self.max_cost_usd,
        }


class UserDeclined(OpenProgramError):
    """The person declined to answer a question (``Runtime.ask``, ``confirm``, ``form``)."""


class AskTimeout(OpenProgramError, TimeoutError):
    """No answer came in time (or nobody is there to ask) and the question had no default."""
