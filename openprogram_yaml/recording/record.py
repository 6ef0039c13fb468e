"""Recording: a selector wrapper whose runtimes also write each successful turn to disk.

``RecordingSelector`` wraps the selector a ``Runtime`` asks for runtimes: every successful
turn is also written to ``DIR/<label>/<key>.yaml`` (see ``recording.format``), where the
label is the method whose turn it is ("agent.method") and the key a short hash of the
turn's canonical request. Secrets are redacted as the format says: the ones given, the
selected runtime's key, header values and key variable, secret-looking environment
variables, and common key shapes.
"""

from __future__ import annotations

import datetime
import json
import os
import threading
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from .._file_writes import write_atomically
from ..errors import ConfigError, Diagnostic, ErrorReason
from ..json_types import JSONObject
from ..redaction import env_secrets, secrets_in_options
from ..runtime.context import current_method, current_test
from ..runtimes.protocol import (
    AgentRuntimeProtocol,
    Capabilities,
    Message,
    RuntimeResult,
    RuntimeSelectorProtocol,
    TurnFailure,
)
from ..runtimes.wrapping import WrappedRuntime
from .format import (
    FILE_HEADER,
    Redactor,
    canonical_request,
    capabilities_record,
    embeddings_request,
    label_dir,
    request_key,
    response_record,
    selection_secrets,
)

__all__ = ["RecordingRuntime", "RecordingSelector"]


def _utc_now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def _label_folder_problem(folder: Path) -> str | None:
    """Why recordings could not be written in the label folder ``folder`` (made if missing),
    and what to do; None when they can."""
    from .._file_writes import unwritable_folder

    if folder.is_symlink():
        # A label folder the repository links elsewhere would take the recordings (the
        # prompts, the replies) out of the recordings folder, to wherever it points.
        return (
            "is a symbolic link; recordings are not written through one (they would leave "
            "the recordings folder): remove the link or record into another folder"
        )
    reason = unwritable_folder(folder)
    if reason is None:
        return None
    return f"cannot hold recordings ({reason}); move it away or record into another folder"


class RecordingRuntime(WrappedRuntime):
    """Forwards every call to ``inner``; successful turns are also written to disk."""

    def __init__(
        self, inner: AgentRuntimeProtocol, owner: RecordingSelector, secrets: Iterable[str] = ()
    ) -> None:
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
        """The inner runtime's turn, recorded when it succeeded. Raises ``ConfigError``,
        before the model is asked, when its recording could not be written (see ``ready``)."""
        label = current_method.get()
        self._owner.ready(label)
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
            # The turn was made (and paid for): its usage still counts in the run's record.
            return RuntimeResult(
                error=message, failure=failure, metadata=result.metadata, usage=result.usage
            )
        return result

    async def embed(
        self, texts: Sequence[str], *, model_ref: str | None = None
    ) -> list[list[float]] | TurnFailure:
        """The inner runtime's embeddings of ``texts``, recorded (request ``{embed: texts}``,
        the vectors as the response's content, in JSON) when they came."""
        embed = getattr(self.inner, "embed", None)
        if embed is None:
            return TurnFailure(
                ErrorReason.INVALID_REQUEST.value,
                f"the {self.runtime_id} runtime has no embeddings endpoint",
                False,
            )
        try:
            self._owner.ready(current_method.get())
        except ConfigError as exc:
            return TurnFailure(ErrorReason.INVALID_REQUEST.value, str(exc), False)
        vectors: list[list[float]] | TurnFailure = await embed(texts, model_ref=model_ref)
        if isinstance(vectors, TurnFailure):
            return vectors
        try:
            self._owner.write(
                current_method.get(),
                embeddings_request(texts),
                RuntimeResult(content=json.dumps(vectors)),
                model_ref=model_ref,
                runtime_id=self.runtime_id,
                capabilities=self.capabilities(model_ref),
                secrets=self._secrets,
            )
        except (OSError, TypeError, ValueError) as exc:
            message = f"recording: cannot write a recording to {self._owner.directory}: {exc}"
            return TurnFailure(ErrorReason.UNKNOWN.value, message, False)
        return vectors

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
        inner: RuntimeSelectorProtocol,
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
        #: Label folders ``ready`` found writable.
        self._ready: set[Path] = set()

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

    def ready(self, label: str | None) -> Path:
        """The folder ``label``'s recordings go to, checked before the turn is made: a
        ``ConfigError`` names it when they could not be written there (a symbolic link, a
        file in the way, a folder that cannot be written), so that no model is asked (and
        paid) for an answer that would be lost, and the run stops as a bad config does."""
        folder = self.directory / label_dir(label)
        with self._lock:
            if folder in self._ready:
                return folder
        problem = _label_folder_problem(folder)
        if problem is not None:
            raise ConfigError(Diagnostic(str(folder), 0, 0, problem))
        with self._lock:
            self._ready.add(folder)
        return folder

    def write(
        self,
        label: str | None,
        request: JSONObject,
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
        recorded: JSONObject = {"label": label}
        test = current_test.get()
        if test is not None:
            recorded["test"] = test
        record = {
            "request": request,
            "response": redactor.data(response_record(result)),
            "recorded": redactor.data(
                {
                    **recorded,
                    "model_ref": model_ref,
                    "at": self._clock().astimezone(datetime.UTC).isoformat(timespec="seconds"),
                    "runtime": runtime_id,
                    "capabilities": dict(capabilities_record(capabilities)),
                }
            ),
        }
        folder = self.directory / label_dir(label)
        folder.mkdir(parents=True, exist_ok=True)
        if folder.is_symlink():
            # A label folder the repository links elsewhere would take the recordings (the
            # prompts, the replies) out of DIR, to wherever it points.
            raise OSError(f"{folder} is a symbolic link; recordings are not written through one")
        path = folder / f"{key}.yaml"
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
