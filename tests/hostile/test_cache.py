"""Issue 12 §8: the compile cache is correct and cannot be planted.

- A cached program is used only while everything its compile read is unchanged, including
  the lookups that found nothing (the search for ``openprogram.yaml`` in parent folders).
- Schema files of the same name in different folders keep their ``$defs`` apart.
- The fast paths (the JSON Schema check, the plain-template analysis) agree with the
  libraries they stand in for, on a generated corpus.
- A pickle (or template code) planted in a cache folder that is a link, that others can
  write to, that someone else owns, or that lies inside the project, is never loaded.
"""

from __future__ import annotations

import json
import os
import pickle
import random
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from support import REPO

from openprogram_yaml.compile import _jinja, _jinja_analysis, cache
from openprogram_yaml.compile.project import compile_path
from openprogram_yaml.runner.cli import main
from openprogram_yaml.runtime.validation import _plainly_valid, check_schema
from openprogram_yaml.runtime.validators import validator_for

AGENT = """\
version: 1
name: greeter
model: test
methods:
  greet:
    inputs:
      who: {type: string}
    prompt_file: greet.j2
"""
RUN = ["greet", "-i", "who=Ada"]


def settle(root: Path, seconds_ago: float = 10.0) -> None:
    """Date files and folders back: a file changed a moment before its compile is too
    recent for the cache to trust, and the program would not be kept."""
    then = time.time() - seconds_ago
    for folder, _, names in os.walk(root):
        for name in names:
            os.utime(os.path.join(folder, name), (then, then), follow_symlinks=False)
        os.utime(folder, (then, then))


