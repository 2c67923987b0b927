"""Arguments taken, and results returned, in the order their dims are stored.

A dense tensor whose dims sit in memory in another order than its shape's
(a channels-last image or convolution weight, a transposed matrix) would
be copied to row-major by every call. Instead the compiled function takes
its storage as it is, the dims in memory order (N, H, W, C for a
channels-last image), and the graph permutes it back to the module's
view. That permute then meets the transposes the channels-last
convolution kernels make of their input and weight, and the two cancel.
The calling convention (calling.py) passes the caller's tensor permuted
into memory order: a view, with no copy, when the tensor has the layout
the compile saw. Likewise a result eager returns stored permuted (a
convolution's output on channels-last input) is computed in memory order
and returned as eager's view of it, with eager's strides."""

from __future__ import annotations

import torch
from torch.export.graph_signature import OutputKind

from ...calling import inverse_order
from .graph_edit import NodeBuilder

aten = torch.ops.aten


def storage_order(tensor: torch.Tensor) -> tuple[int, ...] | None:
    """The dims of a dense, non-contiguous tensor from the outermost in
    memory to the innermost; None for a contiguous tensor, and for one that
    is not dense (a slice or a broadcast: a copy is needed anyway)."""
    if tensor.dim() < 2 or tensor.is_contiguous() or _symbolic(tensor):
        return None
    order = tuple(sorted(range(tensor.dim()), key=lambda dim: (-tensor.stride(dim), dim)))
    return order if tensor.permute(order).is_contiguous() else None


def arguments_in_storage_order(program: torch.export.ExportedProgram) -> dict[str, tuple[int, ...]]:
    """Retype each user input stored in another order than its shape's (in
    place) as its storage, the dims in memory order, and permute it back
    for its users; return those inputs' names with their orders. An input
    the module returns as it is stays the caller's tensor."""
    graph = program.graph
    user_inputs = set(program.graph_signature.user_inputs)
    placeholders = [node for node in graph.nodes if node.op == "placeholder"]
    orders = {}
    for node in placeholders:
        value = node.meta.get("val")
        if node.name not in user_inputs or not isinstance(value, torch.Tensor) or value.is_complex():
            continue
        order = storage_order(value)
        users = [user for user in node.users if user.op != "output"]
        if order is None or not users:
            continue
        node.meta["val"] = value.permute(order)
        in_module_order = NodeBuilder(graph, placeholders[-1], after=True)(aten.permute.default, node, inverse_order(order))
        for user in users:
            user.replace_input_with(node, in_module_order)
        orders[node.name] = order
    if orders:
        graph.lint()
        program.graph_module.recompile()
    return orders


def results_in_storage_order(program: torch.export.ExportedProgram, skipped: set[int]) -> dict[int, tuple[int, ...]]:
    """Replace each result the module returns (but the output positions in
    `skipped`) whose value is stored permuted by its permute into memory
    order (in place); return those output positions with their orders."""
    graph = program.graph
    output = graph.output_node()
    values = list(output.args[0])
    orders = {}
    for position, (spec, value) in enumerate(zip(program.graph_signature.output_specs, values)):
        if spec.kind != OutputKind.USER_OUTPUT or position in skipped or not isinstance(value, torch.fx.Node) \
                or value.op == "placeholder":
            continue
        tensor = value.meta.get("val")
        order = storage_order(tensor) if isinstance(tensor, torch.Tensor) and not tensor.is_complex() else None
        if order is not None:
            values[position] = NodeBuilder(graph, value, after=True)(aten.permute.default, value, list(order))
            orders[position] = order
    if orders:
        output.args = (type(output.args[0])(values),)
        graph.lint()
        program.graph_module.recompile()
    return orders


def shape_in_module_order(stored_shape, order: tuple[int, ...]) -> tuple:
    """The shape of a tensor stored with its dims in `order`, as the module sees it."""
    undo = inverse_order(order)
    return tuple(stored_shape[undo[dim]] for dim in range(len(order)))


def _symbolic(tensor: torch.Tensor) -> bool:
    return any(not isinstance(size, int) for size in (*tensor.shape, *tensor.stride()))
