"""The runs this server answered, kept in memory for the web page: ``GET /runs`` and
``GET /runs/{id}``.

Each entry holds the record and its session trace as they are; they become JSON, with the
run's secrets redacted, only when asked for (a run that nobody looks at costs nothing: turning
a trace into JSON took about 0.5 ms, more than the rest of a served run on the ``test``
model). The newest ``size`` runs are kept, fewer when their inputs and outputs weigh more
than ``max_bytes`` together (a file input may be 20 MiB, and its record and trace hold it:
200 of them would not fit in memory; so may 500,000 ``{}`` in 1.5 MB of JSON), the newest
always; with ``--records FILE``, ``/runs`` also lists the older records of that file (their
traces were not kept: only the record is shown).
"""

from __future__ import annotations

import json
import os
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path

from ..json_types import JSONObject, JSONValue, parse_json
from ..redaction import redact
from ..run.record import RunRecord
from ..runtime.trace import SessionTrace

__all__ = ["DEFAULT_HISTORY", "DEFAULT_HISTORY_BYTES", "RunHistory"]

#: Runs kept in memory: enough for a day of trying prompts, a few MB at most.
DEFAULT_HISTORY = 200

#: The weight of the runs kept at most: about the bytes their inputs and outputs take in
#: memory (files, mostly; a run's other parts are a few KB).
DEFAULT_HISTORY_BYTES = 64 << 20

#: Records read back from ``--records FILE`` at most (its last lines), and the bytes read
#: from its end to find them: ``/runs`` stays quick however long the file has grown.
MAX_FILE_RECORDS = 1000
MAX_FILE_TAIL = 8 << 20

#: What ``GET /runs`` shows of each record.
SUMMARY_KEYS = (
    "id",
    "agent",
    "method",
    "model",
    "status",
    "started_at",
    "elapsed_s",
    "usage",
    "cost",
)


@dataclass(frozen=True, slots=True)
class _Entry:
    """One run kept: its record and trace, made JSON (redacted) when shown."""

    record: RunRecord
    trace: SessionTrace | None
    #: What it counts against ``RunHistory.max_bytes``.
    weight: int

    def record_json(self) -> JSONObject:
        shown: JSONObject = json.loads(self.record.to_json())  # redacted
        return shown

    def trace_json(self) -> list[JSONValue]:
        if self.trace is None:
            return []
        text = redact(self.trace.to_jsonl(), self.record.secrets)
        # Lines end at "\n" alone: a JSON string written with ensure_ascii=False may hold
        # U+2028, U+2029 or U+0085 raw, where splitlines() would break it.
        return [json.loads(line) for line in text.split("\n") if line]


def _summary(record: JSONObject, source: str) -> JSONObject:
    out: JSONObject = {key: record.get(key) for key in SUMMARY_KEYS}
    version = record.get("version")
    out["version"] = version.get("hash") if isinstance(version, dict) else None
    error = record.get("error")
    out["error"] = error.get("type") if isinstance(error, dict) else None
    out["source"] = source
    return out


class RunHistory:
    """The last ``size`` runs (fewer past ``max_bytes``), newest last; looked up by run id."""

    def __init__(
        self,
        size: int = DEFAULT_HISTORY,
        records: Path | None = None,
        max_bytes: int = DEFAULT_HISTORY_BYTES,
    ) -> None:
        self.size = size
        self.max_bytes = max_bytes
        #: The ``--records`` file whose older records ``/runs`` lists too.
        self.records = records
        self._entries: OrderedDict[str, _Entry] = OrderedDict()
        self._weight = 0

    def add(self, record: RunRecord, trace: SessionTrace | None) -> None:
        """Keep ``record`` and its trace; the oldest entries go past ``size`` or
        ``max_bytes`` (never the one just kept)."""
        entry = _Entry(record, trace, _text_size(record.inputs) + _text_size(record.output))
        old = self._entries.pop(record.id, None)
        self._weight += entry.weight - (old.weight if old is not None else 0)
        self._entries[record.id] = entry
        while len(self._entries) > 1 and (
            len(self._entries) > self.size or self._weight > self.max_bytes
        ):
            _, gone = self._entries.popitem(last=False)
            self._weight -= gone.weight

    def summaries(self) -> list[JSONObject]:
        """Newest first: the runs kept here, then those only in the records file."""
        kept = [_summary(e.record_json(), "memory") for e in reversed(self._entries.values())]
        older = [
            _summary(r, "records")
            for r in reversed(self._file_records())
            if r.get("id") not in self._entries
        ]
        return kept + older

    def get(self, run_id: str) -> JSONObject | None:
        """The record and trace nodes of run ``run_id`` (``trace`` is None for a run known
        only from the records file); None when unknown."""
        entry = self._entries.get(run_id)
        if entry is not None:
            return {"record": entry.record_json(), "trace": entry.trace_json()}
        for record in self._file_records():
            if record.get("id") == run_id:
                return {"record": record, "trace": None}
        return None

    def _file_records(self) -> list[JSONObject]:
        """The last records of the records file, oldest first; torn or foreign lines skipped.
        (Already redacted: ``RecordLog`` writes ``RunRecord.to_json``.)"""
        if self.records is None:
            return []
        try:
            with self.records.open("rb") as file:
                size = file.seek(0, os.SEEK_END)
                file.seek(max(0, size - MAX_FILE_TAIL))
                tail = file.read(MAX_FILE_TAIL)
        except OSError:
            return []
        text = tail.decode("utf-8", errors="replace")
        lines = [line for line in text.split("\n") if line]  # as trace_json
        if size > MAX_FILE_TAIL:
            lines = lines[1:]  # begun before the part read
        found: list[JSONObject] = []
        for line in lines[-MAX_FILE_RECORDS:]:
            try:
                value = parse_json(line)
            except json.JSONDecodeError:
                continue
            if isinstance(value, dict) and isinstance(value.get("id"), str):
                found.append(value)
        return found


def _text_size(value: object) -> int:
    """About the bytes JSON ``value`` takes in memory: its strings' characters, and for each
    value and container what Python holds besides (a loop: no recursion limit).

    Characters alone counted a body of 500,000 ``{}`` (1.5 MB) as nothing: it held 39 MB
    in a record the history kept, 200 of them 8 GB."""
    size, stack = 0, [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            size += _STR + len(item)
        elif isinstance(item, dict):
            size += _CONTAINER + _SLOT * len(item) + sum(_STR + len(key) for key in item)
            stack.extend(item.values())
        elif isinstance(item, list | tuple):
            size += _CONTAINER + _SLOT * len(item)
            stack.extend(item)
        elif isinstance(item, int | float) and not isinstance(item, bool):
            size += _NUMBER
    return size


#: What CPython holds besides the characters, about: a str (49 bytes and up), a list or a
#: dict (56 and 64 bytes, and a slot of 8 for each item, more for a dict), a float or int.
_STR = 49
_CONTAINER = 64
_SLOT = 8
_NUMBER = 24
