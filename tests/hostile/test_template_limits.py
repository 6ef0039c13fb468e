"""A template cannot make the runner build a huge value or run without end: a repository's
prompt (or an http tool's URL template) rendering inputs and model output pads, repeats,
joins and formats within ``MAX_BUILT`` characters, and is refused before it allocates more;
a render that runs past its time (loops in loops, a macro calling itself twice) is refused.

Before, ``'%999999999s' % x``, ``'{:999999999}'.format(x)``, ``x.ljust(10**9)``,
``x|center(10**9)`` each built a gigabyte, and the multiplying ones (``sep.join``,
``replace``, a field named many times) far more. The payloads here ask for just over the
bound, so that the sandbox failing to refuse them would cost tens of megabytes, not the
machine.
"""

from __future__ import annotations

import json
import random
import time
from pathlib import Path
from typing import Any

import pytest
from jinja2 import StrictUndefined
from jinja2.exceptions import SecurityError
from jinja2.sandbox import ImmutableSandboxedEnvironment

from openprogram_yaml.compile._jinja import PromptSandbox, SnapshotLoader
from openprogram_yaml.compile._template_sizes import MAX_BUILT, printf_size
from openprogram_yaml.compile.rendering import CompiledTemplate, TemplateRenderError
from openprogram_yaml.compile.templates import TemplateEngine
from openprogram_yaml.spec.positions import TextOrigin

OVER = MAX_BUILT + 1
#: Each item of a text this long, joined or replaced this many times, is just over the bound.
LONG, TIMES = 8193, 8193


def variables() -> dict[str, Any]:
    return {
        "x": "abc",
        "long": "a" * LONG,
        "lines": "a\n" * LONG,
        "items": [1, 2],
        "data": {"k": 1, "name": "Ann"},
    }


def compile_text(tmp_path: Path, source: str) -> CompiledTemplate:
    engine = TemplateEngine(tmp_path)
    return engine.compile(
        source, origin=TextOrigin("agent.yaml", 4, 13, ""), declared=set(variables())
    )


