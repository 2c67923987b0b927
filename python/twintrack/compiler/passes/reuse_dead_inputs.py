"""reuse-dead-inputs: an elementwise op writes into an input buffer that
dies with it, instead of a fresh buffer.

Bufferization gives every result a new allocation. When a linalg.generic is
elementwise (all loops parallel, identity maps) and one of its inputs is a
temporary of the same type read for the last time by this op, each element
is read before the same thread writes it, so the output can take the input's
buffer: one allocation fewer live at a time (softmax over the attention
scores, for example, no longer holds two score-sized buffers).
"""

from __future__ import annotations

from dataclasses import dataclass

from mlir import ir

from .ir_helpers import (RESHAPE_OPS, PythonPass, block_positions, defining_op, position_in_block, reshape_aliases,
                         users_of)

_PLAIN_USERS = ("linalg.", "memref.dealloc", "memref.copy", "func.call") + RESHAPE_OPS


def _defined_by_alloc(value: ir.Value) -> bool:
    owner = defining_op(value)
    return owner is not None and owner.name == "memref.alloc"


def _root_alloc(value: ir.Value) -> ir.Value | None:
    """The allocation a value is (a reshape of), or None."""
    while (owner := defining_op(value)) is not None and owner.name in RESHAPE_OPS:
        value = owner.operands[0]
    return value if _defined_by_alloc(value) else None


def _is_identity(map_attr) -> bool:
    affine_map = ir.AffineMapAttr(map_attr).value
    return affine_map.is_permutation and affine_map == ir.AffineMap.get_minor_identity(
        affine_map.n_dims, affine_map.n_dims)


@dataclass(frozen=True)
class ReuseDeadInputs(PythonPass):
    name = "reuse-dead-inputs"

    def _run(self, module: ir.Operation, pass_) -> None:
        for func in module.regions[0].blocks[0].operations:
            if func.operation.name == "func.func" and func.operation.regions[0].blocks:
                self._reuse_in(func.operation.regions[0].blocks[0])

    def _reuse_in(self, block: ir.Block) -> None:
        ops, position = block_positions(block)
        index = 0
        while index < len(ops):
            op = ops[index]
            donor = _dead_input_for(op, index, position) if op.name == "linalg.generic" else None
            if donor is not None:
                _write_into(op, donor)
                # Positions are taken afresh: erasing an op gives the
                # bindings' handles of the others new identities.
                ops, position = block_positions(block)
                index -= 1  # the output's allocation, erased, came before it
            index += 1


def _dead_input_for(op: ir.Operation, index: int, position: dict) -> ir.Value | None:
    """The input whose buffer the output of this elementwise op can take, if any."""
    inputs = len(op.operands) - 1
    if len(op.results) or inputs < 1 or len(op.operands) - inputs != 1:
        return None
    if any("reduction" in str(it) for it in op.attributes["iterator_types"]):
        return None
    maps = list(op.attributes["indexing_maps"])
    output = op.operands[inputs]
    body = op.regions[0].blocks[0]
    if not _is_identity(maps[inputs]) or list(body.arguments[inputs].uses) or not _defined_by_alloc(output):
        return None
    if any(position_in_block(user, op.block, position) < index for user in users_of(output)):
        return None  # written or read before this op (a loop's body included)
    operands = list(op.operands)[:inputs]
    for candidate, map_attr in zip(operands, maps):
        root = _root_alloc(candidate)
        if str(candidate.type) != str(output.type) or root is None \
                or not _is_identity(map_attr):
            continue
        aliases = reshape_aliases(root)
        if sum(1 for v in operands if any(v == alias for alias in aliases)) != 1:
            continue  # read again through another view: overwriting would change what it sees
        users = [user for alias in aliases for user in users_of(alias) if user.name not in RESHAPE_OPS]
        if all(user.name.startswith(_PLAIN_USERS) and user in position
               and (position[user] <= index or user.name == "memref.dealloc") for user in users):
            return candidate
    return None


def _write_into(op: ir.Operation, donor: ir.Value) -> None:
    """The output's uses move to the donor; the donor's allocation is then
    freed at the end of the block (where the output's was), the output's is gone."""
    output = op.operands[len(op.operands) - 1]
    block_end = list(op.block.operations)[-1].operation
    for free in [user for user in users_of(_root_alloc(donor)) if user.name == "memref.dealloc"]:
        free.move_before(block_end)
    for free in [user for user in users_of(output) if user.name == "memref.dealloc"]:
        free.erase()
    output.replace_all_uses_with(donor)
    defining_op(output).erase()
