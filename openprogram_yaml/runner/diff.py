"""``openprogram-run diff [REV_A] [REV_B] PATH``: what changed between two versions of a
prompt repository, for a reviewer.

For each method: its prompt version (what ``openprogram.lock`` holds) in both versions,
and the diff of the request it renders (``run/render.py``: system prompt, messages, tools,
response format, as the offline ``test`` model would be sent them). A method is rendered
with the inputs of each of its tests, so the diff shows the prompt on the cases the
repository already cares about; a method without tests is rendered with its inputs'
defaults, and a placeholder (``<name>``, an enum's first value, 0, false, empty) for each
input without one. With ``--test``, both versions run their tests (offline, as ``test``
does by default: recorded replies when the project keeps recordings, else the ``test``
model) and each case is compared: better (failed, now passes; or a higher judge score),
worse, unchanged, new or removed.

The defaults compare the last commit (``HEAD``) against the work tree; both versions are
copies in a temporary folder (``runner/checkouts.py``), never the user's own files.
"""

from __future__ import annotations

import difflib
import html
import io
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from ..compile.program import Method, Program
from ..errors import ConfigError
from ..json_types import JSONObject, JSONValue
from ..run.render import format_request, render_method
from ..run.version import VersionStamp
from ..shown_text import shown_on_terminal
from .checkouts import Checkout, GitRepository, checkouts
from .lock import LOCK_FILE, check_lock, lock_data
from .testing import TestOutcome, run_tests

__all__ = ["CaseChange", "MethodChange", "VersionDiff", "diff_versions", "to_markdown", "to_text"]

Change = Literal["better", "worse", "unchanged", "new", "removed"]


@dataclass(slots=True)
class _Version:
    """What one version holds: its program (or why it does not compile), prompt versions,
    rendered requests, lock problems and test outcomes."""

    checkout: Checkout
    problems: list[str] = field(default_factory=list)
    prompts: dict[str, str] = field(default_factory=dict)
    #: method -> case label -> the rendered request as text.
    renders: dict[str, dict[str, str]] = field(default_factory=dict)
    lock_problems: list[str] = field(default_factory=list)
    outcomes: list[TestOutcome] | None = None
    secrets: frozenset[str] = frozenset()


@dataclass(slots=True)
class RenderChange:
    """One rendering of a method that differs: its case and the unified diff."""

    case: str
    diff: list[str]

    def to_dict(self) -> JSONObject:
        return {"case": self.case, "diff": list(self.diff)}


@dataclass(slots=True)
class MethodChange:
    """A method whose prompt version or rendered request differs between the versions."""

    method: str
    #: Its prompt version in each (None: the method is not there).
    before: str | None
    after: str | None
    renders: list[RenderChange] = field(default_factory=list)

    @property
    def status(self) -> str:
        if self.before is None:
            return "new"
        if self.after is None:
            return "removed"
        return "changed" if self.before != self.after else "renders differently"

    def to_dict(self) -> JSONObject:
        return {
            "method": self.method,
            "status": self.status,
            "before": self.before,
            "after": self.after,
            "renders": [r.to_dict() for r in self.renders],
        }


@dataclass(frozen=True, slots=True)
class CaseResult:
    """How one test went in one version."""

    passed: bool
    #: The judge's score, when the test has a judge that graded.
    score: float | None
    #: Why it failed (its first problem), empty when it passed.
    problem: str = ""

    def to_dict(self) -> JSONObject:
        return {"passed": self.passed, "score": self.score, "problem": self.problem}

    def __str__(self) -> str:
        text = "pass" if self.passed else "FAIL"
        return text if self.score is None else f"{text} ({self.score:.2f})"


@dataclass(frozen=True, slots=True)
class CaseChange:
    """One test compared across the versions."""

    case: str
    before: CaseResult | None
    after: CaseResult | None

    @property
    def change(self) -> Change:
        a, b = self.before, self.after
        if a is None:
            return "new"
        if b is None:
            return "removed"
        if a.passed != b.passed:
            return "better" if b.passed else "worse"
        if a.score is not None and b.score is not None and a.score != b.score:
            return "better" if b.score > a.score else "worse"
        return "unchanged"

    def to_dict(self) -> JSONObject:
        return {
            "case": self.case,
            "change": self.change,
            "before": None if self.before is None else self.before.to_dict(),
            "after": None if self.after is None else self.after.to_dict(),
        }


