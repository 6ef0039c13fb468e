"""Batch runs from Python (run.batch): rows in, results out, limits, resume's file handling."""

from __future__ import annotations

import asyncio
import io
import json
import tracemalloc
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from openprogram_yaml import compile_path
from openprogram_yaml.providers.test import FakeClock
from openprogram_yaml.run.batch import BatchJob, BatchRow, LocalEngine, RowResult, run_batch
from openprogram_yaml.run.batch.driver import BatchSummary, drive_batch
from openprogram_yaml.run.batch.limits import RateLimiter
from openprogram_yaml.run.batch.output import DoneRows, OutputWriter, done_key
from openprogram_yaml.run.batch.rows import BatchInputError, input_digest, input_lines, read_rows

AGENT = """\
version: 1
name: tagger
model: test
methods:
  tag:
    inputs: {ticket: {type: string, minLength: 1}}
    prompt: "Tag: {{ ticket }}"
"""


def _collect(agen: AsyncIterator[RowResult]) -> list[RowResult]:
    async def go() -> list[RowResult]:
        return [r async for r in agen]

    return asyncio.run(go())


def test_every_row_gets_a_result_and_a_failed_row_is_recorded(write) -> None:
    program = compile_path(write("agent.yaml", AGENT))
    rows = [{"ticket": "a"}, {"ticket": ""}, {"ticket": "c"}]
    results = _collect(run_batch(program, rows, concurrency=2))
    by_key = {r.key: r for r in results}
    assert sorted(by_key) == [0, 1, 2]
    assert by_key[0].status == "ok" and isinstance(by_key[0].output, str)
    assert by_key[1].status == "failed"
    assert by_key[1].error is not None and by_key[1].error["type"] == "InputValidationError"
    line = json.loads(by_key[2].line)
    assert line["key"] == 2 and line["digest"] == input_digest({"ticket": "c"})
    assert line["model"] == "test" and line["usage"]["total_tokens"] > 0
    assert {"cost", "latency_s", "version", "inputs"} <= set(line)


def test_rows_are_read_only_as_slots_free_up(write) -> None:
    # The input is pulled lazily: never more than `concurrency` rows ahead of the results.
    program = compile_path(write("agent.yaml", AGENT))
    pulled = 0
    ahead: list[int] = []

    def endless() -> Iterator[dict[str, str]]:
        nonlocal pulled
        while True:
            pulled += 1
            yield {"ticket": f"t{pulled}"}

    async def go() -> None:
        done = 0
        results = run_batch(program, endless(), concurrency=3)
        async for _ in results:
            done += 1
            ahead.append(pulled - done)
            if done == 30:
                break
        await results.aclose()

    asyncio.run(go())
    assert max(ahead) <= 3


def test_rpm_spaces_model_calls_with_the_injected_clock(write) -> None:
    program = compile_path(write("agent.yaml", AGENT))
    clock = FakeClock()
    start = clock.now()
    engine = LocalEngine(program, clock=clock.now, sleep=clock.sleep)
    results = _collect(
        run_batch(program, [{"ticket": str(i)} for i in range(5)], rpm=60, engine=engine)
    )
    assert len(results) == 5
    # 60 a minute: one call a second; the first goes at once, the fifth at +4 s.
    assert clock.now() - start == pytest.approx(4.0)
    assert len(clock.sleeps) == 4


def test_tpm_makes_later_calls_wait_for_the_tokens_spent(write) -> None:
    program = compile_path(write("agent.yaml", AGENT))
    clock = FakeClock()
    start = clock.now()
    engine = LocalEngine(program, clock=clock.now, sleep=clock.sleep)
    rows = [{"ticket": "x"} for _ in range(3)]
    results = _collect(run_batch(program, rows, tpm=600, concurrency=1, engine=engine))
    tokens = [r.tokens for r in results]
    # Each call's tokens take tokens / 600 minutes; the third waits for the first two.
    assert clock.now() - start == pytest.approx((tokens[0] + tokens[1]) * 60 / 600)


def test_rate_limiter_takes_slots_in_order() -> None:
    clock = FakeClock(0.0)
    limiter = RateLimiter(rpm=120, clock=clock.now, sleep=clock.sleep)

    async def go() -> None:
        await asyncio.gather(*(limiter.acquire() for _ in range(3)))

    asyncio.run(go())
    # 120 a minute: slots at 0, 0.5 and 1.0 s, taken at once by three callers together.
    assert clock.now() == pytest.approx(1.0)
    assert len(clock.sleeps) == 2


def test_a_torn_last_output_line_is_cut_off_on_resume(tmp_path: Path) -> None:
    out = tmp_path / "out.jsonl"
    whole = json.dumps({"key": 0, "digest": "d0", "status": "ok"})
    failed = json.dumps({"key": 1, "digest": "d1", "status": "failed"})
    out.write_text(whole + "\n" + failed + "\n" + '{"key": 2, "dig', encoding="utf-8")
    done = DoneRows.read(out)
    assert done_key(0, "d0") in done and done_key(1, "d1") not in done
    assert done.dropped == 1
    writer = OutputWriter(out)
    writer.write(json.dumps({"key": 2, "digest": "d2", "status": "ok"}))
    writer.close()
    lines = out.read_text(encoding="utf-8").splitlines()
    assert [json.loads(line)["key"] for line in lines] == [0, 1, 2]


