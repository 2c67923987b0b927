"""outputs-in-place: a result computed into a temporary and then copied
into the function's output buffer is computed in the output buffer.

Bufferization writes a result straight into its out-parameter only when the
function returned the allocation itself. When it returned a reshape of it
(a matmul's [1, N] rows collapsed to [N] for an elementwise epilogue, then
expanded back), a `memref.copy` into the output remains: a kernel of its
own, or a copy step of the host plan, moving the whole result once more.
Where the output buffer is used by nothing but that copy, and the copy is
the last use of the temporary, the temporary becomes the output seen
through the inverse reshapes, and the copy goes.
"""

from __future__ import annotations

from dataclasses import dataclass

from mlir import ir
from mlir.dialects import memref

from .ir_helpers import (RESHAPE_OPS, PythonPass, block_positions, defining_op, defined_functions, position_in_block,
                         reshape_aliases, users_of)


@dataclass(frozen=True)
class OutputsInPlace(PythonPass):
    name = "outputs-in-place"

    def _run(self, module: ir.Operation, pass_) -> None:
        for func in defined_functions(module):
            block = func.regions[0].blocks[0]
            while (found := _copy_to_elide(block)) is not None:
                _compute_in_output(*found)


def _copy_to_elide(block: ir.Block) -> tuple[ir.Operation, list[ir.Operation], ir.Operation] | None:
    """(the copy into an output, the reshapes from the temporary to its
    source, the temporary's allocation) of the first copy that can go."""
    ops, position = block_positions(block)
    for copy in ops:
        if copy.name != "memref.copy":
            continue
        source, target = copy.operands[0], copy.operands[1]
        if not isinstance(target, ir.BlockArgument) or target.owner != block or len(users_of(target)) != 1:
            continue
        chain = reshapes_from_alloc(source)
        if chain is None or str(source.type) != str(target.type):
            continue
        allocation = defining_op(chain[0].operands[0]) if chain else defining_op(source)
        if allocation.block != block or not _invertible(chain):
            continue
        users = [u for alias in reshape_aliases(allocation.results[0]) for u in users_of(alias) if u.name not in RESHAPE_OPS]
        if all(u.name == "memref.dealloc" or position_in_block(u, block, position) <= position[copy]
               for u in users):
            return copy, chain, allocation
    return None


def reshapes_from_alloc(value: ir.Value) -> list[ir.Operation] | None:
    """The expand/collapse_shape ops from an allocation to `value`, in the
    order they apply; None where `value` is not an allocation seen through reshapes."""
    chain = []
    while (owner := defining_op(value)) is not None and owner.name in RESHAPE_OPS:
        chain.insert(0, owner)
        value = owner.operands[0]
    owner = defining_op(value)
    return chain if owner is not None and owner.name == "memref.alloc" else None


def _invertible(chain: list[ir.Operation]) -> bool:
    """Can the inverse reshapes be built before the allocation? With static
    types, always; with dynamic ones, where a collapse applies to the
    allocation itself, if at all (its expansion back takes the allocation's
    own sizes; an expansion's collapse back takes none: a matmul's (B·S, d)
    rows seen as (B, S, d))."""
    static = all(ir.MemRefType(value.type).has_static_shape for op in chain for value in (op.operands[0], op.results[0]))
    return static or all(op.name == "memref.expand_shape" for op in chain[1:])


def _compute_in_output(copy: ir.Operation, chain: list[ir.Operation], allocation: ir.Operation) -> None:
    """The allocation's uses take the output through the inverse of `chain`."""
    view = copy.operands[1]
    with ir.InsertionPoint(allocation), allocation.location:
        for reshape in reversed(chain):
            view = _inverse(reshape, view, list(allocation.operands))
    for free in [u for u in users_of(allocation.results[0]) if u.name == "memref.dealloc"]:
        free.erase()
    copy.erase()
    allocation.results[0].replace_all_uses_with(view)
    allocation.erase()


def _inverse(reshape: ir.Operation, value: ir.Value, sizes: list[ir.Value]) -> ir.Value:
    """`value` (of the reshape's result type) reshaped back to its source
    type, whose dynamic sizes are `sizes` (the allocation's)."""
    source_type = reshape.operands[0].type
    reassociation = reshape.attributes["reassociation"]
    if reshape.name == "memref.expand_shape":
        return memref.CollapseShapeOp(source_type, value, reassociation).result
    shape = ir.MemRefType(source_type).shape
    return memref.ExpandShapeOp(source_type, value, reassociation, sizes, shape).result
