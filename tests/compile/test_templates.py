"""Prompt templates: rendering, load-time checks, and the positions of their problems."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from openprogram_yaml.compile.rendering import CompiledTemplate, TemplateRenderError
from openprogram_yaml.compile.templates import TemplateEngine
from openprogram_yaml.errors import ConfigError, Diagnostic
from openprogram_yaml.spec.positions import TextOrigin

# A prompt written inline as `prompt: ...` at line 7, column 13 of agent.yaml.
PLAIN = TextOrigin("agent.yaml", 7, 13, "")


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A prompt repository with a `prompts/` template folder; the working directory."""
    (tmp_path / "prompts" / "partials").mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def write(project: Path, name: str, text: str) -> Path:
    path = project / "prompts" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def engine_for(project: Path) -> TemplateEngine:
    return TemplateEngine(project, [Path("prompts")])


def problems(
    engine: TemplateEngine,
    source: str,
    declared: set[str],
    origin: TextOrigin = PLAIN,
) -> list[Diagnostic]:
    with pytest.raises(ConfigError) as caught:
        engine.compile(source, origin=origin, declared=declared)
    return caught.value.diagnostics


def where(diagnostic: Diagnostic) -> tuple[str, int, int]:
    return diagnostic.path, diagnostic.line, diagnostic.col


# --- rendering -------------------------------------------------------------------------------


def test_renders_inline_prompt_and_reports_what_it_reads(project: Path) -> None:
    template = engine_for(project).compile(
        "Label this ticket: {{ ticket }}", origin=PLAIN, declared={"ticket", "unused"}
    )
    assert template.render({"ticket": "Refund please"}) == "Label this ticket: Refund please"
    assert template.variables == {"ticket"}
    assert template.files == frozenset()
    assert template.source == "Label this ticket: {{ ticket }}"
    assert template.name == "agent.yaml:7:13"


def test_name_is_the_callers_when_given(project: Path) -> None:
    template = engine_for(project).compile("hi", origin=PLAIN, declared=(), name="triage.classify")
    assert template.name == "triage.classify"


def test_prompts_are_not_html_escaped_and_keep_their_trailing_newline(project: Path) -> None:
    template = engine_for(project).compile("{{ text }}\n", origin=PLAIN, declared={"text"})
    assert template.render({"text": "<b>Tom & 'Jerry'</b>"}) == "<b>Tom & 'Jerry'</b>\n"


def test_tojson_is_compact_unsorted_and_not_html_escaped(project: Path) -> None:
    template = engine_for(project).compile(
        "{{ order|tojson }} {{ [1, 2]|tojson(indent=2) }}", origin=PLAIN, declared={"order"}
    )
    order = {"zeta": "<é&>", "alpha": [1, None, True]}
    assert template.render({"order": order}) == (
        '{"zeta":"<é&>","alpha":[1,null,true]} [\n  1,\n  2\n]'
    )


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        (
            'Reply as {"label": "...", "tags": {"a": 1}}',
            'Reply as {"label": "...", "tags": {"a": 1}}',
        ),
        ('{% raw %}{"a": {{ not a tag }}}{% endraw %}', '{"a": {{ not a tag }}}'),
        ("{{ '{' }}{{ '{' }}x}}", "{{x}}"),
        ("{{ '{{' }} literal {{ '}}' }}", "{{ literal }}"),
        ("{{ '{%' }} raw {{ '%}' }}", "{% raw %}"),
    ],
)
def test_literal_braces(project: Path, source: str, expected: str) -> None:
    template = engine_for(project).compile(source, origin=PLAIN, declared=())
    assert template.render({}) == expected


