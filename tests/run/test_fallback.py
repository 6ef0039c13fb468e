"""Fallback models against a real chat server on 127.0.0.1 that fails for one model name
and answers for another: which failures pass the call on, what the record and trace say."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from pathlib import Path

import pytest
from loopback import LoopbackServer, Reply, Request, chat_completion, json_reply, status_reply

from openprogram_yaml.runner.cli import main

AGENT = """\
version: 1
name: helper
model: %(model)s
retry: {max_retries: 2}
runtimes:
  - {match: "local:*", runtime: openai, options: {base_url: "%(url)s/v1"}}
methods:
  answer:
    prompt: Say hello.
%(method)s"""


@pytest.fixture(autouse=True)
def _no_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    # Retries wait 0 s: the run never sleeps for real.
    monkeypatch.setenv("OPENPROGRAM_RETRY_BACKOFF_BASE", "0")


def by_model(replies: Mapping[str, Callable[[], Reply]]) -> Callable[[Request], Reply]:
    """A scripted reply chosen by the model the request names."""
    return lambda request: replies[request.json["model"]]()


def serve(server: LoopbackServer, replies: Mapping[str, Callable[[], Reply]], n: int = 8) -> None:
    server.add(*[by_model(replies)] * n)


def ok(text: str = "hello") -> Callable[[], Reply]:
    return lambda: json_reply(chat_completion(text))


def failing(status: int, message: str = "down") -> Callable[[], Reply]:
    return lambda: status_reply(status, {"error": {"message": message}}, retry_after="0")


def run(
    write: Callable[[str, str], Path],
    capsys: pytest.CaptureFixture[str],
    server: LoopbackServer,
    model: str,
    method: str = "",
    *args: str,
) -> tuple[int, dict[str, object], str]:
    path = write("agent.yaml", AGENT % {"model": model, "url": server.url, "method": method})
    code = main([str(path), "--json", *args])
    out, err = capsys.readouterr()
    return code, json.loads(out), err


def models_asked(server: LoopbackServer) -> list[str]:
    return [r.json["model"] for r in server.requests]


def test_a_server_error_after_retries_passes_the_call_to_the_next_model(write, capsys) -> None:
    with LoopbackServer() as server:
        serve(server, {"primary": failing(503), "backup": ok("from backup")})
        code, record, _ = run(write, capsys, server, "[local:primary, local:backup]")
        asked = models_asked(server)
    assert code == 0
    assert asked == ["primary", "primary", "backup"]  # both attempts, then the fallback
    assert record["output"] == "from backup"
    assert record["model"] == "local:primary"
    assert record["path"][0]["answered_by"] == "local:backup"
    [fallback] = record["fallbacks"]
    assert fallback["method"] == "helper.answer"
    assert fallback["model"] == "local:primary"
    assert fallback["next"] == "local:backup"
    assert fallback["reason"] == "server_error"
    assert fallback["http_status"] == 503
    assert fallback["attempts"] == 2


def test_an_exhausted_quota_falls_back_at_once(write, capsys) -> None:
    with LoopbackServer() as server:
        serve(server, {"primary": failing(429, "insufficient_quota"), "backup": ok()})
        code, record, _ = run(write, capsys, server, "local:primary", "", "--json")
        assert code == 1  # no fallback named: the quota error ends the run
        server.requests.clear()
        serve(server, {"primary": failing(429, "insufficient_quota"), "backup": ok()})
        path = write(
            "agent.yaml",
            AGENT
            % {
                "model": "local:primary\nfallback_models: [local:backup]",
                "url": server.url,
                "method": "",
            },
        )
        code = main([str(path), "--json"])
        record = json.loads(capsys.readouterr().out)
        asked = models_asked(server)
    assert code == 0
    assert asked == ["primary", "backup"]  # a quota is final: no retry, straight on
    assert record["fallbacks"][0]["reason"] == "quota"


def test_a_request_the_provider_refuses_does_not_fall_back(write, capsys) -> None:
    with LoopbackServer() as server:
        serve(server, {"primary": failing(400, "bad request"), "backup": ok()})
        code, record, _ = run(write, capsys, server, "[local:primary, local:backup]")
        asked = models_asked(server)
    assert code == 1
    assert asked == ["primary"]
    assert record["status"] == "failed"
    assert record["error"]["reason"] == "invalid_request"
    assert "fallbacks" not in record


def test_when_every_model_fails_the_last_error_ends_the_run(write, capsys) -> None:
    with LoopbackServer() as server:
        serve(server, {"primary": failing(500), "backup": failing(401, "invalid api key")})
        code, record, _ = run(write, capsys, server, "[local:primary, local:backup]")
        asked = models_asked(server)
    assert code == 1
    assert asked == ["primary", "primary", "backup"]
    assert record["error"]["model"] == "local:backup"
    assert record["error"]["reason"] == "auth"
    assert [f["model"] for f in record["fallbacks"]] == ["local:primary"]


def test_a_method_names_its_own_models_and_the_command_line_one_model(write, capsys) -> None:
    method = "    model: [local:first, local:second]\n"
    with LoopbackServer() as server:
        replies = {"first": failing(502), "second": ok("second"), "agent": ok("agent")}
        serve(server, replies)
        code, record, _ = run(write, capsys, server, "[local:agent, local:x]", method)
        assert code == 0
        assert models_asked(server) == ["first", "first", "second"]
        assert record["output"] == "second"
        server.requests.clear()
        serve(server, replies)
        code, record, _ = run(
            write, capsys, server, "local:agent", method, "--model", "local:first"
        )
        assert models_asked(server) == ["first", "first"]  # --model: that model alone
    assert code == 1
    assert "fallbacks" not in record


def test_the_trace_and_the_events_name_the_fallback(write, capsys, tmp_path: Path) -> None:
    trace = tmp_path / "trace.jsonl"
    with LoopbackServer() as server:
        serve(server, {"primary": failing(503), "backup": ok()})
        code, _, _ = run(
            write, capsys, server, "[local:primary, local:backup]", "", "--trace", str(trace)
        )
    assert code == 0
    nodes = [json.loads(line) for line in trace.read_text().splitlines()]
    [method] = [n for n in nodes if n["kind"] == "method"]
    [fallback] = method["data"]["fallbacks"]
    assert (fallback["model"], fallback["next"]) == ("local:primary", "local:backup")
    execs = [n for n in nodes if n["kind"] == "exec"]
    assert [e["data"]["model"] for e in execs] == ["local:primary", "local:backup"]


@pytest.mark.parametrize(
    ("fields", "where", "message"),
    [
        (
            "[local:a, local:b]\nfallback_models: [local:c]",
            "4:18",
            "either in the 'model' list or in 'fallback_models', not both",
        ),
        ("[]", "3:8", "at least 1 item"),
        ("test\nfallback_models: [local:a, '']", "4:28", "at least 1 character"),
    ],
)
def test_bad_fallback_config_is_a_positioned_error(write, capsys, fields, where, message) -> None:
    path = write("agent.yaml", AGENT % {"model": fields, "url": "http://127.0.0.1:9", "method": ""})
    code = main([str(path)])
    err = capsys.readouterr().err
    assert code == 2
    assert f"agent.yaml:{where}: error: " in err and message in err, err
    assert "Traceback" not in err


def test_a_plain_run_says_which_model_failed_on_stderr(write, capsys) -> None:
    with LoopbackServer() as server:
        serve(server, {"primary": failing(503), "backup": ok("hi")})
        path = write(
            "agent.yaml",
            AGENT % {"model": "[local:primary, local:backup]", "url": server.url, "method": ""},
        )
        code = main([str(path)])
    out, err = capsys.readouterr()
    assert code == 0
    assert out == "hi\n"
    assert (
        "fallback: local:primary failed (server_error, HTTP 503, 2 attempts) in "
        "helper.answer; trying local:backup"
    ) in err


CHAIN = """\
version: 1
name: flow
model: [local:primary, local:backup]
retry: {max_retries: 1}
runtimes:
  - {match: "local:*", runtime: openai, options: {base_url: "%s/v1"}}
