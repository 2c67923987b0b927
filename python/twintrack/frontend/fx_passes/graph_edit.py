"""Replacing one op of an exported FX graph by plain torch code.

The frontend's graph rewrites (fx_passes/complex_pairs.py, bounded_outputs.py) write
what an op becomes as a Python function over tensors. `splice_traced`
traces that function with make_fx on the op's fake arguments, through the
frontend's decomposition table (so the new ops are the ones every later
stage takes), and copies its nodes in before the op, each at the op's
source location and named after it.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch.fx.experimental.proxy_tensor import make_fx

from ...errors import CompilerError, TwintrackError
from .naming import model_line, op_name

fx = torch.fx


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
        raise CompilerError(stage, [f"{op_name(anchor)} at {model_line(anchor)}: {type(e).__name__}: "
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


def located_at(new: fx.Node, anchor: fx.Node) -> None:
    """`new` at `anchor`'s source location, named after its op (name_ops.py)."""
    new.meta["stack_trace"] = anchor.meta.get("stack_trace")
    new.meta["original_aten"] = anchor.meta.get("original_aten") or anchor.target


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