@dataclass(slots=True)
class VersionDiff:
    """What changed from version ``before`` to version ``after`` of a project."""

    project: str
    before: str
    after: str
    #: Why a version does not compile (one line per problem), per version label.
    problems: dict[str, list[str]]
    methods: list[MethodChange]
    unchanged_methods: int
    #: Where ``after``'s openprogram.lock does not match its prompts.
    lock_problems: list[str]
    #: With ``--test``: each case compared; None without.
    cases: list[CaseChange] | None
    secrets: frozenset[str] = frozenset()

    @property
    def failed(self) -> bool:
        """Whether a reviewer must look: the newer version does not compile, or a case got
        worse (``diff`` then exits 1)."""
        return self.after in self.problems or self.count("worse") > 0

    def count(self, change: Change) -> int:
        return sum(c.change == change for c in self.cases or ())

    def to_dict(self) -> JSONObject:
        out: JSONObject = {
            "project": self.project,
            "before": self.before,
            "after": self.after,
            "problems": {k: list(v) for k, v in self.problems.items()},
            "methods": [m.to_dict() for m in self.methods],
            "unchanged_methods": self.unchanged_methods,
            "lock_problems": list(self.lock_problems),
        }
        if self.cases is not None:
            changes: list[Change] = ["better", "worse", "unchanged", "new", "removed"]
            out["tests"] = {
                "summary": {c: self.count(c) for c in changes},
                "cases": [c.to_dict() for c in self.cases],
            }
        return out


# --- collecting one version -------------------------------------------------------------


#: A placeholder for an input of each JSON type but a string (which gets ``<name>``).
_EMPTY: dict[str, JSONValue] = {
    "integer": 0,
    "number": 0,
    "boolean": False,
    "array": [],
    "object": {},
    "null": None,
}


def _placeholder(name: str, schema: JSONValue) -> JSONValue:
    """A value a reviewer recognizes as a stand-in for input ``name``."""
    spec: Mapping[str, Any] = schema if isinstance(schema, Mapping) else {}
    enum = spec.get("enum")
    if isinstance(enum, list) and enum:
        return enum[0]  # type: ignore[no-any-return]
    kind = spec.get("type")
    kind = kind[0] if isinstance(kind, list) and kind else kind
    return _EMPTY.get(str(kind), f"<{name}>")


def _cases(program: Program, agent: str, method: Method) -> list[tuple[str, Mapping[str, Any]]]:
    """The inputs a method is rendered with: each of its tests' (the same inputs once),
    else its defaults and placeholders."""
    cases: list[tuple[str, Mapping[str, Any]]] = []
    seen: set[str] = set()
    for test in program.tests:
        if test.agent == agent and test.method == method.name:
            key = json.dumps(test.inputs, sort_keys=True, default=repr)
            if key not in seen:
                seen.add(key)
                cases.append((f"test: {test.name}", test.inputs))
    if cases:
        return cases
    placeholders = {
        name: _placeholder(name, schema)
        for name, schema in method.inputs.items()
        if not (isinstance(schema, Mapping) and "default" in schema)
    }
    return [("placeholder inputs", placeholders)]


async def _render(program: Program, agent: str, method: str, inputs: Mapping[str, Any]) -> str:
    rendered = await render_method(
        program, VersionStamp(program.version), agent, method, inputs, model="test"
    )
    if rendered.request is None:
        error = rendered.record.error or {}
        return f"(not rendered: {error.get('message', 'no request was made')})\n"
    return format_request(rendered.request)


async def _collect(
    checkout: Checkout, project: Path, with_tests: bool, model: str | None
) -> _Version:
    from ..compile.project import compile_path
    from ..run.record import run_secrets

    version = _Version(checkout)
    try:
        program = compile_path(checkout.top / project)
    except ConfigError as exc:
        prefix = str(checkout.top) + "/"
        version.problems = [str(d).replace(prefix, "") for d in exc.diagnostics]
        return version
    version.secrets = frozenset().union(*(run_secrets(a) for a in program.agents.values()))
    version.prompts = dict(lock_data(program)["prompts"])
    for agent in program.agents.values():
        for method in agent.methods.values():
            renders = version.renders.setdefault(f"{agent.name}.{method.name}", {})
            for label, inputs in _cases(program, agent.name, method):
                renders[label] = await _render(program, agent.name, method.name, inputs)
    if (program.root / LOCK_FILE).is_file():
        try:
            version.lock_problems = check_lock(program)
        except ConfigError as exc:  # a lock that does not read: said as its problem
            version.lock_problems = [str(d) for d in exc.diagnostics]
    if with_tests:
        version.outcomes = await _run_tests(program, model)
    return version


