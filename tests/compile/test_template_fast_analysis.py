"""The shortcut for text-and-{{ name }} templates finds exactly what Jinja's own analysis
finds, on a seeded corpus, and steps aside for everything else."""

from __future__ import annotations

import random

from openprogram_yaml.compile import _jinja, _jinja_analysis

PIECES = [
    "Ticket: ", "{{ ticket }}", "{{name}}", "{{- tone -}}", "\n", " and ", "}} ", "{ x }",
    "{{ ticket }}{{ ticket }}", "{{ true }}", "{{ range }}", "{{ x.y }}", "{{ x|upper }}",
    "{% if a %}a{% endif %}", "{# note #}", "{{ }}", "{{ a", "\r\n", "plain",
]  # fmt: skip


def test_the_shortcut_agrees_with_jinja_or_steps_aside() -> None:
    env = _jinja.PromptSandbox()
    rng = random.Random(1130)
    taken = 0
    for _ in range(1500):
        source = "".join(rng.choice(PIECES) for _ in range(rng.randint(0, 8)))
        fast = _jinja_analysis.simple_analysis(env, source)
        if fast is None:
            continue
        taken += 1
        assert fast == _jinja_analysis.analyze(env, source, "t", "t"), source
    assert taken > 100


def test_anything_beyond_names_goes_to_jinja() -> None:
    env = _jinja.PromptSandbox()
    for source in ["{{ x|upper }}", "{{ x.y }}", "{% if x %}{% endif %}", "{{ true }}",
                   "{{ range }}", "{# c #}", "{{ x", "a\rb {{ x }}"]:  # fmt: skip
        assert _jinja_analysis.simple_analysis(env, source) is None, source
