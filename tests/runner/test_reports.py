"""``openprogram-run test --junit FILE --report FILE.html``: what CI reads and what a
reviewer opens. The JUnit file is parsed as CI systems parse it; the HTML page is opened in
a headless chromium. Model outputs are untrusted: a reply that looks like markup, carries
control characters or a secret must reach neither file as such."""

from __future__ import annotations

import shutil
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from browser import launch_chromium
from playwright.sync_api import Browser
from support import EXAMPLES

from openprogram_yaml.runner.cli import main

SECRET = "sk-report-secret-7731"

#: Cases added to the example repository: one fails on a hostile output, one cannot run.
CASES = """\
  - name: a hostile reply fails <b>loudly</b>
    method: draft
    inputs: {ticket: "<script>alert(1)</script> ]]> \\0 \\e[31m token sk-report-secret-7731"}
    expect:
      contains: [never there]
  - name: a model nobody serves
    method: draft
    model: "zzz:nobody"
    inputs: {ticket: "x"}
    expect:
      contains: [x]
"""

#: The elements and attributes of the JUnit XML schema CI systems read (Jenkins'
#: junit-10.xsd, which GitLab, GitHub's reporters and Azure follow).
SCHEMA = {
    "testsuites": {"name", "tests", "failures", "errors", "time", "disabled"},
    "testsuite": {
        "name",
        "tests",
        "failures",
        "errors",
        "skipped",
        "time",
        "timestamp",
        "hostname",
        "id",
        "package",
        "disabled",
    },
    "properties": set(),
    "property": {"name", "value"},
    "testcase": {"name", "classname", "time", "assertions", "status"},
    "failure": {"message", "type"},
    "error": {"message", "type"},
    "skipped": {"message"},
    "system-out": set(),
    "system-err": set(),
}


@pytest.fixture
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("SUPPORT_API_TOKEN", SECRET)  # a secret by its variable's name
    target = tmp_path / "repo"
    shutil.copytree(EXAMPLES / "support_repo", target)
    tests = target / "tests" / "replies.tests.yaml"
    tests.write_text(tests.read_text() + CASES)
    return target


def _run(repo: Path, *extra: str) -> int:
    # In a thread of its own: Playwright's sync API keeps an event loop running in this one.
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(main, ["test", str(repo), *extra]).result()


def test_junit_xml_has_a_suite_per_model_and_a_case_per_test_that_ci_reads(
    repo: Path, tmp_path: Path
) -> None:
    junit = tmp_path / "out" / "junit.xml"
    junit.parent.mkdir()
    assert _run(repo, "--junit", str(junit)) == 1
    raw = junit.read_bytes()
    assert SECRET.encode() not in raw and b"\x1b" not in raw and b"\x00" not in raw
    root = ET.fromstring(raw)
    for element in root.iter():
        assert element.tag in SCHEMA, element.tag
        assert set(element.attrib) <= SCHEMA[element.tag], (element.tag, element.attrib)
    assert root.tag == "testsuites"
    assert (root.get("tests"), root.get("failures"), root.get("errors")) == ("6", "1", "1")
    (suite,) = root.findall("testsuite")
    assert suite.get("name") == "test"
    assert (suite.get("tests"), suite.get("failures"), suite.get("errors")) == ("6", "1", "1")
    assert [p.attrib for p in suite.findall("properties/property")] == [
        {"name": "model", "value": "test"}
    ]
    cases = {c.get("name"): c for c in suite.findall("testcase")}
    assert cases["replies are signed in the house style"].get("classname") == "replies"
    assert list(cases["replies are signed in the house style"]) == []
    failure = cases["a hostile reply fails <b>loudly</b>"].find("failure")
    assert failure is not None
    assert failure.get("message") == "expected output to contain 'never there'"
    text = failure.text or ""
    assert "<script>alert(1)</script> ]]>" in text  # escaped in the file, whole when read
    assert "got:" in text and "rendered prompt:" in text and "***" in text
    assert 'expect:\n{\n  "contains": [\n    "never there"\n  ]\n}' in text
    error = cases["a model nobody serves"].find("error")
    assert error is not None and error.get("type") == "UsageError"
    assert error.get("message") == "no runtime serves model 'zzz:nobody'"


def test_a_report_that_cannot_be_written_fails_before_any_test_runs(
    repo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = _run(repo, "--report", str(tmp_path / "missing" / "r.html"))
    captured = capsys.readouterr()
    assert code == 2
    assert "cannot write" in captured.err and "--report" in captured.err
    assert "passed" not in captured.out


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    yield from launch_chromium()


def test_the_html_report_shows_the_matrix_and_each_failure_as_text(
    repo: Path, tmp_path: Path, browser: Browser
) -> None:
    report = tmp_path / "report.html"
    assert _run(repo, "--report", str(report)) == 1
    raw = report.read_text(encoding="utf-8")
    assert SECRET not in raw and "<script" not in raw
    context = browser.new_context()
    page = context.new_page()
    requests: list[str] = []
    dialogs: list[str] = []
    page.on("request", lambda r: requests.append(r.url))
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    page.goto(report.as_uri())
    page.screenshot(path=str(tmp_path / "report.png"), full_page=True)
    assert requests == [report.as_uri()]  # self-contained: nothing else is fetched
    assert page.locator("#totals").inner_text().startswith("4 passed, 2 failed")
    rows = page.locator("#matrix tbody tr")
    assert rows.count() == 1
    assert rows.nth(0).locator("td").all_inner_texts()[:4] == ["test", "4", "2", "67%"]
    failures = page.locator("#failures section.failure")
    assert failures.count() == 2
    hostile = failures.nth(0)
    assert "a hostile reply fails <b>loudly</b>" in hostile.locator("h3").inner_text()
    assert hostile.locator("b").count() == 0
    assert hostile.locator("li.problem").inner_text() == "expected output to contain 'never there'"
    assert '"contains": [' in hostile.locator("pre.expect").inner_text()
    got = hostile.locator("pre.got").inner_text()
    assert "<script>alert(1)</script> ]]>" in got and "token ***" in got
    assert "Draft a friendly reply" in hostile.locator("pre.prompt").inner_text()
    assert page.locator("script").count() == 0 and dialogs == []
    unserved = failures.nth(1)
    assert "no runtime serves model 'zzz:nobody'" in unserved.locator("li.problem").inner_text()
    assert unserved.locator("pre.got").count() == 0
    context.close()


def test_with_models_and_repeat_each_model_is_a_suite_and_each_run_a_case(
    tmp_path: Path,
) -> None:
    junit = tmp_path / "junit.xml"
    args = ["--models", "test,test:other", "--repeat", "2", "--junit", str(junit), "-k", "tone"]
    assert _run(EXAMPLES / "support_repo", *args) == 0
    root = ET.fromstring(junit.read_bytes())
    assert (root.get("tests"), root.get("failures"), root.get("errors")) == ("4", "0", "0")
    suites = root.findall("testsuite")
    assert [s.get("name") for s in suites] == ["test", "test:other"]
    assert [c.get("name") for c in suites[1].findall("testcase")] == [
        "the formal tone reaches the prompt (run 1)",
        "the formal tone reaches the prompt (run 2)",
    ]


def test_a_failure_on_the_terminal_shows_the_replys_control_characters_as_text(
    repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _run(repo) == 1
    out = capsys.readouterr().out
    assert "FAIL replies: a hostile reply fails <b>loudly</b>" in out
    assert "\x1b" not in out and "\x00" not in out, out
    assert r"\x1b[31m token ***" in out, out  # in what came and in the rendered prompt
