"""tensor-map-params: a kernel parameter that TMA copies (loads, stores,
prefetches) read their tensor map through becomes the 128-byte tensor map itself, passed by value
(`.param .align 64 .b8 [128]`) and marked a grid constant, so the kernel
reads it where the launch put it (its generic address, cvta.param) and
the runtime passes the map it encodes (kernels/tensor_maps). Runs on the
kernels once they are in the LLVM dialect: the gpu-to-NVVM lowering keeps
no attribute of a gpu.func argument that says this."""

from __future__ import annotations

from dataclasses import dataclass

from mlir import ir

from .ir_helpers import PythonPass, nested_ops

TENSOR_MAP_BYTES = 128
TENSOR_MAP_ALIGNMENT = 64
# TMA ops and where their tensor map is: a load's second operand, the others' first.
_READS_TENSOR_MAP = ("nvvm.cp.async.bulk.tensor.shared.cluster.global", "nvvm.cp.async.bulk.tensor.prefetch",
                     "nvvm.cp.async.bulk.tensor.global.shared.cta", "nvvm.cp.async.bulk.tensor.reduce")


@dataclass(frozen=True)
class TensorMapParams(PythonPass):
    name = "tensor-map-params"

    def _run(self, module: ir.Operation, pass_) -> None:
        for function in nested_ops(module, lambda op: op.name == "llvm.func" and "nvvm.kernel" in op.attributes):
            positions = tensor_map_parameters(function)
            if positions:
                mark_by_value(function, positions)


def tensor_map_parameters(function: ir.Operation) -> set[int]:
    """The positions of `function`'s parameters that a TMA op reads as its
    tensor map, directly or through the block arguments branches pass or a
    select (the CFG's simplification merges a horizontal kernel's identical
    stores, each matmul's map then reaching the one store as a block
    argument)."""
    entry = function.regions[0].blocks[0]
    positions = set()
    for op in nested_ops(function, lambda op: op.name in _READS_TENSOR_MAP):
        descriptor = op.operands[1] if op.name.endswith("global") else op.operands[0]
        positions |= {source.arg_number for source in _sources(descriptor, entry)}
    return positions


def _sources(value: ir.Value, entry: ir.Block, seen: list | None = None) -> list[ir.BlockArgument]:
    """The entry block's arguments `value` may be: itself, those that
    branches pass to the block argument it is, or those an llvm.select
    chooses between."""
    if not isinstance(value, ir.BlockArgument):
        owner = value.owner.operation if isinstance(value.owner, ir.OpView) else value.owner
        if owner.name == "llvm.select":
            return _sources(owner.operands[1], entry, seen) + _sources(owner.operands[2], entry, seen)
        return []
    if value.owner == entry:
        return [value]
    seen = [] if seen is None else seen
    if value in seen:
        return []  # a loop's block argument, already followed
    seen.append(value)
    found = []
    for predecessor in value.owner.predecessors:
        terminator = list(predecessor.operations)[-1]
        for passed in _passed_to(terminator.operation, value.owner):
            found += _sources(passed[value.arg_number], entry, seen)
    return found


def _passed_to(branch: ir.Operation, block: ir.Block) -> list[list[ir.Value]]:
    """The operand lists `branch` passes to `block` (once per edge to it)."""
    operands = list(branch.operands)
    if branch.name == "llvm.br":
        return [operands]
    if branch.name == "llvm.cond_br":
        _, taken, _ = ir.DenseI32ArrayAttr(branch.attributes["operandSegmentSizes"])
        edges = [operands[1:1 + taken], operands[1 + taken:]]
        return [edge for successor, edge in zip(branch.successors, edges) if successor == block]
    raise ValueError(f"tensor-map-params: a tensor map reaches a TMA op through {branch.name}")


def mark_by_value(function: ir.Operation, positions: set[int]) -> None:
    """Parameters `positions` of a kernel: 128 bytes by value, 64-byte aligned, grid constants."""
    count = len(function.regions[0].blocks[0].arguments)
    existing = list(function.attributes["arg_attrs"]) if "arg_attrs" in function.attributes else []
    existing += [ir.DictAttr.get({})] * (count - len(existing))
    tensor_map = {"llvm.byval": ir.TypeAttr.get(ir.Type.parse(f"!llvm.array<{TENSOR_MAP_BYTES} x i8>")),
                  "llvm.align": ir.IntegerAttr.get(ir.IntegerType.get_signless(64), TENSOR_MAP_ALIGNMENT),
                  "nvvm.grid_constant": ir.UnitAttr.get()}
    attributes = []
    for position, current in enumerate(existing):
        entries = {named.name: named.attr for named in ir.DictAttr(current)}
        attributes.append(ir.DictAttr.get({**entries, **tensor_map} if position in positions else entries))
    function.attributes["arg_attrs"] = ir.ArrayAttr.get(attributes)
