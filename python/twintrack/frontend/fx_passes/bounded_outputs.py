"""Results whose length depends on the data, computed at their bound.

nonzero, argwhere, masked_select, unique and unique_consecutive return as
many rows as the data has: torch.export gives them an unbacked size (u0),
and the static pipeline has no size to give. Each has a bound that the
shapes fix (the input's element count), so each is rewritten here to fill
a buffer of that bound, its valid rows first, and to count them. The
buffer flows through the ops that keep its rows apart (pointwise ops,
casts, unsqueeze and cat away from the rows) to the program's outputs, and
the calling convention cuts each output to its count after the call
(calling.OutputLeaf.length).

A data-dependent result used any other way (summed, indexed with, its
size read) is left for refuse_unsupported, which names the op that made it.
bincount has no bound the shapes fix and stays refused.
"""

from __future__ import annotations

import torch

from ...errors import UsageError
from .graph_edit import graph_fake_mode, splice_traced
from .naming import located
from .unsupported import data_dependent

aten = torch.ops.aten
fx = torch.fx


# ---------------------------------------------------------------- the ops at their bound

def _nonzero(input):
    bound = input.numel()
    rows = torch.nonzero_static(input, size=bound)
    return rows, (input != 0).sum()


def _masked_select(input, mask):
    input, mask = torch.broadcast_tensors(input, mask)
    flat_mask = mask.reshape(-1)
    positions = torch.nonzero_static(flat_mask, size=flat_mask.numel(), fill_value=0).reshape(-1)
    return input.reshape(-1)[positions], flat_mask.sum()


def _unique2(input, sorted=True, return_inverse=False, return_counts=False):
    flat = input.reshape(-1)
    keys = flat.to(torch.uint8) if flat.dtype == torch.bool else flat
    values, order = torch.sort(keys, stable=True)
    return _unique_of_runs(values.to(flat.dtype), order, input.shape, return_inverse, return_counts)


def _unique_consecutive(input, return_inverse=False, return_counts=False, dim=None):
    return _unique_of_runs(input.reshape(-1), None, input.shape, return_inverse, return_counts)


def _unique_of_runs(values, order, shape, return_inverse: bool, return_counts: bool):
    """unique's (values, inverse, counts) and their count, from the runs of
    equal neighbours in `values` (`order`: the input position of each, or
    None for the input's own order); an output not asked for is empty, as
    eager's."""
    bound, device = values.numel(), values.device
    starts = torch.ones_like(values, dtype=torch.bool)
    if bound > 1:
        starts = torch.cat([starts[:1], values[1:] != values[:-1]])
    run = torch.cumsum(starts.to(torch.int64), 0) - 1
    uniques = torch.zeros(bound, dtype=values.dtype, device=device).scatter(0, run, values)
    inverse = counts = torch.zeros(0, dtype=torch.int64, device=device)
    if return_inverse:
        inverse = (run if order is None else torch.zeros_like(run).scatter(0, order, run)).reshape(shape)
    if return_counts:
        counts = torch.zeros(bound, dtype=torch.int64, device=device).scatter_add(0, run, torch.ones_like(run))
    return (uniques, inverse, counts), starts.sum()


UNIQUES = {aten._unique2.default: _unique2, aten.unique_consecutive.default: _unique_consecutive}
SINGLE = {aten.nonzero.default: _nonzero, aten.masked_select.default: _masked_select}

# Ops that keep the rows of a bounded buffer apart: its row i only ever meets row i.
ROW_KEEPING = (aten.unsqueeze.default, aten.cat.default, aten.clone.default, aten._to_copy.default,
               aten.alias.default, torch.ops.prims.convert_element_type.default)


# ---------------------------------------------------------------- the rewrite

def bound_data_dependent_results(program: torch.export.ExportedProgram, decompositions: dict) -> dict[int, fx.Node]:
    """Rewrite each bounded op (in place) and the row-keeping ops after it;
    return, for each program output cut to a count, its position and the
    node of the count (a 0-d int64). Anything else is left as it was."""
    graph = program.graph
    counts: dict = {}   # unbacked symbol -> its count node
    for node in list(graph.nodes):
        if node.op == "call_function" and (node.target in SINGLE or node.target in UNIQUES) \
                and node.args and data_dependent(node.meta.get("val")) and _supported_call(node):
            _bound(graph, node, counts, decompositions)
    if not counts:
        return {}
    _drop_size_checks(graph, counts)
    outputs = _carry_rows(graph, counts)
    graph.lint()
    program.graph_module.recompile()
    return outputs


def _supported_call(node: fx.Node) -> bool:
    """unique_consecutive along a dim has no bounded form here."""
    return not (node.target is aten.unique_consecutive.default and node.kwargs.get("dim") is not None)


