"""Graded expectations (``judge``, ``similar``), dataset cases and model matrices of
``openprogram-run test``: recorded against a loopback server, replayed with it gone."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from loopback import LoopbackServer, Reply, Request, chat_completion, json_reply

from openprogram_yaml.runner.cli import main

GONE = "http://127.0.0.1:9/v1"  # nothing listens: only recordings can answer

PROJECT = """\
version: 1
name: evals
agents: [agents/*.yaml]
tests: [tests/*.yaml]
"""

AGENT = """\
version: 1
name: desk
model: local:llama3
runtimes:
  - {match: "local:*", runtime: openai, options: {base_url: "%s"}}
  - {match: "anth:*", runtime: anthropic, options: {base_url: "%s", api_key: k}}
methods:
  reply:
    inputs: {ticket: {type: string}}
    prompt: "Answer the ticket: {{ ticket }}"
"""


def project(root: Path, url: str, tests: str) -> Path:
    """A project whose models are served at ``url``, with one test file."""
    (root / "agents").mkdir(parents=True, exist_ok=True)
    (root / "tests").mkdir(exist_ok=True)
    (root / "openprogram.yaml").write_text(PROJECT)
    (root / "agents" / "desk.yaml").write_text(AGENT % (url, url.removesuffix("/v1")))
    (root / "tests" / "desk.tests.yaml").write_text("version: 1\nagent: desk\n" + tests)
    return root


def judged(score: float, reason: str) -> Reply:
    return json_reply(chat_completion(json.dumps({"score": score, "reason": reason})))


def embeddings(*vectors: list[float]) -> Reply:
    data = [{"object": "embedding", "index": i, "embedding": v} for i, v in enumerate(vectors)]
    return json_reply({"object": "list", "data": data, "model": "emb"})


def run_json(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, Any, str]:
    """``main(args + --json)``: exit status, the JSON printed, and the report (stderr)."""
    code = main([*args, "--json"])
    out, err = capsys.readouterr()
    return code, json.loads(out), err


JUDGED = """\
judge_model: local:judge
tests:
  - name: a polite reply
    method: reply
    inputs: {ticket: "Where is my refund?"}
    expect:
      judge: {rubric: "Polite, and says where the refund is", pass_at: 0.7}
"""


def test_a_judge_grades_once_recorded_and_replays_offline(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    recordings = tmp_path / "recordings"
    with LoopbackServer() as server:
        server.add(json_reply(chat_completion("Sorry! Your refund left on Monday.")))
        server.add(judged(0.9, "Polite; says the refund left on Monday."))
        root = project(tmp_path / "p", server.url + "/v1", JUDGED)
        code, data, _ = run_json(["test", str(root), "--record", str(recordings)], capsys)
        assert code == 0
        judge_request = server.requests[1].json
    # The judge is one structured-output call to the judge model, with the rubric and output.
    assert judge_request["model"] == "judge"
    assert judge_request["response_format"]["type"] == "json_schema"
    sent = json.dumps(judge_request["messages"])
    assert "Polite, and says where the refund is" in sent and "left on Monday" in sent
    assert list((recordings / "judge").glob("*.yaml"))

    project(tmp_path / "p", GONE, JUDGED)
    code, data, _ = run_json(["test", str(root), "--replay", str(recordings)], capsys)
    assert code == 0
    (result,) = data["results"]
    (grade,) = result["grades"]
    assert grade["kind"] == "judge" and grade["score"] == 0.9 and grade["passed"]
    assert grade["reason"] == "Polite; says the refund left on Monday."
    assert result["expect"] == {
        "judge": {"rubric": "Polite, and says where the refund is", "pass_at": 0.7}
    }
    assert data["models"][0]["mean_score"] == 0.9


def test_a_low_judge_score_fails_with_the_judges_reason_and_the_prompt(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with LoopbackServer() as server:
        server.add(json_reply(chat_completion("Go away.")))
        server.add(judged(0.2, "Rude, and says nothing of the refund."))
        root = project(tmp_path, server.url + "/v1", JUDGED)
        assert main(["test", str(root), "--live"]) == 1
    out = capsys.readouterr().out
    assert "FAIL desk: a polite reply" in out
    assert (
        "the judge (local:judge) scored 0.20, below pass_at 0.7: Rude, and says nothing of "
        "the refund." in out
    )
    assert "Answer the ticket: Where is my refund?" in out  # the rendered prompt
    assert "0 passed, 1 failed" in out


def test_a_judge_whose_answer_does_not_fit_fails_the_test_with_why(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with LoopbackServer() as server:
        server.add(json_reply(chat_completion("Sorry!")))
        for _ in range(2):  # the first answer and its correction
            server.add(judged(3, "way above the scale"))
        root = project(tmp_path, server.url + "/v1", JUDGED)
        assert main(["test", str(root), "--live"]) == 1
    out = capsys.readouterr().out
    assert "could not grade (judge, local:judge): StructuredOutputValidationError" in out
    assert "tokens: 93 in, 27 out" in out  # both judge calls counted with the run
    assert "Traceback" not in out


def test_the_offline_test_model_does_not_judge_and_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = project(tmp_path, GONE, JUDGED)
    assert main(["test", str(root)]) == 0
    out = capsys.readouterr().out
    assert "1 judge expectation not graded: the offline test model does not judge" in out
    assert out.splitlines()[-2].startswith("tokens: ")


SIMILAR = """\
embed_model: local:emb
tests:
  - name: close enough
    method: reply
    inputs: {ticket: "refund?"}
    expect:
      similar: {to: "Your refund is on its way.", at_least: 0.5}
  - name: not close enough
    method: reply
    inputs: {ticket: "refund again?"}
    expect:
      similar: {to: "Your refund is on its way.", at_least: 0.7}
"""


def _record_similar(tmp_path: Path) -> tuple[Path, Path, Request]:
    """The SIMILAR tests run once against a server, recorded: the project, the recordings
    and the embeddings request; the project then points where nothing listens."""
    recordings = tmp_path / "recordings"
    with LoopbackServer() as server:
        for _ in range(2):
            server.add(json_reply(chat_completion("We sent it back.")))
            server.add(embeddings([1.0, 0.0], [0.6, 0.8]))  # cosine 0.6
        root = project(tmp_path / "p", server.url + "/v1", SIMILAR)
        assert main(["test", str(root), "--record", str(recordings)]) == 1
        request = server.requests[1]
    project(tmp_path / "p", GONE, SIMILAR)
    return root, recordings, request


def test_similar_compares_embeddings_recorded_then_replayed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root, recordings, request = _record_similar(tmp_path)
    assert request.path == "/v1/embeddings"
    assert request.json == {
        "model": "emb",
        "input": ["We sent it back.", "Your refund is on its way."],
    }
    recorded_out = capsys.readouterr().out

    code, data, err = run_json(["test", str(root), "--replay", str(recordings)], capsys)
    assert code == 1
    assert [r["passed"] for r in data["results"]] == [True, False]
    assert [r["grades"][0]["score"] for r in data["results"]] == [
        pytest.approx(0.6),
        pytest.approx(0.6),
    ]
    failure = (
        "expected output similar to 'Your refund is on its way.' (at least 0.7), "
        "got similarity 0.600"
    )
    assert failure in err and failure in recorded_out


def test_recorded_embeddings_that_do_not_read_are_said_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A recording is a file of the repository: one nested past the JSON decoder's limit
    # was a RecursionError out of the replay.
    root, recordings, _ = _record_similar(tmp_path)
    (recorded,) = (recordings / "embeddings").glob("*.yaml")
    deep = "[" * 100_000 + "]" * 100_000
    text = recorded.read_text(encoding="utf-8")
    recorded.write_text(text.replace("'[[1.0, 0.0], [0.6, 0.8]]'", f"'{deep}'"), encoding="utf-8")
    capsys.readouterr()
    assert main(["test", str(root), "--replay", str(recordings)]) == 1
    report = capsys.readouterr().out
    assert report.count("could not grade (similar, local:emb): replay: the embeddings") == 2
    assert "do not read: nested deeper than the JSON decoder reads" in report


def test_a_provider_without_embeddings_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tests = SIMILAR.replace("embed_model: local:emb", "embed_model: anth:claude-x")
    with LoopbackServer() as server:
        server.add(json_reply(chat_completion("We sent it back.")))
        server.add(json_reply(chat_completion("We sent it back.")))
        root = project(tmp_path, server.url + "/v1", tests)
        assert main(["test", str(root), "--live"]) == 1
    out = capsys.readouterr().out
    assert "could not grade (similar, anth:claude-x): the anthropic runtime has no " in out
    assert "embeddings endpoint" in out


def test_the_offline_test_model_embeds_by_words(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tests = """\
tests:
  - name: says something about the ticket
    method: reply
    inputs: {ticket: "refund"}
    expect:
      similar: {to: "unrelated words entirely", at_least: 0.99}
"""
    root = project(tmp_path, GONE, tests)
    code, data, _ = run_json(["test", str(root)], capsys)
    assert code == 1
    (grade,) = data["results"][0]["grades"]
    assert grade["model"] == "test" and 0 <= grade["score"] < 0.99


DATASET = """\
tests:
  - name: refunds
    method: reply
    cases: data/cases.jsonl
    expect: {contains: refund}
"""


def test_cases_come_from_a_dataset_file_one_test_a_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = project(tmp_path, "", DATASET)
    (root / "tests" / "data").mkdir()
    (root / "tests" / "data" / "cases.jsonl").write_text(
        '{"ticket": "my refund?"}\n'
        "\n"
        '{"name": "asks twice", "inputs": {"ticket": "refund, again"}, '
        '"expect": {"contains": "again"}}\n'
    )

    def reply(request: Request) -> Reply:
        # Echo the ticket, so each line's expectation is checked against its own output.
        return json_reply(chat_completion(request.json["messages"][-1]["content"]))

    with LoopbackServer() as server:
        server.add(reply)
        server.add(reply)
        project(root, server.url + "/v1", DATASET)
        code, data, _ = run_json(["test", str(root), "--live"], capsys)
    assert code == 0
    assert [r["case"] for r in data["results"]] == [
        "desk: refunds [line 1]",
        "desk: refunds [asks twice]",
    ]
    assert data["results"][1]["expect"] == {"contains": "again"}  # the line's replaces


def test_a_bad_dataset_line_is_reported_at_its_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = project(tmp_path, GONE, DATASET)
    (root / "tests" / "data").mkdir()
    (root / "tests" / "data" / "cases.jsonl").write_text(
        '{"ticket": "ok"}\n{"ticket": 3}\n{"tickt": "x"}\nnot json\n'
        '{"inputs": {"ticket": "y"}, "expect": {"judge": {"pass_at": 2}}}\n'
        + '{"ticket": '
        + "[" * 100_000
        + "]" * 100_000
        + "}\n"  # a RecursionError's traceback before
    )
    assert main(["test", str(root)]) == 2
    err = capsys.readouterr().err
    assert "cases.jsonl:2:1" in err and "inputs do not match" in err
    assert "cases.jsonl:3:1" in err and "has no input 'tickt'" in err
    assert "cases.jsonl:4:1" in err and "not a JSON object" in err
    assert "cases.jsonl:5:1" in err and "expect.judge.rubric" in err
    assert "cases.jsonl:6:1" in err and "nested deeper than the JSON decoder reads" in err
    assert "Traceback" not in err

    (root / "tests" / "data" / "cases.jsonl").unlink()
    assert main(["test", str(root)]) == 2
    err = capsys.readouterr().err
    assert "desk.tests.yaml:6" in err and "cannot read the cases file" in err


def test_a_dataset_file_outside_the_project_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = project(tmp_path / "repo", GONE, DATASET.replace("data/cases.jsonl", "../../x.jsonl"))
    (tmp_path / "x.jsonl").write_text('{"ticket": "read from outside"}\n')
    assert main(["test", str(root)]) == 2
    err = capsys.readouterr().err
    assert "desk.tests.yaml:6" in err and "leaves the project root" in err


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_a_dataset_file_that_is_a_fifo_is_refused_and_never_blocks(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = project(tmp_path, GONE, DATASET)
    (root / "tests" / "data").mkdir()
    os.mkfifo(root / "tests" / "data" / "cases.jsonl")  # no writer: reading it would block
    assert main(["test", str(root)]) == 2
    err = capsys.readouterr().err
    assert "desk.tests.yaml:6" in err and "not a regular file" in err


MATRIX = """\
tests:
  - name: says hello
    method: reply
    inputs: {ticket: "hi"}
    expect: {contains: Hello}
"""


def test_models_side_by_side_with_flaky_cases(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    answers = {"a": iter(["Hello", "Hello"]), "b": iter(["Hello", "Bye"])}

    def reply(request: Request) -> Reply:
        return json_reply(chat_completion(next(answers[request.json["model"]])))

    with LoopbackServer() as server:
        for _ in range(4):
            server.add(reply)
        root = project(tmp_path, server.url + "/v1", MATRIX)
        code = main(["test", str(root), "--models", "local:a,local:b", "--repeat", "2"])
        out = capsys.readouterr().out
        assert code == 1
        assert "FAIL desk: says hello [local:b, run 2/2]" in out
        lines = out.splitlines()
        header = next(i for i, line in enumerate(lines) if line.startswith("model "))
        assert "pass rate" in lines[header] and "p50 latency" in lines[header]
        assert lines[header + 2].startswith("local:a") and "2/2 (100%)" in lines[header + 2]
        assert lines[header + 3].startswith("local:b") and "1/2 (50%)" in lines[header + 3]
        assert "  62  " in lines[header + 2]  # tokens in: two runs of 31
        assert "flaky on local:b: desk: says hello" in out

        for _ in range(2):
            server.add(json_reply(chat_completion("Hello")))
        code, data, _ = run_json(["test", str(root), "--models", "local:a,local:b"], capsys)
    assert code == 0
    rows = {row["model"]: row for row in data["models"]}
    assert rows["local:a"]["pass_rate"] == 1.0 and rows["local:a"]["input_tokens"] == 31
    assert rows["local:b"]["flaky"] == [] and rows["local:b"]["usd"] is None
    assert [r["model"] for r in data["results"]] == ["local:a", "local:b"]


def test_bad_matrix_options_are_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = project(tmp_path, GONE, MATRIX)
    assert main(["test", str(root), "--repeat", "0"]) == 2
    assert "expected a whole number of at least 1, got '0'" in capsys.readouterr().err
    assert main(["test", str(root), "--model", "x", "--models", "a,b"]) == 2
    assert "--model and --models do not go together" in capsys.readouterr().err


def test_the_example_repository_grades_its_judged_test_from_its_recordings(
    capsys: pytest.CaptureFixture[str],
) -> None:
    repo = Path(__file__).parents[2] / "examples" / "support_repo"
    code, data, _ = run_json(["test", str(repo), "--replay", str(repo / "recordings")], capsys)
    assert code == 0
    results = {r["case"]: r for r in data["results"]}
    (grade,) = results["replies: replies are signed in the house style"]["grades"]
    assert grade["model"] == "gpt-4o-mini" and grade["score"] == 0.9 and grade["passed"]
    assert "desk: labels follow the label schema [calendar sync]" in results


def test_the_projects_judge_model_grades_unless_a_test_file_names_its_own(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tests = JUDGED.replace("judge_model: local:judge\n", "")
    with LoopbackServer() as server:
        for _ in range(2):
            server.add(json_reply(chat_completion("Sorry! Your refund left on Monday.")))
            server.add(judged(0.8, "Fine."))
        root = project(tmp_path, server.url + "/v1", tests)
        (root / "openprogram.yaml").write_text(PROJECT + "judge_model: local:project-judge\n")
        assert main(["test", str(root), "--live"]) == 0
        (root / "tests" / "desk.tests.yaml").write_text(
            "version: 1\nagent: desk\njudge_model: local:file-judge\n" + tests
        )
        assert main(["test", str(root), "--live"]) == 0
        models = [r.json["model"] for r in server.requests]
    assert models == ["llama3", "project-judge", "llama3", "file-judge"]