HUGE = [
    # printf-style: the operator and the filter, widths, precisions, '*', keys with brackets
    f"{{{{ '%{OVER}s' % x }}}}",
    f"{{{{ '%0{OVER}d' % 1 }}}}",
    f"{{{{ '%.{OVER}f' % 1.5 }}}}",
    f"{{{{ '%*d' % ({OVER}, 1) }}}}",
    f"{{{{ '%*d' % (-{OVER}, 1) }}}}",
    f"{{{{ '%(a(b))-{OVER}s' % {{'a(b)': 1}} }}}}",
    f"{{{{ '%{OVER}s'|format(x) }}}}",
    f"{{{{ '%(k){OVER}s'|format(k=x) }}}}",
    f"{{{{ ('%(a)s' * {TIMES}) % {{'a': long}} }}}}",
    f"{{{{ ('%s' * {TIMES}) % ((long,) * {TIMES}) }}}}",
    # str.format and format_map: widths, nested widths, a field named many times
    f"{{{{ '{{:{OVER}}}'.format(x) }}}}",
    f"{{{{ '{{:.{OVER}f}}'.format(1.5) }}}}",
    f"{{{{ '{{:{{}}}}'.format(x, {OVER}) }}}}",
    f"{{{{ '{{a:>{OVER}}}'.format_map({{'a': x}}) }}}}",
    f"{{{{ ('{{0}}' * {TIMES}).format(long) }}}}",
    f"{{{{ (('{{0}}' * {TIMES})|safe).format(long) }}}}",
    # str methods that pad, repeat or join
    f"{{{{ x.ljust({OVER}) }}}}",
    f"{{{{ x.rjust({OVER}, '-') }}}}",
    f"{{{{ x.center({OVER}) }}}}",
    f"{{{{ x.zfill({OVER}) }}}}",
    f"{{{{ '\t'.expandtabs({OVER}) }}}}",
    f"{{{{ ('\t' * {TIMES}).expandtabs({LONG}) }}}}",
    "{{ long.replace('a', long) }}",
    "{{ long.replace('', long) }}",
    "{{ long.translate({97: long}) }}",
    "{{ long.join(long) }}",
    f"{{{{ (x|safe).ljust({OVER}) }}}}",
    "{{ (long|safe).join(long) }}",
    "{{ (long|safe).replace('a', long) }}",
    "{% set f = long.join %}{{ f(long) }}",
    # filters that pad, repeat or join, called directly or through map
    f"{{{{ x|center({OVER}) }}}}",
    f"{{{{ x|center(width={OVER}) }}}}",
    f"{{{{ lines|indent({LONG}) }}}}",
    "{{ lines|indent(long, blank=true) }}",
    "{{ long|wordwrap(1, wrapstring=long) }}",
    "{{ long|replace('a', long) }}",
    "{{ long|join(long) }}",
    f"{{{{ ([data] * {TIMES})|join(long, attribute='name') }}}}",
    f"{{{{ items|batch({OVER}, 'x')|list }}}}",
    f"{{{{ items|slice({OVER})|list }}}}",
    f"{{{{ items|map('center', {OVER})|list }}}}",
    f"{{{{ items|tojson(indent={OVER}) }}}}",
    f"{{{{ [[[[[1]]]]]|tojson(indent={MAX_BUILT // 4}) }}}}",
    # a list of few, long items repeated, then shown or joined
    f"{{{{ [long] * {TIMES} }}}}",
    f"{{{{ ([long] * {TIMES})|join }}}}",
    # the text a template, a macro or a block puts together, and what + and ~ build
    f"{{% for i in range({TIMES}) %}}{{{{ long }}}}{{% endfor %}}",
    f"{{% for i in range({TIMES}) %}}{{{{ long|upper }}}}{{% endfor %}}",
    f"{{% macro m() %}}{{% for i in range({TIMES}) %}}{{{{ long|upper }}}}{{% endfor %}}"
    "{% endmacro %}{{ m()|length }}",
    f"{{% set b %}}{{% for i in range({TIMES}) %}}{{{{ long }}}}{{% endfor %}}{{% endset %}}",
    f"{{% filter upper %}}{{% for i in range({TIMES}) %}}{{{{ long }}}}{{% endfor %}}"
    "{% endfilter %}",
    "{% set ns = namespace(s=long) %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}"
    "{% endfor %}",
    "{% set ns = namespace(s=long) %}{% for i in range(40) %}{% set ns.s = ns.s + ns.s %}"
    "{% endfor %}",
    "{% set ns = namespace(s=[1]) %}{% for i in range(40) %}{% set ns.s = ns.s + ns.s %}"
    "{% endfor %}",
]


@pytest.mark.parametrize("payload", HUGE)
def test_a_template_building_a_huge_value_is_refused(tmp_path: Path, payload: str) -> None:
    with pytest.raises(TemplateRenderError) as caught:
        compile_text(tmp_path, payload).render(variables())
    message = str(caught.value)
    assert "sandbox refused it" in message, message
    assert f"more than {MAX_BUILT} characters" in message or "more than 1000000" in message


