"""What ``serve`` keeps out of its replies and log follows the environment the runs read."""

from __future__ import annotations

from pathlib import Path

import pytest

from openprogram_yaml.run.record import run_secrets
from openprogram_yaml.run.reload import ProgramHolder
from openprogram_yaml.run.service import RunService
from openprogram_yaml.serve.app import ServeState

#: The key variable's name does not look secret: only the rule makes its value one.
AGENT = """\
version: 1
name: desk
model: local:m
runtimes:
  - match: "local:*"
    runtime: openai
    options: {base_url: "http://127.0.0.1:9/v1", api_key_env: DESK_LLM}
methods:
  greet: {prompt: "Hello."}
"""


def test_the_servers_secrets_follow_a_key_variable_the_environment_changes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each run reads its key variable when it starts; the server's own secrets (its log,
    the page's replies) were those of the variable's value when the version loaded."""
    (tmp_path / "desk.yaml").write_text(AGENT, encoding="utf-8")
    monkeypatch.setenv("DESK_LLM", "first-key-value-1234")
    holder = ProgramHolder(tmp_path / "desk.yaml")
    holder.load()
    state = ServeState(holder, RunService(holder.snapshot))
    agent = holder.snapshot()[0].agent()
    assert "first-key-value-1234" in state.secrets()
    monkeypatch.setenv("DESK_LLM", "second-key-value-5678")
    assert "second-key-value-5678" in run_secrets(agent)  # what a run now knows
    assert "second-key-value-5678" in state.secrets()
    assert state.secrets() == run_secrets(agent)  # no token: nothing else
