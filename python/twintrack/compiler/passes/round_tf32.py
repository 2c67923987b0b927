"""round-tf32-operands: the B operand of an f32 matmul that will run as
tf32 rounded to tf32 (round to nearest, ties away from zero) before the
matmul reads it.

wgmma reads an f32 operand's top 19 bits: tf32 by truncation, toward zero.
Each product then carries a bias of the same sign, and through a deep
network (ResNet-50's 53 convolutions) the biases compound: 2e-2 from float64
where eager's cuDNN kernels, which round to nearest, give 1.2e-3.

A is the kernels' to round: the tf32 wgmma kernels load A's fragments from
shared memory into registers and round them on their way to the wgmmas
(kernels/wgmma_matmul.rounded_tf32_a_fragment), at no pass over A; where
those registers would cost a kernel a block an SM, gpu-matmul-kernels
rounds A by a copy instead (WgmmaMatmulWriter.a_registers_cost_a_block). B is
read by the wgmmas from shared memory, so it is rounded here: an
elementwise op on B's source, ahead of the views that only move its
elements (reshapes, zero padding, a transpose the matmul reads directly):
fusion then folds it into the kernel that produces the value (a layout
copy, an epilogue), and the matmul kernels still read the source through
its views (a weight read transposed). Where no kernel produces it (a
weight, an input) it costs a pass of its own, once for all the matmuls
that read it, but for a plain B, which the matmul kernels' transposing
copy rounds on its way (gpu-matmul-kernels). A value other ops read too
stays as it is rather than take a pass of its own.

Only matmuls the tf32 tensor-core kernels will take are rounded: one left
to the CUDA cores computes in f32 and reads its operands as they are.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from mlir import ir

from ..kernels.tf32_rounding import round_to_tf32
from ..target import DEFAULT_ARCH, DEFAULT_LOWERING_DIR, gpu_target
from .ir_helpers import PythonPass, defining_op, elementwise_map, is_zero_constant, nested_ops

_VIEWS = ("tensor.collapse_shape", "tensor.expand_shape", "tensor.extract_slice")


def _view_source(op: ir.Operation) -> tuple[ir.Operation, int] | None:
    """Where a view that only moves elements (or adds zeros) reads its
    source, the op and operand position, so that rounding commutes with
    it; None for anything else. A transpose or a copy is no view: it is a
    kernel of its own, which fusion will fold the rounding into."""
    if op.name in _VIEWS:
        return op, 0
    if op.name == "tensor.pad":
        yielded = list(op.regions[0].blocks[0].operations)[-1].operands[0]  # the padding value
        return (op, 0) if is_zero_constant(defining_op(yielded)) else None
    if op.name == "linalg.generic" and len(op.results) == 1 and \
            all("parallel" in str(i) for i in op.attributes["iterator_types"]):
        return _patches_source(op)
    return None


def _patches_source(generic: ir.Operation) -> tuple[ir.Operation, int] | None:
    """Where a convolution's patches (im2col) read their input: a copy
    through a window map (not a permutation: a transpose is a kernel), or,
    with the zero padding folded in (fold-patch-padding), a tensor.extract
    in the body, yielded where the window is inside and zero elsewhere."""
    block = generic.regions[0].blocks[0]
    body = list(block.operations)
    yielded = body[-1].operands[0]
    if len(generic.operands) == 2:
        read = ir.AffineMapAttr(generic.attributes["indexing_maps"][0]).value
        return (generic, 0) if yielded == block.arguments[0] and not read.is_permutation else None
    extracts = [op.operation for op in body if op.name == "tensor.extract"]
    if len(generic.operands) != 1 or len(extracts) != 1:
        return None
    extracted = extracts[0].results[0]
    chosen = defining_op(yielded)
    guarded = chosen is not None and chosen.name == "arith.select" and chosen.operands[1] == extracted \
        and is_zero_constant(defining_op(chosen.operands[2]))
    return (extracts[0], 0) if yielded == extracted or guarded else None


def _views(value: ir.Value):
    """The views the matmul operand `value` is read through, outermost first,
    each with where it reads its source. A transpose the matmul reads
    directly is one too: the matmul kernels read through it (a weight read
    transposed)."""
    owner = defining_op(value)
    if owner is not None and owner.name == "linalg.transpose":
        yield owner, (owner, 0)
        value = owner.operands[0]
    while (owner := defining_op(value)) is not None and (read := _view_source(owner)) is not None:
        yield owner, read
        value = read[0].operands[read[1]]


def _source_read(matmul: ir.Operation, position: int) -> tuple[ir.Operation, int]:
    """The op and operand position where the matmul's operand `position` is
    first read as a value of its own: behind the views, each of them read by
    nothing else."""
    user, at = matmul, position
    for view, read in _views(matmul.operands[position]):
        if len(list(view.results[0].uses)) != 1:
            break
        user, at = read
    return user, at


def _reads_windows(value: ir.Value) -> bool:
    """Is `value` (through views) a convolution's patches?"""
    return any(view.name == "linalg.generic" for view, _ in _views(value))


