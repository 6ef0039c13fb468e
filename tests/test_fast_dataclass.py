"""fast_dataclass gives what dataclass(slots=True) gives: repr, equality, hashing, frozen
guards, pickling and the dataclasses helpers, on classes built both ways."""

from __future__ import annotations

import dataclasses
import pickle
import random
from dataclasses import dataclass, field
from typing import Any

import pytest

from openprogram_yaml._fast_dataclass import fast_dataclass


def pair(frozen: bool, eq: bool = True) -> tuple[type, type]:
    """The same class body, made by dataclass and by fast_dataclass."""

    def body() -> dict[str, Any]:
        return {
            "__annotations__": {
                "name": "str",
                "size": "int",
                "tags": "list[str]",
                "note": "str",
                "weight": "float",
                "seen": "int",
            },
            "size": 0,
            "tags": field(default_factory=list),
            "note": field(default="", repr=False),
            "weight": field(default=1.0, compare=False),
            "seen": field(default=0, hash=False),
            "__module__": __name__,
        }

    made = (
        dataclass(frozen=frozen, eq=eq, slots=True)(type("Stock", (), body())),
        fast_dataclass(frozen=frozen, eq=eq)(type("Stock", (), body())),
    )
    for cls in made:
        globals()[f"Stock_{frozen}_{eq}_{cls is made[1]}"] = cls  # picklable by name
        cls.__qualname__ = f"Stock_{frozen}_{eq}_{cls is made[1]}"
    return made


def values(rng: random.Random) -> dict[str, Any]:
    return {
        "name": rng.choice(["a", "b"]),
        "size": rng.choice([0, 1]),
        "tags": rng.choice([[], ["x"]]),
        "note": rng.choice(["", "n"]),
        "weight": rng.choice([1.0, 2.0]),
        "seen": rng.choice([0, 3]),
    }


def shown(obj: Any) -> str:
    return repr(obj).split("(", 1)[1]  # the class names differ on purpose


@pytest.mark.parametrize("frozen", [False, True])
@pytest.mark.parametrize("eq", [True, False])
def test_the_same_answers_as_dataclass_on_a_seeded_corpus(frozen: bool, eq: bool) -> None:
    std, fast = pair(frozen, eq)
    rng = random.Random(2026)
    for _ in range(300):
        a, b = values(rng), values(rng)
        if frozen:  # hashable values only
            a["tags"], b["tags"] = tuple(a["tags"]), tuple(b["tags"])
        s1, s2, f1, f2 = std(**a), std(**b), fast(**a), fast(**b)
        assert shown(f1) == shown(s1)
        assert (f1 == f2) == (s1 == s2)
        assert (f1 == fast(**a)) == (s1 == std(**a))
        assert (f1 == s1) is False  # another class is never equal
        if std.__hash__ is None:
            assert fast.__hash__ is None
        elif eq and frozen:
            assert (hash(f1) == hash(f2)) == (hash(s1) == hash(s2))
            assert hash(f1) == hash(s1)
        assert dataclasses.asdict(f1) == dataclasses.asdict(s1)
        assert dataclasses.replace(f1, size=9).size == 9


def test_frozen_classes_refuse_assignment_and_still_pickle() -> None:
    _, fast = pair(frozen=True)
    item = fast(name="a", tags=("x",))
    with pytest.raises(dataclasses.FrozenInstanceError):
        item.size = 3
    with pytest.raises(dataclasses.FrozenInstanceError):
        del item.name
    assert pickle.loads(pickle.dumps(item)) == item
    assert not hasattr(item, "__dict__")  # slots


def test_mutable_classes_assign_pickle_and_are_unhashable() -> None:
    _, fast = pair(frozen=False)
    item = fast(name="a")
    item.size = 3
    assert pickle.loads(pickle.dumps(item)) == item
    with pytest.raises(TypeError):
        hash(item)


def test_recursion_shows_as_dots_and_own_methods_are_kept() -> None:
    @fast_dataclass
    class Node:
        name: str
        children: list[Node] = field(default_factory=list)

    node = Node("root")
    node.children.append(node)
    assert repr(node) == "test_recursion_shows_as_dots_and_own_methods_are_kept.<locals>." + (
        "Node(name='root', children=[...])"
    )

    @fast_dataclass(frozen=True)
    class Named:
        name: str

        def __repr__(self) -> str:
            return f"<{self.name}>"

        def __eq__(self, other: object) -> bool:
            return isinstance(other, Named) and other.name.lower() == self.name.lower()

        def __hash__(self) -> int:
            return hash(self.name.lower())

    assert repr(Named("A")) == "<A>"
    assert Named("A") == Named("a") and hash(Named("A")) == hash(Named("a"))


def outcome(make: Any, *args: Any, **kwargs: Any) -> Any:
    try:
        obj = make(*args, **kwargs)
    except TypeError as exc:
        return ("TypeError", str(exc).split(".", 1)[-1])  # the class names differ
    return shown(obj)


@pytest.mark.parametrize("frozen", [False, True])
def test_init_takes_and_refuses_what_dataclass_does(frozen: bool) -> None:
    std, fast = pair(frozen)
    calls: list[tuple[tuple[Any, ...], dict[str, Any]]] = [
        (("a",), {}),
        (("a", 2), {}),
        (("a", 2, ["t"], "n", 3.0, 4), {}),
        ((), {"name": "a", "seen": 5}),
        (("a",), {"tags": ["x"], "note": "y"}),
        ((), {}),  # missing name
        (("a", 2, [], "n", 1.0, 0, "extra"), {}),  # too many
        (("a",), {"name": "b"}),  # twice
        (("a",), {"colour": "red"}),  # unknown
    ]
    for args, kwargs in calls:
        assert outcome(fast, *args, **kwargs) == outcome(std, *args, **kwargs), (args, kwargs)
    assert fast("a").tags is not fast("a").tags  # a fresh default each time


def test_several_missing_arguments_are_named_as_python_names_them() -> None:
    body = {"__annotations__": {"a": "int", "b": "int", "c": "int"}, "__module__": __name__}
    std = dataclass(frozen=True, slots=True)(type("Three", (), dict(body)))
    fast = fast_dataclass(frozen=True)(type("Three", (), dict(body)))
    for args in [(), (1,), (1, 2)]:
        assert outcome(fast, *args) == outcome(std, *args)


def test_post_init_runs_and_copies_are_equal() -> None:
    import copy

    @fast_dataclass(frozen=True)
    class Span:
        start: int
        end: int = 0

        def __post_init__(self) -> None:
            if self.end < self.start:
                object.__setattr__(self, "end", self.start)

    span = Span(5)
    assert span.end == 5
    assert copy.copy(span) == span and copy.deepcopy(span) == span
    assert dataclasses.replace(span, start=1) == Span(1, 5)


def test_every_class_of_the_package_has_a_docstring() -> None:
    # A dataclass without one gets a __doc__ made with inspect.signature when it is
    # created: a cost at import that a line of text avoids (and the line helps readers).
    import ast

    from support import REPO

    missing = []
    for path in sorted((REPO / "openprogram_yaml").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef) and ast.get_docstring(node) is None:
                decorators = " ".join(ast.unparse(d) for d in node.decorator_list)
                if "dataclass" in decorators:
                    missing.append(f"{path.relative_to(REPO)}:{node.lineno} {node.name}")
    assert not missing, missing
