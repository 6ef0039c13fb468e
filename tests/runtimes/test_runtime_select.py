"""Runtime selection: rules, providers, supports(), errors, caching and closing."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from loopback import LoopbackServer, json_reply

from openprogram_yaml.errors import UsageError
from openprogram_yaml.providers.anthropic import AnthropicRuntime
from openprogram_yaml.providers.openai import OpenAIRuntime
from openprogram_yaml.runtimes.protocol import RuntimeDelta, RuntimeResult
from openprogram_yaml.runtimes.registry import RuntimeRegistry
from openprogram_yaml.runtimes.rules import ProviderConfig, RuntimeRule, split_model_ref
from openprogram_yaml.runtimes.select import RuntimeSelector


class FakeRuntime:
    """Records its options; supports the model refs listed in ``claims``."""

    closed = 0

    def __init__(self, claims: tuple[str, ...] = (), **options: Any) -> None:
        self.claims = claims
        self.options = options

    def supports(self, model_ref: str | None = None) -> bool:
        return model_ref in self.claims

    async def run_turn(self, prompt: Any, **kwargs: Any) -> RuntimeResult:
        return RuntimeResult(content=str(prompt))

    async def stream_turn(self, prompt: Any, **kwargs: Any) -> AsyncIterator[RuntimeDelta]:
        yield RuntimeDelta("text", str(prompt))

    async def aclose(self) -> None:
        FakeRuntime.closed += 1


@pytest.fixture
def registry() -> RuntimeRegistry:
    registry = RuntimeRegistry.isolated(entry_point_group=None)
    registry.register("alpha", lambda **o: FakeRuntime(("plain-model",), **o))
    registry.register("openai", lambda **o: FakeRuntime(**o))
    registry.register("anthropic", lambda **o: FakeRuntime(("claude-x", "plain-model"), **o))
    return registry


@pytest.fixture(autouse=True)
def _reset_closed() -> Iterator[None]:
    FakeRuntime.closed = 0
    yield


def options_of(selector: RuntimeSelector, model_ref: str) -> dict[str, Any]:
    runtime = selector.select(model_ref)
    assert isinstance(runtime, FakeRuntime)
    return runtime.options


def test_split_model_ref_keeps_everything_after_the_first_colon() -> None:
    assert split_model_ref("openai:gpt-4o") == ("openai", "gpt-4o")
    assert split_model_ref("ollama:llama3.1:8b") == ("ollama", "llama3.1:8b")
    assert split_model_ref("test") == (None, "test")


def test_the_first_matching_rule_wins(registry: RuntimeRegistry) -> None:
    selector = RuntimeSelector(
        rules=[
            RuntimeRule("local:*", "openai", {"base_url": "http://127.0.0.1:11434/v1"}),
            RuntimeRule("local:big-*", "anthropic"),
            RuntimeRule("*", "alpha"),
        ],
        registry=registry,
    )
    chosen = selector.explain("local:big-model")
    assert (chosen.runtime_id, chosen.source, chosen.rule_index, chosen.model_id) == (
        "openai",
        "rule",
        0,
        "big-model",
    )
    assert options_of(selector, "local:big-model") == {"base_url": "http://127.0.0.1:11434/v1"}
    assert selector.explain("whatever").runtime_id == "alpha"


def test_globs_are_case_sensitive(registry: RuntimeRegistry) -> None:
    selector = RuntimeSelector(rules=[RuntimeRule("Local:*", "anthropic")], registry=registry)
    assert selector.explain("Local:x").runtime_id == "anthropic"
    with pytest.raises(UsageError):
        selector.explain("local:x")


def test_the_provider_named_by_the_prefix_decides(registry: RuntimeRegistry) -> None:
    selector = RuntimeSelector(
        providers=[
            ProviderConfig(
                "lmstudio",
                runtime="openai",
                base_url="http://127.0.0.1:1234/v1",
                api_key_env="LMSTUDIO_KEY",
                headers={"X-Team": "a"},
                timeout_s=30,
                options={"max_tokens_field": "max_tokens"},
            )
        ],
        registry=registry,
    )
    chosen = selector.explain("lmstudio:qwen2.5-7b")
    assert (chosen.runtime_id, chosen.source, chosen.provider) == ("openai", "provider", "lmstudio")
    assert options_of(selector, "lmstudio:qwen2.5-7b") == {
        "provider": "lmstudio",
        "base_url": "http://127.0.0.1:1234/v1",
        "api_key_env": "LMSTUDIO_KEY",
        "headers": {"X-Team": "a"},
        "timeout_s": 30,
        "max_tokens_field": "max_tokens",
    }


def test_a_prefix_naming_a_runtime_is_an_implicit_provider(registry: RuntimeRegistry) -> None:
    selector = RuntimeSelector(registry=registry)
    chosen = selector.explain("anthropic:claude-sonnet-4-5")
    assert (chosen.runtime_id, chosen.source, chosen.options) == ("anthropic", "provider", {})


def test_a_rule_for_a_provider_keeps_the_providers_settings(registry: RuntimeRegistry) -> None:
    selector = RuntimeSelector(
        rules=[RuntimeRule("corp:*", "openai", {"timeout_s": 5})],
        providers={
            "corp": ProviderConfig("corp", runtime="openai", base_url="http://127.0.0.1:8/v1")
        },
        registry=registry,
    )
    assert options_of(selector, "corp:m") == {
        "provider": "corp",
        "base_url": "http://127.0.0.1:8/v1",
        "timeout_s": 5,
    }


def test_otherwise_the_first_runtime_that_supports_the_model(registry: RuntimeRegistry) -> None:
    selector = RuntimeSelector(registry=registry)
    assert selector.explain("plain-model").runtime_id == "alpha"  # registered first
    chosen = selector.explain("claude-x")
    assert (chosen.runtime_id, chosen.source) == ("anthropic", "supports")


def test_no_runtime_is_a_usage_error_that_helps(registry: RuntimeRegistry) -> None:
    selector = RuntimeSelector(
        rules=[RuntimeRule("local:*", "openai")],
        providers={"corp": ProviderConfig("corp", runtime="openai")},
        registry=registry,
    )
    with pytest.raises(UsageError) as info:
        selector.select("opnai:gpt-4o")
    message = str(info.value)
    assert message.startswith("no runtime serves model 'opnai:gpt-4o'")
    assert "did you mean 'openai:gpt-4o'?" in message
    assert "registered runtimes: alpha, openai, anthropic" in message
    assert "rules: 'local:*' -> openai" in message
    assert "providers: corp" in message
    assert info.value.exit_code == 2


def test_instances_are_cached_per_configuration(registry: RuntimeRegistry) -> None:
    selector = RuntimeSelector(
        rules=[
            RuntimeRule("a:*", "openai", {"base_url": "http://127.0.0.1:1/v1"}),
            RuntimeRule("b:*", "openai", {"base_url": "http://127.0.0.1:1/v1"}),
            RuntimeRule("c:*", "openai", {"base_url": "http://127.0.0.1:2/v1"}),
        ],
        registry=registry,
    )
    first = selector.select("a:one")
    assert selector.select("a:two") is first  # same provider config: one instance, one pool
    assert selector.select("b:three") is first
    assert selector.select("c:four") is not first


class CountedOptions(dict[str, Any]):
    """An option value that counts how often its items are read."""

    reads = 0

    def items(self) -> Any:
        CountedOptions.reads += 1
        return super().items()


def test_a_model_refs_options_are_frozen_once_not_on_every_call(
    registry: RuntimeRegistry,
) -> None:
    headers = CountedOptions({"x-team": "a"})
    selector = RuntimeSelector(
        rules=[RuntimeRule("o:*", "openai", {"headers": headers})], registry=registry
    )
    first = selector.select("o:x")
    reads = CountedOptions.reads
    for _ in range(5):
        assert selector.select("o:x") is first
    assert CountedOptions.reads == reads  # the per-call path reads no options
    assert selector.select("o:y") is first  # another ref, the same configuration
    asyncio.run(selector.aclose())
    assert selector.select("o:x") is not first  # closed: a new instance


def test_aclose_closes_what_the_selector_created_only(registry: RuntimeRegistry) -> None:
    shared = FakeRuntime()
    registry.register("shared", shared)
    selector = RuntimeSelector(
        rules=[RuntimeRule("s:*", "shared"), RuntimeRule("o:*", "openai", {"n": 1})],
        registry=registry,
    )
    selector.select("s:x")
    owned = selector.select("o:x")
    selector.select("alpha:x")
    asyncio.run(selector.aclose())
    assert FakeRuntime.closed == 2  # openai{n:1} and alpha, not the shared instance
    assert selector.select("o:x") is not owned  # a later select builds a new one


def test_secrets_stay_out_of_explain_and_reprs(registry: RuntimeRegistry) -> None:
    provider = ProviderConfig(
        "corp",
        runtime="openai",
        api_key="sk-secret-1234567",
        headers={"Authorization": "Bearer tok-secret-99"},
    )
    selector = RuntimeSelector(
        rules=[RuntimeRule("x:*", "openai", {"api_key": "sk-rule-secret-777"})],
        providers=[provider],
        registry=registry,
    )
    shown = " ".join(
        [
            repr(provider),
            repr(selector),
            repr(selector.explain("corp:m")),
            str(selector.explain("corp:m").to_dict()),
            str(selector.explain("x:m").to_dict()),
            selector.explain("x:m").describe(),
        ]
    )
    for secret in ("sk-secret-1234567", "tok-secret-99", "sk-rule-secret-777"):
        assert secret not in shown
    assert selector.explain("corp:m").to_dict()["options"]["headers"] == {"Authorization": "***"}


def test_bad_options_are_a_usage_error_without_values(registry: RuntimeRegistry) -> None:
    registry.register("strict", lambda *, base_url: FakeRuntime(base_url=base_url))
    selector = RuntimeSelector(
        rules=[RuntimeRule("s:*", "strict", {"base_ur": "http://x", "api_key": "sk-hidden-555"})],
        registry=registry,
    )
    with pytest.raises(UsageError) as info:
        selector.select("s:m")
    assert "cannot create runtime 'strict'" in str(info.value)
    assert "rule 0" in str(info.value)
    assert "sk-hidden-555" not in str(info.value)


def test_check_reports_rules_and_providers_naming_unknown_runtimes(
    registry: RuntimeRegistry,
) -> None:
    selector = RuntimeSelector(
        rules=[RuntimeRule("a:*", "opena"), RuntimeRule("b:*", "alpha")],
        providers={"p": ProviderConfig("p", runtime="antropic")},
        registry=registry,
    )
    problems = selector.check()
    assert [p.where for p in problems] == ["runtimes[0]", "providers.p"]
    assert "did you mean 'openai'" in problems[0].message
    assert "did you mean 'anthropic'" in problems[1].message


def test_two_models_go_to_two_real_runtimes() -> None:
    """One selector routes a local model to the openai runtime and a Claude model to the
    anthropic runtime; each server sees its own wire format."""
    openai_reply = {
        "id": "c1",
        "object": "chat.completion",
        "created": 1,
        "model": "llama3",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "from llama"},
                "finish_reason": "stop",
            }
        ],
    }
    anthropic_reply = {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-4-5",
        "content": [{"type": "text", "text": "from claude"}],
        "stop_reason": "end_turn",
        "usage": {"input_tokens": 3, "output_tokens": 2},
    }
    with (
        LoopbackServer([json_reply(openai_reply)]) as local,
        LoopbackServer([json_reply(anthropic_reply)]) as claude,
    ):
        selector = RuntimeSelector(
            rules=[
                RuntimeRule("anthropic:*", "anthropic", {"base_url": claude.url, "api_key": "k-a"}),
                RuntimeRule("local:*", "openai", {"base_url": local.url + "/v1"}),
            ]
        )

        async def both() -> tuple[RuntimeResult, RuntimeResult]:
            try:
                a = await selector.select("local:llama3").run_turn("hi", model_ref="local:llama3")
                b = await selector.select("anthropic:claude-sonnet-4-5").run_turn(
                    "hi", model_ref="anthropic:claude-sonnet-4-5"
                )
                return a, b
            finally:
                await selector.aclose()

        assert isinstance(selector.select("local:llama3"), OpenAIRuntime)
        assert isinstance(selector.select("anthropic:claude-sonnet-4-5"), AnthropicRuntime)
        a, b = asyncio.run(both())
    assert (a.content, b.content) == ("from llama", "from claude")
    assert local.requests[0].path == "/v1/chat/completions"
    assert local.requests[0].json["model"] == "llama3"
    assert claude.requests[0].path == "/v1/messages"
    assert claude.requests[0].json["model"] == "claude-sonnet-4-5"
