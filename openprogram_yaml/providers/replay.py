"""Record real model turns as readable files, and answer later turns from them.

``RecordingSelector`` wraps the selector a ``Runtime`` asks for runtimes: every successful
turn is also written to ``DIR/<label>/<key>.yaml``, where the label is the method whose turn
it is (``current_label``, "agent.method") and the key a short hash of the turn's canonical
request. ``ReplaySelector`` / ``ReplayRuntime`` answer turns from those files, with no
network, whatever the model; a request with no recording fails (not retryable) with a
message that names it and, when the method has other recordings, shows how the request
differs from the closest one. A replayed turn's tool calls carry the results the
recording holds for them (``RECORDED_TOOL_RESULTS``), so that the tool loop answers them
from the recording instead of running the tools again.

The canonical request is what shapes the model's answer: system prompt, messages, tools,
tool choice, response format and sampling options. Nothing secret or volatile (key, headers,
session id, time budget, stream callback) and not the model ref, so that a ``replay`` model
answers for any model. Every string written passes through redaction of known secrets
(given, from the runtime's options, from secret-looking environment variables) and of
common key shapes, so a key that leaked into a prompt or reply never lands in a file.
``_recordings`` holds the request, the redaction and the file format.
"""

from __future__ import annotations

import datetime
import difflib
import os
import threading
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from .._file_writes import write_atomically
from ..errors import ConfigError, ErrorReason
from ..redaction import env_secrets, secrets_in_options
from ..runtime.context import current_method as current_label
from ..runtime.toolgate import RECORDED_TOOL_RESULTS
from ..runtimes.protocol import (
    Capabilities,
    Message,
    RuntimeDelta,
    RuntimeResult,
    TurnFailure,
)
from ..runtimes.wrapping import WrappedRuntime, stream_via_run_turn
from ._recordings import (
    FILE_HEADER,
    REQUEST_OPTIONS,
    Recording,
    RecordingStore,
    Redactor,
    canonical_request,
    capabilities_record,
    label_dir,
    request_key,
    response_record,
    selection_secrets,
)

__all__ = [
    "REQUEST_OPTIONS",
    "Recording",
    "RecordingRuntime",
    "RecordingSelector",
    "RecordingStore",
    "Redactor",
    "ReplayRuntime",
    "ReplaySelector",
    "canonical_request",
    "current_label",
    "label_dir",
    "request_key",
]

#: Diffs in a failure message stop here, so one changed schema cannot bury the message.
MAX_DIFF_LINES = 40
#: What a replay reports when no recording says what its runtime could do.
_DEFAULT_CAPS = Capabilities(tools=True, native_json_schema=True)


# --- recording ---------------------------------------------------------------------------


def _utc_now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


class RecordingRuntime(WrappedRuntime):
    """Forwards every call to ``inner``; successful turns are also written to disk."""

    def __init__(self, inner: Any, owner: RecordingSelector, secrets: Iterable[str] = ()) -> None:
        super().__init__(inner)
        self._owner = owner
        self._secrets = frozenset(secrets)

    def __repr__(self) -> str:
        return f"RecordingRuntime({self.inner!r}, directory={str(self._owner.directory)!r})"

    async def run_turn(
        self,
        prompt: str | Sequence[Message],
        *,
        system_prompt: str | None = None,
        model_ref: str | None = None,
        **kwargs: Any,
    ) -> RuntimeResult:
        """The inner runtime's turn, recorded when it succeeded. Never raises."""
        label = current_label.get()
        result: RuntimeResult = await self.inner.run_turn(
            prompt, system_prompt=system_prompt, model_ref=model_ref, **kwargs
        )
        if result.failure is not None or result.error:
            return result  # a failure is not an answer worth replaying
        try:
            self._owner.write(
                label,
                canonical_request(prompt, system_prompt=system_prompt, options=kwargs),
                result,
                model_ref=model_ref,
                runtime_id=self.runtime_id,
                capabilities=self.capabilities(model_ref),
                secrets=self._secrets | secrets_in_options(kwargs),
            )
        except (OSError, TypeError, ValueError) as exc:
            # Recording was asked for: a run that silently loses its recordings is worse
            # than one that stops, and retrying would not help.
            message = f"recording: cannot write a recording to {self._owner.directory}: {exc}"
            failure = TurnFailure(ErrorReason.UNKNOWN.value, message, False)
            return RuntimeResult(error=message, failure=failure, metadata=result.metadata)
        return result

    async def aclose(self) -> None:
        close = getattr(self.inner, "aclose", None)
        if close is not None:
            await close()


