"""The two ways the FX passes add nodes to an exported graph, both placing
each new node at the source location of the op it is made for, named
after that op (naming.located_at):

- `NodeBuilder`: one ATen op at a time, its fake value computed on the
  spot (the guards, the unsigned-operand casts, zero-size folding);
- `splice_traced`: what an op becomes, written as a Python function over
  tensors (fx_passes/complex_pairs.py, bounded_outputs.py), traced with
  make_fx on the op's fake arguments through the frontend's decomposition
  table (so the new ops are the ones every later stage takes), and copied
  in before the op.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch.fx.experimental.proxy_tensor import make_fx

from torch._guards import detect_fake_mode

from ...errors import CompilerError, TwintrackError
from .naming import located, located_at, op_name

fx = torch.fx


class NodeBuilder:
    """New nodes before `anchor` (or, with `after`, after it in the order
    made), each with its fake value, at the anchor's source location."""

    def __init__(self, graph: fx.Graph, anchor: fx.Node, after: bool = False):
        self.graph, self.anchor = graph, anchor
        self._last = anchor if after else None
        self.mode = _fake_mode(graph, anchor)

    def __call__(self, op, *args, **kwargs) -> fx.Node:
        place = self.graph.inserting_before(self.anchor) if self._last is None else self.graph.inserting_after(self._last)
        with place:
            node = self.graph.call_function(op, args, kwargs)
        if self._last is not None:
            self._last = node
        fake_args, fake_kwargs = fx.node.map_arg((args, kwargs), lambda n: n.meta["val"])
        with self.mode:
            node.meta["val"] = op(*fake_args, **fake_kwargs)
        located_at(node, self.anchor)
        return node


def _fake_mode(graph: fx.Graph, anchor: fx.Node):
    """The graph's fake mode, read off the anchor and its inputs (every fake
    value of one graph shares it), so a pass over many sites does not scan
    the graph for each; the whole graph only where those hold none."""
    near = [anchor.meta.get("val"), *(n.meta.get("val") for n in anchor.all_input_nodes)]
    return detect_fake_mode(near) or graph_fake_mode(graph)


def graph_fake_mode(graph: fx.Graph):
    """The fake mode of the graph's values (one scan of the graph)."""
    return detect_fake_mode([n.meta.get("val") for n in graph.nodes if "val" in n.meta])


def splice_traced(graph: fx.Graph, anchor: fx.Node, fn: Callable, inputs: list[fx.Node], decompositions: dict,
                  stage: str):
    """fn(*fake values of `inputs`) traced and inserted before `anchor`;
    returns what fn returned, with each tensor as its new node (an input
    returned as it is is that input's node). A failure to trace is a
    CompilerError of `stage` naming the op and its line."""
    try:
        traced = make_fx(fn, tracing_mode="fake", decomposition_table=decompositions)(
            *(node.meta["val"] for node in inputs))
    except TwintrackError:  # a rewrite refusing its arguments: the user's to fix
        raise
    except Exception as e:  # a rewrite meeting arguments it was not written for: our bug, named
        raise CompilerError(stage, [f"{located(anchor)}: {type(e).__name__}: "
                                    f"{' '.join(str(e).split())[:200]}"]) from e
    env: dict[fx.Node, fx.Node] = {}
    placeholders = iter(inputs)
    with graph.inserting_before(anchor):
        for inner in traced.graph.nodes:
            if inner.op == "placeholder":
                env[inner] = next(placeholders)
            elif inner.op == "output":
                return torch.fx.node.map_arg(inner.args[0], lambda n: env[n])
            elif inner.op == "get_attr":
                env[inner] = _copied_submodule(graph, traced, inner, anchor, stage)
            else:
                env[inner] = graph.node_copy(inner, lambda n: env[n])
                located_at(env[inner], anchor)
    raise AssertionError("a traced graph has an output node")


def _copied_submodule(graph: fx.Graph, traced: fx.GraphModule, inner: fx.Node, anchor: fx.Node, stage: str):
    """A `get_attr` of the traced function in `graph`: the subgraph of a
    higher-order op (a loop's condition and body, loops.py), added to the
    graph's module under a fresh name. A tensor constant is refused: the
    function read a tensor it closed over."""
    value = getattr(traced, inner.target)
    if not isinstance(value, torch.nn.Module):
        raise CompilerError(stage, [f"the rewrite of {op_name(anchor)} made a tensor constant"])
    owner = graph.owning_module
    name, count = inner.target, 0
    while hasattr(owner, name):
        count += 1
        name = f"{inner.target}_{count}"
    owner.add_submodule(name, value)
    node = graph.get_attr(name)
    node.meta = dict(inner.meta)
    return node
