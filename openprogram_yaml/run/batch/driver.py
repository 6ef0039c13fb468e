"""The driver of a batch: rows in, rows already done skipped, the engine run, every result
written by the one writer and counted, and a summary at the end.

Whatever the engine (local or Ray), this runs in the process that owns the output file, so
resume and whole lines hold the same way for all of them.
"""

from __future__ import annotations

import math
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass, field

from ...json_types import JSONObject
from ..costs import sum_costs
from .engine import BatchEngine, BatchJob, RowResult
from .output import DoneRows, OutputWriter, done_key
from .rows import BatchRow

__all__ = ["BatchSummary", "drive_batch"]

#: How many distinct errors the summary lists.
_ERRORS_SHOWN = 5

#: Latency buckets grow by 2%: a bucket's value is within 1% of every latency in it.
_RATIO = 1.02
#: The bucket of a latency of 0 (a row that failed before it ran).
_ZERO = -(10**6)


def _bucket(seconds: float) -> int:
    if seconds <= 0:
        return _ZERO
    return round(math.log(seconds) / math.log(_RATIO))


@dataclass(slots=True)
class BatchSummary:
    """What a batch did: counts, latency, tokens, cost, the first distinct errors."""

    ok: int = 0
    failed: int = 0
    #: Rows skipped because the output already held their result (``--resume``).
    skipped: int = 0
    #: Why the batch stopped before its last row (``--max-failures``), if it did.
    stopped: str | None = None
    input_tokens: int = 0
    output_tokens: int = 0
    cost: JSONObject = field(default_factory=lambda: {"usd": 0.0, "models": []})
    #: ``"Type: message"`` of the first distinct errors, with how many rows had each.
    errors: dict[str, int] = field(default_factory=dict)
    #: Rows by latency bucket (``_bucket``): the percentiles in memory that stays flat
    #: however many rows run, within 1% of the exact value.
    latencies: dict[int, int] = field(default_factory=dict)

    @property
    def done(self) -> int:
        return self.ok + self.failed

    def add(self, result: RowResult) -> None:
        if result.status == "ok":
            self.ok += 1
        else:
            self.failed += 1
            error = result.error or {}
            text = f"{error.get('type', 'Error')}: {error.get('message', '')}".splitlines()[0]
            if text in self.errors or len(self.errors) < _ERRORS_SHOWN:
                self.errors[text] = self.errors.get(text, 0) + 1
        bucket = _bucket(result.latency_s)
        self.latencies[bucket] = self.latencies.get(bucket, 0) + 1
        usage = result.usage or {}
        self.input_tokens += int(usage.get("input_tokens", 0))
        self.output_tokens += int(usage.get("output_tokens", 0))
        if result.cost is not None and result.cost.get("models"):
            self.cost = sum_costs([self.cost, result.cost])

    def percentile(self, p: float) -> float | None:
        """The ``p``-th percentile of the rows' latency (nearest rank, within 1%), None with
        no row."""
        total = sum(self.latencies.values())
        if not total:
            return None
        rank = max(1, math.ceil(p / 100 * total))
        seen = 0
        for bucket in sorted(self.latencies):
            seen += self.latencies[bucket]
            if seen >= rank:
                return _RATIO**bucket if bucket > _ZERO else 0.0
        return None  # not reached: the ranks add up to total

    def to_dict(self) -> JSONObject:
        p50, p95 = self.percentile(50), self.percentile(95)
        return {
            "ok": self.ok,
            "failed": self.failed,
            "skipped": self.skipped,
            "stopped": self.stopped,
            "latency_s": {
                "p50": None if p50 is None else round(p50, 3),
                "p95": None if p95 is None else round(p95, 3),
            },
            "tokens": {"input": self.input_tokens, "output": self.output_tokens},
            "cost": self.cost,
            "errors": [{"error": text, "rows": n} for text, n in self.errors.items()],
        }


async def drive_batch(
    engine: BatchEngine,
    job: BatchJob,
    rows: Iterable[BatchRow],
    writer: OutputWriter,
    *,
    done: DoneRows | None = None,
    max_failures: int | None = None,
    on_result: Callable[[RowResult, BatchSummary], None] | None = None,
    summary: BatchSummary | None = None,
) -> BatchSummary:
    """Run ``rows`` on ``engine`` and write each result as it comes.

    Rows ``done`` already holds (key and digest) are skipped. After ``max_failures`` failed
    rows no new row starts; the rows in flight finish and are written. An error reading a
    row (``BatchInputError``) is raised after the rows started before it are written.
    ``summary`` (made here when None) is filled as results come, so a caller interrupted
    part way still has the counts."""
    summary = summary if summary is not None else BatchSummary()

    async def feed() -> AsyncIterator[BatchRow]:
        for row in rows:
            if max_failures is not None and summary.failed >= max_failures:
                summary.stopped = f"{summary.failed} rows failed (--max-failures {max_failures})"
                return
            if done is not None and done_key(row.key, row.digest) in done:
                summary.skipped += 1
                continue
            yield row

    results = engine.run(job, feed())
    try:
        async for result in results:
            writer.write(result.line)
            summary.add(result)
            if on_result is not None:
                on_result(result, summary)
    finally:
        await results.aclose()  # type: ignore[attr-defined]
    return summary