def test_render_error_for_missing_attribute_points_at_the_template_line(project: Path) -> None:
    origin = TextOrigin("agent.yaml", 9, 3, "|", 4)
    template = engine_for(project).compile(
        "Ticket:\n{{ ticket.subject }}\n", origin=origin, declared={"ticket"}
    )
    with pytest.raises(TemplateRenderError) as caught:
        template.render({"ticket": "just a string"})
    error = caught.value
    assert error.position is not None
    assert (error.position.path, error.position.line) == ("agent.yaml", 11)
    assert "has no attribute 'subject'" in str(error)
    assert str(error).startswith("agent.yaml:11: ")


def test_render_error_inside_an_included_file_points_into_that_file(project: Path) -> None:
    write(project, "partials/ticket.j2", "Title:\n{{ ticket.title }}\n")
    template = engine_for(project).compile(
        "{% include 'partials/ticket.j2' %}", origin=PLAIN, declared={"ticket"}
    )
    with pytest.raises(TemplateRenderError) as caught:
        template.render({"ticket": 3})
    assert str(caught.value).startswith(os.path.join("prompts", "partials", "ticket.j2") + ":2: ")


def test_render_error_for_an_input_not_given(project: Path) -> None:
    template = engine_for(project).compile("{{ ticket }}", origin=PLAIN, declared={"ticket"})
    with pytest.raises(TemplateRenderError, match="'ticket' is undefined"):
        template.render({})


# --- undeclared variables, at their position ----------------------------------------------------


def test_undeclared_variable_in_plain_scalar(project: Path) -> None:
    # Prose before the tag holds the same word; the tag's use is the one reported.
    (problem,) = problems(engine_for(project), "Label this tickt: {{ tickt }}", {"ticket"})
    assert where(problem) == ("agent.yaml", 7, 13 + 21)
    assert problem.message == (
        "template reads 'tickt', which the method does not declare in 'inputs'; "
        "did you mean 'ticket'?"
    )


def test_undeclared_variable_in_double_quoted_scalar(project: Path) -> None:
    origin = TextOrigin("agent.yaml", 7, 13, '"')
    (problem,) = problems(engine_for(project), "Label: {{ tickt }}", {"ticket"}, origin)
    assert where(problem) == ("agent.yaml", 7, 13 + 1 + 10)


def test_undeclared_variable_in_block_scalar(project: Path) -> None:
    # `instructions: |` on line 9; content lines indented by 4 spaces.
    origin = TextOrigin("agent.yaml", 9, 1, "|", 4)
    source = "You triage tickets.\nThe product is {{ prodct }}.\n"
    (problem,) = problems(engine_for(project), source, {"product"}, origin)
    assert where(problem) == ("agent.yaml", 11, 4 + 19)
    assert "did you mean 'product'?" in problem.message


def test_undeclared_variable_in_prompt_file(project: Path) -> None:
    origin = TextOrigin("prompts/route.md.j2", 1, 1, "file")
    source = (
        "# Route\n\n{% if urgent %}\n  Ticket: {{ ticket.body }} from {{ custmer }}\n{% endif %}"
    )
    (problem,) = problems(engine_for(project), source, {"ticket", "urgent", "customer"}, origin)
    assert where(problem) == ("prompts/route.md.j2", 4, 37)


def test_every_use_is_reported_each_at_its_own_column(project: Path) -> None:
    source = "{{ tickt }} and {{ tickt|upper }}\n{{ ticket.tickt }} {{ tickt }}"
    found = problems(engine_for(project), source, {"ticket"}, TextOrigin("p.j2", 1, 1, "file"))
    # `ticket.tickt` is an attribute, not a read of `tickt`.
    assert [where(p) for p in found] == [("p.j2", 1, 4), ("p.j2", 1, 20), ("p.j2", 2, 23)]


def test_all_problems_of_a_template_are_reported_together(project: Path) -> None:
    source = "{{ a }}\n{{ b|uper }}\n{% include 'missing.j2' %}\n{% include name %}"
    found = problems(engine_for(project), source, {"name"}, TextOrigin("p.j2", 1, 1, "file"))
    assert [(p.line, p.col) for p in found] == [(1, 4), (2, 4), (2, 6), (3, 12), (4, 4)]
    assert "there is no filter named 'uper'; did you mean 'upper'?" in found[2].message


