"""Graded expectations of tests (``judge``, ``similar``) and what a test run reports per model.

A ``judge`` expectation asks a model to grade a run's output against a rubric: one
structured-output call (the response schema ``JUDGE_SCHEMA``: a score from 0 to 1 and a
reason) through the same ``Runtime`` and runtime selector as the run itself, under the label
``judge`` (``runtime.context.current_method``). So ``--record`` writes the judge's call to
``DIR/judge/`` and a replay answers it from there, like any other model call: once
recorded, CI grades offline and always the same way.

A ``similar`` expectation compares the output with a reference text by the cosine
similarity of their embeddings, from the embeddings endpoint of the provider that serves
the embeddings model (a runtime's ``embed``; OpenAI-compatible providers have one,
Anthropic has none and says so). Embeddings are recorded and replayed the same way, under
the label ``embeddings``; the offline ``test`` model embeds by counting words.

The offline ``test`` model does not judge (its answers are made up): under it a ``judge``
expectation is skipped, and ``openprogram-run test`` says how many were; recordings made
with ``--record`` grade them offline from then on.

``Grade`` is one graded expectation's result, ``ModelSummary`` one model's row of the
matrix ``openprogram-run test --models`` prints (``summarize``).
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from ..json_types import JSONObject, JSONValue
from ..runtime.context import current_method
from ..runtimes.protocol import RuntimeSelectorProtocol, TurnFailure
from .costs import CostMeter

if TYPE_CHECKING:
    from ..compile.program import Agent
    from ..compile.prompt_tests import CompiledTest, Judge, Similar
    from ..runtimes.protocol import SelectorWrapper

__all__ = [
    "EMBEDDINGS_LABEL",
    "JUDGE_LABEL",
    "JUDGE_SCHEMA",
    "Embedder",
    "Grade",
    "ModelSummary",
    "cosine",
    "grade_outcome",
    "summarize",
]

#: The recordings folder (label) of judge calls and of embeddings requests. Method labels
#: are always "agent.method", so these never meet one.
JUDGE_LABEL = "judge"
EMBEDDINGS_LABEL = "embeddings"

#: What a judge answers.
JUDGE_SCHEMA: JSONObject = {
    "type": "object",
    "properties": {
        "score": {"type": "number", "minimum": 0, "maximum": 1},
        "reason": {"type": "string"},
    },
    "required": ["score", "reason"],
    "additionalProperties": False,
}

_JUDGE_SYSTEM = (
    "You grade the output of a program against a rubric. Read the rubric, the program's "
    "inputs and its output; answer with a score from 0 (does not meet the rubric at all) "
    "to 1 (meets it fully) and the reason for the score in one or two sentences."
)

#: The embeddings model when none is named: at the provider of the model the test runs on.
DEFAULT_EMBED_MODEL = "text-embedding-3-small"


@dataclass(slots=True)
class Grade:
    """One graded expectation of one run: its score against the threshold that passes.

    ``score`` is None when the grading itself failed (``error`` says why): that fails too.
    """

    #: "judge" or "similar".
    kind: str
    score: float | None
    #: The lowest passing score (``pass_at`` or ``at_least``).
    threshold: float
    #: The model that graded (the judge, or the embeddings model).
    model: str
    #: The judge's reason; for ``similar``, the reference text.
    reason: str = ""
    error: str | None = None
    #: What the grading call cost (``run.costs``), apart from the run's own.
    cost: JSONObject | None = None
    #: Not graded: the offline ``test`` model cannot judge (neither a pass nor a failure).
    skipped: bool = False

    @property
    def passed(self) -> bool:
        return self.skipped or (self.score is not None and self.score >= self.threshold)

    def problem(self) -> str | None:
        """The line a failure report shows, None when it passed."""
        if self.error is not None:
            return f"could not grade ({self.kind}, {self.model}): {self.error}"
        if self.passed:  # or skipped
            return None
        if self.kind == "judge":
            return (
                f"the judge ({self.model}) scored {self.score:.2f}, below pass_at "
                f"{self.threshold:g}: {self.reason}"
            )
        return (
            f"expected output similar to {self.reason!r} (at least {self.threshold:g}), "
            f"got similarity {self.score:.3f}"
        )

    def to_dict(self) -> JSONObject:
        return {
            "kind": self.kind,
            "score": self.score,
            "threshold": self.threshold,
            "passed": self.passed,
            "model": self.model,
            "reason": self.reason,
            "error": self.error,
            "cost": self.cost,
            "skipped": self.skipped,
        }


class Embedder(Protocol):
    """A runtime that can embed texts: ``embed`` returns one vector a text, or a failure."""

    async def embed(
        self, texts: Sequence[str], *, model_ref: str | None = None
    ) -> list[list[float]] | TurnFailure: ...


def cosine(a: Sequence[float], b: Sequence[float]) -> float:
    """The cosine similarity of two vectors (0 when either is all zeros)."""
    dot = sum(x * y for x, y in zip(a, b, strict=False))
    norm = math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b))
    return dot / norm if norm else 0.0


def _text(value: object) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def judge_model(test: CompiledTest, judge: Judge, run_model: str | None) -> str | None:
    """Who grades: the expectation's model, else the test file's ``judge_model`` (else the
    project's: ``CompiledTest.judge_model`` holds whichever is set), else the model the
    test ran on."""
    return judge.model or test.judge_model or run_model


def embed_model(test: CompiledTest, similar: Similar, run_model: str | None) -> str:
    """The embeddings model: the expectation's, else the test file's ``embed_model``, else
    ``text-embedding-3-small`` at the provider of the model the test ran on (the offline
    ``test`` model embeds by itself)."""
    named = similar.model or test.embed_model
    if named:
        return named
    if run_model in (None, "test"):
        return "test"
    provider, sep, _ = run_model.partition(":")
    return f"{provider}:{DEFAULT_EMBED_MODEL}" if sep else DEFAULT_EMBED_MODEL


class _Grader:
    """Opens the agent's runtime selector (wrapped like the run's: recording, replay) once
    for the grades of one run, and closes it."""

    def __init__(self, agent: Agent, wrap_selector: SelectorWrapper | None) -> None:
        from .agent_runtime import selector_for

        selector: RuntimeSelectorProtocol = selector_for(agent)
        self.selector = wrap_selector(selector) if wrap_selector is not None else selector

    async def judge(
        self, model: str, judge: Judge, inputs: Mapping[str, Any], output: JSONValue
    ) -> Grade:
        from ..runtime.runtime import Runtime

        runtime = Runtime(model=model, runtimes=self.selector, max_retries=2)
        meter = runtime.meter = CostMeter()
        prompt = (
            f"Rubric:\n{judge.rubric}\n\nInputs:\n{_text(dict(inputs))}\n\nOutput:\n{_text(output)}"
        )
        token = current_method.set(JUDGE_LABEL)
        try:
            answer = await runtime.async_exec(
                [
                    {"type": "text", "role": "system", "text": _JUDGE_SYSTEM},
                    {"type": "text", "text": prompt},
                ],
                response_format=JUDGE_SCHEMA,
                model=model,
                tools=[],
            )
        except Exception as exc:  # a grading failure fails the test, with its reason
            error = _failure_text(exc)
            return Grade("judge", None, judge.pass_at, model, error=error, cost=meter.to_dict())
        finally:
            current_method.reset(token)
        score = float(answer["score"])
        return Grade(
            "judge", score, judge.pass_at, model, str(answer["reason"]), cost=meter.to_dict()
        )

    async def similar(self, model: str, similar: Similar, output: JSONValue) -> Grade:
        def failed(message: str) -> Grade:
            return Grade("similar", None, similar.at_least, model, similar.to, error=message)

        try:
            runtime = self.selector.select(model)
        except Exception as exc:
            return failed(_failure_text(exc))
        embed: Callable[..., Any] | None = getattr(runtime, "embed", None)
        if embed is None:
            kind = getattr(runtime, "runtime_id", type(runtime).__name__)
            return failed(
                f"the {kind} runtime has no embeddings endpoint; name an embeddings model "
                "of an OpenAI-compatible provider with similar: {model: ...} or the test "
                "file's embed_model:"
            )
        token = current_method.set(EMBEDDINGS_LABEL)
        try:
            vectors = await embed([_text(output), similar.to], model_ref=model)
        finally:
            current_method.reset(token)
        if isinstance(vectors, TurnFailure):
            return failed(vectors.message)
        problem = _embeddings_problem(vectors)
        if problem is not None:
            return failed(f"the embeddings model answered {problem}")
        score = cosine(vectors[0], vectors[1])
        if not math.isfinite(score):
            return failed(
                "the embeddings hold a number that is not finite, or too large to compare"
            )
        return Grade("similar", score, similar.at_least, model, similar.to)

    async def aclose(self) -> None:
        await self.selector.aclose()


def _embeddings_problem(vectors: Sequence[Sequence[float]]) -> str | None:
    """What keeps ``vectors``, the embeddings of two texts (a provider's or a recording's
    answer), from being compared; None when nothing does."""
    if len(vectors) != 2:
        return f"{len(vectors)} vector(s) for 2 texts"
    first, second = vectors
    if len(first) != len(second) or not first:
        return f"vectors of {len(first)} and {len(second)} numbers"
    return None


def _failure_text(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


async def grade_outcome(
    agent: Agent,
    test: CompiledTest,
    inputs: Mapping[str, Any],
    output: JSONValue,
    *,
    run_model: str | None,
    judge_override: str | None,
    wrap_selector: SelectorWrapper | None,
) -> list[Grade]:
    """The graded expectations of ``test`` for a run that gave ``output``.

    ``run_model`` is the model the run used; ``judge_override`` replaces every judge and
    embeddings model (``test``, offline).
    """
    exp = test.expect
    if exp.judge is None and exp.similar is None:
        return []
    grader = _Grader(agent, wrap_selector)
    grades: list[Grade] = []
    try:
        if exp.judge is not None:
            model = judge_override or judge_model(test, exp.judge, run_model)
            if model is None:
                grades.append(Grade("judge", None, exp.judge.pass_at, "?", error="no judge model"))
            elif model == "test" or model.startswith("test:"):
                # Its scores are made up: a judged test is graded once recorded or live.
                grades.append(Grade("judge", None, exp.judge.pass_at, model, skipped=True))
            else:
                grades.append(await grader.judge(model, exp.judge, inputs, output))
        if exp.similar is not None:
            model = judge_override or embed_model(test, exp.similar, run_model)
            grades.append(await grader.similar(model, exp.similar, output))
    finally:
        await grader.aclose()
    return grades


# --- the matrix ---------------------------------------------------------------------------


class _Outcome(Protocol):
    """What ``summarize`` reads of a test outcome (``runner.testing.TestOutcome``)."""

    @property
    def case_id(self) -> str: ...
    @property
    def model_label(self) -> str: ...
    @property
    def passed(self) -> bool: ...
    @property
    def judge_score(self) -> float | None: ...
    @property
    def latency_s(self) -> float: ...
    @property
    def run_cost(self) -> JSONObject | None: ...


@dataclass(slots=True)
class ModelSummary:
    """One model's row of the matrix: how its runs of the cases went."""

    model: str
    #: Distinct cases, and runs of them (cases times ``--repeat``).
    cases: int = 0
    runs: int = 0
    passed: int = 0
    #: The mean judge score of its runs (None: no judged case).
    mean_score: float | None = None
    input_tokens: int = 0
    output_tokens: int = 0
    #: What its runs cost in USD (None: a model without a known price, e.g. ``test``).
    usd: float | None = None
    #: The median time of one run, seconds.
    p50_latency_s: float = 0.0
    #: Cases that passed on some runs and failed on others (with ``--repeat``).
    flaky: list[str] = field(default_factory=list)

    @property
    def pass_rate(self) -> float:
        return self.passed / self.runs if self.runs else 0.0

    def to_dict(self) -> JSONObject:
        return {
            "model": self.model,
            "cases": self.cases,
            "runs": self.runs,
            "passed": self.passed,
            "pass_rate": self.pass_rate,
            "mean_score": self.mean_score,
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "usd": self.usd,
            "p50_latency_s": self.p50_latency_s,
            "flaky": list(self.flaky),
        }


