"""A session trace tells its observers of each node as it starts and as it ends."""

from __future__ import annotations

import pytest

from openprogram_yaml.runtime.trace import SessionTrace, TraceNode


class Log:
    """Writes down what it is told: ``start kind name`` and ``end kind name status``."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def node_started(self, trace: SessionTrace, node: TraceNode) -> None:
        parent = trace.get(node.parent_id).name if node.parent_id else "-"
        self.lines.append(f"start {node.kind} {node.name} under {parent}")

    def node_finished(self, trace: SessionTrace, node: TraceNode) -> None:
        self.lines.append(f"end {node.kind} {node.name} {node.status} {node.data.get('n')}")


def test_observers_are_told_of_each_node_start_and_end_in_order() -> None:
    trace = SessionTrace()
    log = Log()
    trace.observers.append(log)
    with trace.span("run", "r") as run:
        with trace.span("exec", "e") as node:
            node.data["n"] = 1  # set inside the block: seen at the end
        with pytest.raises(ValueError), trace.span("tool", "t"):
            raise ValueError("boom")
        run.data["n"] = 2
    assert log.lines == [
        "start run r under -",
        "start exec e under r",
        "end exec e ok 1",
        "start tool t under r",
        "end tool t error None",
        "end run r ok 2",
    ]


def test_an_observer_that_raises_never_breaks_the_trace_nor_the_others() -> None:
    class Broken:
        def node_started(self, trace: SessionTrace, node: TraceNode) -> None:
            raise RuntimeError("observer bug")

        def node_finished(self, trace: SessionTrace, node: TraceNode) -> None:
            raise RuntimeError("observer bug")

    trace = SessionTrace()
    log = Log()
    trace.observers.extend([Broken(), log])
    with trace.span("run", "r"):
        pass
    assert [n.status for n in trace.nodes] == ["ok"]
    assert log.lines == ["start run r under -", "end run r ok None"]


def test_an_observer_may_leave_while_it_is_told() -> None:
    class Once(Log):
        def node_finished(self, trace: SessionTrace, node: TraceNode) -> None:
            super().node_finished(trace, node)
            trace.observers.remove(self)

    trace = SessionTrace()
    once, log = Once(), Log()
    trace.observers.extend([once, log])
    with trace.span("run", "first"):
        pass
    with trace.span("run", "second"):
        pass
    assert once.lines == ["start run first under -", "end run first ok None"]
    assert len(log.lines) == 4
