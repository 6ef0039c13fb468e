"""A template with no Jinja syntax renders as its text without Jinja (``plain_text``): the
same text Jinja renders, on a seeded corpus of edge cases, and Jinja for everything else."""

from __future__ import annotations

import pickle
import random
from pathlib import Path

import pytest

from openprogram_yaml.compile import _jinja
from openprogram_yaml.compile.rendering import plain_text
from openprogram_yaml.compile.templates import TemplateEngine
from openprogram_yaml.spec.positions import TextOrigin

PIECES = [
    "plain", " ", "\n", "\n\n", "\r\n", "\r", "\t", "{", "}", "%", "#", "{ x }", "{}",
    "{%", "%}", "{{", "}}", "{#", "#}", "{-", "-}", "{+", "é", "日本語", "🙂", "\u2028",
    "\u0085", "\x0b", "\x0c", "\x00", "\\", "'", '"', "{{ x }}", "{% if x %}a{% endif %}",
    "{# c #}", "## line", "# not a comment", "%% x", "$", "${x}", "<b>&amp;</b>",
]  # fmt: skip


def jinja_render(source: str) -> str:
    return _jinja.PromptSandbox().from_string(source).render({})


def test_plain_text_is_what_jinja_renders() -> None:
    rng = random.Random(1217)
    taken = 0
    for _ in range(3000):
        source = "".join(rng.choice(PIECES) for _ in range(rng.randint(0, 10)))
        fast = plain_text(source)
        if fast is None:
            continue
        taken += 1
        assert fast == jinja_render(source), repr(source)
    assert taken > 300


@pytest.mark.parametrize(
    "source",
    ["", "\n", "ping", "ping\n", "a\n\n", "a\r\nb\r\n", "a\rb\r", "\r\n\r\n", "{ % # }",
     "{\n{", "%}\n#}", "}}", "a {\r\n# b", "naïve — ☃\n"],
)  # fmt: skip
def test_edge_cases_render_as_jinja_does(source: str) -> None:
    assert plain_text(source) == jinja_render(source)


@pytest.mark.parametrize(
    "source", ["{{ x }}", "a {% raw %}{% endraw %}", "{# c #}", "{{", "{%", "{#", "x\r\n{{ y }}"]
)
def test_any_jinja_opener_goes_to_jinja(source: str) -> None:
    assert plain_text(source) is None


def test_a_compiled_plain_template_renders_as_jinja_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    engine = TemplateEngine(tmp_path, [])
    origin = TextOrigin("agent.yaml", 7, 13, "")
    for source in ["Classify this ticket.\r\nReply in one word.\n", "Use {braces} and 100%."]:
        template = engine.compile(source, origin=origin, declared={"ticket"})
        assert template.render({"ticket": "x"}) == jinja_render(source)
        # From the compile cache (a pickle): the same.
        assert pickle.loads(pickle.dumps(template)).render({}) == jinja_render(source)
    with_syntax = engine.compile("T: {{ ticket }}\r\n", origin=origin, declared={"ticket"})
    assert with_syntax.render({"ticket": "x"}) == "T: x\n"
