"""The CLI against real HTTP servers on 127.0.0.1 that speak the providers' wire formats."""

from __future__ import annotations

import json

from loopback import LoopbackServer, chat_completion, json_reply, status_reply

from openprogram_yaml.runner.cli import main

AGENT = """\
version: 1
name: labeler
model: local:llama3
instructions: You label tickets for {{ product }}.
vars: {product: Acme Mail}
retry: {max_retries: 2, backoff_base_s: 0.001}
runtimes:
  - {match: "local:*", runtime: openai, options: {base_url: "%s"}}
methods:
  label:
    inputs: {ticket: {type: string}}
    prompt: "Label this ticket: {{ ticket }}"
    response_schema:
      name: label
      schema:
        type: object
        additionalProperties: false
        required: [category]
        properties: {category: {type: string, enum: [bug, billing]}}
  summarize:
    inputs: {ticket: {type: string}}
    prompt: "Summarize: {{ ticket }}"
    max_tokens: 50
"""


def test_agent_runs_against_a_chat_completions_server(write, capsys) -> None:
    with LoopbackServer() as server:
        server.add(json_reply(chat_completion('{"category": "billing"}')))
        path = write("agent.yaml", AGENT % (server.url + "/v1"))
        code = main([str(path), "label", "-i", "ticket=I was charged twice", "--json"])
        captured = capsys.readouterr()
        assert code == 0, captured.err
        [request] = server.requests
    assert request.path == "/v1/chat/completions"
    body = request.json
    assert body["model"] == "llama3"
    assert body["messages"] == [
        {"role": "system", "content": "You label tickets for Acme Mail."},
        {"role": "user", "content": "Label this ticket: I was charged twice"},
    ]
    assert body["response_format"]["type"] == "json_schema"
    assert body["response_format"]["json_schema"]["name"] == "label"
    assert body["response_format"]["json_schema"]["schema"]["required"] == ["category"]
    assert "tool_choice" not in body and "parallel_tool_calls" not in body
    record = json.loads(captured.out)
    assert record["output"] == {"category": "billing"}
    assert record["model"] == "local:llama3"
    assert record["usage"]["input_tokens"] == 31 and record["usage"]["output_tokens"] == 9


def test_text_answer_is_printed_and_options_are_sent(write, capsys) -> None:
    with LoopbackServer() as server:
        server.add(json_reply(chat_completion("Customer was double-billed.")))
        path = write("agent.yaml", AGENT % (server.url + "/v1"))
        code = main([str(path), "summarize", "-i", "ticket=charged twice"])
        out = capsys.readouterr().out
        body = server.requests[0].json
    assert code == 0
    assert out == "Customer was double-billed.\n"
    assert body["max_tokens"] == 50
    assert "response_format" not in body


def test_server_error_then_success_is_retried(write, capsys) -> None:
    with LoopbackServer() as server:
        server.add(status_reply(503, {"error": {"message": "overloaded"}}, retry_after="0"))
        server.add(json_reply(chat_completion("ok")))
        path = write("agent.yaml", AGENT % (server.url + "/v1"))
        code = main([str(path), "summarize", "-i", "ticket=x"])
        assert len(server.requests) == 2
    assert code == 0
    assert capsys.readouterr().out == "ok\n"


def test_failed_run_exits_1_with_the_error_in_json(write, capsys) -> None:
    with LoopbackServer() as server:
        server.add(status_reply(401, {"error": {"message": "bad key"}}))
        path = write("agent.yaml", AGENT % (server.url + "/v1"))
        code = main([str(path), "summarize", "-i", "ticket=x", "--json"])
        assert len(server.requests) == 1  # auth errors are not retried
    captured = capsys.readouterr()
    assert code == 1
    record = json.loads(captured.out)
    assert record["error"]["reason"] == "auth"
    assert record["error"]["retryable"] is False
    assert "Traceback" not in captured.err


def test_api_key_from_env_is_sent_but_never_printed(write, capsys, monkeypatch) -> None:
    secret = "sk-test-abcdef0123456789"
    monkeypatch.setenv("OPENAI_API_KEY", secret)
    with LoopbackServer() as server:
        # The server echoes the key back: the CLI must still not print it.
        server.add(json_reply(chat_completion(f"your key is {secret}")))
        monkeypatch.setenv("OPENAI_BASE_URL", server.url + "/v1")
        path = write(
            "agent.yaml",
            """\
            version: 1
            name: keyed
            model: openai:gpt-4o-mini
            vars: {key: "${env:OPENAI_API_KEY}"}
            methods:
              echo: {prompt: "hello"}
            """.replace("            ", ""),
        )
        code = main([str(path), "echo", "--json"])
        headers = server.requests[0].headers
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert headers["authorization"] == f"Bearer {secret}"
    assert secret not in captured.out and secret not in captured.err
    assert json.loads(captured.out)["output"] == "your key is ***"
