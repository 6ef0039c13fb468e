"""A prompt repository (openprogram.yaml): agents across files, shared prompts, schemas,
toolsets and providers; the example repository runs offline."""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path

import pytest
from support import EXAMPLES

from openprogram_yaml.compile.project import compile_path
from openprogram_yaml.errors import ConfigError
from openprogram_yaml.providers.test import Reply, ScriptedRuntime
from openprogram_yaml.run.agent_runtime import open_runtime
from openprogram_yaml.run.method import RunState, run_method
from openprogram_yaml.runner.cli import main
from openprogram_yaml.runtimes.registry import register_runtime, unregister_runtime

REPO = EXAMPLES / "support_repo"


def test_check_validates_the_whole_repository(capsys) -> None:
    assert main(["check", str(REPO)]) == 0
    assert capsys.readouterr().out.strip() == "ok: 2 agents, 5 methods checked"


def test_program_tracks_every_file_it_was_built_from() -> None:
    program = compile_path(REPO)
    names = {p.relative_to(REPO).as_posix() for p in program.files}
    assert {
        "openprogram.yaml",
        "agents/desk.yaml",
        "agents/replies.yaml",
        "prompts/_ticket.j2",
        "prompts/_style.j2",
        "prompts/assess.md.j2",
        "schemas/label.json",
        "schemas/refund.json",
        "support_tools/text.py",
    } <= names


def test_flow_through_three_methods_offline(capsys) -> None:
    code = main([str(REPO), "desk.assess", "-i", "ticket=Invoice 1042 charged twice", "--json"])
    record = json.loads(capsys.readouterr().out)
    assert code == 0
    assert [s["method"] for s in record["path"]] == ["assess", "investigate", "answer"]
    assert "Invoice 1042 charged twice" in record["output"]


def test_an_agent_file_inside_the_repository_gets_its_settings(capsys) -> None:
    code = main([str(REPO / "agents" / "replies.yaml"), "draft", "-i", "ticket=Cannot log in"])
    out = capsys.readouterr().out
    assert code == 0
    assert 'sign as "The Acme Mail team"' in out  # the macro came from the template folder


@pytest.fixture
def scripted():  # type: ignore[no-untyped-def]
    def install(replies: list[Reply]) -> ScriptedRuntime:
        runtime = ScriptedRuntime(replies)
        register_runtime("scripted-repo", runtime)
        return runtime

    yield install
    unregister_runtime("scripted-repo")


def test_tools_run_and_deny_rules_hold_in_the_repository(scripted) -> None:
    model = scripted(
        [
            Reply.call("notes_delete", {"ticket_id": "1042"}),
            Reply.call("search_docs", {"query": "invoice"}),
            Reply.call("count_words", {"text": "charged twice again"}),
            Reply.json({"call": "refund", "args": {"amount": 12.5, "reason": "double charge"}}),
        ]
    )
    agent = compile_path(REPO).agent("desk")
    state = RunState()

    async def go() -> object:
        async with open_runtime(agent) as runtime:
            method = agent.method("investigate")
            return await run_method(
                method, runtime, {"ticket": "charged twice"}, model="scripted-repo:m", state=state
            )

    out = asyncio.run(go())
    assert out == {"decision": "refund", "amount": 12.5, "reason": "double charge"}
    [step] = state.path
    assert len(step.pop("prompt_version")) == 12
    assert [step] == [
        {
            "agent": "desk",
            "method": "investigate",
            "choice": "refund",
            "fields": {"amount": 12.5, "reason": "double charge"},
        }
    ]
    first = model.requests[0]
    offered = sorted(n for n in first.tool_names if not n.startswith("choose_"))
    assert offered == ["count_words", "search_docs"]  # notes_delete is denied by read_only
    results = {m.name: m for m in model.requests[-1].messages if m.role == "tool"}
    assert results["notes_delete"].is_error  # asked for, refused, never ran
    assert "billing.md" in results["search_docs"].text()
    assert results["count_words"].text() == "3"


def copy_repo(tmp_path: Path) -> Path:
    target = tmp_path / "repo"
    shutil.copytree(REPO, target)
    return target


