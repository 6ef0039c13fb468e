"""An http tool's URL template: rendered so that ``safe_urls.build_url`` can tell the
template's own text from the values put into it.

The template is checked like any other (``templates.TemplateEngine``); rendering uses the
same sandbox with two changes: every expression's output goes through ``safe_urls.mark``
(percent-encoded and fenced), and ``urlencode`` encodes ``/`` too and marks its result as
already encoded, so ``{{ id | urlencode }}`` means what ``{{ id }}`` does and nothing is
encoded twice. Its generated code is never written to the template code cache: a URL may
hold a key read with ``${env:…}``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from openprogram_yaml.compile.rendering import CompiledTemplate, TemplateRenderError

if TYPE_CHECKING:
    from jinja2 import Template

__all__ = ["UrlTemplate"]


@dataclass(frozen=True, eq=False, slots=True)
class UrlTemplate:
    """A checked URL template; ``render_url`` returns the URL with its values fenced."""

    template: CompiledTemplate
    _built: list[Template] = field(default_factory=list, repr=False)

    def __reduce__(self) -> tuple[type[UrlTemplate], tuple[object, ...]]:
        return UrlTemplate, (self.template,)

    @property
    def source(self) -> str:
        return self.template.source

    @property
    def variables(self) -> frozenset[str]:
        return self.template.variables

    def render_url(self, variables: Mapping[str, Any], /) -> str:
        """The URL with every value encoded and fenced (see ``safe_urls.build_url``)."""
        try:
            return self._jinja_template().render(variables)
        except Exception as exc:  # translated at the boundary, like CompiledTemplate.render
            raise TemplateRenderError(
                f"{type(exc).__name__}: {exc}", template=self.template.name, position=None
            ) from exc

    def _jinja_template(self) -> Template:
        if not self._built:
            from openprogram_yaml import safe_urls
            from openprogram_yaml.compile import _jinja

            t = self.template
            env = _jinja.PromptSandbox(
                loader=_jinja.SnapshotLoader(t._sources, root=(t.name, t.source, t.origin.path)),
                links=t._links,
            )
            # Both are read when the code is generated, which happens below, after this.
            env.finalize = safe_urls.mark
            env.filters["urlencode"] = safe_urls.urlencode
            self._built.append(env.get_template(t.name))
        return self._built[0]
