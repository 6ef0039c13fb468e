"""The runtime registry: the seed's names and semantics, aliases, thread safety."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from openprogram_yaml.runtimes import registry as reg
from openprogram_yaml.runtimes.protocol import RuntimeDelta, RuntimeResult
from openprogram_yaml.runtimes.registry import RuntimeRegistry


class EchoRuntime:
    """Echoes the prompt back."""

    display_name = "Echo"

    def __init__(self, **options: Any) -> None:
        self.options = options

    def supports(self, model_ref: str | None = None) -> bool:
        return True

    async def run_turn(self, prompt: Any, **kwargs: Any) -> RuntimeResult:
        return RuntimeResult(content=f"echo: {prompt}")

    async def stream_turn(self, prompt: Any, **kwargs: Any) -> AsyncIterator[RuntimeDelta]:
        yield RuntimeDelta("text", f"echo: {prompt}")


@pytest.fixture
def registry() -> RuntimeRegistry:
    return RuntimeRegistry.isolated(entry_point_group=None)


@pytest.fixture
def default_registry() -> Iterator[RuntimeRegistry]:
    """The process-wide registry, reset before and after the test."""
    reg.clear()
    yield RuntimeRegistry()
    reg.clear()


def test_the_seed_quick_start_works(default_registry: RuntimeRegistry) -> None:
    reg.register_runtime("echo", lambda: EchoRuntime())
    runtime = reg.resolve_runtime("echo")
    assert asyncio.run(runtime.run_turn("Hello!")).content == "echo: Hello!"
    assert "echo" in reg.list_runtimes()
    assert reg.is_runtime_available("echo")
    assert RuntimeRegistry() is default_registry  # one registry per process


def test_the_seeds_import_paths_and_list_runtimes_giving_ids(
    default_registry: RuntimeRegistry,
) -> None:
    # Written as the protocol page writes it, with our package name in place of theirs.
    from openprogram_yaml import list_runtimes, register_runtime, resolve_runtime
    from openprogram_yaml.runtime import RuntimeDelta, RuntimeResult
    from openprogram_yaml.runtime.registry import (
        add_runtime_alias,
        is_runtime_available,
        unregister_runtime,
    )

    class MyRuntime:
        def supports(self, model_ref: str | None = None) -> bool:
            return True

        async def run_turn(self, prompt: str, **kwargs: Any) -> RuntimeResult:
            return RuntimeResult(content=f"handled: {prompt}")

        async def stream_turn(self, prompt: str, **kwargs: Any) -> AsyncIterator[RuntimeDelta]:
            yield RuntimeDelta(type="text", content=f"handled: {prompt}")

    register_runtime("my-llm", lambda: MyRuntime())
    add_runtime_alias("default", "my-llm")
    assert asyncio.run(resolve_runtime("default").run_turn("hi")).content == "handled: hi"
    listed = [runtime_id for runtime_id in list_runtimes()]
    assert "my-llm" in listed and "openai" in listed
    assert all(isinstance(runtime_id, str) for runtime_id in listed)
    # The entries, with their metadata, stay available under another name.
    (mine,) = [e for e in reg.runtime_entries() if e.runtime_id == "my-llm"]
    assert (mine.metadata["origin"], mine.metadata["aliases"]) == ("code", ["default"])
    assert is_runtime_available("my-llm")
    assert unregister_runtime("my-llm") and not is_runtime_available("default")


def test_factories_give_fresh_instances_and_instances_are_shared(registry: RuntimeRegistry) -> None:
    registry.register("fresh", EchoRuntime)
    shared = EchoRuntime()
    registry.register("shared", shared)
    assert registry.resolve("fresh") is not registry.resolve("fresh")
    assert registry.resolve("shared") is shared is registry.resolve("shared")


def test_overrides_reach_the_factory_as_keyword_options(registry: RuntimeRegistry) -> None:
    registry.register("echo", EchoRuntime)
    runtime = registry.resolve("echo", {"base_url": "http://127.0.0.1:9", "timeout_s": 5})
    assert isinstance(runtime, EchoRuntime)
    assert runtime.options == {"base_url": "http://127.0.0.1:9", "timeout_s": 5}


def test_a_shared_instance_refuses_options(registry: RuntimeRegistry) -> None:
    registry.register("shared", EchoRuntime())
    with pytest.raises(ValueError, match="takes no options"):
        registry.resolve("shared", {"base_url": "x"})


def test_a_duplicate_id_is_a_value_error(registry: RuntimeRegistry) -> None:
    registry.register("echo", EchoRuntime)
    with pytest.raises(ValueError, match="already registered"):
        registry.register("echo", EchoRuntime)


def test_an_unknown_id_lists_the_available_ones(registry: RuntimeRegistry) -> None:
    registry.register("echo", EchoRuntime)
    registry.register("openai-ish", EchoRuntime)
    with pytest.raises(ValueError) as info:
        registry.resolve("ecko")
    message = str(info.value)
    assert "unknown runtime 'ecko'" in message
    assert "available: echo, openai-ish" in message
    assert "did you mean 'echo'" in message


def test_things_that_are_not_runtimes_are_refused(registry: RuntimeRegistry) -> None:
    with pytest.raises(TypeError):
        registry.register("number", 42)
    with pytest.raises(ValueError):
        registry.register("", EchoRuntime)
    registry.register("bad", lambda: object())
    with pytest.raises(TypeError, match="lacks supports/run_turn/stream_turn"):
        registry.resolve("bad")


def test_aliases_resolve_and_go_away_with_their_runtime(registry: RuntimeRegistry) -> None:
    registry.register("echo", EchoRuntime)
    registry.add_alias("default", "echo")
    registry.add_alias("fallback", "default")  # an alias of an alias names the runtime
    assert isinstance(registry.resolve("default"), EchoRuntime)
    assert registry.is_registered("fallback")
    entry = registry.get_entry("default")
    assert entry is not None and entry.runtime_id == "echo"
    assert entry.metadata["aliases"] == ["default", "fallback"]
    with pytest.raises(ValueError):
        registry.add_alias("echo", "echo")
    with pytest.raises(ValueError, match="unknown runtime"):
        registry.add_alias("x", "missing")

    assert registry.unregister("echo") is True
    assert not registry.is_available("default")
    assert registry.unregister("echo") is False


def test_unregistering_an_alias_keeps_the_runtime(registry: RuntimeRegistry) -> None:
    registry.register("echo", EchoRuntime)
    registry.add_alias("default", "echo")
    assert registry.unregister("default") is True
    assert registry.is_available("echo") and not registry.is_available("default")


def test_entries_describe_where_a_runtime_came_from(registry: RuntimeRegistry) -> None:
    registry.register("echo", EchoRuntime, tier="experimental")
    registry.register("named", EchoRuntime(), display_name="Named One", description="Custom.")
    (echo, named) = registry.list_runtimes()
    assert echo.runtime_id == "echo"
    assert echo.description == "Echoes the prompt back."
    assert echo.display_name == "echo"
    assert echo.is_builtin is False
    assert echo.metadata == {
        "origin": "code",
        "kind": "factory",
        "tier": "experimental",
        "aliases": [],
    }
    assert (named.display_name, named.description, named.metadata["kind"]) == (
        "Named One",
        "Custom.",
        "instance",
    )
    # Entries are copies: changing one does not change the registry.
    echo.metadata["origin"] = "tampered"
    assert registry.list_runtimes()[0].metadata["origin"] == "code"
    assert registry.get_entry("missing") is None


def test_clear_forgets_everything(registry: RuntimeRegistry) -> None:
    registry.register("echo", EchoRuntime)
    registry.add_alias("e", "echo")
    registry.clear()
    assert registry.list_names() == [] and not registry.is_available("e")


def test_registration_is_thread_safe(registry: RuntimeRegistry) -> None:
    errors: list[BaseException] = []
    barrier = threading.Barrier(8)

    def worker(n: int) -> None:
        try:
            barrier.wait()
            for i in range(50):
                registry.register(f"rt-{n}-{i}", EchoRuntime)
                registry.resolve(f"rt-{n}-{i}")
                registry.list_runtimes()
            registry.register("contended", EchoRuntime)
        except ValueError:
            pass  # only one thread wins "contended"
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert len(registry.list_names()) == 8 * 50 + 1


def test_builtins_come_through_the_entry_point_path(default_registry: RuntimeRegistry) -> None:
    entries = {e.runtime_id: e for e in reg.runtime_entries()}
    for runtime_id in ("openai", "anthropic"):
        entry = entries[runtime_id]
        assert entry.is_builtin
        assert entry.metadata["origin"] == "builtin"
        assert entry.metadata["distribution"] == "openprogram-yaml"
        assert entry.metadata["entry_point"].startswith("openprogram_yaml.providers.")
    names = reg.list_runtimes()
    assert names.index("openai") < names.index("anthropic")


def test_a_builtin_can_be_replaced_the_seed_way(default_registry: RuntimeRegistry) -> None:
    assert reg.unregister_runtime("openai")
    reg.register_runtime("openai", EchoRuntime)
    assert isinstance(reg.resolve_runtime("openai"), EchoRuntime)
    entry = reg.get_runtime_entry("openai")
    assert entry is not None and entry.metadata["origin"] == "code"
    reg.clear()  # back to the built-in on the next lookup
    assert not isinstance(reg.resolve_runtime("openai"), EchoRuntime)


def test_the_builtins_the_registry_knows_are_the_ones_the_pyproject_declares() -> None:
    import tomllib

    from support import REPO

    declared = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["entry-points"]
    assert declared[reg.ENTRY_POINT_GROUP] == reg._BUILTINS


def _distribution_claiming(folder: Any, runtime_id: str) -> None:
    """A real (metadata-only) distribution on sys.path whose entry point takes ``runtime_id``."""
    info = folder / "claimant-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: claimant\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(
        f"[{reg.ENTRY_POINT_GROUP}]\n{runtime_id} = claimant_module:Runtime\n"
    )


def test_a_model_a_builtin_serves_is_selected_without_discovering_plugins(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    import warnings

    from openprogram_yaml.runtimes.select import RuntimeSelector

    _distribution_claiming(tmp_path, "test")
    monkeypatch.syspath_prepend(str(tmp_path))
    registry = RuntimeRegistry.isolated()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # discovering the claimant would warn
        selection = RuntimeSelector(registry=registry).explain("test")
        assert registry.is_available("openai")
    assert selection.runtime_id == "test"
    with pytest.warns(RuntimeWarning, match="'test' from claimant is ignored"):
        names = registry.list_names()
    assert names[: len(reg._BUILTINS)] == list(reg._BUILTINS)


def test_a_builtin_loads_what_its_entry_point_loads() -> None:
    from importlib.metadata import EntryPoint

    for name, value in reg._BUILTINS.items():
        own = reg._OwnEntryPoint(name, value)
        assert own.load() is EntryPoint(name, value, reg.ENTRY_POINT_GROUP).load(), name
