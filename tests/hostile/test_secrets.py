"""Issue 12 §4: no secret on disk or on screen.

A secret is any value read with ``${env:…}`` that the loader takes for one, and every
provider key (the variable a provider's ``api_key_env`` names, ``OPENAI_API_KEY``, …). None
may reach a cache file, stdout, stderr, a record, a trace, a serve reply, a ``repr`` or an
error message, even when a model server echoes it back in a successful reply.
"""

from __future__ import annotations

import asyncio
import json
import textwrap
from pathlib import Path

import pytest
from loopback import LoopbackServer, Reply, Request, chat_completion, json_reply

from openprogram_yaml.compile.project import compile_path
from openprogram_yaml.errors import ConfigError, ToolError
from openprogram_yaml.run.agent_runtime import selector_for
from openprogram_yaml.run.execute import execute_run
from openprogram_yaml.run.version import VersionStamp
from openprogram_yaml.runner.cli import main

SHOP_TOKEN = "tok-shop-5ecret-0a1b2c3d"
PROVIDER_KEY = "sk-loop-5ecret-9f8e7d6c5b"
RULE_KEY = "rk-rule-5ecret-44556677"


def _agent(tmp_path: Path, text: str, name: str = "agent.yaml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
    return path


def _files_holding(folder: Path, secret: str) -> list[Path]:
    """Every file under ``folder`` whose bytes hold ``secret`` (as UTF-8 or as UTF-16)."""
    needles = (secret.encode(), secret.encode("utf-16-le"))
    return [
        path
        for path in folder.rglob("*")
        if path.is_file() and any(n in path.read_bytes() for n in needles)
    ]


# --- the template code cache ---------------------------------------------------------------


def test_a_secret_in_a_template_is_not_written_to_the_template_code_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    cache = tmp_path / "cache"  # outside the project: a cache inside it is refused
    monkeypatch.setenv("OPENPROGRAM_CACHE_DIR", str(cache))
    monkeypatch.setenv("SHOP_TOKEN", SHOP_TOKEN)
    (tmp_path / "project").mkdir()
    path = _agent(
        tmp_path / "project",
        """
        version: 1
        name: shop
        model: test
        instructions: "You answer for the shop{# through Jinja #}. Its token is ${env:SHOP_TOKEN}."
        tools:
          lookup_order:
            parameters: {type: object, properties: {id: {type: string}}, required: [id]}
            http: {url: "http://127.0.0.1:9/orders/{{ id }}",
                   headers: {Authorization: "Bearer ${env:SHOP_TOKEN}"}}
        methods:
          ask:
            inputs: {q: {type: string}}
            prompt: "Answer: {{ q | trim }}"
            toolset: none
        """,
    )
    for _ in range(2):  # the second run reads what the first one kept
        assert main([str(path), "ask", "-i", "q=where is my order"]) == 0
    captured = capsys.readouterr()
    assert SHOP_TOKEN not in captured.out + captured.err
    # The cache is on and holds the code of the templates without a secret ...
    assert any(p.is_file() for p in cache.rglob("*")), "the template code cache was not used"
    # ... and not a byte of the secret.
    assert _files_holding(cache, SHOP_TOKEN) == []


# --- one redaction set for every output ----------------------------------------------------

_ECHO_AGENT = """
version: 1
name: echo
model: {model}
retry: {{max_retries: 1}}
{runtimes}
methods:
  say:
    inputs: {{q: {{type: string}}}}
    prompt: "Say: {{{{ q }}}}"
  label:
    inputs: {{q: {{type: string}}}}
    prompt: "Label: {{{{ q }}}}"
    response_schema:
      type: object
      required: [category]
      properties: {{category: {{type: string, enum: [bug, billing]}}}}
"""


def _echo_key(request: Request) -> Reply:
    """A 200 reply that repeats the credential the client sent: in its text, or, when JSON
    is asked for, as a value the schema refuses (the error names the rule, not the value)."""
    header = request.headers.get("authorization", "")
    if "response_format" in request.json:
        return json_reply(chat_completion(json.dumps({"category": header[7:]})))
    return json_reply(chat_completion(f"You sent {header!r}; the key is {header[7:]}."))


def _outputs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> str:
    captured = capsys.readouterr()
    written = [tmp_path / "records.jsonl", tmp_path / "trace.jsonl"]
    return captured.out + captured.err + "".join(p.read_text() for p in written if p.exists())


def _run_all_outputs(path: Path, method: str, tmp_path: Path) -> list[int]:
    files = ["--records", str(tmp_path / "records.jsonl"), "--trace", str(tmp_path / "trace.jsonl")]
    return [
        main([str(path), method, "-i", "q=hi", "--json", *files]),
        main([str(path), method, "-i", "q=hi", *files]),
    ]


@pytest.mark.parametrize("method", ["say", "label"])
def test_the_default_provider_key_echoed_by_the_server_is_redacted_everywhere(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    method: str,
) -> None:
    # The agent file never names the key: the openai runtime reads OPENAI_API_KEY itself.
    monkeypatch.setenv("OPENAI_API_KEY", PROVIDER_KEY)
    with LoopbackServer() as server:
        server.add(*[_echo_key] * 8)
        runtimes = (
            f'runtimes: [{{match: "local:*", runtime: openai, '
            f'options: {{base_url: "{server.url}/v1"}}}}]'
        )
        path = _agent(tmp_path, _ECHO_AGENT.format(model="local:llama3", runtimes=runtimes))
        codes = _run_all_outputs(path, method, tmp_path)
        sent = server.requests[0].headers["authorization"]
    assert sent == f"Bearer {PROVIDER_KEY}"  # the key is used ...
    shown = _outputs(tmp_path, capsys)
    # "say" succeeds with the echo as its output; "label" fails without quoting the reply.
    assert codes == ([0, 0] if method == "say" else [1, 1]), shown
    assert PROVIDER_KEY not in shown  # ... and never shown or written
    assert "***" in shown if method == "say" else "must be one of" in shown


def test_a_provider_key_variable_with_a_plain_name_is_redacted_everywhere(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # LOOP_CREDS does not look secret by its name: it is one because a provider reads its key
    # from it.
    monkeypatch.setenv("LOOP_CREDS", PROVIDER_KEY)
    with LoopbackServer() as server:
        server.add(*[_echo_key] * 4)
        _agent(
            tmp_path,
            f"""
            version: 1
            name: loop-project
            agents: [echo.yaml]
            providers:
              loop: {{runtime: openai, base_url: "{server.url}/v1", api_key_env: LOOP_CREDS}}
            """,
            "openprogram.yaml",
        )
        path = _agent(tmp_path, _ECHO_AGENT.format(model="loop:llama3", runtimes=""), "echo.yaml")
        codes = _run_all_outputs(path, "say", tmp_path)
        sent = server.requests[0].headers["authorization"]
    assert sent == f"Bearer {PROVIDER_KEY}"
    shown = _outputs(tmp_path, capsys)
    assert codes == [0, 0], shown
    assert PROVIDER_KEY not in shown


def test_a_serve_reply_redacts_the_provider_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What ``serve`` answers a run with is the run's record."""
    monkeypatch.setenv("OPENAI_API_KEY", PROVIDER_KEY)
    with LoopbackServer() as server:
        server.add(_echo_key)
        runtimes = (
            f'runtimes: [{{match: "local:*", runtime: openai, '
            f'options: {{base_url: "{server.url}/v1"}}}}]'
        )
        path = _agent(tmp_path, _ECHO_AGENT.format(model="local:llama3", runtimes=runtimes))
        program = compile_path(path)
        record = asyncio.run(
            execute_run(program, VersionStamp(program.version), "echo", "say", {"q": "hi"})
        )
    assert record.status == "ok"
    assert PROVIDER_KEY in record.output  # the run itself is not changed ...
    assert PROVIDER_KEY not in record.to_json()  # ... what is shown of it is


# --- reprs and error messages --------------------------------------------------------------

_SECRETS_AGENT = """
version: 1
name: shop
model: test
vars: {shop_token: "${env:SHOP_TOKEN}"}
instructions: "You answer for the shop (token ${env:SHOP_TOKEN})."
runtimes:
  - {match: "local:*", runtime: openai,
     options: {base_url: "http://127.0.0.1:9/v1", api_key: "${env:RULE_KEY}"}}
tools:
  lookup_order:
    parameters: {type: object, properties: {id: {type: string}}, required: [id]}
    http: {url: "%s/orders/{{ id }}", headers: {Authorization: "Bearer ${env:SHOP_TOKEN}"}}
methods:
  ask:
    inputs: {q: {type: string, default: "${env:SHOP_TOKEN}"}}
    prompt: "Answer {{ q }} with ${env:SHOP_TOKEN}"
    choices:
      done: {description: "Finish", value: "${env:SHOP_TOKEN}"}
      again: {description: Once more, method: ask}
"""


def test_no_repr_of_a_compiled_program_shows_a_secret(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SHOP_TOKEN", SHOP_TOKEN)
    monkeypatch.setenv("RULE_KEY", RULE_KEY)
    program = compile_path(_agent(tmp_path, _SECRETS_AGENT % "http://127.0.0.1:9"))
    agent = program.agent("shop")
    method = agent.method("ask")
    assert agent.secrets >= {SHOP_TOKEN, RULE_KEY}  # the secrets are known ...
    shown = [
        repr(program),
        repr(agent),
        repr(method),
        repr(method.prompt),
        repr(method.instructions),
        *(repr(rule) for rule in agent.runtime_rules),
        *(repr(tool) for tool in agent.tools),
        repr(selector_for(agent).explain("local:llama3")),
    ]
    for text in shown:  # ... and no repr shows one
        assert SHOP_TOKEN not in text and RULE_KEY not in text, text
    assert "RuntimeRule(match='local:*'" in repr(agent.runtime_rules[0])


def test_an_http_tool_failing_with_a_secret_header_does_not_show_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SHOP_TOKEN", SHOP_TOKEN)
    monkeypatch.setenv("RULE_KEY", RULE_KEY)

    def echo_headers(request: Request) -> Reply:
        return json_reply({"error": "denied", "you_sent": request.headers}, status=403)

    with LoopbackServer([echo_headers]) as server:
        program = compile_path(_agent(tmp_path, _SECRETS_AGENT % server.url))
        [tool] = program.agent("shop").tools

        async def call() -> None:
            try:
                await tool.execute(id="42")
            finally:
                await tool.aclose()

        with pytest.raises(ToolError) as failure:
            asyncio.run(call())
        assert server.requests[0].headers["authorization"] == f"Bearer {SHOP_TOKEN}"
    assert "HTTP 403" in str(failure.value)
    assert SHOP_TOKEN not in str(failure.value) and SHOP_TOKEN not in repr(failure.value)


def test_config_errors_do_not_quote_a_secret(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("SHOP_TOKEN", SHOP_TOKEN)
    bad_spec = _agent(
        tmp_path,
        """
        version: 1
        name: shop
        model: test
        retry: {max_retries: "${env:SHOP_TOKEN}"}
        methods:
          ask: {prompt: "hi"}
        """,
        "bad_spec.yaml",
    )
    bad_schema = _agent(
        tmp_path,
        """
        version: 1
        name: shop
        model: test
        methods:
          ask:
            inputs: {q: {type: string, minLength: "${env:SHOP_TOKEN}"}}
            prompt: "{{ q }}"
            response_schema: {type: "${env:SHOP_TOKEN}"}
        """,
        "bad_schema.yaml",
    )
    for path in (bad_spec, bad_schema):
        with pytest.raises(ConfigError) as failure:
            compile_path(path)
        messages = [str(d) for d in failure.value.diagnostics]
        assert messages and all("***" in m for m in messages), messages
        assert not any(SHOP_TOKEN in m for m in messages), messages
        assert main([str(path), "ask"]) == 2
        assert main(["check", str(path)]) == 2
    captured = capsys.readouterr()
    assert SHOP_TOKEN not in captured.out + captured.err
    assert json.dumps(SHOP_TOKEN) not in captured.out


def test_a_secret_with_quotes_and_backslashes_is_redacted_inside_json_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # In JSON output the value reads 'tok\\"quoted\\\\back': it must be found there too.
    secret = 'tok"quoted\\back-1234'
    monkeypatch.setenv("SHOP_TOKEN", secret)
    path = _agent(
        tmp_path,
        """
        version: 1
        name: shop
        model: test
        methods:
          say: {prompt: "Say ${env:SHOP_TOKEN}"}
        """,
    )
    files = ["--records", str(tmp_path / "records.jsonl"), "--trace", str(tmp_path / "trace.jsonl")]
    assert main([str(path), "say", "--json", *files]) == 0
    shown = _outputs(tmp_path, capsys)
    assert json.dumps(secret)[1:-1] not in shown and secret not in shown
    assert json.loads(shown.splitlines()[0])["output"].endswith("Say ***")
