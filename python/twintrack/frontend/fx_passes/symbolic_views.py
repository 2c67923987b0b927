"""Reshapes of dynamic shapes as collapses and expansions of dim groups.

torch-mlir lowers a view whose sizes it cannot see (an `aten.view` of
`[s0, s1, 32]` to `[s0*s1, 32]`) by guessing which dims match, and guesses
wrong: it casts the input to `[?, 1, 32]`. A view that only merges dims
into one and splits dims out of one is what `prims.collapse` and
`aten.unflatten` say, and torch-mlir lowers those with every size known
(`tensor.collapse_shape`, and a reshape by the sizes given). So each view of
a symbolic shape is rewritten as collapses of its input's dim groups
followed by unflattens to its output's, the groups found by comparing the
sizes' products as symbolic expressions.
"""

from __future__ import annotations

import torch

from .graph_edit import NodeBuilder

aten, prims = torch.ops.aten, torch.ops.prims
RESHAPES = (aten.view.default, aten._unsafe_view.default, aten.reshape.default)


def views_as_dim_groups(program: torch.export.ExportedProgram) -> None:
    graph = program.graph
    for node in list(graph.nodes):
        if node.op != "call_function" or node.target not in RESHAPES:
            continue
        source, result = node.args[0].meta.get("val"), node.meta.get("val")
        if not (_symbolic(source) or _symbolic(result)):
            continue
        groups = dim_groups([_expression(s) for s in source.shape], [_expression(s) for s in result.shape])
        if groups is None:
            continue  # a 0-d side: nothing to group
        node.replace_all_uses_with(_regrouped(graph, node, groups))
        graph.erase_node(node)
    graph.lint()


def _symbolic(value) -> bool:
    return isinstance(value, torch.Tensor) and any(isinstance(s, torch.SymInt) for s in value.shape)


def _expression(size):
    import sympy
    return size.node.expr if isinstance(size, torch.SymInt) else sympy.Integer(size)


def dim_groups(source: list, result: list) -> list[tuple[list[int], list[int]]] | None:
    """Pairs (source dims, result dims) with equal products, in order, that
    cover both shapes, as fine as they are found; a unit dim joins the group
    before it (the first group where none is before). Every view of a
    contiguous tensor is at worst one group of all dims; None for a 0-d
    shape (nothing to group)."""
    import sympy
    source, result = [sympy.sympify(s) for s in source], [sympy.sympify(s) for s in result]
    if not source or not result:
        return None
    return _fine_groups(source, result) or [(list(range(len(source))), list(range(len(result))))]


def _fine_groups(source: list, result: list) -> list[tuple[list[int], list[int]]] | None:
    """Groups closed as soon as their products agree; None where that
    greedy order strands a dim."""
    import sympy
    groups, i, j = [], 0, 0
    while i < len(source) or j < len(result):
        if i == len(source) or j == len(result):
            if not groups or any(s != 1 for s in source[i:] + result[j:]):
                return None
            groups[-1][0].extend(range(i, len(source)))
            groups[-1][1].extend(range(j, len(result)))
            break
        mine, theirs, left, right = [i], [j], source[i], result[j]
        i, j = i + 1, j + 1
        while True:
            ratio = sympy.cancel(right / left)
            if ratio == 1:
                break
            if sympy.fraction(ratio)[1] == 1 and i < len(source):
                mine.append(i)
                left, i = left * source[i], i + 1
            elif j < len(result):
                theirs.append(j)
                right, j = right * result[j], j + 1
            else:
                return None
        groups.append((mine, theirs))
    return groups


def _regrouped(graph, node, groups) -> torch.fx.Node:
    """Collapse each source group of more than one dim, then unflatten each
    result group of more than one dim, with the view's own size arguments."""
    build = NodeBuilder(graph, node)
    value, sizes = node.args[0], list(node.args[1])
    for mine, _ in reversed(groups):
        if len(mine) > 1:
            value = build(prims.collapse.default, value, mine[0], mine[-1])
    for position, (_, theirs) in reversed(list(enumerate(groups))):
        if len(theirs) > 1:
            value = build(aten.unflatten.int, value, position, [sizes[d] for d in theirs])
    return value