def write_agent(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    # A filter: text and ``{{ name }}`` alone render without Jinja and keep no code.
    (folder / "greet.j2").write_text("Hello, {{ who | trim }}!\n")
    path = folder / "greeter.yaml"
    path.write_text(AGENT)
    return path


# --- lookups that found nothing ------------------------------------------------------------


@pytest.mark.parametrize("where", ["parent", "grandparent"])
def test_an_invalid_project_file_appearing_in_a_parent_folder_is_seen(
    tmp_path: Path, where: str, capsys: pytest.CaptureFixture[str]
) -> None:
    agent = write_agent(tmp_path / "a" / "b" / "agents")
    settle(tmp_path)
    assert main([str(agent), *RUN]) == 0
    assert main([str(agent), *RUN]) == 0
    assert cache.load(agent) is not None  # the second run was served from the cache
    folder = agent.parent.parent if where == "parent" else agent.parent.parent.parent
    (folder / "openprogram.yaml").write_text("version: 1\nagnets: [agents/*.yaml]\n")
    settle(tmp_path)
    capsys.readouterr()
    assert main(["check", str(agent)]) == 2
    assert main([str(agent), *RUN]) == 2
    assert "agnets" in capsys.readouterr().err


def test_a_git_checkout_appearing_above_changes_the_project_root(tmp_path: Path) -> None:
    # The prompt file lies two folders up: inside the project while the project is the
    # checkout at tmp_path, outside it once a folder in between becomes a checkout.
    (tmp_path / ".git").mkdir()
    (tmp_path / "greet.j2").write_text("Hello, {{ who }}!\n")
    agent = tmp_path / "a" / "agents" / "greeter.yaml"
    agent.parent.mkdir(parents=True)
    agent.write_text(AGENT.replace("prompt_file: greet.j2", "prompt_file: ../../greet.j2"))
    settle(tmp_path)
    assert main([str(agent), *RUN]) == 0
    assert cache.load(agent) is not None
    (tmp_path / "a" / ".git").mkdir()
    settle(tmp_path)
    assert main([str(agent), *RUN]) == 2


# --- $ref'd schema files of the same name ----------------------------------------------------


def test_schema_files_of_the_same_name_keep_their_defs_apart(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for folder, kind in (("a", "string"), ("b", "integer")):
        (tmp_path / folder).mkdir()
        label = {"$ref": "#/$defs/kind", "$defs": {"kind": {"type": kind}}}
        (tmp_path / folder / "label.json").write_text(json.dumps(label))
    agent = tmp_path / "agent.yaml"
    agent.write_text(
        "version: 1\nname: labels\nmodel: test\nmethods:\n"
        "  show:\n"
        "    inputs:\n      x: {$ref: a/label.json}\n      y: {$ref: b/label.json}\n"
        '    prompt: "{{ x }} {{ y }}"\n'
        "  label:\n"
        '    prompt: "Label it"\n'
        "    response_schema:\n"
        "      type: object\n"
        "      properties: {x: {$ref: a/label.json}, y: {$ref: b/label.json}}\n"
    )
    settle(tmp_path)
    valid, swapped = {"x": "text", "y": 3}, {"x": 3, "y": "text"}
    program = compile_path(agent)
    response = program.agent("labels").method("label").response_format
    assert response is not None
    validator = validator_for(response["schema"])
    assert validator.errors(valid) == []
    assert len(validator.errors(swapped)) == 2
    # Inputs are one object of all the inputs: their definitions must resolve there too.
    assert main(["render", str(agent), "show", "--input-json", json.dumps(valid)]) == 0, (
        capsys.readouterr().err
    )
    assert "text 3" in capsys.readouterr().out
    assert main(["render", str(agent), "show", "--input-json", json.dumps(swapped)]) == 2


# --- fast paths agree with the libraries ------------------------------------------------------

ANCHORS = ["a", "A1", "_x", "a-b.c", "", "1a", "-a", "a b", "a#", "a\n", "é", "a/b", ".a"]
URIS = ["x", "#", "a#", "a#b", "#/$defs/x", "http://e.x/s", "a b", "", "\n", "a#\n"]
VALUES: dict[str, list[Any]] = {
    "$anchor": [*ANCHORS, 3, None],
    "$dynamicAnchor": [*ANCHORS, True],
    "$id": [*URIS, 1],
    "$ref": [*URIS, []],
    "$dynamicRef": URIS,
    "$comment": ["c", 2],
    "$schema": ["https://json-schema.org/draft/2020-12/schema", "x"],
    "$vocabulary": [{"x": True}, {"x": 1}],
    "type": ["string", "strin", ["string", "null"], ["string", "string"], [], 3, "integer"],
    "enum": [["a"], [], "a", [1, 1]],
    "const": [None, {"a": 1}],
    "default": [[1]],
    "examples": [[], "x"],
    "title": ["t", None],
    "description": ["d", 1],
    "format": ["date", 1],
    "pattern": ["^a$", "(", 2],
    "contentEncoding": ["base64", 1],
    "contentMediaType": ["text/plain", False],
    "minimum": [0, 1.5, "1", True, float("inf")],
    "exclusiveMaximum": [-1, None],
    "multipleOf": [2, 0.5, 0, -1, True],
    "minLength": [0, 3, -1, 1.0, 1.5, True],
    "maxItems": [2, "2"],
    "minContains": [0, -2],
    "maxProperties": [1, 2.0],
    "required": [["a"], [], ["a", "a"], [1], "a"],
    "dependentRequired": [{"a": ["b"]}, {"a": ["b", "b"]}, {"a": "b"}, []],
    "uniqueItems": [True, 1, "yes"],
    "readOnly": [False, 0],
    "deprecated": [True, None],
    "unknown": ["allowed", None],
    "x-note": [1],
}
SUBSCHEMA_KEYS = ["items", "not", "additionalProperties", "contains", "if", "contentSchema"]
MAP_KEYS = ["properties", "$defs", "patternProperties", "dependentSchemas", "definitions"]
LIST_KEYS = ["anyOf", "allOf", "oneOf", "prefixItems"]


def random_schema(rng: random.Random, depth: int = 0) -> Any:
    if rng.random() < 0.05:
        return rng.choice([True, False, 3, "s", None, []])
    schema: dict[str, Any] = {}
    for _ in range(rng.randint(0, 4)):
        roll = rng.random()
        if depth < 3 and roll < 0.15:
            schema[rng.choice(SUBSCHEMA_KEYS)] = random_schema(rng, depth + 1)
        elif depth < 3 and roll < 0.25:
            children = {
                rng.choice(["p", "q", "", 1]): random_schema(rng, depth + 1) for _ in range(2)
            }
            schema[rng.choice(MAP_KEYS)] = children if rng.random() < 0.9 else []
        elif depth < 3 and roll < 0.32:
            size = rng.randint(0, 2)
            schema[rng.choice(LIST_KEYS)] = [random_schema(rng, depth + 1) for _ in range(size)]
        else:
            key = rng.choice(list(VALUES))
            schema[key] = rng.choice(VALUES[key])
    return schema


def metaschema_accepts(schema: Any) -> bool:
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    return bool(cls(cls.META_SCHEMA).is_valid(schema))


def test_the_schema_check_agrees_with_the_metaschema_on_a_generated_corpus() -> None:
    rng = random.Random(1208)
    disagreements = []
    taken = 0
    for _ in range(4000):
        schema = random_schema(rng)
        if not isinstance(schema, dict):
            continue
        taken += _plainly_valid(schema)
        if (check_schema(schema) == []) != metaschema_accepts(schema):
            disagreements.append(schema)
    assert disagreements == []
    assert taken > 800  # the fast path is really taken, for ordinary schemas


@pytest.mark.parametrize("keyword", ["$anchor", "$dynamicAnchor"])
@pytest.mark.parametrize("value", ["1a", "a b", "", "a#"])
def test_an_anchor_the_metaschema_rejects_is_rejected(keyword: str, value: str) -> None:
    assert check_schema({"type": "object", keyword: value}) != []


def test_an_id_with_a_fragment_is_rejected() -> None:
    assert check_schema({"$id": "https://example.com/s#part"}) != []


TEMPLATE_PIECES = [
    "Ticket: ", "{{ ticket }}", "{{name}}", "{{- tone -}}", "{{+ tone }}", "{{ tone +}}",
    "{{ tone -}}", "{{-- x }}", "{{ x --}}", "\n", " and ", "}} ", "{ x }", "{ {{ x }}",
    "{{ self }}", "{{ super }}", "{{ loop }}", "{{ caller }}", "{{ varargs }}", "{{ kwargs }}",
    "{{\nname\n}}", "{{ name\n}}", "{{\tname }}", "{{\x0bname }}", "\u2028", "\x85",
    "{{ true }}", "{{ None }}", "{{ range }}", "{{ namespace }}", "{{ x.y }}", "{{ x|upper }}",
    "{% if a %}a{% endif %}", "{# note #}", "{{ }}", "{{ a", "\r\n", "{{ _ }}", "{{ é }}",
    "{{ 1 }}", "{{ __class__ }}", "{{ ticket}}}", "{{{ ticket }}", "{{ ticket }}}}", "\t",
    "{{ in }}", "{{ not }}", "{{ and }}", "{{ is }}",
]  # fmt: skip


def test_the_plain_template_shortcut_agrees_with_jinja_on_a_generated_corpus() -> None:
    env = _jinja.PromptSandbox()
    rng = random.Random(1208)
    taken = 0
    for _ in range(3000):
        source = "".join(rng.choice(TEMPLATE_PIECES) for _ in range(rng.randint(0, 6)))
        fast = _jinja_analysis.simple_analysis(env, source)
        if fast is None:
            continue
        taken += 1
        assert fast == _jinja_analysis.analyze(env, source, "t", "t"), source
        # Rendering agrees too: each name read prints what the context holds for it.
        context = {read.name: f"<{read.name}>" for read in fast.reads}
        rendered = env.from_string(source).render(context)
        assert all(f"<{read.name}>" in rendered for read in fast.reads), source
    assert taken > 300


@pytest.mark.parametrize("source", ["{{ self }}", "{{ x +}}", "{{\nx\n}}", "{{{ x }}"])
def test_the_shortcut_steps_aside_or_agrees(source: str) -> None:
    env = _jinja.PromptSandbox()
    fast = _jinja_analysis.simple_analysis(env, source)
    try:
        slow = _jinja_analysis.analyze(env, source, "t", "t")
    except _jinja.TemplateSyntaxError:
        assert fast is None
    else:
        assert fast is None or fast == slow


# --- planted pickles -------------------------------------------------------------------------


class Planted:
    """Unpickling this creates ``marker``: proof that the planted entry was loaded."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, tuple[str, str]]:
        return open, (str(self.marker), "w")


@pytest.fixture
def agent(tmp_path: Path) -> Path:
    path = write_agent(tmp_path / "project")
    settle(tmp_path / "project")
    return path


@pytest.fixture
def cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "cache"
    monkeypatch.setenv("OPENPROGRAM_CACHE_DIR", str(folder))
    return folder


def plant(folder: Path, marker: Path) -> list[Path]:
    """Replace every kept program in ``folder`` by a planted pickle; the entries."""
    entries = sorted(folder.glob("*.pickle"))
    assert entries
    for entry in entries:
        entry.write_bytes(pickle.dumps(Planted(marker)))
    return entries


def not_loaded(agent: Path, marker: Path) -> bool:
    assert main([str(agent), *RUN]) == 0
    assert cache.load(agent) is None or not marker.exists()
    return not marker.exists()


def test_a_planted_pickle_in_an_ordinary_folder_is_what_the_checks_let_through(
    agent: Path, cache_dir: Path, tmp_path: Path
) -> None:
    # The control case: the checks below are what stands between a plant and a load.
    assert main([str(agent), *RUN]) == 0
    plant(cache_dir, tmp_path / "marker")
    cache.load(agent)
    assert (tmp_path / "marker").exists()


def test_a_cache_folder_that_is_a_link_is_not_read(
    agent: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = tmp_path / "real-cache"
    monkeypatch.setenv("OPENPROGRAM_CACHE_DIR", str(real))
    assert main([str(agent), *RUN]) == 0
    plant(real, tmp_path / "marker")
    link = tmp_path / "linked-cache"
    link.symlink_to(real)
    monkeypatch.setenv("OPENPROGRAM_CACHE_DIR", str(link))
    assert not_loaded(agent, tmp_path / "marker")


def test_a_cache_folder_others_can_write_to_is_not_read(
    agent: Path, cache_dir: Path, tmp_path: Path
) -> None:
    assert main([str(agent), *RUN]) == 0
    plant(cache_dir, tmp_path / "marker")
    cache_dir.chmod(0o770)
    assert not_loaded(agent, tmp_path / "marker")


def test_an_entry_others_can_write_to_is_not_read(
    agent: Path, cache_dir: Path, tmp_path: Path
) -> None:
    assert main([str(agent), *RUN]) == 0
    for entry in plant(cache_dir, tmp_path / "marker"):
        entry.chmod(0o666)
    assert not_loaded(agent, tmp_path / "marker")


def test_an_entry_that_is_a_link_is_not_read(agent: Path, cache_dir: Path, tmp_path: Path) -> None:
    assert main([str(agent), *RUN]) == 0
    (entry,) = plant(cache_dir, tmp_path / "marker")
    elsewhere = tmp_path / "elsewhere.pickle"
    entry.rename(elsewhere)
    entry.symlink_to(elsewhere)
    assert not_loaded(agent, tmp_path / "marker")


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="needs chown")
def test_an_entry_or_folder_owned_by_someone_else_is_not_read(
    agent: Path, cache_dir: Path, tmp_path: Path
) -> None:
    assert main([str(agent), *RUN]) == 0
    (entry,) = plant(cache_dir, tmp_path / "marker")
    os.chown(entry, 4321, 4321)
    assert not_loaded(agent, tmp_path / "marker")
    plant(cache_dir, tmp_path / "marker")
    os.chown(cache_dir, 4321, 4321)
    assert not_loaded(agent, tmp_path / "marker")


@pytest.mark.parametrize("relative", [True, False])
def test_a_cache_folder_inside_the_project_is_refused_with_one_warning(
    agent: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    relative: bool,
) -> None:
    project = agent.parent
    monkeypatch.chdir(project)  # the working folder is part of an entry's name
    neutral = tmp_path / "cache"
    monkeypatch.setenv("OPENPROGRAM_CACHE_DIR", str(neutral))
    assert main([str(agent), *RUN]) == 0
    names = sorted(entry.name for entry in neutral.glob("*.pickle"))
    planted = project / ".cache"  # as a cloned repository could hold it
    planted.mkdir(mode=0o700)
    marker = tmp_path / "marker"
    for name in names:
        (planted / name).write_bytes(pickle.dumps(Planted(marker)))
    settle(project)
    monkeypatch.setenv("OPENPROGRAM_CACHE_DIR", ".cache" if relative else str(planted))
    capsys.readouterr()
    for _ in range(2):
        assert main([str(agent), *RUN]) == 0
    assert not marker.exists()
    assert sorted(entry.name for entry in planted.iterdir()) == names  # nothing written
    warnings = [line for line in capsys.readouterr().err.splitlines() if "warning" in line]
    assert len(warnings) == 1, warnings
    assert "cache" in warnings[0] and ("relative" if relative else "inside") in warnings[0]


def jinja_plant(marker: Path) -> bytes:
    """What Jinja's template code cache reads first (magic, then a pickled checksum),
    with a checksum whose unpickling creates ``marker``."""
    from jinja2.bccache import bc_magic

    return bc_magic + pickle.dumps(Planted(marker))


def run_in_a_new_process(agent: Path) -> None:
    # This process keeps the templates it made, and its view of the package's code (which
    # names the template code folder).
    code = f"from openprogram_yaml.runner.cli import main; main([{str(agent)!r}, *{RUN!r}])"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    subprocess.run([sys.executable, "-c", code], check=True, env=env, capture_output=True)


@pytest.mark.parametrize("how", ["control", "folder link", "folder mode", "file mode", "file link"])
def test_planted_template_code_is_not_read(
    agent: Path, cache_dir: Path, tmp_path: Path, how: str
) -> None:
    run_in_a_new_process(agent)
    (kept,) = cache_dir.glob("templates-*")
    files = list(kept.iterdir())
    assert files
    marker = tmp_path / "marker"
    for file in files:
        file.write_bytes(jinja_plant(marker))
        if how == "file mode":
            file.chmod(0o666)
        elif how == "file link":
            target = tmp_path / f"{file.name}.elsewhere"
            file.rename(target)
            file.symlink_to(target)
    if how == "folder mode":
        kept.chmod(0o777)
    elif how == "folder link":
        moved = tmp_path / "moved-templates"
        kept.rename(moved)
        kept.symlink_to(moved)
    for entry in cache_dir.glob("*.pickle"):
        entry.unlink()  # the program is compiled again, and its template code looked up
    run_in_a_new_process(agent)
    # The control shows the plant works where the checks let it through.
    assert marker.exists() == (how == "control")


def test_the_validator_cache_tells_a_number_key_from_a_text_key() -> None:
    # YAML reads `properties: {1: …}` with a number key: JSON writes it as "1", so a cache
    # keyed by JSON text served one schema's validator for the other.
    by_number = validator_for({"type": "object", "properties": {1: {"type": "string"}}})
    by_text = validator_for({"type": "object", "properties": {"1": {"type": "string"}}})
    library = jsonschema.Draft202012Validator({"properties": {"1": {"type": "string"}}})
    assert by_text.errors({"1": 5}) != [] and not library.is_valid({"1": 5})
    assert by_number.errors({"1": 5}) == []  # as jsonschema: no property is called 1