# What prompt authors write renders exactly as Jinja's own sandbox renders it.
EVERYDAY = [
    "{{ '%s, %s!' % (x, data.name) }}",
    "{{ '%5.2f|%-6s|%%|%x|%r|%a' % (3.14159, x, 255, x, 'é') }}",
    "{{ '%(name)s is %(k)03d' % data }}",
    "{{ '%s' % items }}",
    "{{ '%*d|%-*s|%.*f' % (5, 42, 4, x, 2, 1.0) }}",
    "{{ 10 % 3 }} {{ 7.5 % 2 }}",
    "{{ '%s!'|format(x) }} {{ '%(a)s'|format(a=x) }}",
    "{{ '{} and {}'.format(x, 1) }}",
    "{{ '{:>10}|{:.3}|{:,}|{:08.3f}'.format(x, 'abcdef', 1234567, 3.14159) }}",
    "{{ '{0[k]} {0[name]}'.format(data) }} {{ '{name}'.format_map(data) }}",
    "{{ '{:{}}'.format(x, 7) }}|{{ ('{}'|safe).format('<b>') }}",
    "{{ x.ljust(6, '.') }}|{{ x.rjust(6) }}|{{ x.center(7, '*') }}|{{ '42'.zfill(5) }}",
    "{{ 'a\tb'.expandtabs(4) }}|{{ x.replace('b', 'BB') }}|{{ x.replace('', '-', 2) }}",
    "{{ x.translate({97: 'AA', 98: none}) }}|{{ ', '.join(['a', 'b']) }}|{{ '-'.join(x) }}",
    "{{ x|center(9) }}|{{ x|center }}|{{ lines[:6]|indent(2) }}",
    "{{ 'a\nb'|indent('> ', first=true) }}",
    "{{ 'a\n\nb'|indent(2, blank=true) }}|{{ 'one two three four'|wordwrap(7) }}",
    "{{ 'one two three'|wordwrap(5, wrapstring='|', break_long_words=false) }}",
    "{{ x|replace('b', 'BB') }}|{{ x|replace('a', '', 1) }}",
    "{{ items|join(', ') }}|{{ items|join }}",
    "{{ [data, data]|join(', ', attribute='name') }}|{{ range(3)|join('-') }}",
    "{{ items|batch(3, 0)|list }}|{{ range(5)|batch(2)|list }}|{{ range(5)|slice(2)|list }}",
    "{{ range(5)|slice(3, 'x')|list }}|{{ items|map('center', 5)|list }}",
    "{{ data|tojson }}|{{ items|tojson(indent=2) }}|{{ {'a': [1, {'b': 'é<'}]}|tojson(4) }}",
    "{{ [x] * 3 }}|{{ ('ab', 1) * 2 }}|{{ x * 2 }}",
    "{% macro m(a) %}<{{ a }}>{% endmacro %}{% set b %}[{{ m(x) }}]{% endset %}{{ b }}",
    "{% for i in items %}{{ loop.index }}{{ i }}{% endfor %}",
    "{{ (x|safe).ljust(5) }}|{{ ('<'|safe).join(['a', '&']) }}|{{ (x|safe).replace('a', '<') }}",
    "{{ ([data.missing] * 2)|length }}",
    "{% for i in items %}{{ loop.index }}/{{ loop.length }}{{ loop.last }}{% endfor %}",
    "{% for i in range(4) %}{{ loop.revindex }}{{ loop.previtem|default('-') }}"
    "{{ loop.nextitem|default('-') }}"
    "{{ loop.changed(i // 2) }}{{ loop.cycle('a', 'b') }}{% endfor %}",
    "{% for a in [] %}{% else %}empty{% endfor %}|{% for k, v in data.items() if v %}{{ k }}"
    "{% else %}none{% endfor %}",
    "{% for i in [[1, [2]], [3]] recursive %}{% if i is iterable %}{{ loop(i) }}{% else %}"
    "{{ loop.depth }}:{{ i }}{% endif %}{% endfor %}",
    "{{ x ~ 1 ~ none ~ items }}|{{ 1 + 2 }}|{{ x + 'd' }}|{{ items + [3] }}|{{ (1,) + (2,) }}",
    "{% autoescape true %}{{ '<' ~ x }}{{ ('<'|safe) ~ '>' }}{% endautoescape %}",
    "{% macro m(a) %}[{{ a }}]{% endmacro %}{% macro c() %}<{{ caller() }}>{% endmacro %}"
    "{{ m(1) }}{% call c() %}in {{ x }}{% endcall %}{% filter upper %}f{{ x }}{% endfilter %}",
    "{% set ns = namespace(s='') %}{% for i in items %}{% set ns.s = ns.s ~ i %}{% endfor %}"
    "{{ ns.s }}",
]


def _jinja_sandbox() -> ImmutableSandboxedEnvironment:
    env = ImmutableSandboxedEnvironment(
        undefined=StrictUndefined, autoescape=False, keep_trailing_newline=True
    )
    env.filters["tojson"] = lambda value, indent=None: (
        json.dumps(value, ensure_ascii=False, separators=(",", ":"))
        if indent is None
        else json.dumps(value, ensure_ascii=False, indent=indent)
    )
    return env


@pytest.mark.parametrize("source", EVERYDAY)
def test_everyday_templates_render_as_jinjas_sandbox_renders_them(
    tmp_path: Path, source: str
) -> None:
    expected = _jinja_sandbox().from_string(source).render(variables())
    assert compile_text(tmp_path, source).render(variables()) == expected


