"""Reports of ``openprogram-run test`` for CI: ``--junit FILE`` and ``--report FILE.html``.

- JUnit XML, the format CI systems read (GitHub, GitLab, Jenkins, Azure): one
  ``<testsuite>`` per model, one ``<testcase>`` per case (and per repeat), a ``<failure>``
  carrying the expectations missed, what came instead and the rendered prompt; an
  ``<error>`` when the run itself failed where the test expected an answer.
- A single HTML page, self-contained (no script, no external asset; its content security
  policy forbids both): the matrix of models, then each failure with its expectation, what
  came, and the prompt the method rendered.

Model outputs are untrusted: everything shown is escaped (and characters XML cannot hold
are replaced), and every secret of the project's agents is redacted. Both files are written
atomically: a failed write leaves the old report as it was.
"""

from __future__ import annotations

import html
import json
import re
import xml.etree.ElementTree as ET
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from pathlib import Path

from .._file_writes import write_atomically
from ..redaction import redact
from ..run.evals import summarize
from .testing import TestOutcome

__all__ = ["html_report", "junit_xml", "write_report"]

#: What XML 1.0 cannot hold (control characters, lone surrogates, U+FFFE/FFFF); a model's
#: output may carry them, and one would make the whole file unreadable to CI.
_NOT_XML = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")

#: Outputs and prompts in reports are cut to this many characters (a CI page is not the
#: place for a whole book a model wrote).
_SHOWN = 20_000


def _by_model(outcomes: Iterable[TestOutcome]) -> dict[str, list[TestOutcome]]:
    groups: dict[str, list[TestOutcome]] = {}
    for outcome in outcomes:
        groups.setdefault(outcome.model_label, []).append(outcome)
    return groups


def _case_name(outcome: TestOutcome, repeated: bool) -> str:
    """The case's name; with ``--repeat``, which run of it."""
    return f"{outcome.test.name} (run {outcome.attempt})" if repeated else outcome.test.name


def _clean(text: str, secrets: frozenset[str]) -> str:
    """``text`` as a report may show it: secrets redacted, cut, XML-safe."""
    text = redact(text, secrets)
    if len(text) > _SHOWN:
        text = text[:_SHOWN] + f"… ({len(text)} characters)"
    return _NOT_XML.sub("\ufffd", text)


def _output_text(outcome: TestOutcome) -> str | None:
    """What came: the output, or None when the run failed (its error is a problem)."""
    record = outcome.record
    if record is None or record.error is not None:
        return None
    out = record.output
    return out if isinstance(out, str) else json.dumps(out, ensure_ascii=False, indent=2)


def _unexpected_error(outcome: TestOutcome) -> dict[str, object] | None:
    """The run's error when the test expected an answer instead."""
    record = outcome.record
    if record is None or record.error is None or outcome.test.expect.error is not None:
        return None
    return record.error


def _grade_lines(outcome: TestOutcome) -> list[str]:
    """The graded expectations (judge, similar): score against what passes, and why."""
    lines = []
    for g in outcome.grades:
        if g.skipped:
            lines.append(f"{g.kind}: not graded (the offline test model does not judge)")
            continue
        score = "no score" if g.score is None else f"{g.score:.2f}"
        why = g.error or g.reason
        lines.append(f"{g.kind} ({g.model}): {score} (passes at {g.threshold:g}) {why}".rstrip())
    return lines


def _expectation(outcome: TestOutcome) -> str:
    """The test's ``expect:`` block as written."""
    return json.dumps(dict(outcome.test.expect.written), ensure_ascii=False, indent=2)


def _failure_text(outcome: TestOutcome) -> str:
    lines = [f"{outcome.test.id}  ({outcome.test.where})"]
    lines += [f"- {p}" for p in outcome.problems]
    lines += ["", "expect:", _expectation(outcome)]
    grades = _grade_lines(outcome)
    if grades:
        lines += ["", "grades:", *grades]
    got = _output_text(outcome)
    if got is not None:
        lines += ["", "got:", got]
    if outcome.prompt:
        lines += ["", "rendered prompt:", outcome.prompt]
    return "\n".join(lines)


