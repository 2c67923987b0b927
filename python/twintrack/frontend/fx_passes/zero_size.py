"""Op results with no elements, folded to zeros."""

from __future__ import annotations

import operator

import torch

from .graph_edit import NodeBuilder
from .unsupported import data_dependent

aten = torch.ops.aten


def fold_zero_size_values(program: torch.export.ExportedProgram) -> None:
    """Replace every op result with no elements by a `zeros` of its shape
    and dtype (in place): it holds no values, so nothing downstream can
    tell, and torch-mlir's lowerings of pooling, factorizations and
    reshaping views over a zero extent fail or divide by it. Ops that
    mutate are left as they are; what is then unused is dropped."""
    graph = program.graph
    sites = [node for node in graph.nodes if node.op == "call_function" and _zero_size(node.meta.get("val"))
             and _pure(node.target) and node.target is not aten.zeros.default]
    for node in sites:
        value = node.meta["val"]
        zeros = NodeBuilder(graph, node)(aten.zeros.default, list(value.shape), dtype=value.dtype, device=value.device)
        node.replace_all_uses_with(zeros)
    if sites:
        graph.eliminate_dead_code()
        graph.lint()
        program.graph_module.recompile()


def _pure(target) -> bool:
    """An ATen op that mutates nothing, or an output of a multi-output one."""
    return target is operator.getitem or not getattr(getattr(target, "_schema", None), "is_mutable", True)


def _zero_size(value) -> bool:
    return isinstance(value, torch.Tensor) and not data_dependent(value) and value.numel() == 0
