"""Python numbers a model computes from `.item()` reads and returns
(`int(a) + int(b)`, `float(x) >= 0.5`): strict export traces them as
operator calls on symbols, which no stage lowers. Each such result is
rebuilt as the same arithmetic on 0-d tensors, in the types Python computes
in (int64 for ints, float64 for floats, bool), and returned as `.item()`
of that tensor: the calling convention reads it back as a Python number
after the call (calling.OutputLeaf.scalar). A result using anything else
(a call this module has no tensor op for) is left for the calling
convention to refuse, as before.
"""

from __future__ import annotations

import operator

import torch

from .calling_convention import SCALAR_READS
from .graph_edit import NodeBuilder

aten = torch.ops.aten
fx = torch.fx

TENSOR_OPS = {operator.add: aten.add.Tensor, operator.sub: aten.sub.Tensor, operator.mul: aten.mul.Tensor,
              operator.truediv: aten.div.Tensor, operator.eq: aten.eq.Tensor, operator.ne: aten.ne.Tensor,
              operator.lt: aten.lt.Tensor, operator.le: aten.le.Tensor, operator.gt: aten.gt.Tensor,
              operator.ge: aten.ge.Tensor}
PYTHON_TYPES = {torch.SymInt: torch.int64, torch.SymFloat: torch.float64, torch.SymBool: torch.bool,
                int: torch.int64, float: torch.float64, bool: torch.bool}


def scalar_results_as_tensors(program: torch.export.ExportedProgram) -> None:
    """Rewrite (in place) each symbolic number the program returns as `.item()` of a 0-d tensor."""
    graph = program.graph
    output = graph.output_node()
    results = list(output.args[0])
    for position, value in enumerate(results):
        if not isinstance(value, fx.Node) or value.target in SCALAR_READS or \
                type(value.meta.get("val")) not in (torch.SymInt, torch.SymFloat, torch.SymBool):
            continue
        tensor = _as_tensor(graph, value, value)
        if tensor is None:
            continue
        with graph.inserting_before(output):
            read = graph.call_function(aten.item.default, (tensor,))
        read.meta.update(value.meta)
        results[position] = read
    if results != list(output.args[0]):
        output.args = (tuple(results),)
        graph.eliminate_dead_code()
        graph.lint()
        program.graph_module.recompile()


def _as_tensor(graph: fx.Graph, value, anchor: fx.Node) -> fx.Node | None:
    """`value` (a symbolic number's node, or a Python number) as a 0-d tensor
    of its Python type, built before `anchor`; None if it uses an op without one."""
    new = NodeBuilder(graph, anchor)
    if not isinstance(value, fx.Node):
        if type(value) not in PYTHON_TYPES:
            return None
        return new(aten.scalar_tensor.default, value, dtype=PYTHON_TYPES[type(value)])
    dtype = PYTHON_TYPES.get(type(value.meta.get("val")))
    if dtype is None:
        return None
    if value.target in SCALAR_READS:
        return new(aten._to_copy.default, value.args[0], dtype=dtype)
    if value.target is torch.sym_float and len(value.args) == 1:  # float(n) of an int
        operand = _as_tensor(graph, value.args[0], anchor)
        return None if operand is None else new(aten._to_copy.default, operand, dtype=torch.float64)
    if value.target not in TENSOR_OPS or len(value.args) != 2 or value.kwargs:
        return None
    operands = [_as_tensor(graph, argument, anchor) for argument in value.args]
    if None in operands:
        return None
    if value.target is operator.truediv:  # Python's / of two ints is a float
        operands = [new(aten._to_copy.default, operand, dtype=torch.float64) for operand in operands]
    return new(TENSOR_OPS[value.target], *operands)
