"""What a repository's files refer to cannot make ``check`` (or a run) hang: a schema whose
``$ref``s reach the same file again and again through files that each refer to it twice is
refused at its ``$ref`` with a positioned error, instead of being put in 2**n times.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from openprogram_yaml.compile.schemas import MAX_BUNDLED_VALUES
from openprogram_yaml.runner.cli import main

#: Levels of files each referring to the next twice: 2**18 copies of the last one, past the
#: bound. (Before, 30 levels ran ``check`` for over a minute.)
LEVELS = 18


def _doubling_schemas(folder: Path, levels: int) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(levels):
        nxt = f"s{i + 1}.json"
        (folder / f"s{i}.json").write_text(
            f'{{"type": "object", "properties": {{"a": {{"$ref": "{nxt}"}}, '
            f'"b": {{"$ref": "{nxt}"}}}}}}'
        )
    (folder / f"s{levels}.json").write_text('{"type": "string"}')


def _agent(tmp_path: Path, where: str) -> Path:
    path = tmp_path.resolve() / "agent.yaml"
    path.write_text(
        "version: 1\nname: a\nmodel: test\nmethods:\n  m:\n    prompt: hi\n" + where,
        encoding="utf-8",
    )
    return path


@pytest.mark.parametrize(
    ("where", "line"),
    [
        ("    response_schema: {$ref: schemas/s0.json}\n", 7),
        ("    inputs:\n      q: {$ref: schemas/s0.json}\n", 8),
        (
            "    response_schema:\n      type: object\n      properties:\n"
            "        x: {$ref: schemas/s1.json}\n        y: {$ref: schemas/s1.json}\n",
            10,
        ),
    ],
    ids=["response-schema", "input", "twice-inline"],
)
def test_a_schema_that_doubles_through_its_files_is_refused_at_its_ref(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], where: str, line: int
) -> None:
    _doubling_schemas(tmp_path / "schemas", LEVELS)
    path = _agent(tmp_path, where)
    started = time.monotonic()
    for argv in (["check", str(path)], [str(path), "m", "-i", "q=x"]):
        code = main(argv)
        err = capsys.readouterr().err
        assert code == 2, err
        assert "Traceback" not in err
        assert f"{path}:{line}:" in err, err
        assert f"more than {MAX_BUNDLED_VALUES} mappings and lists" in err
        assert err.count("error:") == 1, err
    assert time.monotonic() - started < 30


def test_a_schema_referring_to_one_file_many_times_within_the_bound_is_bundled(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _doubling_schemas(tmp_path / "schemas", 8)
    path = _agent(tmp_path, "    response_schema: {$ref: schemas/s0.json}\n")
    assert main(["check", str(path)]) == 0, capsys.readouterr().err
