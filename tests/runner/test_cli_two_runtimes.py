"""One YAML file routes two models to two runtimes: Chat Completions and Anthropic Messages."""

from __future__ import annotations

import json

from loopback import LoopbackServer, chat_completion, json_reply

from openprogram_yaml.runner.cli import main

AGENT = """\
version: 1
name: duo
model: local:llama3
runtimes:
  - {match: "local:*", runtime: openai, options: {base_url: "%(openai)s"}}
  - match: "claude:*"
    runtime: anthropic
    options: {base_url: "%(anthropic)s", api_key: "k-test-1"}
methods:
  fast:
    prompt: quick answer
  careful:
    model: claude:claude-sonnet-4-5
    prompt: careful answer
"""


def anthropic_body(text: str) -> dict:
    return {
        "id": "msg_1", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
        "content": [{"type": "text", "text": text}], "stop_reason": "end_turn",
        "stop_sequence": None, "usage": {"input_tokens": 4, "output_tokens": 2},
    }  # fmt: skip


def test_two_models_two_runtimes(write, capsys) -> None:
    with LoopbackServer() as oai, LoopbackServer() as anth:
        oai.add(json_reply(chat_completion("from llama")))
        anth.add(json_reply(anthropic_body("from claude")))
        path = write("duo.yaml", AGENT % {"openai": oai.url + "/v1", "anthropic": anth.url})
        assert main([str(path), "fast", "--json"]) == 0
        fast = json.loads(capsys.readouterr().out)
        assert main([str(path), "careful", "--json"]) == 0
        careful = json.loads(capsys.readouterr().out)
        [o_req], [a_req] = oai.requests, anth.requests
    assert fast["output"] == "from llama" and fast["model"] == "local:llama3"
    assert careful["output"] == "from claude" and careful["model"] == "claude:claude-sonnet-4-5"
    assert o_req.path == "/v1/chat/completions" and o_req.json["model"] == "llama3"
    assert a_req.path == "/v1/messages" and a_req.json["model"] == "claude-sonnet-4-5"
    assert a_req.headers["x-api-key"] == "k-test-1"


def test_a_repository_provider_serves_its_models(write, capsys, monkeypatch) -> None:
    """openprogram.yaml names a provider (base URL, the variable holding its key); an agent
    using "local:MODEL" reaches it with no rule of its own."""
    monkeypatch.setenv("LOCAL_GATEWAY_KEY", "lk-0123456789")
    with LoopbackServer() as server:
        server.add(json_reply(chat_completion("from the local provider")))
        project = write(
            "repo/openprogram.yaml",
            f"""
            version: 1
            agents: [agents/*.yaml]
            providers:
              local:
                runtime: openai
                base_url: "{server.url}/v1"
                api_key_env: LOCAL_GATEWAY_KEY
            """,
        )
        write(
            "repo/agents/ask.yaml",
            """
            version: 1
            name: ask
            model: local:llama3
            methods:
              say: {prompt: hello}
            """,
        )
        assert main([str(project.parent), "ask.say", "--json"]) == 0
        record = json.loads(capsys.readouterr().out)
        [request] = server.requests
    assert record["output"] == "from the local provider"
    assert request.json["model"] == "llama3"
    assert request.headers["authorization"] == "Bearer lk-0123456789"