def junit_xml(outcomes: Sequence[TestOutcome], secrets: frozenset[str] = frozenset()) -> str:
    """The outcomes as JUnit XML: ``<testsuites>``, a ``<testsuite>`` per model."""
    root = ET.Element("testsuites", name="openprogram-run test")
    totals = {"tests": 0, "failures": 0, "errors": 0}
    all_time = 0.0
    stamp = datetime.now(UTC).isoformat(timespec="seconds")
    repeated = any(o.attempt > 1 for o in outcomes)
    for model, group in _by_model(outcomes).items():
        errors = sum(_unexpected_error(o) is not None for o in group)
        failures = sum(not o.passed for o in group) - errors
        time = sum(o.record.elapsed_s for o in group if o.record is not None)
        suite = ET.SubElement(
            root,
            "testsuite",
            name=_clean(model, secrets),
            tests=str(len(group)),
            failures=str(failures),
            errors=str(errors),
            skipped="0",
            time=f"{time:.3f}",
            timestamp=stamp,
        )
        properties = ET.SubElement(suite, "properties")
        ET.SubElement(properties, "property", name="model", value=_clean(model, secrets))
        for outcome in group:
            test = outcome.test
            case = ET.SubElement(
                suite,
                "testcase",
                name=_clean(_case_name(outcome, repeated), secrets),
                classname=_clean(test.agent, secrets),
                time=f"{outcome.record.elapsed_s if outcome.record else 0.0:.3f}",
            )
            if outcome.passed:
                continue
            error = _unexpected_error(outcome)
            if error is not None:
                element = ET.SubElement(
                    case,
                    "error",
                    type=_clean(str(error.get("type", "error")), secrets),
                    message=_clean(str(error.get("message", "")).split("\n")[0], secrets),
                )
            else:
                element = ET.SubElement(
                    case,
                    "failure",
                    type="expectation",
                    message=_clean(outcome.problems[0], secrets),
                )
            element.text = _clean(_failure_text(outcome), secrets)
        totals["tests"] += len(group)
        totals["failures"] += failures
        totals["errors"] += errors
        all_time += time
    for key, value in totals.items():
        root.set(key, str(value))
    root.set("time", f"{all_time:.3f}")
    ET.indent(root)
    return ET.tostring(root, encoding="unicode", xml_declaration=True) + "\n"


_STYLE = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 2rem auto; max-width: 70rem;
       padding: 0 1rem; color: #1d1d1f; }
