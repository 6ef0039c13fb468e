"""Replay: answer turns from recorded files, with no network, whatever the model.

``ReplayRuntime`` is registered as the ``replay`` runtime; ``ReplaySelector`` serves every
model from one folder (``--replay DIR``). A request with no recording fails (not
retryable) with a message that names it and, when the method has other recordings, shows
how the request differs from the closest one. A replayed turn's tool calls carry the
results the recording holds for them (``RECORDED_TOOL_RESULTS``), so that the tool loop
answers them from the recording instead of running the tools again.
"""

from __future__ import annotations

import difflib
import os
import threading
from collections.abc import AsyncIterator, Iterable, Sequence
from pathlib import Path
from typing import Any

from ..errors import ConfigError, ErrorReason
from ..json_types import JSONObject, parse_json
from ..redaction import env_secrets, secrets_in_options
from ..runtime.context import current_method, current_test
from ..runtime.toolgate import RECORDED_TOOL_RESULTS
from ..runtimes.protocol import Capabilities, Message, RuntimeDelta, RuntimeResult, TurnFailure
from ..runtimes.wrapping import stream_via_run_turn
from .format import (
    RecordingStore,
    Redactor,
    canonical_request,
    embeddings_request,
    label_dir,
    request_key,
)

__all__ = ["ReplayRuntime", "ReplaySelector"]

#: Diffs in a failure message stop here, so one changed schema cannot bury the message.
MAX_DIFF_LINES = 40
#: What a replay reports when no recording says what its runtime could do.
_DEFAULT_CAPS = Capabilities(tools=True, native_json_schema=True)


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
            caps = store.capabilities(label_dir(current_method.get()))
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
        """The recorded answer to this exact request, or a failure saying what differs.
        Raises ``ConfigError`` when the recordings folder cannot be read."""
        label = current_method.get()
        folder = self._folder(model_ref)
        if folder is None:
            return _no_record(
                "replay: no recordings folder given; use the model 'replay:DIR', --replay DIR "
                "or OPENPROGRAM_REPLAY_DIR"
            )
        store = self._store(folder)
        if isinstance(store, ConfigError):
            # The user's files are at fault, not the model: the run stops as a bad config
            # does (exit 2), naming each broken file, instead of failing like a model call.
            raise ConfigError(store.diagnostics)
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

    async def embed(
        self, texts: Sequence[str], *, model_ref: str | None = None
    ) -> list[list[float]] | TurnFailure:
        """The recorded embeddings of ``texts``, or a failure saying what is missing."""
        label = current_method.get()
        folder = self._folder(model_ref)
        if folder is None:
            message = "replay: no recordings folder given; use --replay DIR"
            return TurnFailure(ErrorReason.INVALID_REQUEST.value, message, False)
        store = self._store(folder)
        if isinstance(store, ConfigError):
            message = f"replay: cannot read the recordings in {folder}:\n{store}"
            return TurnFailure(ErrorReason.INVALID_REQUEST.value, message, False)
        request = Redactor({*self.secrets, *env_secrets()}).data(embeddings_request(texts))
        key = request_key(request)
        recording = store.find(label_dir(label), key)
        if recording is None:
            message = self._missing(store, label, key, request)
            return TurnFailure(ErrorReason.INVALID_REQUEST.value, message, False)
        try:
            vectors: Any = parse_json(recording.result(model_ref).content)
            return [[float(x) for x in vector] for vector in vectors]
        except (TypeError, ValueError) as exc:
            message = f"replay: the embeddings recorded in {recording.path} do not read: {exc}"
            return TurnFailure(ErrorReason.INVALID_REQUEST.value, message, False)

    @staticmethod
    def _missing(
        store: RecordingStore, label: str | None, key: str, request: dict[str, Any]
    ) -> str:
        from ..spec.yamlwrite import dump_yaml

        folder = store.directory
        name = label_dir(label)
        shown = repr(label) if label else "an unlabelled turn"
        expected = Path(name) / f"{key}.yaml"
        test = current_test.get()
        tests = {r.recorded.get("test") for rs in store.by_label.values() for r in rs.values()}
        if test is not None and test not in tests and tests - {None}:
            return (
                f"replay: test {test!r} was never recorded: no recording in {folder} names it\n"
                f"  (this request would be {expected}). Record it with --record {folder}."
            )
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

    def check(self) -> None:
        """Read the recordings now, before a run: raises ``ConfigError`` naming each broken
        file (``path:line:col``), or the folder when it holds none. Without it, a broken
        folder fails each turn that asks it."""
        store = self.runtime._store(self.directory)
        if isinstance(store, ConfigError):
            raise ConfigError(store.diagnostics)

    def recorded_tools(self) -> list[JSONObject]:
        """The spec of every tool the recorded requests offered: what a replay offers for
        tools whose listing would take starting something (an MCP server's), since a replay
        starts nothing (their calls are answered from the recordings)."""
        store = self.runtime._store(self.directory)
        if isinstance(store, ConfigError):
            return []  # the first turn says what is wrong with the folder
        found: dict[str, JSONObject] = {}
        for recordings in store.by_label.values():
            for recording in recordings.values():
                tools = recording.request.get("tools")
                for tool in tools if isinstance(tools, list) else ():
                    if isinstance(tool, dict) and isinstance(tool.get("name"), str):
                        found.setdefault(str(tool["name"]), tool)
        return list(found.values())

    async def aclose(self) -> None:
        await self.runtime.aclose()