def test_message_lists_declared_inputs_when_nothing_is_close(project: Path) -> None:
    (problem,) = problems(engine_for(project), "{{ zzz }}", {"ticket", "customer"})
    assert problem.message.endswith("; declared: 'customer', 'ticket'")


def test_message_when_nothing_is_declared(project: Path) -> None:
    (problem,) = problems(engine_for(project), "{{ zzz }}", set())
    assert problem.message.endswith("; the method declares no inputs")


def test_names_the_template_sets_itself_are_not_inputs(project: Path) -> None:
    source = (
        "{% set greeting = 'Hi' %}{{ greeting }}"
        "{% for item in items %}{{ loop.index }}{{ item }}{% endfor %}"
        "{% macro line(text, sep='-') %}{{ sep }}{{ text }}{% endmacro %}{{ line(greeting) }}"
        "{% with n = items|length %}{{ n }}{% endwith %}"
        "{% set ns = namespace(total=0) %}{% set ns.total = 1 %}{{ ns.total }}"
        "{% set block %}x{% endset %}{{ block }}{{ range(2)|list }}{{ dict(a=1) }}"
    )
    template = engine_for(project).compile(source, origin=PLAIN, declared={"items"})
    assert template.variables == {"items"}


def test_a_loop_variable_outside_its_loop_is_an_input(project: Path) -> None:
    source = "{% for item in items %}{{ item }}{% endfor %}{{ item }}"
    (problem,) = problems(engine_for(project), source, {"items"})
    assert where(problem) == ("agent.yaml", 7, 13 + 48)


# --- syntax errors -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("source", "line", "col", "fragment"),
    [
        (
            "Label {{ ticket ticket }}",
            1,
            17,
            "expected token 'end of print statement', got 'ticket'",
        ),
        ("a\nb {{ x ! y }}", 2, 8, "unexpected char '!'"),
        ("Hi {{ name", 1, 4, "unexpected end of template"),
        (
            "x\n{% for t in ts %}\n{{ t }}\n",
            2,
            1,
            "this {% for %} is never closed; add {% endfor %}",
        ),
        ("{% endif %}", 1, 4, "Encountered unknown tag 'endif'"),
        ('[{{"a": 1}]', 1, 7, "got ':'"),
        ("{% if x = 1 %}", 1, 9, "got '='"),
        ("{{ x + }}", 1, 8, "unexpected 'end of print statement'"),
    ],
)
def test_syntax_error_position_and_message(
    project: Path, source: str, line: int, col: int, fragment: str
) -> None:
    (problem,) = problems(
        engine_for(project), source, {"ticket", "x", "y"}, TextOrigin("p.j2", 1, 1)
    )
    assert (problem.line, problem.col) == (line, col)
    assert problem.message.startswith("template syntax error: ")
    assert fragment in problem.message


def test_syntax_error_suggests_raw_for_literal_text(project: Path) -> None:
    (problem,) = problems(engine_for(project), '[{{"a": 1}]', set())
    assert "wrap it in {% raw %}…{% endraw %} or write {{ '{{' }}" in problem.message


# --- include / import / extends ------------------------------------------------------------------


def test_include_renders_and_lists_its_files(project: Path) -> None:
    header = write(project, "partials/header.j2", "Product: {{ product }}\n")
    item = write(project, "partials/item.j2", "{% include 'partials/header.j2' %}- {{ item }}\n")
    template = engine_for(project).compile(
        "{% for item in items %}{% include 'partials/item.j2' %}{% endfor %}",
        origin=PLAIN,
        declared={"items", "product"},
    )
    assert template.render({"items": ["a", "b"], "product": "P"}) == (
        "Product: P\n- a\nProduct: P\n- b\n"
    )
    assert template.files == {header.resolve(), item.resolve()}
    assert template.variables == {"items", "product"}


