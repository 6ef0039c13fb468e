"""What the compiler learns from a template's syntax tree: the names it reads, the templates
it pulls in, and what it refuses, each with its line. Rendering does not need this module.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from jinja2 import TemplateSyntaxError, nodes
from jinja2.compiler import CodeGenerator, Frame
from jinja2.idtracking import VAR_LOAD_ALIAS, VAR_LOAD_RESOLVE

from ._jinja import PromptSandbox

__all__ = [
    "Analysis",
    "Read",
    "Reference",
    "TemplateSyntaxError",
    "TemplateTooDeep",
    "analyze",
    "simple_analysis",
    "unsafe_attribute_message",
]


@dataclass(frozen=True, slots=True)
class Read:
    """A name a template reads from its render context (not one it sets itself)."""

    name: str
    line: int
    #: Which use of ``name`` on its line this is (0 = first), counting every variable use,
    #: local or not, in source order; ``name_uses`` holds how many there are.
    ordinal: int
    name_uses: int


@dataclass(frozen=True, slots=True)
class Reference:
    """An ``include``, ``import`` / ``from … import`` or ``extends`` of another template."""

    kind: str  # "include" | "import" | "extends"
    name: str | None  # None: the name is computed, not a string literal
    line: int
    with_context: bool
    ignore_missing: bool
    local_names: frozenset[str]  # the includer's variables the other template also sees


@dataclass(frozen=True, slots=True)
class Analysis:
    """What one template reads, pulls in and refuses, learnt from its syntax tree."""

    reads: tuple[Read, ...]
    references: tuple[Reference, ...]
    failures: tuple[tuple[int, str], ...]  # (line, message): unknown filters and the like
    top_level: frozenset[str]  # names set at the top level, visible to blocks and macros


class _Analyzer(CodeGenerator):
    """Runs Jinja's code generator without output to learn which names come from the context.

    ``jinja2.meta.find_undeclared_variables`` does the same but keeps neither line numbers
    nor scopes; here each read is recorded at the ``Name`` node, where Jinja's own symbol
    tables say whether it is a local (loop variable, ``set``, macro argument …) or a context
    lookup.
    """

    def __init__(
        self, environment: PromptSandbox, name: str, filename: str, tree: nodes.Template
    ) -> None:
        super().__init__(environment, name, filename)
        self.uses = _name_uses(tree)
        self.reads: list[Read] = []
        self.references: list[Reference] = []
        self.failures: list[tuple[int, str]] = []

    def write(self, x: str) -> None:
        """Generate nothing."""

    def fail(self, msg: str, lineno: int) -> None:  # type: ignore[override]
        # Keep going so that every problem of the template is reported in one run.
        self.failures.append((lineno, msg))

    def visit_Name(self, node: nodes.Name, frame: Frame) -> None:
        if node.ctx == "load":
            self._note_read(node, frame)
        super().visit_Name(node, frame)

    def visit_NSRef(self, node: nodes.NSRef, frame: Frame) -> None:
        self._note_read(node, frame)
        super().visit_NSRef(node, frame)

    def visit_Include(self, node: nodes.Include, frame: Frame) -> None:
        self._note_reference("include", node, frame, node.with_context, node.ignore_missing)
        super().visit_Include(node, frame)

    def visit_Import(self, node: nodes.Import, frame: Frame) -> None:
        self._note_reference("import", node, frame, node.with_context, False)
        super().visit_Import(node, frame)

    def visit_FromImport(self, node: nodes.FromImport, frame: Frame) -> None:
        self._note_reference("import", node, frame, node.with_context, False)
        super().visit_FromImport(node, frame)

    def visit_Extends(self, node: nodes.Extends, frame: Frame) -> None:
        self._note_reference("extends", node, frame, True, False)
        super().visit_Extends(node, frame)

    def _note_read(self, node: nodes.Name | nodes.NSRef, frame: Frame) -> None:
        name = node.name
        ref = frame.symbols.find_ref(name)
        if ref is None:
            return
        load = frame.symbols.find_load(ref)
        while load is not None and load[0] == VAR_LOAD_ALIAS:
            load = frame.symbols.find_load(load[1])
        resolved = load is not None and load[0] == VAR_LOAD_RESOLVE
        if resolved and name not in self.environment.globals:
            ordinal, count = self.uses.get(id(node), (0, 0))
            self.reads.append(Read(name, node.lineno, ordinal, count))

    def _note_reference(
        self,
        kind: str,
        node: nodes.Include | nodes.Import | nodes.FromImport | nodes.Extends,
        frame: Frame,
        with_context: bool,
        ignore_missing: bool,
    ) -> None:
        target = node.template
        name = target.value if isinstance(target, nodes.Const) else None
        stores = frame.symbols.dump_stores() if with_context else {}
        self.references.append(
            Reference(
                kind=kind,
                name=name if isinstance(name, str) else None,
                line=node.lineno,
                with_context=with_context,
                ignore_missing=ignore_missing,
                local_names=frozenset(stores),
            )
        )


def _top_level_names(tree: nodes.Template) -> frozenset[str]:
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, (nodes.Assign, nodes.AssignBlock)):
            names.update(n.name for n in node.target.find_all(nodes.Name))
            if isinstance(node.target, nodes.Name):
                names.add(node.target.name)
        elif isinstance(node, nodes.Macro):
            names.add(node.name)
        elif isinstance(node, nodes.Import):
            names.add(node.target)
        elif isinstance(node, nodes.FromImport):
            names.update(n if isinstance(n, str) else n[1] for n in node.names)
    return frozenset(names)


def _source_order(node: nodes.Node) -> list[nodes.Node]:
    """Children in the order they are written, where Jinja's field order differs."""
    if isinstance(node, nodes.CondExpr):  # a if b else c
        parts: list[Any] = [node.expr1, node.test, node.expr2]
    elif isinstance(node, nodes.For):  # for t in it if test … else …
        parts = [node.target, node.iter, node.test, *node.body, *node.else_]
    elif isinstance(node, nodes.FilterBlock):
        parts = [node.filter, *node.body]
    elif isinstance(node, nodes.CallBlock):
        parts = [*node.args, *node.defaults, node.call, *node.body]
    else:
        return list(node.iter_child_nodes())
    return [p for p in parts if isinstance(p, nodes.Node)]