@dataclass(frozen=True)
class RoundTf32Operands(PythonPass):
    name = "round-tf32-operands"
    arch: str = DEFAULT_ARCH  # the matmul kernels' options: an operand is
    tf32: bool = False        # rounded only where their tf32 kernels
    lowering_dir: str = str(DEFAULT_LOWERING_DIR)  # take the matmul

    def _run(self, module: ir.Operation, pass_) -> None:
        if not self.tf32:
            return
        reads: dict[ir.Value, list[_Read]] = {}  # each source -> where the tf32 matmuls read it
        for matmul in nested_ops(module, lambda op: op.name in ("linalg.matmul", "linalg.batch_matmul")):
            if self._runs_as_tf32(matmul):
                read = _Read(*_source_read(matmul, 1), matmul.location)  # B (A: the kernels round it)
                reads.setdefault(read.source, []).append(read)
        for source, readers in reads.items():
            if _rounding_is_free(source, readers):
                rounded = _rounded_after_definition(source, readers[0].location)
                for read in readers:
                    read.user.operands[read.position] = rounded

    def _runs_as_tf32(self, matmul: ir.Operation) -> bool:
        """Will the tf32 tensor-core kernels take this matmul? A batched one
        only where it is a convolution's (an attention's batched matmuls go
        to the attention kernels, which compute f32 on the CUDA cores)."""
        from .gpu_matmul_kernels import chosen_generator
        from ..kernels.registry import TF32_GENERATORS
        a, b, c = (ir.RankedTensorType(v.type) for v in matmul.operands[:3])
        if not all(str(t.element_type) == "f32" for t in (a, b, c)) or not b.has_static_shape:
            return False
        if _rows_open(matmul, a, c):  # M known at run time: the kernel is chosen for the rows it is tiled for
            m = gpu_target(Path(self.lowering_dir)).dynamic_matmul_rows
            return chosen_generator(None, m, c.shape[1], a.shape[1], "f32", "f32", self.arch, True,
                                    Path(self.lowering_dir)) in TF32_GENERATORS
        if not (a.has_static_shape and c.has_static_shape):
            return False
        batched = matmul.name == "linalg.batch_matmul"
        if batched and not _reads_windows(matmul.operands[0]):
            return False
        batch = c.shape[0] if batched else None
        m, n = c.shape[-2:]
        k = math.prod(a.shape) // ((batch or 1) * m)
        return chosen_generator(batch, m, n, k, "f32", "f32", self.arch, True,
                                Path(self.lowering_dir)) in TF32_GENERATORS


def _rows_open(matmul: ir.Operation, a: ir.RankedTensorType, c: ir.RankedTensorType) -> bool:
    """A 2-D matmul whose M alone is known only at run time (gpu-matmul-kernels
    tiles it for its largest M and masks the last row tile)."""
    return (matmul.name == "linalg.matmul" and a.is_dynamic_dim(0) and c.is_dynamic_dim(0)
            and not a.is_dynamic_dim(1) and not c.is_dynamic_dim(1))


@dataclass(frozen=True)
class _Read:
    """Where a tf32 matmul reads an operand's source: `user`'s operand `position`."""
    user: ir.Operation
    position: int
    location: ir.Location  # the matmul's

    @property
    def source(self) -> ir.Value:
        return self.user.operands[self.position]


def _rounding_is_free(source: ir.Value, readers: list[_Read]) -> bool:
    """Does rounding `source` cost no pass over it that would not be made
    anyway? So where the tf32 matmuls are all that read it (the kernel that
    produces it then rounds what it stores), or where it is an argument (a
    parameter, an input: no kernel produces it, and no pass could be
    saved). A value other ops read too (a residual's shortcut) would take a
    pass of its own, for one layer's truncation: left as it is."""
    return isinstance(source.owner, ir.Block) or len(list(source.uses)) == len(readers)


def _rounded_after_definition(source: ir.Value, location: ir.Location) -> ir.Value:
    """`source` rounded to tf32, built where `source` is defined, so that it
    dominates every read of `source` a later matmul redirects to it; at the
    `location` of the matmul that asked for it, which the kernel report names."""
    owner = defining_op(source)
    point = ir.InsertionPoint.after(owner) if owner is not None else ir.InsertionPoint.at_block_begin(source.owner)
    with point, location:
        return elementwise_map(source, round_to_tf32)