class RecordingSelector:
    """A selector whose runtimes record each successful turn under ``directory``.

    ``secrets`` are values never to write (keys, tokens); the selected runtime's key,
    header values and key variable, secret-looking environment variables and common key
    shapes are redacted as well. Other attributes (``explain``, ``rules`` …) are the inner
    selector's. ``written`` lists the files written, in order.
    """

    def __init__(
        self,
        inner: Any,
        directory: str | os.PathLike[str],
        *,
        secrets: Iterable[str] = (),
        clock: Callable[[], datetime.datetime] | None = None,
    ) -> None:
        self.inner = inner
        self.directory = Path(directory)
        self.secrets = frozenset(s for s in secrets if s)
        self.written: list[Path] = []
        self._clock = clock or _utc_now
        self._lock = threading.Lock()
        self._wrappers: dict[tuple[int, frozenset[str]], RecordingRuntime] = {}

    def __repr__(self) -> str:
        return f"RecordingSelector({self.inner!r}, directory={str(self.directory)!r})"

    def __getattr__(self, name: str) -> Any:
        # Only reached for attributes this class lacks: the wrapper stands in for the inner
        # selector everywhere (explain, check, rules …).
        if name == "inner":
            raise AttributeError(name)
        return getattr(self.inner, name)

    def select(self, model_ref: str) -> RecordingRuntime:
        runtime = self.inner.select(model_ref)
        secrets = frozenset(selection_secrets(self.inner, model_ref))
        key = (id(runtime), secrets)
        with self._lock:
            wrapper = self._wrappers.get(key)
            if wrapper is None:
                # The wrapper holds the runtime, so its id cannot be reused while cached.
                wrapper = self._wrappers[key] = RecordingRuntime(runtime, self, secrets)
        return wrapper

    def write(
        self,
        label: str | None,
        request: dict[str, Any],
        result: RuntimeResult,
        *,
        model_ref: str | None,
        runtime_id: str,
        capabilities: Capabilities,
        secrets: Iterable[str] = (),
    ) -> Path:
        """Write one recorded turn; returns its path."""
        from ..spec.yamlwrite import dump_yaml

        redactor = Redactor({*self.secrets, *secrets, *env_secrets()})
        request = redactor.data(request)
        key = request_key(request)
        record = {
            "request": request,
            "response": redactor.data(response_record(result)),
            "recorded": redactor.data(
                {
                    "label": label,
                    "model_ref": model_ref,
                    "at": self._clock().astimezone(datetime.UTC).isoformat(timespec="seconds"),
                    "runtime": runtime_id,
                    "capabilities": capabilities_record(capabilities),
                }
            ),
        }
        path = self.directory / label_dir(label) / f"{key}.yaml"
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomically(path, FILE_HEADER + dump_yaml(record))
        with self._lock:
            self.written.append(path)
        return path

    async def aclose(self) -> None:
        """Close the inner selector (and so the runtimes it created)."""
        with self._lock:
            self._wrappers.clear()
        close = getattr(self.inner, "aclose", None)
        if close is not None:
            await close()


# --- replaying ---------------------------------------------------------------------------


def _bounded_diff(before: list[str], after: list[str], before_name: str) -> str:
    lines = list(difflib.unified_diff(before, after, before_name, "this request", n=2, lineterm=""))
    if len(lines) > MAX_DIFF_LINES:
        more = len(lines) - MAX_DIFF_LINES
        lines = [*lines[:MAX_DIFF_LINES], f"… {more} more diff line(s)"]
    return "\n".join("    " + line for line in lines)


def _no_record(message: str) -> RuntimeResult:
    failure = TurnFailure(ErrorReason.INVALID_REQUEST.value, message, False)
    return RuntimeResult(error=message, failure=failure, metadata={"runtime": "replay"})


