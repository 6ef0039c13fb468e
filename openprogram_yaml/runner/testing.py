"""``openprogram-run test``: run the tests kept beside the prompts.

Offline by default: a project with recordings replays them, otherwise the built-in
``test`` model answers, and http and command tools are not run for its calls unless the test
(or ``--live-tools``) asks; a test's tool doubles answer for the tools they name. Each
failure shows the expectation, what came instead, and the prompt the method rendered, so a
reviewer sees why without running anything.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Protocol, TextIO

from ..compile.program import Program
from ..compile.prompt_tests import MISSING, CompiledTest, value_at
from ..json_types import JSONObject, json_equal
from ..run.costs import sum_costs, usage_line
from ..run.evals import Grade, ModelSummary, grade_outcome, summarize
from ..run.execute import execute_run
from ..run.record import RunRecord
from ..run.version import VersionStamp
from ..runtime.asking import ScriptedAsker
from ..runtime.context import current_test
from ..runtime.toolgate import arguments_match
from ..runtime.trace import SessionTrace
from ..runtimes.protocol import SelectorWrapper
from ..shown_text import shown_on_terminal

__all__ = ["TestOutcome", "check_expectations", "matrix_table", "results_json", "run_tests"]


class Writer(Protocol):
    def write(self, text: str, /) -> int: ...

    def flush(self) -> None: ...


#: Outputs and prompts in failure reports are cut to this many characters.
_SHOWN = 600


@dataclass(slots=True)
class TestOutcome:
    """The result of one run of one test: its problems (empty when it passed), the run's
    record, and its graded expectations (``judge``, ``similar``).

    With ``--models`` a test runs once per model (``model``), with ``--repeat N`` N times
    (``attempt`` 1..N). ``to_dict`` is what ``--json`` prints of it.
    """

    __test__ = False  # not a pytest class

    test: CompiledTest
    problems: list[str] = field(default_factory=list)
    record: RunRecord | None = None
    #: The prompt the method rendered (filled for a failure, where reports show it).
    prompt: str = ""
    #: The tool calls the model made (run, doubled or not run): name and arguments.
    calls: list[tuple[str, object]] = field(default_factory=list)
    #: The model asked for (``--model``/``--models``); None: the agent's own.
    model: str | None = None
    attempt: int = 1
    grades: list[Grade] = field(default_factory=list)

    @property
    def tools(self) -> list[str]:
        """The names of the tools called, in order."""
        return [name for name, _ in self.calls]

    @property
    def passed(self) -> bool:
        return not self.problems

    @property
    def case_id(self) -> str:
        return self.test.id

    @property
    def model_label(self) -> str:
        """The model the run used (the one asked for, else the record's)."""
        used = self.record.model if self.record is not None else None
        return self.model or used or "?"

    @property
    def judge_score(self) -> float | None:
        """The judge's score (None: no judge, or it could not grade)."""
        return next((g.score for g in self.grades if g.kind == "judge"), None)

    @property
    def latency_s(self) -> float:
        return self.record.elapsed_s if self.record is not None else 0.0

    @property
    def run_cost(self) -> JSONObject | None:
        """What the run's own model calls cost (the graders' apart, in ``grades``)."""
        return self.record.cost if self.record is not None else None

    def to_dict(self) -> dict[str, object]:
        """The outcome as JSON: the case, model, pass/fail and why, the grades, what came,
        usage, cost and latency, the expectation as written and the rendered prompt."""
        record = self.record
        return {
            "case": self.test.id,
            "agent": self.test.agent,
            "name": self.test.name,
            "method": self.test.method,
            "where": str(self.test.where),
            "model": self.model_label,
            "attempt": self.attempt,
            "passed": self.passed,
            "problems": list(self.problems),
            "grades": [g.to_dict() for g in self.grades],
            "inputs": dict(self.test.inputs),
            "expect": dict(self.test.expect.written),
            "output": None if record is None or record.error is not None else record.output,
            "error": None if record is None else record.error,
            "usage": None if record is None else record.usage,
            "cost": self.run_cost,
            "latency_s": self.latency_s,
            "prompt": self.prompt,
        }


def _text(value: object) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def _short(value: object) -> str:
    text = _text(value)
    return text if len(text) <= _SHOWN else text[:_SHOWN] + f"… ({len(text)} characters)"


def check_expectations(
    test: CompiledTest, record: RunRecord, calls: list[tuple[str, object]]
) -> list[str]:
    """What the run did that the test did not expect, one line each.

    ``calls`` are the tool calls the model made, as (name, arguments).
    """
    exp = test.expect
    problems: list[str] = []
    if exp.error is not None:
        if record.error is None:
            return [f"expected the run to fail with {exp.error!r}, but it succeeded"]
        message = str(record.error.get("message", ""))
        if exp.error not in message:
            problems.append(f"expected an error containing {exp.error!r}, got: {message}")
        return problems
    if record.error is not None:
        kind = record.error.get("type", "error")
        return [f"the run failed: {kind}: {record.error.get('message', '')}"]
    out = record.output
    if "equals" in exp.given and not json_equal(out, exp.equals):
        problems.append(f"expected output to equal {_short(exp.equals)}")
    text = _text(out)
    for part in exp.contains:
        if part not in text:
            problems.append(f"expected output to contain {part!r}")
    for part in exp.not_contains:
        if part in text:
            problems.append(f"expected output not to contain {part!r}")
    if exp.regex is not None and not exp.regex.search(text):
        problems.append(f"expected output to match /{exp.regex.pattern}/")
    if exp.schema is not None:
        for issue in exp.schema.errors(out):
            problems.append(f"expected output to match the schema: {issue}")
    for shown, (path, expected) in exp.json_path.items():
        found = value_at(out, path)
        if found is MISSING:
            problems.append(f"expected {shown} to be {_short(expected)}, but there is no {shown}")
        elif not json_equal(found, expected):
            problems.append(f"expected {shown} to be {_short(expected)}, got {_short(found)}")
    steps = record.path
    if exp.choice is not None:
        picked = steps[0].get("choice") if steps else None
        if picked != exp.choice:
            problems.append(f"expected the choice {exp.choice!r}, got {picked!r}")
    if exp.methods is not None:
        taken = [str(s["method"]) for s in steps]
        if taken != list(exp.methods):
            problems.append(
                f"expected the methods {' -> '.join(exp.methods)}, got {' -> '.join(taken)}"
            )
    tools = [name for name, _ in calls]
    for expected in exp.tools_called:
        name = expected.name
        if expected.arguments is None:
            if name not in tools:
                problems.append(f"expected tool {name!r} to be called (called: {tools or 'none'})")
            continue
        had = [args for called, args in calls if called == name]
        if not any(isinstance(a, dict) and arguments_match(expected.arguments, a) for a in had):
            seen = "; ".join(_text(a) for a in had) if had else "it was not called"
            problems.append(
                f"expected tool {name!r} to be called with {_short(expected.arguments)} "
                f"(called with: {seen})"
            )
    for name in exp.tools_not_called:
        if name in tools:
            problems.append(f"expected tool {name!r} not to be called, but it was")
    return problems


def _rendered_prompt(program: Program, test: CompiledTest) -> str:
    method = program.agents[test.agent].methods[test.method]
    try:
        blocks = method.render(method.prepare_inputs(test.inputs))
    except Exception as exc:  # shown in a report: never let it hide the real failure
        return f"(could not render: {exc})"
    return "\n".join(f"[{b.get('role', 'user')}] {b['text']}" for b in blocks)


async def _run_one(
    program: Program,
    stamp: VersionStamp,
    test: CompiledTest,
    model: str | None,
    wrap_selector: SelectorWrapper | None,
    live_tools: bool,
    *,
    judge_model: str | None = None,
    attempt: int = 1,
) -> TestOutcome:
    trace = SessionTrace()
    token = current_test.set(test.id)  # recordings name the test; a replay miss says so
    try:
        record = await execute_run(
            program,
            stamp,
            test.agent,
            test.method,
            test.inputs,
            model=test.model or model,
            trace=trace,
            wrap_selector=wrap_selector,
            live_tools=live_tools or test.live_tools,
            tool_doubles=test.doubles,
            asker=None if test.answers is None else ScriptedAsker(list(test.answers)),
        )
    finally:
        current_test.reset(token)
    calls = [(n.name, n.inputs) for n in trace.nodes if n.kind == "tool"]
    outcome = TestOutcome(test, record=record, calls=calls, model=model, attempt=attempt)
    outcome.problems = check_expectations(test, record, calls)
    if record.error is None and test.expect.error is None:
        token = current_test.set(test.id)  # the graders' recordings name the test too
        try:
            outcome.grades = await grade_outcome(
                program.agents[test.agent],
                test,
                test.inputs,
                record.output,
                run_model=record.model,
                judge_override=judge_model,
                wrap_selector=wrap_selector,
            )
        finally:
            current_test.reset(token)
        outcome.problems += [p for g in outcome.grades if (p := g.problem()) is not None]
    if outcome.problems:
        outcome.prompt = _rendered_prompt(program, test)
    return outcome


def _indent(text: str, prefix: str = "    ") -> str:
    return "\n".join(prefix + line for line in text.splitlines())


def report_failure(outcome: TestOutcome, stream: Writer, label: str = "") -> None:
    """A failed case as the person reads it. What the model wrote (and the prompt, which
    holds the case's inputs) shows its control characters as text, driving no terminal."""
    test = outcome.test
    lines = [f"FAIL {test.id}{label}  ({test.where})"]
    lines += [f"  - {problem}" for problem in outcome.problems]
    record = outcome.record
    if record is not None and record.error is None:
        lines.append(f"  got:\n{_indent(_short(record.output))}")
    if outcome.prompt:
        lines.append(f"  rendered prompt:\n{_indent(_short(outcome.prompt))}")
    stream.write(shown_on_terminal("\n".join(lines)) + "\n")


async def run_tests(
    program: Program,
    tests: Iterable[CompiledTest],
    *,
    model: str | None,
    models: Sequence[str] | None = None,
    repeat: int = 1,
    judge_model: str | None = None,
    wrap_selector: SelectorWrapper | None = None,
    live_tools: bool = False,
    stream: Writer = sys.stdout,
    progress: TextIO | None = None,
    verbose: bool = False,
) -> list[TestOutcome]:
    """Run ``tests`` one after the other, report failures to ``stream`` (and passes, when
    ``verbose``), and return all.

    ``models`` runs every test on each of them (else on ``model``, None: the agents' own),
    ``repeat`` times each; with more than one model or run a test, a table of each model's
    pass rate, mean judge score, tokens, cost and median latency follows, with the tests
    that passed only sometimes (flaky). ``judge_model`` grades every ``judge`` and
    ``similar`` expectation (the offline ``test`` model, when nothing else may answer).
    ``live_tools`` runs http and command tools for real under the offline ``test`` model in
    every test (a test can ask for it alone with ``live_tools: true``).
    """
    chosen = list(tests)
    asked: list[str | None] = list(models) if models else [model]
    runs = [(m, n) for m in asked for n in range(1, repeat + 1)]
    stamp = VersionStamp(program.version)
    outcomes: list[TestOutcome] = []
    started = time.perf_counter()
    total = len(chosen) * len(runs)
    for run_model, attempt in runs:
        for test in chosen:
            if progress is not None:
                where = f" ({run_model})" if models else ""
                progress.write(f"\r\033[K[{len(outcomes) + 1}/{total}] {test.id}{where}")
                progress.flush()
            outcome = await _run_one(
                program,
                stamp,
                test,
                run_model,
                wrap_selector,
                live_tools,
                judge_model=judge_model,
                attempt=attempt,
            )
            outcomes.append(outcome)
            if (not outcome.passed or verbose) and progress is not None:
                progress.write("\r\033[K")
            label = _run_label(outcome, models is not None, repeat)
            if not outcome.passed:
                report_failure(outcome, stream, label)
            elif verbose:
                stream.write(f"PASS {test.id}{label}\n")
    if progress is not None:
        progress.write("\r\033[K")
        progress.flush()
    failed = sum(not o.passed for o in outcomes)
    elapsed = time.perf_counter() - started
    if len(runs) > 1:
        stream.write(matrix_table(summarize(outcomes)))
    skipped = sum(g.skipped for o in outcomes for g in o.grades)
    if skipped:
        stream.write(
            f"{skipped} judge expectation{'' if skipped == 1 else 's'} not graded: the "
            "offline test model does not judge (grade with --record DIR, or --live)\n"
        )
    # What the tests' model calls used and cost, just before the count: the last two lines.
    costs = [o.run_cost for o in outcomes]
    costs += [g.cost for o in outcomes for g in o.grades]
    stream.write(usage_line(sum_costs(costs)) + "\n")
    stream.write(f"{len(outcomes) - failed} passed, {failed} failed\n")
    if progress is not None:
        n = len(outcomes)
        progress.write(f"({n} test{'' if n == 1 else 's'} in {elapsed:.2f}s)\n")
    return outcomes


def _run_label(outcome: TestOutcome, by_model: bool, repeat: int) -> str:
    """`` [model, run 2/3]`` after a test's id when it runs on several models or times."""
    parts = [outcome.model_label] if by_model else []
    if repeat > 1:
        parts.append(f"run {outcome.attempt}/{repeat}")
    return f" [{', '.join(parts)}]" if parts else ""


def matrix_table(rows: Sequence[ModelSummary]) -> str:
    """The models side by side: pass rate, mean judge score, tokens, cost, median latency;
    then the flaky tests of each model."""
    header = ("model", "pass rate", "judge", "tokens in", "tokens out", "cost", "p50 latency")
    body = [
        (
            row.model,
            f"{row.passed}/{row.runs} ({row.pass_rate:.0%})",
            "-" if row.mean_score is None else f"{row.mean_score:.2f}",
            f"{row.input_tokens:,}",
            f"{row.output_tokens:,}",
            "unknown" if row.usd is None else f"${row.usd:.4f}",
            f"{row.p50_latency_s * 1000:.0f} ms",
        )
        for row in rows
    ]
    widths = [max(len(line[i]) for line in (header, *body)) for i in range(len(header))]

    def line(cells: Sequence[str]) -> str:
        first = cells[0].ljust(widths[0])
        rest = (cell.rjust(width) for cell, width in zip(cells[1:], widths[1:], strict=True))
        return "  ".join((first, *rest)).rstrip() + "\n"

    text = line(header) + line(["-" * w for w in widths]) + "".join(line(b) for b in body)
    for row in rows:
        for case in row.flaky:
            text += f"flaky on {row.model}: {case} (passed on some runs, failed on others)\n"
    return text


def results_json(outcomes: Sequence[TestOutcome]) -> dict[str, object]:
    """``--json``: every run of every test, and each model's summary."""
    return {
        "models": [row.to_dict() for row in summarize(outcomes)],
        "results": [o.to_dict() for o in outcomes],
        "passed": sum(o.passed for o in outcomes),
        "failed": sum(not o.passed for o in outcomes),
    }
