"""The prompt sandbox holds against template injection and keeps what prompt authors need."""

from __future__ import annotations

from pathlib import Path

import pytest

from openprogram_yaml.compile.rendering import CompiledTemplate, TemplateRenderError
from openprogram_yaml.compile.templates import TemplateEngine
from openprogram_yaml.errors import ConfigError
from openprogram_yaml.spec.positions import TextOrigin

DECLARED = {"x", "items", "data"}


def variables() -> dict[str, object]:
    return {"x": "abc", "items": [1, 2], "data": {"k": 1}}


def compile_text(tmp_path: Path, source: str) -> CompiledTemplate:
    engine = TemplateEngine(tmp_path)
    return engine.compile(source, origin=TextOrigin("agent.yaml", 4, 13, ""), declared=DECLARED)


# Known server-side template injection payloads. Each either fails the load-time check
# (it reads a name no method declares: the dropped globals and Flask-style `config`) or is
# stopped by the sandbox at render time. None may render.
PAYLOADS = [
    "{{ ''.__class__.__mro__[1].__subclasses__() }}",
    "{{ ().__class__.__base__.__subclasses__() }}",
    "{{ [].__class__.__base__.__subclasses__() }}",
    "{{ {}.__class__ }}",
    "{{ x.__class__.__mro__ }}",
    "{{ x['__class__'] }}",
    "{{ x.__len__() }}",
    "{{ cycler.__init__.__globals__.os.popen('id').read() }}",
    "{{ joiner.__init__.__globals__ }}",
    "{{ lipsum.__globals__['os'].popen('id').read() }}",
    "{{ namespace.__init__.__globals__ }}",
    "{{ namespace(a=1).__class__ }}",
    "{% set ns = namespace() %}{{ ns.__init__ }}",
    "{{ self._TemplateReference__context }}",
    "{{ self.__init__.__globals__ }}",
    "{{ self.__dict__ }}",
    "{{ config }}",
    "{{ config.items() }}",
    "{{ request.application.__globals__ }}",
    "{{ url_for.__globals__ }}",
    "{{ ''|attr('__class__') }}",
    "{{ x|attr('__class__')|attr('__mro__') }}",
    "{{ x|attr('\\x5f\\x5fclass\\x5f\\x5f') }}",
    "{{ (x|attr('__class__')).__base__ }}",
    "{{ x|map(attribute='__class__')|list }}",
    "{{ [x]|map(attribute='__class__')|list }}",
    "{{ '{0.__class__}'.format(x) }}",
    "{{ '{0.__class__.__mro__}'.format(x) }}",
    "{{ '{0[__class__]}'.format(x) }}",
    "{{ '{0.__class__}'.format_map({'0': x}) }}",
    "{{ '%s'|format(x.__class__) }}",
    "{{ '%s' % x.__class__ }}",
    "{% for c in [].__class__.__base__.__subclasses__() %}{{ c }}{% endfor %}",
    "{{ ''.mro() }}",
    "{{ x.mro() }}",
    "{{ dict.mro() }}",
    "{{ dict.__mro__ }}",
    "{{ dict.__subclasses__() }}",
    "{{ dict.fromkeys }}",
    "{{ range.__self__ }}",
    "{{ range.__globals__ }}",
    "{{ range.__module__ }}",
    "{{ x.upper.__self__ }}",
    "{{ x.upper.__globals__ }}",
    "{{ x.upper|attr('__self__') }}",
    "{% if x.__class__ is defined %}leak{% endif %}",
    "{{ items.append(1) }}",
    "{{ items.pop() }}",
    "{{ data.update(a=1) }}",
    "{{ data.clear() }}",
    "{{ 'a' * 100000000 }}",
    "{{ [1] * 10000000 }}",
    "{{ 2 ** 100000000 }}",
    "{{ range(100000000)|list }}",
]


@pytest.mark.parametrize("payload", PAYLOADS)
def test_injection_payload_is_refused(tmp_path: Path, payload: str) -> None:
    given = variables()
    with pytest.raises((ConfigError, TemplateRenderError)) as caught:
        compile_text(tmp_path, payload).render(given)
    assert "Traceback" not in str(caught.value)
    assert given == variables(), "a template changed its inputs"


@pytest.mark.parametrize(
    ("payload", "name"),
    [
        ("{{ cycler.__init__.__globals__ }}", "cycler"),
        ("{{ joiner.__init__.__globals__ }}", "joiner"),
        ("{{ lipsum.__globals__ }}", "lipsum"),
        ("{{ config }}", "config"),
        ("{{ request }}", "request"),
    ],
)
def test_internal_names_fail_at_load_as_undeclared(tmp_path: Path, payload: str, name: str) -> None:
    with pytest.raises(ConfigError) as caught:
        compile_text(tmp_path, payload)
    # The dunder attributes are refused too (tests/hostile/test_files.py); the name first.
    problem = caught.value.diagnostics[0]
    assert problem.message.startswith(f"template reads {name!r}, which the method does not")


@pytest.mark.parametrize(
    "payload",
    [
        # A written-out dunder attribute is a load-time error (tests/hostile/test_files.py);
        # these are found only when the template runs.
        "{{ '{0.__class__}'.format(x) }}",
        "{{ dict.fromkeys }}",
    ],
)
def test_render_time_refusal_names_the_sandbox(tmp_path: Path, payload: str) -> None:
    with pytest.raises(TemplateRenderError) as caught:
        compile_text(tmp_path, payload).render(variables())
    message = str(caught.value)
    assert message.startswith("agent.yaml:4: ")
    assert "sandbox refused it" in message
    assert "is not allowed in templates" in message


def test_templates_cannot_change_their_inputs(tmp_path: Path) -> None:
    given = {"x": "a", "items": [1], "data": {"k": 1}}
    with pytest.raises(TemplateRenderError, match="'append'"):
        compile_text(tmp_path, "{{ items.append(2) }}").render(given)
    assert given["items"] == [1]


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("{{ x.upper() }}", "ABC"),
        ("{{ x|upper }}|{{ x|length }}", "ABC|3"),
        ("{% for k, v in data.items() %}{{ k }}={{ v }}{% endfor %}", "k=1"),
        ("{{ items|join(', ') }}", "1, 2"),
        ("{% for i in items %}{{ loop.index }}{{ loop.cycle('a', 'b') }}{% endfor %}", "1a2b"),
        ("{{ range(3)|list }}", "[0, 1, 2]"),
        ("{{ dict(a=1) }}", "{'a': 1}"),
        (
            "{% set ns = namespace(n=0) %}{% for i in items %}{% set ns.n = ns.n + i %}"
            "{% endfor %}{{ ns.n }}",
            "3",
        ),
        ("{{ '{} and {}'.format(x, 1) }}", "abc and 1"),
        ("{{ '%s!'|format(x) }}", "abc!"),
        ("{{ 'ab' * 3 }}", "ababab"),
        ("{{ 2 ** 10 }}", "1024"),
        ("{% set copy = items + [3] %}{{ copy }}", "[1, 2, 3]"),
    ],
)
def test_what_prompt_authors_need_still_works(tmp_path: Path, source: str, expected: str) -> None:
    assert compile_text(tmp_path, source).render(variables()) == expected


@pytest.mark.parametrize("name", ["cycler", "joiner", "lipsum"])
def test_risky_default_globals_are_gone(tmp_path: Path, name: str) -> None:
    with pytest.raises(ConfigError, match=f"template reads '{name}'"):
        compile_text(tmp_path, f"{{{{ {name}() }}}}")
