"""Batch runs: one method over many rows of inputs, streamed, resumable, rate-limited.

The seam every engine sits on (the local asyncio engine here, the Ray engine beside it)::

    input file / iterable ──► rows.read_rows ──► BatchRow(key, inputs, digest, where)
                                                     │  (the driver skips rows already done:
                                                     │   output.DoneRows, key + digest)
                                                     ▼
                        engine.run(job, rows: AsyncIterator[BatchRow]) ──► AsyncIterator[RowResult]
                                                     │  (completion order; at most
                                                     │   job.concurrency rows in flight)
                                                     ▼
                        ONE writer in the driver: output.OutputWriter.write(result.line)

- ``BatchRow`` is plain, picklable data: ``key`` (the row's index or its ``--key`` column, a
  JSON scalar), ``inputs`` (the method's inputs), ``digest`` (``input_digest(inputs)``: what
  resume matches besides the key) and ``where`` (``FILE:LINE`` for messages).
- ``BatchJob`` is what an engine needs to run rows anywhere: the project path, agent,
  method, model, concurrency, rate limits (``rpm``/``tpm``), a replay folder, live tools.
  An engine in another process compiles ``job.path`` itself; the local engine is given the
  driver's compiled ``Program``.
- ``RowResult`` is plain, picklable data made where the run ran (``RowResult.from_record``):
  the fields a caller reads (status, output, error, usage, cost, latency) and ``line``, the
  output line already redacted with the run's secrets, so the driver never needs them.
- An engine yields a result for every row it finished (ok or failed). A row cancelled in
  flight (Ctrl-C, a stop) yields nothing: it is not written, so ``--resume`` runs it again.
  When the caller stops iterating (``aclose`` of the results), the engine cancels its rows
  in flight and closes what it opened.
- Only the driver writes the output, one complete line per write (``output``), so resume
  and whole lines hold whatever the engine.

Rate limits (``limits``) count model calls: each call waits for its slot before it is
sent; the provider's own Retry-After (handled by the runtime's retries) still wins.

The Python face: ``run_batch(program, rows, …)`` yields a ``RowResult`` per row.
"""

from __future__ import annotations

from .engine import DEFAULT_CONCURRENCY, BatchEngine, BatchJob, LocalEngine, RowResult, run_batch
from .rows import BatchInputError, BatchRow, input_digest

__all__ = [
    "DEFAULT_CONCURRENCY",
    "BatchEngine",
    "BatchInputError",
    "BatchJob",
    "BatchRow",
    "LocalEngine",
    "RowResult",
    "input_digest",
    "run_batch",
]
