"""Plugin runtimes: real distributions with an ``openprogram_yaml.runtimes`` entry point,
installed by pip into a temporary directory that the test puts on ``sys.path``."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import importlib
import os
import subprocess
import sys
import textwrap
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from openprogram_yaml.runtimes import registry as reg
from openprogram_yaml.runtimes.registry import RuntimeRegistry
from openprogram_yaml.runtimes.rules import RuntimeRule
from openprogram_yaml.runtimes.select import RuntimeSelector

ECHO_MODULE = '''
"""A runtime shipped by a plugin distribution."""

from openprogram_yaml.runtimes.protocol import RuntimeDelta, RuntimeResult


class ShoutRuntime:
    """Shouts the prompt back."""

    display_name = "Shout"

    def __init__(self, suffix: str = "!") -> None:
        self.suffix = suffix

    def supports(self, model_ref=None):
        return bool(model_ref) and model_ref.startswith("shout:")

    async def run_turn(self, prompt, *, system_prompt=None, model_ref=None, **kwargs):
        text = str(prompt).upper() + self.suffix
        return RuntimeResult(content=text, metadata={"model": model_ref})

    async def stream_turn(self, prompt, **kwargs):
        yield RuntimeDelta("text", str(prompt).upper())
'''


def _build_wheel(root: Path, name: str, module: str, source: str, entry: str) -> Path:
    """A real (pure-Python) wheel, built by hand so no build backend is needed offline."""
    dist = name.replace("-", "_")
    info = f"{dist}-1.2.3.dist-info"
    files = {
        f"{module}/__init__.py": textwrap.dedent(source),
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.2.3\n",
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
        "Tag: py3-none-any\n",
        f"{info}/entry_points.txt": f"[openprogram_yaml.runtimes]\n{entry}\n",
    }
    record = []
    for path, text in files.items():
        data = text.encode()
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{path},sha256={digest},{len(data)}")
    files[f"{info}/RECORD"] = "\n".join([*record, f"{info}/RECORD,,"]) + "\n"
    wheel = root / f"{dist}-1.2.3-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for path, text in files.items():
            archive.writestr(path, text)
    return wheel


@pytest.fixture(scope="module")
def plugin_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory holding two pip-installed plugin distributions: one good, one broken."""
    root = tmp_path_factory.mktemp("plugins")
    site = root / "site"
    good = _build_wheel(
        root, "opy-shout-plugin", "opy_shout", ECHO_MODULE, "shout = opy_shout:ShoutRuntime"
    )
    broken = _build_wheel(
        root,
        "opy-broken-plugin",
        "opy_broken",
        "raise ImportError('this plugin needs a library that is not installed')\n",
        "broken = opy_broken:Runtime",
    )
    subprocess.run(
        [
            sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-index",
            "--disable-pip-version-check", "--target", str(site), str(good), str(broken),
        ],
        check=True,
        capture_output=True,
    )  # fmt: skip
    return site


@pytest.fixture
def on_path(plugin_site: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.syspath_prepend(str(plugin_site))
    importlib.invalidate_caches()
    reg.clear()
    yield plugin_site
    monkeypatch.undo()
    for name in ("opy_shout", "opy_broken"):
        sys.modules.pop(name, None)
    reg.clear()


def test_a_plugin_is_listed_with_its_origin(on_path: Path) -> None:
    with pytest.warns(RuntimeWarning, match="runtime plugin 'broken'"):
        entries = {e.runtime_id: e for e in reg.runtime_entries()}
    shout = entries["shout"]
    assert shout.display_name == "Shout"
    assert shout.description == "Shouts the prompt back."
    assert shout.is_builtin is False
    assert shout.metadata["origin"] == "plugin"
    assert shout.metadata["distribution"].replace("_", "-") == "opy-shout-plugin"
    assert shout.metadata["version"] == "1.2.3"
    assert shout.metadata["entry_point"] == "opy_shout:ShoutRuntime"
    assert entries["openai"].metadata["origin"] == "builtin"


def test_a_broken_plugin_is_reported_not_fatal(on_path: Path) -> None:
    with pytest.warns(RuntimeWarning):
        broken = reg.get_runtime_entry("broken")
    assert broken is not None
    assert "ImportError: this plugin needs a library" in broken.metadata["error"]
    assert broken.metadata["available"] is False
    assert not reg.is_runtime_available("broken")
    assert "broken" not in reg.list_runtimes()
    with pytest.raises(ValueError, match="could not be loaded"):
        reg.resolve_runtime("broken")
    assert reg.is_runtime_available("shout")  # the others still load


def test_a_plugin_serves_the_model_its_rule_selects(on_path: Path) -> None:
    selector = RuntimeSelector(rules=[RuntimeRule("team:*", "shout", {"suffix": "?!"})])
    runtime = selector.select("team:loud-1")  # the broken plugin is never imported
    assert type(runtime).__name__ == "ShoutRuntime"
    result = asyncio.run(runtime.run_turn("hello", model_ref="team:loud-1"))
    assert result.content == "HELLO?!"
    # And through supports(), with no rule at all.
    assert selector.explain("shout:x").runtime_id == "shout"


def test_an_isolated_registry_discovers_the_same_plugins(on_path: Path) -> None:
    names = RuntimeRegistry.isolated().list_names()
    assert "shout" in names and "openai" in names


def test_plugins_load_on_first_use_not_at_import_or_discovery(plugin_site: Path) -> None:
    code = textwrap.dedent(
        """
        import sys, warnings
        warnings.simplefilter("ignore")
        import openprogram_yaml
        from openprogram_yaml.runtimes import registry, select
        assert "opy_shout" not in sys.modules, "loaded at import"
        assert "shout" in registry.list_runtimes()
        assert "opy_shout" not in sys.modules, "loaded by discovery"
        registry.resolve_runtime("shout")
        assert "opy_shout" in sys.modules, "not loaded on use"
        assert "opy_broken" not in sys.modules, "an unused plugin was loaded"
        """
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(plugin_site), *sys.path])}
    subprocess.run([sys.executable, "-c", code], check=True, env=env)


def test_the_cli_lists_a_plugin_and_runs_an_agent_on_it(plugin_site: Path, tmp_path: Path) -> None:
    """Through `openprogram-run`, in a fresh process: listed, then selected by a YAML rule."""
    env = {**os.environ, "PYTHONPATH": str(plugin_site)}
    listed = subprocess.run(
        [sys.executable, "-m", "openprogram_yaml", "runtimes"],
        capture_output=True, text=True, env=env, timeout=60,
    )  # fmt: skip
    assert listed.returncode == 0, listed.stderr
    shout_line = next(line for line in listed.stdout.splitlines() if line.startswith("shout"))
    assert "[plugin]" in shout_line
    agent = tmp_path / "loud.yaml"
    agent.write_text(
        "version: 1\nname: loud\nmodel: team:loud-1\n"
        "runtimes:\n  - {match: 'team:*', runtime: shout, options: {suffix: '?!'}}\n"
        "methods:\n  say: {prompt: 'hello {{ who }}', inputs: {who: {type: string}}}\n"
    )
    ran = subprocess.run(
        [sys.executable, "-m", "openprogram_yaml", str(agent), "say", "-i", "who=world"],
        capture_output=True, text=True, env=env, timeout=60,
    )  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    # The plugin upper-cases what it was given (the engine passes the rendered messages)
    # and appends the suffix the YAML rule configured.
    assert "HELLO WORLD" in ran.stdout
    assert ran.stdout.rstrip().endswith("?!")
