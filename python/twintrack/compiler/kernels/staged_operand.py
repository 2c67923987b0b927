"""An epilogue's tensor operand brought in by TMA (sm_90a): where a matmul's
epilogue reads a tensor indexed as C is (SwiGLU's `up`, a residual), the
TMA kernel's consumer warpgroups copy its 64-row x 128-byte boxes into the
staging buffers their results leave from, and each thread reads its
operand pairs at the places it then writes its results to: no other
thread's read stands between, so a part's load, reads, writes and store
share one buffer.

Read from global memory in the accumulator's fragment layout, such an
operand used half of each 32-byte sector and its latency stood between
the last wgmma and the stores (bench/NOTES.md v78b). Here the first two
parts of a tile are copied while its K loop runs; part p + 2 once the
store of part p has read their buffer.

One mbarrier a staging buffer: the warpgroup's storing thread arrives on
it expecting the box's bytes, waits for the phase of that use, and then
meets its warpgroup. Buffer b is used by parts b, b + 2, ... of each
tile, so tile t's use j of it is the barrier's phase t * uses + j."""

from __future__ import annotations

from dataclasses import dataclass, replace

from mlir import ir
from mlir.dialects import arith, nvvm

from .barrier_ring import BARRIER_BYTES, wait_parity
from .builder import KernelBuilder
from .epilogue import Epilogue
from .matmul_common import MatmulOperands
from .tensor_maps import StoredLayout, memref_layout, shared_pointer, stored_layout


@dataclass(frozen=True)
class StagedOperand:
    """The epilogue input a TMA kernel stages: its position among the
    epilogue's inputs, its place among the tensor inputs (the launch's
    `KernelOperands.epilogue`), and its layout as TMA reads it (C's boxes)."""
    position: int
    tensor: int
    layout: StoredLayout


def staged_operand(ops: MatmulOperands, epilogue: Epilogue | None, box_rows: int,
                   box_columns: int) -> StagedOperand | None:
    """The first tensor input of `epilogue` that a TMA copy of C's box
    reads as C's results are placed: indexed by C's own loop indices, of
    C's shape and element (its box is the staging buffer's bytes), in a
    layout a tensor map describes. None: no such input."""
    if epilogue is None:
        return None
    c_layout = memref_layout(ops.c_type)
    if c_layout is None:
        return None
    c_dims = tuple(ops.view.store_dims) if ops.view is not None else tuple(range(len(c_layout.shape)))
    for tensor, (position, given) in enumerate(epilogue.tensor_inputs()):
        layout = memref_layout(given.memref_type)
        if layout is None or given.dims != c_dims or layout.shape != c_layout.shape \
                or layout.element != ops.out_element:
            continue
        read = stored_layout(replace(ops, c_type=given.memref_type), box_rows, box_columns)
        if isinstance(read, StoredLayout):
            return StagedOperand(position, tensor, read)
    return None


class OperandBarriers:
    """The mbarriers of `warpgroups` x `buffers` staging buffers, 8 bytes
    apart from shared address `first` (warpgroup-major)."""

    def __init__(self, w: KernelBuilder, first: ir.Value, warpgroups: int, buffers: int):
        self.w, self.first, self.warpgroups, self.buffers = w, first, warpgroups, buffers

    @staticmethod
    def bytes(warpgroups: int, buffers: int) -> int:
        return warpgroups * buffers * BARRIER_BYTES

    def initialize(self) -> None:
        """Each expects one arrival (the storing thread's); the caller fences and meets after."""
        for n in range(self.warpgroups * self.buffers):
            nvvm.MBarrierInitOp(shared_pointer(self.w, self.w.add(self.first, n * BARRIER_BYTES)),
                                self.w.constant(1, "i32"))

    def of(self, warpgroup: ir.Value, buffer: int) -> ir.Value:
        """The barrier of `warpgroup`'s buffer `buffer`."""
        w = self.w
        slot = w.add(w.mul(warpgroup, self.buffers), buffer)
        return shared_pointer(w, w.add(self.first, w.mul(slot, BARRIER_BYTES)))

    def wait(self, barrier: ir.Value, tile: ir.Value, uses_a_tile: int, use: int) -> None:
        """Wait for use `use` of the barrier in the block's tile number `tile`."""
        w = self.w
        phase = w.add(w.mul(tile, uses_a_tile), use) if uses_a_tile else w.index(use)
        wait_parity(w, barrier, arith.index_cast(ir.IntegerType.get_signless(32), w.rem(phase, 2)))

