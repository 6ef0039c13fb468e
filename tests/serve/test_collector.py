"""While ``serve`` serves, the cyclic collector runs less often (``SERVE_GC_THRESHOLD``),
and the process's own setting is back once it stops."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from openprogram_yaml.serve.driver import SERVE_GC_THRESHOLD, _collector_for_serving


@pytest.fixture
def threshold() -> Iterator[None]:
    before = gc.get_threshold()
    try:
        yield
    finally:
        gc.set_threshold(*before)


@pytest.mark.usefixtures("threshold")
@pytest.mark.parametrize(
    ("first", "serving"),
    [(700, SERVE_GC_THRESHOLD), (2000, SERVE_GC_THRESHOLD), (50_000, 50_000), (0, 0)],
)
def test_serving_raises_the_first_threshold_and_restores_it(first: int, serving: int) -> None:
    gc.set_threshold(first, 11, 12)
    with _collector_for_serving():
        assert gc.get_threshold() == (serving, 11, 12)  # a higher one, or 0 (off), is kept
    assert gc.get_threshold() == (first, 11, 12)


@pytest.mark.usefixtures("threshold")
def test_the_threshold_is_restored_when_serving_fails() -> None:
    gc.set_threshold(700, 10, 10)
    with pytest.raises(OSError), _collector_for_serving():
        raise OSError("the port is taken")
    assert gc.get_threshold() == (700, 10, 10)