def test_undeclared_variable_in_included_file_is_reported_in_that_file(project: Path) -> None:
    write(project, "partials/item.j2", "\n- {{ item }} for {{ custmer }}\n")
    source = "Items:\n{% for item in items %}{% include 'partials/item.j2' %}{% endfor %}"
    (problem,) = problems(engine_for(project), source, {"items", "customer"})
    assert where(problem) == (os.path.join("prompts", "partials", "item.j2"), 2, 21)
    assert problem.message == (
        "template reads 'custmer', which the method does not declare in 'inputs'; "
        "did you mean 'customer'? (included at agent.yaml:8:35)"
    )


def test_extends_checks_the_parent_and_blocks(project: Path) -> None:
    base = write(
        project, "base.j2", "You help with {{ product }}.\n{% block task %}{% endblock %}\n"
    )
    source = "{% extends 'base.j2' %}{% block task %}Label: {{ ticket }}{% endblock %}"
    template = engine_for(project).compile(source, origin=PLAIN, declared={"product", "ticket"})
    assert template.render({"product": "P", "ticket": "T"}) == "You help with P.\nLabel: T\n"
    assert template.files == {base.resolve()}

    (problem,) = problems(engine_for(project), source, {"ticket"})
    assert where(problem) == (os.path.join("prompts", "base.j2"), 1, 18)
    assert problem.message.endswith("(extended at agent.yaml:7:24)")


def test_imported_macros_see_no_inputs_unless_imported_with_context(project: Path) -> None:
    write(project, "macros.j2", "{% macro sign(who) %}{{ who }} of {{ team }}{% endmacro %}")
    without = "{% from 'macros.j2' import sign %}{{ sign(agent) }}"
    (problem,) = problems(engine_for(project), without, {"agent", "team"})
    assert where(problem) == (os.path.join("prompts", "macros.j2"), 1, 38)
    assert "used without context (what 'import' does unless told" in problem.message
    assert problem.message.endswith("(imported at agent.yaml:7:21)")

    with_context = "{% from 'macros.j2' import sign with context %}{{ sign(agent) }}"
    template = engine_for(project).compile(with_context, origin=PLAIN, declared={"agent", "team"})
    assert template.render({"agent": "Ann", "team": "Support"}) == "Ann of Support"


def test_include_without_context_sees_no_inputs(project: Path) -> None:
    write(project, "partials/plain.j2", "{{ ticket }}")
    (problem,) = problems(
        engine_for(project), "{% include 'partials/plain.j2' without context %}", {"ticket"}
    )
    assert "sees no inputs" in problem.message


def test_import_as_module(project: Path) -> None:
    write(project, "macros.j2", "{% macro shout(s) %}{{ s|upper }}!{% endmacro %}")
    source = "{% import 'macros.j2' as m %}{{ m.shout(word) }}"
    template = engine_for(project).compile(source, origin=PLAIN, declared={"word"})
    assert template.render({"word": "hey"}) == "HEY!"


def test_missing_include_is_reported_at_its_name(project: Path) -> None:
    (problem,) = problems(engine_for(project), "Intro {% include 'partials/nope.j2' %}", set())
    assert where(problem) == ("agent.yaml", 7, 13 + 17)
    assert problem.message == (
        f"template 'partials/nope.j2' not found in the template folders (prompts{os.sep})"
    )


def test_missing_include_with_ignore_missing_is_allowed(project: Path) -> None:
    template = engine_for(project).compile(
        "a{% include 'nope.j2' ignore missing %}b", origin=PLAIN, declared=()
    )
    assert template.render({}) == "ab"


@pytest.mark.parametrize(
    "source",
    [
        "{% include name %}",
        "{% include 'partials/' ~ name %}",
        "{% include ['a.j2', 'b.j2'] %}",
        "{% import name as m %}",
        "{% extends name %}",
    ],
)
def test_computed_template_names_are_refused(project: Path, source: str) -> None:
    (problem,) = problems(engine_for(project), source, {"name"})
    assert "needs the template's name in quotes" in problem.message
    assert (problem.line, problem.col) == (7, 13 + 3)