def summarize(outcomes: Iterable[_Outcome]) -> list[ModelSummary]:
    """One row per model, in the order the models first ran."""
    from .costs import sum_costs

    by_model: dict[str, list[_Outcome]] = {}
    for outcome in outcomes:
        by_model.setdefault(outcome.model_label, []).append(outcome)
    rows: list[ModelSummary] = []
    for model, runs in by_model.items():
        results: dict[str, set[bool]] = {}
        for o in runs:
            results.setdefault(o.case_id, set()).add(o.passed)
        scores = [s for o in runs if (s := o.judge_score) is not None]
        cost = sum_costs(o.run_cost for o in runs)
        entries = [e for e in cost["models"] or [] if isinstance(e, dict)]  # type: ignore[union-attr]
        usd = cost["usd"]
        rows.append(
            ModelSummary(
                model=model,
                cases=len(results),
                runs=len(runs),
                passed=sum(o.passed for o in runs),
                mean_score=statistics.fmean(scores) if scores else None,
                input_tokens=sum(_int(e.get("input_tokens")) for e in entries),
                output_tokens=sum(_int(e.get("output_tokens")) for e in entries),
                usd=float(usd) if isinstance(usd, int | float) else None,
                p50_latency_s=statistics.median(o.latency_s for o in runs) if runs else 0.0,
                flaky=[case for case, seen in results.items() if len(seen) > 1],
            )
        )
    return rows


def _int(value: object) -> int:
    return value if isinstance(value, int) else 0