class ReplayRuntime:
    """Answers every turn from the recordings in ``directory``, whatever the model ref.

    With no ``directory`` (as the registry creates it) the model ref names the folder:
    ``replay:DIR``; a bare ``replay`` reads ``OPENPROGRAM_REPLAY_DIR``. Recordings are read
    once per folder, on first use. A request with no recording fails, not retryably.
    """

    runtime_id = "replay"
    provider = "replay"

    def __init__(
        self,
        directory: str | os.PathLike[str] | None = None,
        *,
        secrets: Iterable[str] = (),
    ) -> None:
        self.directory = Path(directory) if directory is not None else None
        self.secrets = frozenset(s for s in secrets if s)
        self._lock = threading.Lock()
        self._stores: dict[Path, RecordingStore | ConfigError] = {}

    def __repr__(self) -> str:
        shown = str(self.directory) if self.directory is not None else None
        return f"ReplayRuntime(directory={shown!r})"

    def supports(self, model_ref: str | None = None) -> bool:
        if self.directory is not None:
            return True
        # The registry's instance must not claim every model it is asked about.
        return model_ref is not None and (model_ref == "replay" or model_ref.startswith("replay:"))

    def _folder(self, model_ref: str | None) -> Path | None:
        if self.directory is not None:
            return self.directory
        if model_ref and model_ref.startswith("replay:") and model_ref != "replay:":
            return Path(model_ref.partition(":")[2])
        env = os.environ.get("OPENPROGRAM_REPLAY_DIR", "").strip()
        return Path(env) if env else None

    def _store(self, folder: Path) -> RecordingStore | ConfigError:
        with self._lock:
            store = self._stores.get(folder)
            if store is None:
                try:
                    store = RecordingStore.load(folder)
                except ConfigError as exc:
                    store = exc
                self._stores[folder] = store
        return store

    def capabilities(self, model_ref: str | None = None) -> Capabilities:
        """What the recorded runtime could do (so requests take the same shape as then)."""
        folder = self._folder(model_ref)
        store = self._store(folder) if folder is not None else None
        if isinstance(store, RecordingStore):
            caps = store.capabilities(label_dir(current_label.get()))
            if caps is not None:
                return caps
        return _DEFAULT_CAPS

    async def run_turn(
        self,
        prompt: str | Sequence[Message],
        *,
        system_prompt: str | None = None,
        model_ref: str | None = None,
        **kwargs: Any,
    ) -> RuntimeResult:
        """The recorded answer to this exact request, or a failure saying what differs."""
        label = current_label.get()
        folder = self._folder(model_ref)
        if folder is None:
            return _no_record(
                "replay: no recordings folder given; use the model 'replay:DIR', --replay DIR "
                "or OPENPROGRAM_REPLAY_DIR"
            )
        store = self._store(folder)
        if isinstance(store, ConfigError):
            return _no_record(f"replay: cannot read the recordings in {folder}:\n{store}")
        secrets = {*self.secrets, *secrets_in_options(kwargs), *env_secrets()}
        request = Redactor(secrets).data(
            canonical_request(prompt, system_prompt=system_prompt, options=kwargs)
        )
        key = request_key(request)
        recording = store.find(label_dir(label), key)
        if recording is None:
            return _no_record(self._missing(store, label, key, request))
        result = recording.result(model_ref)
        if result.tool_calls:
            # The recording answers the tool calls too: running a tool again on replay could
            # repeat what it did (a refund, a file written), and its answer may differ.
            result.metadata[RECORDED_TOOL_RESULTS] = store.tool_results(
                label_dir(label), request, recording
            )
        on_delta = kwargs.get("on_delta")
        if on_delta is not None:
            for kind, text in (("thinking", result.thinking), ("text", result.content)):
                if text:
                    on_delta(RuntimeDelta(kind, text))
        return result

    @staticmethod
    def _missing(
        store: RecordingStore, label: str | None, key: str, request: dict[str, Any]
    ) -> str:
        from ..spec.yamlwrite import dump_yaml

        folder = store.directory
        name = label_dir(label)
        shown = repr(label) if label else "an unlabelled turn"
        expected = Path(name) / f"{key}.yaml"
        recorded = store.by_label.get(name)
        if not recorded:
            labels = ", ".join(sorted(store.by_label)) or "none"
            return (
                f"replay: no recordings for {shown} in {folder}\n"
                f"  (this request would be {expected}; recorded: {labels})\n"
                f"  Record them with --record {folder}."
            )
        lines = dump_yaml(request).splitlines()
        closest = max(
            recorded.values(),
            key=lambda r: difflib.SequenceMatcher(None, store.lines(r), lines).ratio(),
        )
        shown_path = closest.path.relative_to(folder)
        diff = _bounded_diff(store.lines(closest), lines, f"recorded {shown_path}")
        return (
            f"replay: no recording of this request for {shown} in {folder}\n"
            f"  (this request would be {expected}): the prompt changed since it was recorded.\n"
            f"  What changed against the closest recording, {shown_path}:\n{diff}\n"
            f"  If the change is intended, re-record with --record {folder}."
        )

    def stream_turn(self, prompt: Any, **kwargs: Any) -> AsyncIterator[RuntimeDelta]:
        return stream_via_run_turn(self.run_turn, prompt, kwargs)

    async def aclose(self) -> None:
        """Nothing to release: recordings are read once and held in memory."""


class ReplaySelector:
    """A selector that answers every model from the recordings in ``directory``."""

    def __init__(self, directory: str | os.PathLike[str], *, secrets: Iterable[str] = ()) -> None:
        self.directory = Path(directory)
        self.runtime = ReplayRuntime(directory, secrets=secrets)

    def __repr__(self) -> str:
        return f"ReplaySelector(directory={str(self.directory)!r})"

    def select(self, model_ref: str) -> ReplayRuntime:
        return self.runtime

    async def aclose(self) -> None:
        await self.runtime.aclose()
