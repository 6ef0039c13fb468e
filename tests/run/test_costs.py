"""Costs and budgets: usage priced from genai-prices' shipped data where the price is known
for sure, "cost unknown" everywhere else, and a budget that stops a run before a call."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from loopback import LoopbackServer, chat_completion, json_reply
from support import EXAMPLES

from openprogram_yaml.providers.test import ScriptedRuntime
from openprogram_yaml.run.costs import CostMeter, cost_text, sum_costs, usage_line
from openprogram_yaml.runner.cli import main
from openprogram_yaml.runtimes.protocol import RuntimeResult, ToolCall, Usage
from openprogram_yaml.runtimes.registry import register_runtime, unregister_runtime

AGENT = """\
version: 1
name: helper
model: %(model)s
%(extra)s
runtimes:
  - {match: "openai:*", runtime: priced}
  - {match: "local:*", runtime: openai, options: {base_url: "%(url)s/v1"}}
methods:
  answer:
    prompt: Say hello.
"""

# gpt-4o in genai-prices' data: $2.50 a million input tokens, $10 a million output tokens.
TURN = Usage(input_tokens=1000, output_tokens=500)
TURN_USD = 0.0075


@pytest.fixture
def priced() -> Iterator[ScriptedRuntime]:
    """A registered runtime (no base_url of its own) serving "openai:*" from a script."""
    runtime = ScriptedRuntime()
    register_runtime("priced", runtime)
    yield runtime
    unregister_runtime("priced")


def reply(text: str = "hello") -> RuntimeResult:
    return RuntimeResult(content=text, usage=TURN, finish_reason="stop")


def tool_call() -> RuntimeResult:
    # A call of a tool nobody offered: the run answers it with an error and asks again.
    call = ToolCall("call-1", "lookup", "{}")
    return RuntimeResult(tool_calls=[call], usage=TURN, finish_reason="tool_calls")


def run(write, capsys, model: str, extra: str = "", url: str = "http://127.0.0.1:9"):  # type: ignore[no-untyped-def]
    path = write("agent.yaml", AGENT % {"model": model, "extra": extra, "url": url})
    code = main([str(path), "--json"])
    out, err = capsys.readouterr()
    return code, json.loads(out), err


def test_a_priced_model_has_its_cost_in_the_record(write, capsys, priced) -> None:
    priced.add(tool_call(), reply())
    code, record, _ = run(write, capsys, "openai:gpt-4o")
    assert code == 0, record
    assert record["usage"]["input_tokens"] == 2000
    cost = record["cost"]
    assert cost["usd"] == pytest.approx(2 * TURN_USD)
    assert cost["models"] == [
        {
            "model": "openai:gpt-4o",
            "input_tokens": 2000,
            "output_tokens": 1000,
            "usd": pytest.approx(2 * TURN_USD),
        }
    ]
    # The price came from the data the package ships, never from a fetch.
    from genai_prices import data_snapshot

    assert data_snapshot.get_snapshot().from_auto_update is False


def test_the_offline_model_shows_tokens_and_cost_unknown(write, capsys) -> None:
    code, record, _ = run(write, capsys, "test")
    assert code == 0
    [entry] = record["cost"]["models"]
    assert entry["model"] == "test" and entry["input_tokens"] > 0
    assert entry["usd"] is None and record["cost"]["usd"] is None
    assert cost_text(record["cost"]) == "cost unknown (test)"


def test_a_known_model_on_a_local_server_is_not_given_its_providers_price(write, capsys) -> None:
    # "local:gpt-4o" is gpt-4o by name, but served at 127.0.0.1: no price is guessed.
    with LoopbackServer() as server:
        server.add(json_reply(chat_completion("hi")))
        code, record, _ = run(write, capsys, "local:gpt-4o", url=server.url)
    assert code == 0
    assert record["usage"]["input_tokens"] == 31
    assert record["cost"]["usd"] is None
    assert record["cost"]["models"][0]["usd"] is None


def test_a_budget_stops_the_run_before_the_call_that_would_pass_it(write, capsys, priced) -> None:
    priced.add(tool_call(), reply())
    code, record, _ = run(write, capsys, "openai:gpt-4o", "budget: {max_cost_usd: 0.005}")
    assert code == 1
    assert len(priced.requests) == 1  # the second call was never made
    assert record["status"] == "failed"
    error = record["error"]
    assert error["type"] == "BudgetExceededError"
    assert error["kind"] == "spent"
    assert error["spent_usd"] == pytest.approx(TURN_USD)
    assert "max_cost_usd 0.005" in error["message"]
    assert record["cost"]["usd"] == pytest.approx(TURN_USD)


def test_a_method_budget_replaces_the_agents(write, capsys, priced) -> None:
    priced.add(tool_call(), reply())
    path = write(
        "agent.yaml",
        AGENT % {"model": "openai:gpt-4o", "extra": "budget: {max_cost_usd: 0.001}", "url": ""}
        + "    budget: {max_cost_usd: 1}\n",
    )
    assert main([str(path), "--json"]) == 0
    record = json.loads(capsys.readouterr().out)
    assert record["cost"]["max_cost_usd"] == 1


def test_a_budget_refuses_a_model_without_a_price_before_any_request(write, capsys) -> None:
    with LoopbackServer() as server:
        code, record, _ = run(
            write, capsys, "local:llama3", "budget: {max_cost_usd: 0.5}", url=server.url
        )
        assert server.requests == []
    assert code == 1
    assert record["error"]["kind"] == "unpriced"
    assert "'local:llama3' has no known price" in record["error"]["message"]


def test_the_offline_model_spends_nothing_against_a_budget(write, capsys) -> None:
    code, record, _ = run(write, capsys, "test", "budget: {max_cost_usd: 0.01}")
    assert code == 0, record


@pytest.mark.parametrize("budget", ["{max_cost_usd: 0}", "{max_cost_usd: -1}", "{max_usd: 1}"])
def test_a_bad_budget_is_a_positioned_error(write, capsys, budget) -> None:
    path = write("agent.yaml", AGENT % {"model": "test", "extra": f"budget: {budget}", "url": ""})
    assert main([str(path)]) == 2
    err = capsys.readouterr().err
    assert "agent.yaml:4:" in err and "Traceback" not in err


def test_the_test_summary_shows_tokens_and_cost(capsys) -> None:
    assert main(["test", str(EXAMPLES / "support_repo")]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[-2].startswith("tokens: ") and lines[-2].endswith("cost unknown (test)")
    assert lines[-1].endswith(" failed")


def test_costs_add_up_over_records() -> None:
    meter = CostMeter()
    total = sum_costs([None, {"usd": 0.25, "models": [{"model": "a", "usd": 0.25}]}])
    assert total["usd"] == 0.25
    unknown = sum_costs(
        [
            {"usd": 0.25, "models": [{"model": "a", "input_tokens": 3, "usd": 0.25}]},
            {"usd": None, "models": [{"model": "test", "input_tokens": 4, "usd": None}]},
        ]
    )
    assert unknown["usd"] is None
    assert usage_line(unknown) == "tokens: 7 in, 0 out; cost unknown (test)"
    assert meter.to_dict() == {"usd": 0.0, "models": []}


@pytest.mark.parametrize("model", ["test", "local:gpt-4o"])
def test_offline_and_local_runs_never_load_the_price_data(write, model: str) -> None:
    # The price data takes about 0.3 s to load: runs on `test` or a local server never pay it.
    with LoopbackServer() as server:
        server.add(json_reply(chat_completion("hi")))
        path = write("agent.yaml", AGENT % {"model": model, "extra": "", "url": server.url})
        code = (
            "import sys\n"
            "from openprogram_yaml.runner.cli import main\n"
            f"assert main([{str(path)!r}, '--json']) == 0\n"
            "assert 'genai_prices' not in sys.modules\n"
        )
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    cost = json.loads(done.stdout)["cost"]
    assert cost["usd"] is None and cost["models"][0]["model"] == model


def test_the_record_of_a_served_model_keeps_cost_per_model(tmp_path: Path) -> None:
    class Served:
        offline = False

    meter = CostMeter()
    meter.add("openai:gpt-4o", Served(), TURN)  # type: ignore[arg-type]
    meter.add("anthropic:claude-sonnet-4-5", Served(), TURN)  # type: ignore[arg-type]
    cost = meter.to_dict()
    by_model = {m["model"]: m["usd"] for m in cost["models"]}  # type: ignore[index,union-attr]
    assert by_model["openai:gpt-4o"] == pytest.approx(TURN_USD)
    assert by_model["anthropic:claude-sonnet-4-5"] == pytest.approx(0.0105)
    assert cost["usd"] == pytest.approx(TURN_USD + 0.0105)


def test_replayed_and_recorded_turns_are_priced_by_the_runtime_behind_them(
    tmp_path: Path,
) -> None:
    from openprogram_yaml.providers.openai import OpenAIRuntime
    from openprogram_yaml.recording.replay import ReplayRuntime
    from openprogram_yaml.run.costs import price_key, spends_nothing
    from openprogram_yaml.runtimes.wrapping import WrappedRuntime

    replay = ReplayRuntime(tmp_path)
    assert spends_nothing(replay) and price_key("openai:gpt-4o", replay) is None
    local = OpenAIRuntime(base_url="http://127.0.0.1:9/v1")
    real = OpenAIRuntime(base_url="https://api.openai.com/v1", api_key="sk-test")
    recorder_of = WrappedRuntime  # what --record puts in front of a runtime
    assert price_key("openai:gpt-4o", recorder_of(local)) is None  # plain http: a local server
    key = price_key("openai:gpt-4o", recorder_of(real))
    assert key is not None and key.api_url == "https://api.openai.com/v1"
    meter = CostMeter(max_cost_usd=1.0)
    meter.add("openai:gpt-4o", recorder_of(local), TURN)
    meter.add("openai:gpt-4o-mini", recorder_of(real), TURN)
    by_model = {m["model"]: m["usd"] for m in meter.to_dict()["models"]}  # type: ignore[index,union-attr]
    assert by_model["openai:gpt-4o"] is None  # served at 127.0.0.1: no price
    assert by_model["openai:gpt-4o-mini"] is not None
    assert meter.spent_usd() is None


def test_the_run_history_of_serve_shows_each_runs_cost(write, capsys) -> None:
    from openprogram_yaml.run.record import RunRecord
    from openprogram_yaml.run.version import VersionStamp
    from openprogram_yaml.serve.history import RunHistory

    record = RunRecord("helper", "answer", {}, VersionStamp("v1"))
    record.cost = {"usd": None, "models": [{"model": "test", "input_tokens": 3, "usd": None}]}
    history = RunHistory()
    history.add(record, None)
    [summary] = history.summaries()
    assert summary["cost"] == record.cost