def test_include_cycle_is_an_error_not_a_crash(project: Path) -> None:
    write(project, "a.j2", "A {% include 'b.j2' %}")
    write(project, "b.j2", "B\n{% include 'a.j2' %}")
    (problem,) = problems(engine_for(project), "{% include 'a.j2' %}", set())
    assert where(problem) == (os.path.join("prompts", "b.j2"), 2, 12)
    assert problem.message.startswith(
        f"include cycle: {os.path.join('prompts', 'a.j2')} → {os.path.join('prompts', 'b.j2')}"
        f" → {os.path.join('prompts', 'a.j2')}"
    )


def test_prompt_file_that_includes_itself_is_a_cycle(project: Path) -> None:
    path = write(project, "self.j2", "{% include 'self.j2' %}")
    origin = TextOrigin("prompts/self.j2", 1, 1, "file")
    (problem,) = problems(engine_for(project), path.read_text(), set(), origin)
    assert problem.message.startswith("include cycle:")


def test_syntax_error_in_included_file_is_reported_in_that_file(project: Path) -> None:
    write(project, "partials/bad.j2", "ok\n{{ x + }}\n")
    (problem,) = problems(engine_for(project), "{% include 'partials/bad.j2' %}", {"x"})
    assert where(problem) == (os.path.join("prompts", "partials", "bad.j2"), 2, 8)


def test_relative_names_start_at_the_including_template(project: Path) -> None:
    write(project, "partials/outer.j2", "[{% include './inner.j2' %}]")
    write(project, "partials/inner.j2", "{{ word }}")
    template = engine_for(project).compile(
        "{% include 'partials/outer.j2' %}", origin=PLAIN, declared={"word"}
    )
    assert template.render({"word": "hi"}) == "[hi]"


@pytest.mark.parametrize(
    ("name", "fragment"),
    [
        ("./agent.yaml", "outside the template folders"),
        ("partials/../../secret.txt", "outside the template folders"),
        ("/etc/passwd", "is not a relative path"),
        ("escape.j2", "outside the template folders"),
    ],
)
def test_templates_may_not_leave_the_template_folders(
    project: Path, name: str, fragment: str
) -> None:
    (project / "agent.yaml").write_text("version: 1\n")
    (project / "secret.txt").write_text("token\n")
    (project / "prompts" / "escape.j2").symlink_to(project / "secret.txt")
    (problem,) = problems(engine_for(project), f"{{% include '{name}' %}}", set())
    assert fragment in problem.message


def test_template_folder_outside_the_project_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="outside the project root"):
        TemplateEngine(tmp_path / "project", [tmp_path / "elsewhere"])


def test_no_folders_means_the_project_root(project: Path) -> None:
    (project / "note.j2").write_text("note {{ x }}")
    template = TemplateEngine(project).compile(
        "{% include 'note.j2' %}", origin=PLAIN, declared={"x"}
    )
    assert template.render({"x": 1}) == "note 1"


def test_a_compiled_template_keeps_the_files_it_was_checked_with(project: Path) -> None:
    path = write(project, "partials/part.j2", "old {{ x }}")
    engine = engine_for(project)
    source = "{% include 'partials/part.j2' %}"
    first: CompiledTemplate = engine.compile(source, origin=PLAIN, declared={"x"})
    path.write_text("new text with {{ y }}")
    # Unchecked text never reaches a prompt: the old template renders what was checked …
    assert first.render({"x": 1}) == "old 1"
    # … and a recompile (what hot reload does) sees and checks the new file.
    (problem,) = problems(engine, source, {"x"})
    assert "template reads 'y'" in problem.message
    path.write_text("newer {{ x }}!")
    assert engine.compile(source, origin=PLAIN, declared={"x"}).render({"x": 2}) == "newer 2!"
