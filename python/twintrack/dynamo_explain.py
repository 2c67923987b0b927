"""twintrack.explain(model, *inputs): what torch.compile makes of a model
before any backend sees it. Dynamo's graphs and their ops, each graph
break with its reason and the model's source line, and each recompile with
the guard that failed (found by calling the model again, `calls`). The
graphs are those of every call: a recompile adds its own.

The model runs (its prints print, its state changes as in eager): a break
cuts the program in pieces, each run as it would be under torch.compile;
nothing is compiled by twintrack here.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch


@dataclass(frozen=True)
class Graph:
    index: int
    call: int                    # the call of the model that captured it (0 is the first)
    ops: list[tuple[str, int]]   # each op's name and how many times the graph calls it, first seen first


@dataclass(frozen=True)
class GraphBreak:
    reason: str       # Dynamo's reason, its first line
    where: str        # the model's source line: file:line in function
    code: str         # that line's text


@dataclass(frozen=True)
class Recompile:
    call: int                        # which call of the model (0 is the first)
    guards: list[tuple[str, str]]    # each guard that failed, as Dynamo prints it, and its source line ("" if none)


@dataclass
class ExplainReport:
    graphs: list[Graph] = field(default_factory=list)
    breaks: list[GraphBreak] = field(default_factory=list)
    recompiles: list[Recompile] = field(default_factory=list)
    calls: int = 1

    def text(self) -> str:
        lines = [f"{len(self.graphs)} graph(s), {len(self.breaks)} graph break(s), "
                 f"{len(self.recompiles)} recompile(s) over {self.calls} call(s)"]
        for graph in self.graphs:
            ops = ", ".join(f"{name} x{count}" if count > 1 else name for name, count in graph.ops)
            lines.append(f"graph {graph.index} (call {graph.call}): {sum(c for _, c in graph.ops)} op(s): "
                         f"{ops or '(none)'}")
        for number, cut in enumerate(self.breaks, 1):
            lines.append(f"break {number} at {cut.where}: {cut.code}")
            lines.append(f"  reason: {cut.reason}")
        for recompile in self.recompiles:
            lines.append(f"recompile at call {recompile.call}, guard(s) failed:")
            lines += [f"  {guard}" + (f" ({where})" if where else "") for guard, where in recompile.guards]
        return "\n".join(lines) + "\n"


def explain(model: torch.nn.Module, *inputs, calls: Sequence[tuple] = ()) -> ExplainReport:
    """The graphs and breaks of `model(*inputs)` under torch.compile, and the
    recompiles of calling it again with each input tuple of `calls` (all in
    one run: a call that changes the model's state shows its recompile)."""
    from torch._dynamo.backends.debugging import ExplainWithBackend

    torch._dynamo.reset()
    recorder = ExplainWithBackend("eager")
    failures: list[tuple[int, str]] = []
    call = [0]
    optimized = torch._dynamo.optimize(recorder, guard_fail_fn=lambda fail: failures.append((call[0], fail.reason)))(
        model)
    graph_calls: list[int] = []  # the call that captured each graph
    try:
        for call[0], arguments in enumerate([tuple(inputs), *map(tuple, calls)]):
            optimized(*arguments)
            graph_calls += [call[0]] * (len(recorder.graphs) - len(graph_calls))
    finally:
        torch._dynamo.reset()
    output = recorder.output()
    graphs = [Graph(index, number, _ops(graph))
              for index, (graph, number) in enumerate(zip(output.graphs, graph_calls))]
    breaks = list(dict.fromkeys(_break(reason) for reason in output.break_reasons))  # a recompiled frame breaks again
    return ExplainReport(graphs, breaks, _recompiles(failures), 1 + len(calls))


def _ops(graph: torch.fx.GraphModule) -> list[tuple[str, int]]:
    modules = dict(graph.named_modules())
    names = []
    for node in graph.graph.nodes:
        if node.op == "call_function":
            names.append(getattr(node.target, "__name__", str(node.target)))
        elif node.op == "call_method":
            names.append(f".{node.target}")
        elif node.op == "call_module":
            names.append(type(modules[node.target]).__name__)
    return list(Counter(names).items())


# Dynamo's terse reasons, said in the model's terms.
_PLAIN_REASONS = {
    "generic_jump": "a branch on a tensor's value (control flow that depends on the data)",
}


def _break(reason) -> GraphBreak:
    frame = reason.user_stack[-1] if reason.user_stack else None
    where = f"{frame.filename}:{frame.lineno} in {frame.name}" if frame else "unknown"
    lines = [line.strip() for line in str(reason.reason).splitlines() if line.strip()]
    first = lines[0] if lines else ""
    plain = next((text for key, text in _PLAIN_REASONS.items() if first.startswith(key)), None)
    explanation = next((line for line in lines if line.startswith("Explanation:")), "")
    text = plain or f"{first}{'; ' + explanation.removeprefix('Explanation: ') if explanation else ''}"
    return GraphBreak(text, where, (frame.line or "").strip() if frame else "")


def _recompiles(failures: list[tuple[int, str]]) -> list[Recompile]:
    """The failed guards of each call that compiled again (each guard once)."""
    by_call: dict[int, list[tuple[str, str]]] = {}
    for number, reason in failures:
        guard = _guard_text(reason)
        if guard not in by_call.setdefault(number, []):
            by_call[number].append(guard)
    return [Recompile(number, guards) for number, guards in by_call.items()]


def _guard_text(reason: str) -> tuple[str, str]:
    """('self.flag is None', 'file.py:5 in forward') from Dynamo's failure text."""
    first = reason.splitlines()[0]
    guard = first.split(": ", 1)[1] if ": " in first else first  # drop the "0/0" cache entry label
    guard, _, comment = guard.partition("#")
    where = ""
    for line in reason.splitlines()[1:]:
        if line.strip().startswith("File "):
            parts = line.strip().split(", ")
            where = f"{parts[0][6:-1]}:{parts[1].removeprefix('line ')}" + (
                f" in {parts[2].removeprefix('in ')}" if len(parts) > 2 else "")
    return " ".join(guard.split()), where