methods:
  first:
    prompt: Step one.
    choices:
      go: {description: Go on, method: second}
  second:
    prompt: Step two.
"""


def by_step(replies: Mapping[tuple[str, str], Callable[[], Reply]]) -> Callable[[Request], Reply]:
    """A reply chosen by the model and the step the prompt names."""

    def answer(request: Request) -> Reply:
        body = request.json
        step = "one" if "Step one." in json.dumps(body["messages"]) else "two"
        return replies[(body["model"], step)]()

    return answer


def test_a_method_continued_by_a_pick_falls_back_alone(write, capsys) -> None:
    pick = lambda: json_reply(chat_completion('{"call": "go", "args": {}}'))  # noqa: E731
    replies = {
        ("primary", "one"): pick,
        ("primary", "two"): failing(503),
        ("backup", "one"): pick,
        ("backup", "two"): ok("done by backup"),
    }
    with LoopbackServer() as server:
        server.add(*[by_step(replies)] * 6)
        path = write("agent.yaml", CHAIN % server.url)
        code = main([str(path), "first", "--json"])
        record = json.loads(capsys.readouterr().out)
        asked = [
            (r.json["model"], "one" if "Step one." in r.body.decode() else "two")
            for r in server.requests
        ]
    assert code == 0, record
    assert record["output"] == "done by backup"
    # Who answered each method: the first as asked, the second by the backup.
    assert [step.get("answered_by") for step in record["path"]] == [None, "local:backup"]
    # The first method's pick stands: only the second method's call moved to the backup.
    assert asked == [("primary", "one"), ("primary", "two"), ("backup", "two")]
    assert [f["method"] for f in record["fallbacks"]] == ["flow.second"]


def test_a_continued_method_that_fails_on_every_model_does_not_rerun_the_first(
    write, capsys
) -> None:
    pick = lambda: json_reply(chat_completion('{"call": "go", "args": {}}'))  # noqa: E731
    replies = {
        ("primary", "one"): pick,
        ("primary", "two"): failing(503),
        ("backup", "one"): pick,
        ("backup", "two"): failing(503),
    }
    with LoopbackServer() as server:
        server.add(*[by_step(replies)] * 6)
        path = write("agent.yaml", CHAIN % server.url)
        code = main([str(path), "first", "--json"])
        record = json.loads(capsys.readouterr().out)
        asked = [
            (r.json["model"], "one" if "Step one." in r.body.decode() else "two")
            for r in server.requests
        ]
    assert code == 1
    # Without this rule the first method would be run again on the backup, then the second.
    assert asked == [("primary", "one"), ("primary", "two"), ("backup", "two")]
    assert record["error"]["model"] == "local:backup"
    assert [f["method"] for f in record["fallbacks"]] == ["flow.second"]


def test_which_models_a_method_tries(write) -> None:
    from openprogram_yaml.compile.project import compile_path
    from openprogram_yaml.run.fallback import models_for

    path = write(
        "agent.yaml",
        """
        version: 1
        name: a
        model: local:main
        fallback_models: [local:spare]
        defaults: {model: [local:d1, local:d2]}
        methods:
          inherits: {prompt: x}
          own: {prompt: x, model: local:solo}
          listed: {prompt: x, model: local:m, fallback_models: [local:n]}
          spares: {prompt: x, fallback_models: [local:s2]}
        """,
    )
    agent = compile_path(path).agent("a")
    tried = {name: models_for(agent, m) for name, m in agent.methods.items()}
    assert tried == {
        "inherits": ("local:d1", "local:d2"),  # the defaults' list
        "own": ("local:solo",),  # a method's own model brings no fallbacks
        "listed": ("local:m", "local:n"),
        "spares": ("local:d1", "local:s2"),  # its fallbacks follow the inherited model
    }
    assert models_for(agent, agent.methods["own"], "local:cli") == ("local:cli",)
    assert agent.fallback_models == ("local:spare",)


def test_the_terminal_display_shows_a_fallback_and_voids_what_the_failed_model_streamed() -> None:
    import io

    from openprogram_yaml.runner.display import RunDisplay

    out, err = io.StringIO(), io.StringIO()
    display = RunDisplay(
        "helper.answer", out=out, err=err, secrets=(), streams_text=lambda a, m: True
    )
    display({"type": "method", "agent": "helper", "method": "answer"})
    display({"type": "text", "text": "Hel"})  # the primary's stream, cut off
    display(
        {
            "type": "fallback",
            "method": "helper.answer",
            "model": "local:primary",
            "reason": "connection",
            "next": "local:backup",
        }
    )
    display({"type": "text", "text": "Hello"})
    assert display.finish("Hello")  # the answer on screen is the backup's, whole
    assert "local:primary failed (connection) – trying local:backup" in err.getvalue()