def _name_uses(tree: nodes.Template) -> dict[int, tuple[int, int]]:
    """For each variable use (by node id): its ordinal among same-name uses on its line, and
    how many such uses the line has."""
    by_line: dict[tuple[int, str], list[int]] = {}
    pending: list[nodes.Node] = [tree]
    while pending:
        node = pending.pop()
        if isinstance(node, (nodes.Name, nodes.NSRef)):
            by_line.setdefault((node.lineno, node.name), []).append(id(node))
        pending.extend(reversed(_source_order(node)))
    return {
        node_id: (ordinal, len(ids))
        for ids in by_line.values()
        for ordinal, node_id in enumerate(ids)
    }


# Jinja takes "+" after "{{" but not before "}}" ("x +}}" is an unfinished "x + ...").
_SIMPLE_OUTPUT = re.compile(r"\{\{[-+]?\s*([A-Za-z_][A-Za-z0-9_]*)\s*-?\}\}")
#: Keywords, and ``self``: the template itself in Jinja, never read from the context.
_NOT_VARIABLES = frozenset(
    {"and", "or", "not", "in", "is", "if", "else", "true", "false", "none", "True", "False",
     "None", "self"}
)  # fmt: skip


def simple_analysis(environment: PromptSandbox, source: str) -> Analysis | None:
    """The analysis of a template made only of text and ``{{ name }}`` outputs, without
    running Jinja's parser and code generator; None for anything else.

    Most prompts are just that, and a repository has one per method: this keeps checking
    it cheap. Anything unusual (tags, comments, filters, globals, keywords) is None, and
    ``analyze`` decides.
    """
    # "{{{ x }}" opens at the first brace: Jinja reads "{ x }" there, a dict.
    if "{%" in source or "{#" in source or "\r" in source or "{{{" in source:
        return None
    matches = list(_SIMPLE_OUTPUT.finditer(source))
    if len(matches) != source.count("{{"):
        return None
    reads: list[tuple[str, int]] = []
    line, counted = 1, 0  # the lines are counted on from one name to the next
    for match in matches:
        name = match.group(1)
        if name in _NOT_VARIABLES or name in environment.globals:
            return None
        # The line of the name, as Jinja counts it: "{{" may end the line before it.
        line += source.count("\n", counted, match.start(1))
        counted = match.start(1)
        reads.append((name, line))
    per_line: dict[tuple[int, str], int] = {}
    for name, line in reads:
        per_line[(line, name)] = per_line.get((line, name), 0) + 1
    seen: dict[tuple[int, str], int] = {}
    out: list[Read] = []
    for name, line in reads:
        ordinal = seen.get((line, name), 0)
        seen[(line, name)] = ordinal + 1
        out.append(Read(name, line, ordinal, per_line[(line, name)]))
    return Analysis(reads=tuple(out), references=(), failures=(), top_level=frozenset())


