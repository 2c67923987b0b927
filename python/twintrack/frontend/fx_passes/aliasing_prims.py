"""The prims views a model may call directly (torch.ops.prims.squeeze,
view_of, split_dim, ...) as their ATen views, before the decompositions.

PyTorch's `run_decompositions` functionalizes the program and refuses any
non-ATen op whose result aliases its input ("Found a custom (non-ATen)
operator whose output has alias annotations"), so a program calling one
never reaches the frontend's table. Each becomes the ATen op computing
the same view, at the same place; torch-mlir lowers those.
"""

from __future__ import annotations

import torch

from .graph_edit import NodeBuilder

aten, prims = torch.ops.aten, torch.ops.prims
fx = torch.fx


def _arguments(node: fx.Node) -> list:
    """The node's arguments by position, those it was given by name included."""
    named = [node.kwargs[a.name] for a in node.target._schema.arguments[len(node.args):] if a.name in node.kwargs]
    return [*node.args, *named]


def _same_args(op):
    return lambda build, node: build(op, *_arguments(node))


def _split_dim(build, node):
    source, dim, outer = _arguments(node)
    return build(aten.unflatten.int, source, dim, [outer, -1])


def _collapse_view(build, node):
    source, start, end = _arguments(node)  # collapses dims start to end, both included
    return build(aten.flatten.using_ints, source, start, end)


def _broadcast_in_dim(build, node):
    """Unit dims where `broadcast_dimensions` leaves a gap, then an expand to `shape`."""
    source, shape, kept = _arguments(node)
    value = source
    for dim in range(len(shape)):
        if dim not in kept:
            value = build(aten.unsqueeze.default, value, dim)
    return build(aten.expand.default, value, list(shape))


ATEN_VIEW_OF = {
    prims.squeeze.default: _same_args(aten.squeeze.dims),
    prims.view_of.default: _same_args(aten.alias.default),
    prims.view_of_dtype.default: _same_args(aten.view.dtype),
    prims.transpose.default: _same_args(aten.permute.default),
    prims.split_dim.default: _split_dim,
    prims.collapse_view.default: _collapse_view,
    prims.broadcast_in_dim.default: _broadcast_in_dim,
}


def prims_views_as_aten(module: fx.GraphModule) -> None:
    """Each prims view in `module`'s graph replaced by its ATen equivalent."""
    graph = module.graph
    for node in list(graph.nodes):
        rewrite = ATEN_VIEW_OF.get(node.target) if node.op == "call_function" else None
        if rewrite is None:
            continue
        replacement = rewrite(NodeBuilder(graph, node), node)
        node.replace_all_uses_with(replacement)
        graph.erase_node(node)
    module.recompile()