def test_input_errors_name_the_line() -> None:
    lines = ['{"ticket": "a"}\n', "\n", "[1]\n"]
    with pytest.raises(BatchInputError, match=r"^in.jsonl:3: a row must be a JSON object"):
        list(read_rows(lines, "in.jsonl", "jsonl"))
    with pytest.raises(BatchInputError, match=r"^in.csv:3: 1 values for 2 columns"):
        list(read_rows(["a,b\n", "1,2\n", "3\n"], "in.csv", "csv"))


def test_a_line_past_the_limit_is_named_before_it_is_read_whole() -> None:
    # A file of one endless line was read whole into memory before any row ran.
    stream = io.StringIO('{"ticket": "a"}\r\n' + "x" * 10_000_000)
    lines = input_lines(stream, "in.jsonl", limit=1000)
    assert next(lines) == '{"ticket": "a"}\r\n'
    with pytest.raises(BatchInputError, match=r"^in.jsonl:2: the line is longer than 1,000 "):
        next(lines)
    assert stream.tell() == 17 + 1001  # read no further than the limit
    # Lines up to the limit, a last one without newline, pass as they are.
    text = "a" * 999 + "\n" + "b" * 1000
    assert list(input_lines(io.StringIO(text), "in", limit=1000)) == ["a" * 999 + "\n", "b" * 1000]


def test_rows_and_output_lines_the_decoder_cannot_read_are_named_not_crashes(
    tmp_path: Path,
) -> None:
    # A row nested past the recursion limit or with a 5,000-digit number stopped the batch
    # with a traceback (RecursionError, ValueError); now it is the line's error.
    deep = '{"ticket": ' + "[" * 100_000 + "]" * 100_000 + "}\n"
    digits = '{"ticket": ' + "7" * 5_000 + "}\n"
    for line, said in ((deep, "nested deeper than"), (digits, "a number has more digits")):
        with pytest.raises(BatchInputError, match=rf"^in.jsonl:2: not valid JSON: {said}"):
            list(read_rows(['{"ticket": "a"}\n', line], "in.jsonl", "jsonl"))
        with pytest.raises(BatchInputError, match=rf"^in.json:1: not valid JSON: {said}"):
            list(read_rows([f"[{line}]"], "in.json", "json"))
    # On resume, such a line of the output is not a finished row (and no crash).
    out = tmp_path / "out.jsonl"
    ok = json.dumps({"key": 0, "digest": "d0", "status": "ok"})
    out.write_text(ok + "\n" + deep + digits, encoding="utf-8")
    done = DoneRows.read(out)
    assert done_key(0, "d0") in done and done.dropped == 2


class _InstantEngine:
    """An engine whose rows end at once with a scripted result (the driver's own test)."""

    async def run(self, job: BatchJob, rows: AsyncIterator[BatchRow]) -> AsyncIterator[RowResult]:
        async for row in rows:
            yield RowResult(
                key=row.key,
                digest=row.digest,
                status="ok",
                inputs=row.inputs,
                output="x",
                error=None,
                model="test",
                usage=None,
                cost=None,
                latency_s=0.001,
                line=json.dumps({"key": row.key, "digest": row.digest, "status": "ok"}),
            )


def test_the_driver_streams_a_large_input_in_flat_memory(tmp_path: Path) -> None:
    # 100,000 rows from a generator through the driver and the writer: the memory peak
    # stays what a few rows take, whatever the count.
    count = 100_000

    def rows() -> Iterator[BatchRow]:
        for i in range(count):
            inputs = {"ticket": f"ticket number {i} " + "x" * 100}
            yield BatchRow(i, inputs, input_digest(inputs), f"in:{i + 1}")

    writer = OutputWriter(tmp_path / "out.jsonl")
    job = BatchJob(path=tmp_path, agent=None, method=None)
    tracemalloc.start()
    try:
        summary = asyncio.run(drive_batch(_InstantEngine(), job, rows(), writer))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
        writer.close()
    assert isinstance(summary, BatchSummary) and summary.ok == count
    assert peak < 1_000_000


def test_a_row_whose_run_raises_stops_the_batch_and_is_not_dropped(write) -> None:
    # A run that raises instead of ending in a record (here a row whose inputs are not a
    # mapping, which only a caller of the engine can hand it) stops the batch with that
    # error; before, the row was left out silently and the batch went on as if it had run.
    program = compile_path(write("agent.yaml", AGENT))
    job = BatchJob(path=program.root, agent=None, method="tag", concurrency=1)

    async def rows() -> AsyncIterator[BatchRow]:
        yield BatchRow(0, {"ticket": "a"}, input_digest({"ticket": "a"}), "in:1")
        yield BatchRow(1, None, "-", "in:2")  # type: ignore[arg-type]
        yield BatchRow(2, {"ticket": "b"}, input_digest({"ticket": "b"}), "in:3")

    seen: list[object] = []

    async def go() -> None:
        async for result in LocalEngine(program).run(job, rows()):
            seen.append(result.key)

    with pytest.raises(TypeError):
        asyncio.run(go())
    assert seen == [0]