def analyze(environment: PromptSandbox, source: str, name: str, filename: str) -> Analysis:
    """Parse ``source`` and find what it reads and references.

    Raises TemplateSyntaxError, or TemplateTooDeep for nesting Jinja or Python cannot take.
    """
    try:
        tree = environment.parse(source, name, filename)
        unsafe = _check_shape(tree, source)
        analyzer = _Analyzer(environment, name, filename, tree)
        analyzer.visit(tree)
    except RecursionError:
        # Jinja's parser recurses once per level of nesting: 10,000 "(" end here.
        raise TemplateTooDeep(*_deepest_point(source, 1)) from None
    return Analysis(
        reads=tuple(analyzer.reads),
        references=tuple(analyzer.references),
        failures=(*analyzer.failures, *unsafe),
        top_level=_top_level_names(tree),
    )


# --- nesting and attributes the sandbox refuses -------------------------------------------------

#: Block tags nest at most this deep: Python refuses the code Jinja makes of deeper ones
#: (at most 20 nested loops, 100 levels of indentation).
MAX_BLOCK_DEPTH = 20
#: An expression nests at most this deep: Jinja's parser recurses about 15 frames per level
#: (70 levels exhaust Python's stack), and rendering parses again from a deeper stack.
MAX_EXPRESSION_DEPTH = 40

_BLOCKS = (
    nodes.For,
    nodes.If,
    nodes.With,
    nodes.FilterBlock,
    nodes.CallBlock,
    nodes.Macro,
    nodes.Block,
    nodes.AssignBlock,
    nodes.Scope,
    nodes.OverlayScope,
    nodes.EvalContextModifier,
)
#: Tags that open a block (``set`` opens one only without ``=``: the scan leaves it out).
_BLOCK_TAGS = frozenset({"for", "if", "with", "filter", "call", "macro", "block", "autoescape"})


class TemplateTooDeep(Exception):
    """A template nests deeper than it can be compiled and rendered; ``line``/``col`` where."""

    def __init__(self, line: int, col: int) -> None:
        self.line = line
        self.col = col
        super().__init__(
            f"template nests too deeply: at most {MAX_BLOCK_DEPTH} block tags inside one "
            f"another, and {MAX_EXPRESSION_DEPTH} levels of brackets, filters or operators "
            "in one expression"
        )


def unsafe_attribute_message(name: str) -> str:
    """The failure for reading attribute ``name``, which the sandbox refuses at render time."""
    return (
        f"template reads attribute {name!r}, which the sandbox refuses; templates read data "
        "(inputs, vars), not Python internals"
    )