@pytest.mark.parametrize(
    ("file", "old", "new", "expected"),
    [
        ("openprogram.yaml", "includes_never", "", None),
        ("agents/desk.yaml", "includes: [read_only]", "includes: [read_onyl]",
         "includes 'read_onyl', which is not a toolset; did you mean 'read_only'?"),
        ("agents/desk.yaml", "method: replies.draft", "method: replies.drafts",
         "calls method 'drafts', which agent 'replies' does not have; did you mean 'draft'?"),
        ("agents/desk.yaml", "schema: {$ref: refund.json}", "schema: {$ref: ../../refund.json}",
         "leaves the project root"),
        ("agents/desk.yaml", "{$ref: label.json}", "{$ref: 'https://example.com/label.json'}",
         "is a URL"),
        ("agents/replies.yaml", '{% include "_ticket.j2" %}', '{% include "_tickets.j2" %}',
         "_tickets.j2"),
        ("openprogram.yaml", "templates: [prompts]", "templates: [../outside]",
         "leaves the project root"),
        ("openprogram.yaml", "agents: [agents/*.yaml]", "agents: [agent/*.yaml]",
         "matches no file"),
    ],
)  # fmt: skip
def test_repository_mistakes_are_positioned_errors(
    tmp_path: Path, file: str, old: str, new: str, expected: str | None
) -> None:
    repo = copy_repo(tmp_path)
    target = repo / file
    text = target.read_text()
    if expected is None:
        compile_path(repo)  # the unchanged copy compiles
        return
    assert old in text
    target.write_text(text.replace(old, new))
    with pytest.raises(ConfigError) as info:
        compile_path(repo)
    messages = [str(d) for d in info.value.diagnostics]
    assert any(expected in m for m in messages), messages
    assert all(d.line > 0 for d in info.value.diagnostics), messages


def test_tool_parameters_find_refs_in_the_schema_folders(tmp_path: Path) -> None:
    repo = copy_repo(tmp_path)
    (repo / "schemas" / "query.json").write_text(
        json.dumps({"type": "object", "properties": {"query": {"type": "string"}},
                    "required": ["query"]})
    )  # fmt: skip
    desk = repo / "agents" / "desk.yaml"
    text = desk.read_text()
    old = (
        "parameters:\n      type: object\n      properties: {query: {type: string, "
        'minLength: 2, pattern: "^[A-Za-z0-9 ]+$"}}\n      required: [query]'
    )
    assert old in text
    desk.write_text(text.replace(old, "parameters: {$ref: query.json}"))
    program = compile_path(repo)
    [search] = [t for t in program.agents["desk"].tools if t.spec.name == "search_docs"]
    assert search.spec.parameters["required"] == ["query"]
    assert (repo / "schemas" / "query.json").resolve() in program.files


def test_recompile_sees_a_new_file_that_shadows_a_schema(tmp_path: Path) -> None:
    """The compile cache reuses unchanged agents; a file added where a $ref looks first
    (beside the agent, before the schema folders) is still a change."""
    import os

    repo = copy_repo(tmp_path)
    past = 1_700_000_000
    for folder, _, names in os.walk(repo):
        for name in [*names, "."]:
            os.utime(os.path.join(folder, name), (past, past))  # nothing is "just written"
    first = compile_path(repo)
    label = first.agents["desk"].methods["classify"].response_format
    assert label is not None and "priority" in label["schema"]["properties"]
    (repo / "agents" / "label.json").write_text(
        json.dumps({"type": "object", "properties": {"mood": {"type": "string"}}})
    )
    again = compile_path(repo)
    label = again.agents["desk"].methods["classify"].response_format
    assert label is not None and list(label["schema"]["properties"]) == ["mood"]


def _two_agents_sharing_a_schema(root: Path, schema: str) -> None:
    (root / "openprogram.yaml").write_text("version: 1\nname: t\nagents: [agents/*.yaml]\n")
    (root / "agents").mkdir()
    (root / "schemas").mkdir()
    (root / "schemas" / "label.yaml").write_text(schema)
    for name in ("a", "b"):
        (root / "agents" / f"{name}.yaml").write_text(
            f"version: 1\nname: {name}\nmodel: test\nmethods:\n  m:\n    prompt: hi\n"
            "    response_schema: {$ref: ../schemas/label.yaml}\n"
        )


def test_a_schema_file_parsed_once_per_compile_is_still_each_agents_read(
    tmp_path: Path,
) -> None:
    """One compile parses a shared schema file once; each agent still bundles it, records
    it among its reads, and reports the file's own problems at their place."""
    import os

    from openprogram_yaml.compile.build import Build

    good, bad = tmp_path / "good", tmp_path / "bad"
    good.mkdir()
    bad.mkdir()
    _two_agents_sharing_a_schema(
        good, "type: object\nproperties:\n  label: {type: string}\nrequired: [label]\n"
    )
    past = 1_700_000_000
    for folder, _, names in os.walk(good):
        for name in [*names, "."]:
            os.utime(os.path.join(folder, name), (past, past))  # settled: the build keeps it
    build = Build()
    program = compile_path(good, build=build)
    formats = [program.agents[n].methods["m"].response_format for n in ("a", "b")]
    assert formats[0] is not None and formats[0] == formats[1]
    assert formats[0]["schema"]["required"] == ["label"]
    schema_file = (good / "schemas" / "label.yaml").resolve()
    for name in ("a", "b"):
        assert schema_file in build.agents[(good / "agents" / f"{name}.yaml").resolve()].files

    _two_agents_sharing_a_schema(
        bad, "type: object\nproperties:\n  label: {type: string}\nrequried: [x]\n"
    )
    with pytest.raises(ConfigError) as info:
        compile_path(bad)
    places = [(Path(d.path).name, d.line, d.col) for d in info.value.diagnostics]
    assert places == [("label.yaml", 4, 1), ("label.yaml", 4, 1)], places