def _bound(graph: fx.Graph, node: fx.Node, counts: dict, decompositions: dict) -> None:
    inputs = [a for a in node.args if isinstance(a, fx.Node)]
    constants = node.args[len(inputs):]
    kwargs = dict(node.kwargs)
    expected = node.meta["val"]
    if node.target in SINGLE:
        rewrite = SINGLE[node.target]
        result, count = splice_traced(graph, node, lambda *xs: rewrite(*xs, *constants, **kwargs), inputs,
                                      decompositions, "bounded-outputs")
        counts[_symbol(expected)] = count
        result.meta["bounded_by"] = _symbol(expected)
        node.replace_all_uses_with(result)
    else:
        rewrite = UNIQUES[node.target]
        results, count = splice_traced(graph, node, lambda x: rewrite(x, *constants, **kwargs), inputs,
                                       decompositions, "bounded-outputs")
        counts[_symbol(expected[0])] = count
        for result, value in zip(results, expected):
            if data_dependent(value):
                result.meta["bounded_by"] = _symbol(value)
        for user in list(node.users):
            user.replace_all_uses_with(results[user.args[1]])
            graph.erase_node(user)
    graph.erase_node(node)


def _symbol(value: torch.Tensor):
    return next(d.node.expr for d in value.shape if isinstance(d, torch.SymInt))


def _symbols_of(node: fx.Node) -> set:
    value = node.meta.get("val")
    if isinstance(value, (torch.SymInt, torch.SymBool, torch.SymFloat)):
        return set(value.node.expr.free_symbols)
    if isinstance(value, torch.Tensor):
        return {s for d in value.shape if isinstance(d, torch.SymInt) for s in d.node.expr.free_symbols}
    return set()


def _drop_size_checks(graph: fx.Graph, counts: dict) -> None:
    """export's checks of an unbacked size (u0 >= 0, u0 <= numel) hold by
    construction here; they and the size reads feeding them go."""
    known = set(counts)
    for node in reversed(list(graph.nodes)):
        if node.target is aten._assert_scalar.default and _symbols_of(node.args[0]) <= known:
            graph.erase_node(node)
    for node in reversed(list(graph.nodes)):
        if not node.users and node.op == "call_function" and not isinstance(node.meta.get("val"), torch.Tensor) \
                and _symbols_of(node) and _symbols_of(node) <= known:
            graph.erase_node(node)


def _carry_rows(graph: fx.Graph, counts: dict) -> dict[int, fx.Node]:
    """Give each op reading a bounded buffer its static fake value, as a
    bounded buffer itself; refuse one that would mix its rows; return the
    outputs to cut, by position."""
    mode = graph_fake_mode(graph)
    for node in list(graph.nodes):
        bounded = {_bounded_by(a) for a in node.all_input_nodes} - {None}
        if node.op != "call_function" or not bounded:
            continue
        if node.target is aten._assert_tensor_metadata.default:  # a trace-time check of dtype and device
            graph.erase_node(node)
            continue
        if len(bounded) != 1 or not _keeps_rows(node):
            raise UsageError(f"shapes that depend on the data are not supported: {located(node)} "
                             f"reads a result whose length depends on the data "
                             f"(only pointwise ops, casts, unsqueeze and cat may follow one)")
        args, kwargs = fx.node.map_aggregate((node.args, node.kwargs),
                                             lambda a: a.meta["val"] if isinstance(a, fx.Node) else a)
        with mode:
            node.meta["val"] = node.target(*args, **kwargs)
        node.meta["bounded_by"] = bounded.pop()
    output = graph.output_node()
    return {i: counts[_bounded_by(value)] for i, value in enumerate(output.args[0])
            if isinstance(value, fx.Node) and _bounded_by(value) is not None}


def _bounded_by(node: fx.Node):
    """The symbol of the bounded rows `node` holds (set by the rewrite), or None."""
    return node.meta.get("bounded_by")


def _keeps_rows(node: fx.Node) -> bool:
    """Whether `node` keeps the rows (dimension 0) of its bounded operands
    apart and at dimension 0, so that cutting its result cuts them."""
    if not isinstance(node.meta.get("val"), torch.Tensor):  # a size read, an item
        return False
    rank = node.meta["val"].dim()
    if node.target is aten.unsqueeze.default:
        return node.args[1] % rank != 0
    if node.target is aten.cat.default:
        dim = node.args[1] if len(node.args) > 1 else 0
        return dim % rank != 0 and all(_bounded_by(t) is not None for t in node.args[0])
    if node.target not in ROW_KEEPING and torch.Tag.pointwise not in getattr(node.target, "tags", ()):
        return False
    bounded = [a.meta["val"] for a in node.all_input_nodes if _bounded_by(a) is not None]
    others = [a.meta["val"] for a in node.all_input_nodes if _bounded_by(a) is None]
    # rows stay at dimension 0 only if no operand broadcasts the bounded one to a higher rank
    return all(t.dim() == rank for t in bounded) and all(t.dim() < rank or t.shape[0] == 1 for t in others)