def _check_shape(tree: nodes.Template, source: str) -> list[tuple[int, str]]:
    """Raise TemplateTooDeep for nesting too deep; return the attribute reads the sandbox
    would refuse (names starting with ``__``, or ``_`` through the ``attr`` filter), as
    failures. One iterative walk: the tree may be deep, the check must not recurse."""
    unsafe: list[tuple[int, str]] = []
    pending: list[tuple[nodes.Node, int, int]] = [(tree, 0, 0)]
    while pending:
        node, blocks, expression = pending.pop()
        if isinstance(node, nodes.Expr):
            expression += 1
            if expression > MAX_EXPRESSION_DEPTH:
                raise TemplateTooDeep(*_deepest_point(source, node.lineno))
            name = _constant_attribute(node)
            if name is not None:
                unsafe.append((node.lineno, unsafe_attribute_message(name)))
        else:
            expression = 0
        if isinstance(node, _BLOCKS):
            blocks += 1
            if blocks > MAX_BLOCK_DEPTH:
                raise TemplateTooDeep(*_deepest_point(source, node.lineno))
        # An elif is written beside its if, not inside it.
        elifs = {id(e) for e in node.elif_} if isinstance(node, nodes.If) else set()
        for child in node.iter_child_nodes():
            pending.append((child, blocks - (id(child) in elifs), expression))
    return unsafe


def _constant_attribute(node: nodes.Node) -> str | None:
    """The attribute name ``node`` reads, when it is written out and the sandbox refuses it."""
    if isinstance(node, nodes.Getattr):
        name: object = node.attr
    elif isinstance(node, nodes.Getitem) and isinstance(node.arg, nodes.Const):
        name = node.arg.value
    elif isinstance(node, nodes.Filter) and node.name == "attr" and node.args:
        arg = node.args[0]
        # attr() reads the attribute only, never an item: any "_" name is refused or absent.
        if isinstance(arg, nodes.Const) and isinstance(arg.value, str):
            return arg.value if arg.value.startswith("_") else None
        return None
    elif isinstance(node, (nodes.Filter, nodes.Test)):
        # map(attribute='a.b'), sort(attribute=…), selectattr('a.b'): dotted item lookups.
        given = [k.value for k in node.kwargs if k.key == "attribute"]
        if isinstance(node, nodes.Filter) and node.name in ("selectattr", "rejectattr"):
            given += node.args[:1]
        for value in given:
            if isinstance(value, nodes.Const) and isinstance(value.value, str):
                dunder = [p for p in value.value.split(".") if p.startswith("__")]
                if dunder:
                    return dunder[0]
        return None
    else:
        return None
    # x._id may be a mapping's key; x.__class__ is always the object's own attribute.
    return name if isinstance(name, str) and name.startswith("__") else None


_NESTING = re.compile(
    r"(?P<tag>\{%[-+]?\s*(?P<name>\w+))|\{\{[-+]?|[-+]?%\}|[-+]?\}\}"
    r"|(?P<open>[(\[{])|(?P<close>[)\]}])"
)


def _deepest_point(source: str, line: int) -> tuple[int, int]:
    """Where ``source`` first nests deeper than the limits, by a rough scan of its tags and
    brackets (line, column); else the first tag on ``line``."""
    blocks = brackets = 0
    inside = False
    for match in _NESTING.finditer(source):
        text = match.group()
        if match.group("tag") is not None:
            inside, brackets = True, 0
            name = match.group("name")
            if name in _BLOCK_TAGS:
                blocks += 1
            elif name.startswith("end") and name[3:] in _BLOCK_TAGS:
                blocks -= 1
        elif text.lstrip("-+").startswith(("%}", "}}")) or text.startswith("{{"):
            inside = text.startswith("{{")
            brackets = 0
        elif inside and match.group("open") is not None:
            brackets += 1
        elif inside:
            brackets -= 1
        if blocks > MAX_BLOCK_DEPTH or brackets > MAX_EXPRESSION_DEPTH:
            return _line_col(source, match.start())
    lines = source.split("\n")
    text = lines[line - 1] if 0 < line <= len(lines) else ""
    found = [p for p in (text.find("{{"), text.find("{%")) if p >= 0]
    return line, min(found, default=0) + 1


def _line_col(source: str, offset: int) -> tuple[int, int]:
    line_start = source.rfind("\n", 0, offset) + 1
    return source.count("\n", 0, offset) + 1, offset - line_start + 1
