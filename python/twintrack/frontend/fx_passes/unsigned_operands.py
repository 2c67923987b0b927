"""uint8 operands of float pointwise ops, converted explicitly."""

from __future__ import annotations

import torch

from .graph_edit import NodeBuilder


def convert_unsigned_operands(program: torch.export.ExportedProgram) -> None:
    """Give every pointwise op with a float result and a uint8 operand an
    explicit conversion of that operand (in place). torch-mlir promotes the
    operands of a pointwise op itself, and converts uint8 as signed:
    atan2(uint8 253, x) computed with -3. The explicit conversion knows
    the source dtype and is right."""
    graph = program.graph
    sites = [node for node in graph.nodes if node.op == "call_function"
             and torch.Tag.pointwise in getattr(node.target, "tags", ())
             and isinstance(node.meta.get("val"), torch.Tensor) and node.meta["val"].is_floating_point()
             and any(_unsigned_node(a) for a in node.args)]
    for node in sites:
        new, dtype = NodeBuilder(graph, node), node.meta["val"].dtype
        node.args = tuple(new(torch.ops.prims.convert_element_type.default, a, dtype) if _unsigned_node(a) else a
                          for a in node.args)
    if sites:
        graph.lint()
        program.graph_module.recompile()


def _unsigned_node(value) -> bool:
    return isinstance(value, torch.fx.Node) and getattr(value.meta.get("val"), "dtype", None) == torch.uint8
