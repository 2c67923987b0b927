"""fold-patch-padding: a convolution's windows (conv-as-matmul's im2col
patches, its depthwise convolutions and pooling windows, marked
`twintrack.windows`) read the padded input through its padding: an element
of the padding reads as the padding value (zero; a max pool's -inf), any
other reads the unpadded input. The padded copy (a kernel
writing the whole input again, once per 3x3 convolution) goes, and the op
before it (an activation) reaches the window's op directly, to fuse.

    window[l…] = inside(i) ? x[clamp(i - low)] : 0,   i = read map (l…)

The clamp keeps the load in bounds where its value is not used. Padding
along an innermost dim read at a loop index (an image's zero channels,
channels-last) stays written, so that a window's channels remain whole
vectors of the input; along one read at a window position (a direct
convolution's input columns, channels-first) it folds as any other.
"""

from __future__ import annotations

from dataclasses import dataclass

from mlir import ir

from .generic_body import indexing_maps
from .ir_helpers import PythonPass, defining_op, erase_if_unused, nested_ops

WINDOWS_ATTR = "twintrack.windows"  # on conv-as-matmul's patches, depthwise convolutions and pooling windows


def constant_pad(value: ir.Value) -> ir.Operation | None:
    """The tensor.pad defining `value` if its padding is static and one value defined outside it."""
    pad = defining_op(value)
    if pad is None or pad.name != "tensor.pad" or len(pad.operands) != 1:
        return None
    body = list(pad.regions[0].blocks[0].operations)
    yielded = body[-1].operands[0]
    if len(body) != 1 or (isinstance(yielded, ir.BlockArgument) and yielded.owner == pad.regions[0].blocks[0]):
        return None
    return pad


def _fold(generic: ir.Operation) -> None:
    """The generic with its one zero-padded input read through the padding (module docstring)."""
    from mlir.dialects import affine, arith, linalg, tensor

    from ..kernels.epilogue import IRMapping
    inputs = len(generic.operands) - len(generic.results)
    padded = [i for i in range(inputs) if constant_pad(generic.operands[i]) is not None]
    if len(padded) != 1:
        return
    position = padded[0]
    pad = constant_pad(generic.operands[position])
    source = pad.operands[0]
    low = list(ir.DenseI64ArrayAttr(pad.attributes["static_low"]))
    high = list(ir.DenseI64ArrayAttr(pad.attributes["static_high"]))
    maps = indexing_maps(generic)
    read, loops = maps[position], maps[position].n_dims
    if (low[-1] or high[-1]) and isinstance(read.results[-1].maybe_downcast(), ir.AffineDimExpr):
        return  # zeros along the innermost dim read at a loop (channels) stay written: they are read as vectors
    padding_value = list(pad.regions[0].blocks[0].operations)[-1].operands[0]
    kept = [i for i in range(len(generic.operands)) if i != position]
    old_block = generic.regions[0].blocks[0]
    with generic.location, ir.InsertionPoint(generic):
        index = ir.IndexType.get()
        folded = linalg.GenericOp([r.type for r in generic.results], [generic.operands[i] for i in kept[:inputs - 1]],
                                  [generic.operands[i] for i in kept[inputs - 1:]],
                                  ir.ArrayAttr.get([ir.AffineMapAttr.get(maps[i]) for i in kept]),
                                  generic.attributes["iterator_types"])
        block = folded.regions[0].blocks.append(*[old_block.arguments[i].type for i in kept])
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
            mapping = IRMapping()
            mapping.map(old_block.arguments[position],
                        arith.select(inside, value, padding_value) if inside is not None else value)
            for new_position, old_position in enumerate(kept):
                mapping.map(old_block.arguments[old_position], block.arguments[new_position])
            for op in old_block.operations:
                mapping.clone(op.operation)
    for old, new in zip(generic.results, folded.results):
        old.replace_all_uses_with(new)
    generic.erase()
    erase_if_unused(pad)


@dataclass(frozen=True)
class FoldPatchPadding(PythonPass):
    name = "fold-patch-padding"

    def _run(self, module: ir.Operation, pass_) -> None:
        for generic in nested_ops(module, lambda op: op.name == "linalg.generic" and WINDOWS_ATTR in op.attributes):
            del generic.attributes[WINDOWS_ATTR]
            _fold(generic)