_CONVERSIONS = "sdifeEgGxXorac%"
_VALUES: list[Any] = [0, -7, 255, 3.5, -1e300, 1e-300, "", "abc", "é\x00\U0001f600", [1, "a"], None]


def _random_format(rng: random.Random) -> tuple[str, Any]:
    """A printf format and arguments Python accepts (or rejects: both are fine)."""
    parts: list[str] = []
    args: list[Any] = []
    for _ in range(rng.randint(0, 4)):
        parts.append(rng.choice(["", "x", "%%", " - "]))
        spec = "%" + "".join(rng.sample("-+ #0", rng.randint(0, 2)))
        if rng.random() < 0.3:
            spec += "*"
            args.append(rng.randint(-40, 40))
        elif rng.random() < 0.6:
            spec += str(rng.randint(0, 40))
        if rng.random() < 0.5:
            if rng.random() < 0.3:
                spec += ".*"
                args.append(rng.randint(0, 40))
            else:
                spec += f".{rng.randint(0, 40)}"
        spec += rng.choice(["", "", "l", "h"]) + rng.choice(_CONVERSIONS)
        parts.append(spec)
        if not spec.endswith("%"):
            args.append(rng.choice(_VALUES))
    return "".join(parts), tuple(args)


def test_printf_size_is_never_below_what_python_builds() -> None:
    rng = random.Random(2026)
    checked = 0
    for _ in range(4000):
        fmt, args = _random_format(rng)
        try:
            text = fmt % args
        except (TypeError, ValueError, OverflowError):
            continue
        assert printf_size(fmt, args) >= len(text), (fmt, args)
        checked += 1
    assert checked > 1000


@pytest.mark.parametrize(
    ("fmt", "args"),
    [
        ("%(a)s and %(a)r, %(b)5.2f", {"a": "é\x00", "b": 1.0}),
        ("%(a(b))s|%((x))9s", {"a(b)": 1, "(x)": 2}),
        ("%s", ("abc",)),
        ("%s", "abc"),
        ("%s %s", ("a" * 50, [1, 2])),
        ("%c%c", (65, "é")),
        ("%a", "\U0001f600" * 10),
    ],
)
def test_printf_size_bounds_mappings_keys_and_single_values(fmt: str, args: Any) -> None:
    assert printf_size(fmt, args) >= len(fmt % args)


RUNS_LONG = {
    "loops in loops": "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}"
    "{% endfor %}",
    "a recursive loop": "{% for i in range(1000) recursive %}{% if loop.depth < 5 %}"
    "{{ loop(range(1000)) }}{% endif %}{% endfor %}",
    "a macro calling itself twice": "{% macro f(n) %}{% if n %}{{ f(n - 1) }}{{ f(n - 1) }}"
    "{% endif %}{% endmacro %}{{ f(60) }}",
    "an include included twice at each level": "{% include 'level0' %}",
}
#: Each level includes the next twice: 2**40 renders, and not one loop or call.
LEVELS = {
    f"level{i}": f"{{% include 'level{i + 1}' %}}{{% include 'level{i + 1}' %}}" for i in range(40)
}


def _timed_sandbox(seconds: float) -> PromptSandbox:
    return PromptSandbox(loader=SnapshotLoader({**LEVELS, "level40": "."}), render_seconds=seconds)


@pytest.mark.parametrize("source", RUNS_LONG.values(), ids=RUNS_LONG.keys())
def test_a_render_that_runs_past_its_time_is_refused(source: str) -> None:
    template = _timed_sandbox(0.2).from_string(source)
    started = time.monotonic()
    with pytest.raises(SecurityError, match=r"ran for more than 0\.2 seconds"):
        template.render()
    assert time.monotonic() - started < 5
    # The deadline belongs to that render: the next one starts with its own.
    assert (
        _timed_sandbox(0.2).from_string("{% for i in range(3) %}{{ i }}{% endfor %}").render()
        == "012"
    )


def test_the_default_time_is_long_enough_for_a_large_prompt(tmp_path: Path) -> None:
    source = "{% for i in range(100000) %}{{ i }} {% endfor %}"
    assert len(compile_text(tmp_path, source).render(variables())) == 588890
