"""bfloat16 constants stored as float32, for torch-mlir's importer."""

from __future__ import annotations

import torch
from torch.export.graph_signature import InputKind

from .graph_edit import NodeBuilder


def bfloat16_constants_as_float32(program: torch.export.ExportedProgram) -> None:
    """torch-mlir's importer writes a constant (a lifted tensor, a frozen
    weight) through NumPy, which has no bfloat16: each bfloat16 constant is
    stored as its float32 value (exact) and converted back in the graph."""
    constant_kinds = (InputKind.CONSTANT_TENSOR, InputKind.PARAMETER, InputKind.BUFFER)
    by_name = {spec.arg.name: spec for spec in program.graph_signature.input_specs if spec.kind in constant_kinds}
    graph = program.graph
    for node in list(graph.nodes):
        spec = by_name.get(node.name) if node.op == "placeholder" else None
        if spec is None:
            continue
        store = program.constants if spec.target in program.constants else program.state_dict
        stored = store.get(spec.target)
        if stored is None or stored.dtype != torch.bfloat16:
            continue
        value = stored.detach().float()
        store[spec.target] = torch.nn.Parameter(value, requires_grad=False) if isinstance(stored, torch.nn.Parameter) \
            else value
        narrow = node.meta["val"]
        node.meta["val"] = narrow.float()
        cast = NodeBuilder(graph, node, after=True)(torch.ops.aten._to_copy.default, node, dtype=torch.bfloat16)
        node.replace_all_uses_with(cast, delete_user_cb=lambda user: user is not cast)