h1 { font-size: 1.4rem; } h2 { font-size: 1.15rem; margin-top: 2rem; }
table { border-collapse: collapse; }
th, td { border: 1px solid #ccc; padding: .3rem .6rem; text-align: right; }
th:first-child, td:first-child { text-align: left; }
.failure { border-left: 4px solid #c62828; padding: .2rem 1rem; margin: 1rem 0;
           background: #fff6f6; }
.failure h3 { font-size: 1rem; margin: .4rem 0; }
.where, .model { color: #555; font-weight: normal; }
pre { white-space: pre-wrap; word-break: break-word; background: #f4f4f4;
      padding: .5rem; max-height: 30rem; overflow: auto; }
.ok { color: #1b5e20; } .bad { color: #c62828; }
"""

#: No script, no request of any kind: the page shows text and its own style, nothing else.
_POLICY = "default-src 'none'; style-src 'unsafe-inline'; base-uri 'none'; form-action 'none'"


def _e(text: str, secrets: frozenset[str]) -> str:
    return html.escape(_clean(text, secrets), quote=True)


def _money(value: float | None) -> str:
    return "unknown" if value is None else f"${value:.4f}"


def html_report(
    outcomes: Sequence[TestOutcome],
    secrets: frozenset[str] = frozenset(),
    *,
    title: str = "openprogram-run test",
) -> str:
    """The outcomes as one self-contained HTML page."""
    rows = summarize(outcomes)
    failed = [o for o in outcomes if not o.passed]
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f'<meta http-equiv="Content-Security-Policy" content="{_POLICY}">',
        f"<title>{_e(title, secrets)}</title><style>{_STYLE}</style></head><body>",
        f"<h1>{_e(title, secrets)}</h1>",
        f'<p id="totals">{len(outcomes) - len(failed)} passed, {len(failed)} failed '
        f"<span class=where>({datetime.now(UTC):%Y-%m-%d %H:%M} UTC)</span></p>",
        '<h2>Models</h2><table id="matrix"><thead><tr><th>model</th><th>passed</th>'
        "<th>failed</th><th>pass rate</th><th>judge</th><th>tokens in</th><th>tokens out</th>"
        "<th>cost</th><th>p50 latency</th></tr></thead><tbody>",
    ]
    for row in rows:
        score = "-" if row.mean_score is None else f"{row.mean_score:.2f}"
        parts.append(
            f"<tr><td>{_e(row.model, secrets)}</td><td>{row.passed}</td>"
            f"<td>{row.runs - row.passed}</td><td>{row.pass_rate:.0%}</td><td>{score}</td>"
            f"<td>{row.input_tokens:,}</td><td>{row.output_tokens:,}</td>"
            f"<td>{_money(row.usd)}</td><td>{row.p50_latency_s * 1000:.0f} ms</td></tr>"
        )
    parts.append("</tbody></table>")
    for row in rows:
        parts += [
            f'<p class="flaky">flaky on {_e(row.model, secrets)}: {_e(case, secrets)} '
            "(passed on some runs, failed on others)</p>"
            for case in row.flaky
        ]
    parts.append(f'<h2>Failures ({len(failed)})</h2><div id="failures">')
    if not failed:
        parts.append('<p class="ok">Every case passed.</p>')
    for outcome in failed:
        test = outcome.test
        parts.append(
            f'<section class="failure"><h3>{_e(test.id, secrets)} '
            f'<span class="model">on {_e(outcome.model_label, secrets)}</span> '
            f'<span class="where">{_e(str(test.where), secrets)}</span></h3><ul>'
        )
        parts += [f'<li class="problem">{_e(p, secrets)}</li>' for p in outcome.problems]
        parts.append("</ul>")
        parts.append(
            f'<h4>Expected</h4><pre class="expect">{_e(_expectation(outcome), secrets)}</pre>'
        )
        grades = _grade_lines(outcome)
        if grades:
            parts.append('<h4>Grades</h4><ul class="grades">')
            parts += [f"<li>{_e(line, secrets)}</li>" for line in grades]
            parts.append("</ul>")
        got = _output_text(outcome)
        if got is not None:
            parts.append(f'<h4>What came</h4><pre class="got">{_e(got, secrets)}</pre>')
        if outcome.prompt:
            parts.append(
                f'<h4>Rendered prompt</h4><pre class="prompt">{_e(outcome.prompt, secrets)}</pre>'
            )
        parts.append("</section>")
    parts.append(
        '</div><h2>Cases</h2><table id="cases"><thead><tr><th>case</th><th>model</th>'
        "<th>result</th><th>judge</th></tr></thead><tbody>"
    )
    repeated = any(o.attempt > 1 for o in outcomes)
    for outcome in outcomes:
        mark = '<td class="ok">pass</td>' if outcome.passed else '<td class="bad">FAIL</td>'
        judged = outcome.judge_score
        name = f"{outcome.test.agent}: {_case_name(outcome, repeated)}"
        parts.append(
            f"<tr><td>{_e(name, secrets)}</td><td>{_e(outcome.model_label, secrets)}</td>{mark}"
            f"<td>{'-' if judged is None else f'{judged:.2f}'}</td></tr>"
        )
    parts.append("</tbody></table></body></html>")
    return "\n".join(parts) + "\n"


def write_report(path: Path, text: str) -> None:
    """Write a report whole or not at all; raises ``OSError`` naming ``path``."""
    write_atomically(path, text)
