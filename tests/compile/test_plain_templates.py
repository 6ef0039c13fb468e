"""A template made only of text and ``{{ name }}`` outputs renders without Jinja
(``text_and_names``, ``fill``): the same text Jinja renders, on a seeded corpus of edge
cases and values, and Jinja for everything else (other syntax, a name not given)."""

from __future__ import annotations

import enum
import pickle
import random
from pathlib import Path
from typing import Any

import jinja2
import pytest

from openprogram_yaml.compile import _jinja, rendering
from openprogram_yaml.compile.rendering import TemplateRenderError, fill, text_and_names
from openprogram_yaml.compile.templates import TemplateEngine
from openprogram_yaml.spec.positions import TextOrigin

PIECES = [
    "plain", " ", "\n", "\n\n", "\r\n", "\r", "\t", "{", "}", "%", "#", "{ x }", "{}",
    "{%", "%}", "{{", "}}", "{#", "#}", "{-", "-}", "{+", "é", "日本語", "🙂", "\u2028",
    "\u0085", "\x0b", "\x0c", "\x00", "\\", "'", '"', "{% if x %}a{% endif %}", "{# c #}",
    "## line", "# not a comment", "%% x", "$", "${x}", "<b>&amp;</b>",
    "{{ x }}", "{{x}}", "{{  ticket\n}}", "{{\r\nx }}", "{{ x_2 }}", "{{ _y }}", "{{- x }}",
    "{{ x -}}", "{{+ x }}", "{{ x.y }}", "{{ x|upper }}", "{{ range }}", "{{ true }}",
    "{{ None }}", "{{ self }}", "{{ dict }}", "{{ missing }}", "{{ 1 }}", "{{ 'x' }}",
    "{{{ x }}", "{{ x }}}", "{{ é }}", "{{ x }",
]  # fmt: skip

VALUES: list[Any] = [
    "Ada", "", "line\nbreak\r\n", "{{ not a tag }}", "{% raw %}", 0, -7, 10**20, 1.5, 1e16,
    float("inf"), True, False, None, [], [1, "a", None], {}, {"a": [1, {"b": None}]}, "日本",
]  # fmt: skip


def jinja_render(source: str, variables: dict[str, Any] | None = None) -> str:
    return _jinja.PromptSandbox().from_string(source).render(variables or {})


def test_text_and_names_render_as_jinja_renders() -> None:
    rng = random.Random(1217)
    taken = plain = 0
    for _ in range(4000):
        source = "".join(rng.choice(PIECES) for _ in range(rng.randint(0, 8)))
        variables = {name: rng.choice(VALUES) for name in ("x", "ticket", "x_2", "_y")}
        pieces = text_and_names(source)
        if pieces is None:
            continue
        fast = fill(pieces, variables)
        try:
            slow = jinja_render(source, variables)
        except jinja2.UndefinedError:
            assert fast is None, repr(source)
            continue
        assert fast == slow, repr(source)
        taken += 1
        plain += len(pieces) == 1
    assert taken > 500
    assert plain > 100


class Priority(str, enum.Enum):  # noqa: UP042  (not StrEnum: str() is "Priority.HIGH")
    HIGH = "high"


class Shown(str):
    def __str__(self) -> str:
        return "shown"


class Markup(str):
    def __html__(self) -> str:
        return "<escaped>"


@pytest.mark.parametrize("value", [Priority.HIGH, Shown("raw"), Markup("<b>")])
def test_a_str_subclass_renders_as_its_str_as_jinja_renders_it(value: str) -> None:
    # Jinja outputs str(value): a str-mixin enum (3.11) or a subclass with its own __str__
    # shows that, not the characters it holds.
    source = "Priority: {{ x }}."
    pieces = text_and_names(source)
    assert pieces is not None
    assert fill(pieces, {"x": value}) == jinja_render(source, {"x": value})


@pytest.mark.parametrize(
    "source",
    ["", "\n", "ping", "ping\n", "a\n\n", "a\r\nb\r\n", "a\rb\r", "\r\n\r\n", "{ % # }",
     "{\n{", "%}\n#}", "}}", "a {\r\n# b", "naïve — ☃\n", "Hi {{ x }}!\r\n", "{{x}}{{x}}"],
)  # fmt: skip
def test_edge_cases_render_as_jinja_does(source: str) -> None:
    pieces = text_and_names(source)
    assert pieces is not None
    assert fill(pieces, {"x": "a\r\nb"}) == jinja_render(source, {"x": "a\r\nb"})


@pytest.mark.parametrize(
    "source",
    ["a {% raw %}{% endraw %}", "{# c #}", "{{", "{%", "{#", "x\r\n{{ y.z }}", "{{- x }}",
     "{{ x -}}", "{{ range }}", "{{ self }}", "{{ true }}", "{{{ x }}", "{{ x }", "{{ é }}"],
)  # fmt: skip
def test_any_other_syntax_goes_to_jinja(source: str) -> None:
    assert text_and_names(source) is None


def test_the_names_jinja_does_not_read_from_the_variables_include_the_sandbox_globals() -> None:
    assert set(_jinja.PromptSandbox().globals) <= rendering._NOT_VARIABLES


def test_a_compiled_template_renders_as_jinja_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    engine = TemplateEngine(tmp_path, [])
    origin = TextOrigin("agent.yaml", 7, 13, "")
    given = {"ticket": {"id": 7, "tags": ["a"]}}
    for source in [
        "Classify this ticket.\r\nReply in one word.\n",
        "Use {braces} and 100%.",
        "Ticket:\n{{ ticket }}\n",
        "T: {{ ticket.id }}",
    ]:
        template = engine.compile(source, origin=origin, declared={"ticket"})
        assert template.render(given) == jinja_render(source, given)
        # From the compile cache (a pickle): the same.
        assert pickle.loads(pickle.dumps(template)).render(given) == jinja_render(source, given)


def test_a_name_not_given_fails_as_jinja_says_where(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    engine = TemplateEngine(tmp_path, [])
    template = engine.compile(
        "Hello.\nTicket: {{ ticket }}",
        origin=TextOrigin("agent.yaml", 7, 13, ""),
        declared={"ticket"},
    )
    with pytest.raises(TemplateRenderError) as caught:
        template.render({})
    assert "'ticket' is undefined" in str(caught.value)
    assert caught.value.position is not None
