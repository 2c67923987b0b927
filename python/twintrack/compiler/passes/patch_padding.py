"""fold-patch-padding: a convolution's patches (conv-as-matmul's im2col,
marked `twintrack.patches`) read the zero-padded input through its
padding: an element of the padding reads as zero, any other reads the
unpadded input. The padded copy (a kernel writing the whole input again,
once per 3x3 convolution) goes.

    patches[l…] = inside(i) ? x[clamp(i - low)] : 0,   i = read map (l…)

The clamp keeps the load in bounds where its value is not used.
"""

from __future__ import annotations

from dataclasses import dataclass

from mlir import ir

from .generic_body import indexing_maps
from .ir_helpers import PythonPass, defining_op, nested_ops

PATCHES_ATTR = "twintrack.patches"  # on conv-as-matmul's im2col copy


def _zero_pad(value: ir.Value) -> ir.Operation | None:
    """The tensor.pad defining `value` if its padding is static and one value defined outside it."""
    pad = defining_op(value)
    if pad is None or pad.name != "tensor.pad" or len(pad.operands) != 1:
        return None
    body = list(pad.regions[0].blocks[0].operations)
    yielded = body[-1].operands[0]
    if len(body) != 1 or (isinstance(yielded, ir.BlockArgument) and yielded.owner == pad.regions[0].blocks[0]):
        return None
    return pad


def _fold(patches: ir.Operation) -> None:
    from mlir.dialects import affine, arith, linalg, tensor
    pad = _zero_pad(patches.operands[0])
    if pad is None or len(patches.operands) != 2:
        return
    source = pad.operands[0]
    low = list(ir.DenseI64ArrayAttr(pad.attributes["static_low"]))
    high = list(ir.DenseI64ArrayAttr(pad.attributes["static_high"]))
    padding_value = list(pad.regions[0].blocks[0].operations)[-1].operands[0]
    read, written = indexing_maps(patches)
    loops = read.n_dims
    result_type = patches.results[0].type
    with patches.location, ir.InsertionPoint(patches):
        index = ir.IndexType.get()
        gather = linalg.GenericOp([result_type], [], [patches.operands[1]],
                                  ir.ArrayAttr.get([ir.AffineMapAttr.get(written)]),
                                  patches.attributes["iterator_types"])
        block = gather.regions[0].blocks.append(result_type.element_type)
        with ir.InsertionPoint(block):
            at = [linalg.IndexOp(ir.IntegerAttr.get(ir.IntegerType.get_signless(64), d)).result for d in range(loops)]
            indices, inside = [], None
            for dim, (expr, size) in enumerate(zip(read.results, source.type.shape)):
                shifted = affine.AffineApplyOp(ir.AffineMap.get(loops, 0, [expr - low[dim]]), at).result
                if low[dim] == 0 and high[dim] == 0:
                    indices.append(shifted)
                    continue
                zero, last = arith.constant(index, 0), arith.constant(index, size - 1)
                within = arith.andi(arith.cmpi(arith.CmpIPredicate.sge, shifted, zero),
                                    arith.cmpi(arith.CmpIPredicate.sle, shifted, last))
                inside = within if inside is None else arith.andi(inside, within)
                indices.append(arith.minsi(arith.maxsi(shifted, zero), last))
            value = tensor.extract(source, indices)
            linalg.YieldOp([arith.select(inside, value, padding_value) if inside is not None else value])
    patches.results[0].replace_all_uses_with(gather.results[0])
    patches.erase()
    if not list(pad.results[0].uses):
        pad.erase()


@dataclass(frozen=True)
class FoldPatchPadding(PythonPass):
    name = "fold-patch-padding"

    def _run(self, module: ir.Operation, pass_) -> None:
        for patches in nested_ops(module, lambda op: op.name == "linalg.generic" and PATCHES_ATTR in op.attributes):
            del patches.attributes[PATCHES_ATTR]
            _fold(patches)
