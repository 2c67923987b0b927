"""keep-while-loops: a while loop whose first test folds to true stays a
while loop.

torch-mlir imports `torch._higher_order_ops.while_loop` as a
`torch.prim.Loop` of INT64_MAX trips whose first condition is the
condition function called on the initial values, and whose body yields
the condition again. Its SCF lowering takes a loop whose first condition
is a constant `true` for a TorchScript for-loop and makes it an scf.for
over the trip count, dropping the body's condition: a loop from a
constant start (`i = torch.tensor(0)`, `while i < 3`) then ran forever.

On the torch backend contract (a `tool = "torch-mlir-opt"` stage), this
pass routes such a loop's first condition through an op no canonicalizer
folds:

    %first = torch.aten.Bool.Tensor %test            (the importer's)
    becomes
    %kept  = torch.aten.logical_and %test, %test
    %first = torch.aten.Bool.Tensor %kept

so the lowering sees a condition it cannot read, and builds an scf.while.
"""

from __future__ import annotations

from dataclasses import dataclass

from .ir_helpers import PythonPass
from .torch_ir import defining_op, ops_named, torch_ir

LOOP = "torch.prim.Loop"
CONDITION = "torch.prim.Loop.condition"
BOOL_OF_TENSOR = "torch.aten.Bool.Tensor"
CONSTANT_BOOL = "torch.constant.bool"


def _while_like(loop) -> bool:
    """A loop its body may end early: the condition it yields is not a constant."""
    body = loop.regions[0].blocks[0]
    terminator = list(body.operations)[-1].operation
    if terminator.name != CONDITION:
        return False
    test = defining_op(terminator.operands[0])
    return test is None or test.name != CONSTANT_BOOL


def _keep_first_condition(loop) -> None:
    """Route the loop's first condition (a Bool.Tensor of a 0-d tensor) through logical_and."""
    from torch_mlir.dialects import torch as torch_dialect
    ir = torch_ir()
    first = defining_op(loop.operands[1])
    if first is None or first.name != BOOL_OF_TENSOR:
        return
    test = first.operands[0]
    with ir.InsertionPoint(first), first.location:
        kept = torch_dialect.AtenLogicalAndOp(test.type, test, test).result
        condition = torch_dialect.AtenBoolTensorOp(kept).result
    loop.operands[1] = condition
    if not list(first.results[0].uses):
        first.erase()


@dataclass(frozen=True)
class KeepWhileLoops(PythonPass):
    """Runs in torch-mlir's bindings (a `tool = "torch-mlir-opt"` stage)."""

    name = "keep-while-loops"
    binding = "torch_mlir"

    def _run(self, op, pass_) -> None:
        for loop in ops_named(op, LOOP):
            if _while_like(loop):
                _keep_first_condition(loop)