async def _run_tests(program: Program, model: str | None) -> list[TestOutcome]:
    """The tests as ``openprogram-run test`` runs them by default, quietly."""
    from ..recording.replay import ReplaySelector

    replay: Path | None = None
    judge: str | None = None
    if model is None:
        if program.recordings is not None and program.recordings.is_dir():
            replay = program.recordings
        else:
            model = "test"
    if model == "test":
        judge = "test"  # graders answer offline when the tests do
    return await run_tests(
        program,
        program.tests,
        model=model,
        judge_model=judge,
        wrap_selector=None if replay is None else lambda _inner: ReplaySelector(replay),
        stream=io.StringIO(),
    )


# --- comparing --------------------------------------------------------------------------


def _render_changes(a: _Version, b: _Version, method: str) -> list[RenderChange]:
    before, after = a.renders.get(method, {}), b.renders.get(method, {})
    changes = []
    for case in [*before, *(c for c in after if c not in before)]:
        old, new = before.get(case, ""), after.get(case, "")
        if old == new:
            continue
        lines = difflib.unified_diff(
            old.splitlines(),
            new.splitlines(),
            a.checkout.label,
            b.checkout.label,
            lineterm="",
        )
        changes.append(RenderChange(case, list(lines)))
    return changes


def _results(outcomes: Iterable[TestOutcome]) -> dict[str, CaseResult]:
    results: dict[str, CaseResult] = {}
    for o in outcomes:  # one model, one run each
        results[o.case_id] = CaseResult(
            o.passed, o.judge_score, o.problems[0] if o.problems else ""
        )
    return results


def _compare(a: _Version, b: _Version, project: str, with_tests: bool) -> VersionDiff:
    methods: list[MethodChange] = []
    unchanged = 0
    names = sorted(a.prompts.keys() | b.prompts.keys() | a.renders.keys() | b.renders.keys())
    for name in names:
        change = MethodChange(name, a.prompts.get(name), b.prompts.get(name))
        change.renders = _render_changes(a, b, name)
        if change.before == change.after and not change.renders:
            unchanged += 1
        else:
            methods.append(change)
    cases: list[CaseChange] | None = None
    if with_tests:
        before = _results(a.outcomes or ())
        after = _results(b.outcomes or ())
        cases = [
            CaseChange(case, before.get(case), after.get(case))
            for case in [*before, *(c for c in after if c not in before)]
        ]
    return VersionDiff(
        project=project,
        before=a.checkout.label,
        after=b.checkout.label,
        problems={v.checkout.label: v.problems for v in (a, b) if v.problems},
        methods=methods,
        unchanged_methods=unchanged,
        lock_problems=b.lock_problems,
        cases=cases,
        secrets=a.secrets | b.secrets,
    )


async def diff_versions(
    path: Path,
    rev_a: str | None = None,
    rev_b: str | None = None,
    *,
    with_tests: bool = False,
    model: str | None = None,
) -> VersionDiff:
    """Compare the project at ``path`` in ``rev_a`` (None: ``HEAD``) and ``rev_b`` (None:
    the work tree). Raises ``GitError`` (a ``UsageError``) for a path outside git or an
    unknown revision."""
    repository = GitRepository.of(path)
    with checkouts(repository, rev_a or "HEAD", rev_b) as (a, b):
        before = await _collect(a, repository.project, with_tests, model)
        after = await _collect(b, repository.project, with_tests, model)
    name = repository.project.as_posix()
    return _compare(before, after, repository.top.name if name == "." else name, with_tests)


# --- showing ----------------------------------------------------------------------------


def _short(version: str | None) -> str:
    return "-" if version is None else version[:12]


def to_text(diff: VersionDiff) -> str:
    """The diff as plain text for a terminal. The prompts and outputs it quotes are the edit
    under review: their control characters show as text (``\\x1b``), so that none can hide
    a line from the reviewer (an "erase line" sequence on the line it is on)."""
    lines = [f"{diff.project}: {diff.before} -> {diff.after}"]
    for label, problems in diff.problems.items():
        lines += ["", f"{label} does not compile:", *(f"  {p}" for p in problems)]
    lines += [
        "",
        f"methods: {len(diff.methods)} changed, {diff.unchanged_methods} unchanged",
    ]
    for m in diff.methods:
        lines.append(f"  {m.method}: {m.status} ({_short(m.before)} -> {_short(m.after)})")
    for m in diff.methods:
        for r in m.renders:
            lines += ["", f"── {m.method}, {r.case} ──", *r.diff]
    if diff.lock_problems:
        lines += ["", f"{LOCK_FILE} in {diff.after} is not up to date (`openprogram-run lock`):"]
        lines += [f"  {p}" for p in diff.lock_problems]
    if diff.cases is not None:
        lines += ["", _tests_summary(diff)]
        width = max((len(c.case) for c in diff.cases), default=0)
        for c in diff.cases:
            old = "-" if c.before is None else str(c.before)
            new = "-" if c.after is None else str(c.after)
            lines.append(f"  {c.change:<9}  {c.case:<{width}}  {old} -> {new}")
            if c.change == "worse" and c.after is not None and c.after.problem:
                lines.append(f"  {'':<9}  {c.after.problem}")
    return shown_on_terminal("\n".join(lines)) + "\n"


