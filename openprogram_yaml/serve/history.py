"""The runs this server answered, kept in memory for the web page: ``GET /runs`` and
``GET /runs/{id}``.

Each entry holds the record's JSON and its session trace's nodes, both with the run's
secrets redacted when the run ends (nothing unredacted is kept). The newest ``size`` runs are
kept; with ``--records FILE``, ``/runs`` also lists the older records of that file (their
traces were not kept: only the record is shown).
"""

from __future__ import annotations

import json
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path

from ..json_types import JSONObject, JSONValue
from ..redaction import redact
from ..run.record import RunRecord
from ..runtime.trace import SessionTrace

__all__ = ["DEFAULT_HISTORY", "RunHistory"]

#: Runs kept in memory: enough for a day of trying prompts, a few MB at most.
DEFAULT_HISTORY = 200

#: Records read back from ``--records FILE`` at most (its last lines).
MAX_FILE_RECORDS = 1000

#: What ``GET /runs`` shows of each record.
SUMMARY_KEYS = ("id", "agent", "method", "model", "status", "started_at", "elapsed_s", "usage")


@dataclass(frozen=True, slots=True)
class _Entry:
    record: JSONObject
    trace: list[JSONValue]


def _summary(record: JSONObject, source: str) -> JSONObject:
    out: JSONObject = {key: record.get(key) for key in SUMMARY_KEYS}
    version = record.get("version")
    out["version"] = version.get("hash") if isinstance(version, dict) else None
    error = record.get("error")
    out["error"] = error.get("type") if isinstance(error, dict) else None
    out["source"] = source
    return out


class RunHistory:
    """The last ``size`` runs, newest last; looked up by run id."""

    def __init__(self, size: int = DEFAULT_HISTORY, records: Path | None = None) -> None:
        self.size = size
        #: The ``--records`` file whose older records ``/runs`` lists too.
        self.records = records
        self._entries: OrderedDict[str, _Entry] = OrderedDict()

    def add(self, record: RunRecord, trace: SessionTrace | None) -> None:
        """Keep ``record`` and its trace, redacted; the oldest entry goes past ``size``."""
        nodes: list[JSONValue] = []
        if trace is not None:
            text = redact(trace.to_jsonl(), record.secrets)
            nodes = [json.loads(line) for line in text.splitlines() if line]
        self._entries[record.id] = _Entry(json.loads(record.to_json()), nodes)
        while len(self._entries) > self.size:
            self._entries.popitem(last=False)

    def summaries(self) -> list[JSONObject]:
        """Newest first: the runs kept here, then those only in the records file."""
        kept = [_summary(e.record, "memory") for e in reversed(self._entries.values())]
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
            return {"record": entry.record, "trace": entry.trace}
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
            lines = self.records.read_text(encoding="utf-8", errors="replace").splitlines()
        except OSError:
            return []
        found: list[JSONObject] = []
        for line in lines[-MAX_FILE_RECORDS:]:
            try:
                value = json.loads(line)
            except (json.JSONDecodeError, RecursionError):
                continue
            if isinstance(value, dict) and isinstance(value.get("id"), str):
                found.append(value)
        return found