def _tests_summary(diff: VersionDiff) -> str:
    changes: list[Change] = ["better", "worse", "unchanged", "new", "removed"]
    counts = ", ".join(f"{diff.count(c)} {c}" for c in changes if diff.count(c))
    return f"tests: {counts or 'none'}"


_MD_SPECIAL = re.compile(r"([\\`*_{}\[\]<>|~])")
_LINE_BREAK = re.compile(r"\r\n?|\n")


def _md(text: str) -> str:
    """``text`` shown literally in Markdown (a table cell or a line): nothing in a test name
    or a prompt can open a link, an image, a tag or a new cell, nor start a line (a lone
    "\\r" ends one in Markdown, as "\\n" does: "\\r### All good" was a heading)."""
    return _MD_SPECIAL.sub(r"\\\1", _LINE_BREAK.sub(" ", text))


def _fence(lines: list[str]) -> str:
    """A code fence longer than any run of backticks inside (so the diff cannot close it)."""
    longest = max((len(run) for line in lines for run in re.findall("`+", line)), default=0)
    return "`" * max(3, longest + 1)


_MARK = {
    "better": "🟢 better",
    "worse": "🔴 worse",
    "unchanged": "unchanged",
    "new": "new",
    "removed": "removed",
}


def _md_result(result: CaseResult | None) -> str:
    if result is None:
        return "—"
    return ("✅ " if result.passed else "❌ ") + _md(str(result))


def to_markdown(diff: VersionDiff) -> str:
    """The diff as GitHub-flavoured Markdown, for a pull-request comment."""
    out = [f"### Prompt changes in {_md(diff.project)}: {_md(diff.before)} → {_md(diff.after)}"]
    out.append("")
    for label, problems in diff.problems.items():
        out += [f"**{_md(label)} does not compile:**", ""]
        out += [f"- {_md(p)}" for p in problems] + [""]
    if diff.methods:
        out += ["| method | change | prompt version |", "| --- | --- | --- |"]
        for m in diff.methods:
            out.append(f"| {_md(m.method)} | {m.status} | {_short(m.before)} → {_short(m.after)} |")
        out.append("")
    out += [f"{diff.unchanged_methods} other methods unchanged.", ""]
    for m in diff.methods:
        for r in m.renders:
            # The prompts are the edit under review, in a browser now: a bidi override
            # (U+202E) would show a line's words in another order, as the text diff's
            # control characters show as text.
            lines = [shown_on_terminal(line) for line in r.diff]
            fence = _fence(lines)
            out += [
                "<details>",
                # An HTML block: markdown escapes do not work in it, HTML's do. It ends at
                # a blank line: a case name holding one must not end it.
                f"<summary>{html.escape(_LINE_BREAK.sub(' ', f'{m.method}: {r.case}'))}</summary>",
                "",
                f"{fence}diff",
                *lines,
                fence,
                "</details>",
                "",
            ]
    if diff.lock_problems:
        out += [f"**{LOCK_FILE} is not up to date** (run `openprogram-run lock`):", ""]
        out += [f"- {_md(p)}" for p in diff.lock_problems] + [""]
    if diff.cases is not None:
        out += [f"#### {_md(_tests_summary(diff))}", ""]
        changed = [c for c in diff.cases if c.change != "unchanged"]
        if changed:
            out += [
                f"| case | {_md(diff.before)} | {_md(diff.after)} | |",
                "| --- | --- | --- | --- |",
            ]
            for c in changed:
                out.append(
                    f"| {_md(c.case)} | {_md_result(c.before)} | {_md_result(c.after)} "
                    f"| {_MARK[c.change]} |"
                )
            out.append("")
            out += [
                f"- {_md(c.case)}: {_md(c.after.problem)}"
                for c in changed
                if c.change == "worse" and c.after is not None and c.after.problem
            ]
    return "\n".join(out).rstrip() + "\n"
