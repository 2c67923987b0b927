"""A ring of shared buffers that TMA fills, paced by mbarriers (sm_90a): the
kernels whose producer warpgroup copies tiles for consumer warpgroups
(tma_matmul, tma_flash_attention).

Two mbarriers a buffer: `full[s]` completes when the TMA copies of buffer s
have landed (the producer arrives on it expecting the tile's bytes),
`empty[s]` when every consumer thread is done reading it. Step `step`
(counted over everything the block copies) uses buffer step % stages in
round step / stages; a wait for the round's parity (round % 2) returns once
that round's phase has completed. The producer's first wait on each
`empty[s]` asks for parity 1, which a fresh barrier reports complete."""

from __future__ import annotations

from dataclasses import dataclass

from mlir import ir
from mlir.dialects import arith, llvm, nvvm

from .builder import KernelBuilder
from .tensor_maps import shared_pointer

BARRIER_BYTES = 8
# The longest a waiting thread sleeps before it tests its mbarrier again
# (ns): it wakes as soon as the phase completes.
WAIT_HINT_NS = 10_000_000
GEP_DYNAMIC_INDEX = -2**31  # llvm.getelementptr's marker of an index taken from its operands


REGISTERS_PER_SM = 65_536
WARPGROUP_THREADS = 128


def consumer_registers(consumers: int, producer_registers: int, blocks_per_sm: int = 1) -> int:
    """The registers a consumer thread can take (setmaxnreg: multiples of
    8, at most 256) from its block's share once the producer warpgroup has
    given its registers up to `producer_registers`. A block's share is what
    each of its threads gets at entry (ptxas: the SM's registers over the
    resident threads, in multiples of 8); an increase past it never returns."""
    threads = WARPGROUP_THREADS * (consumers + 1)
    share = REGISTERS_PER_SM // (blocks_per_sm * threads) // 8 * 8 * threads
    return min(256, (share - WARPGROUP_THREADS * producer_registers) // (WARPGROUP_THREADS * consumers) // 8 * 8)


def ring_barrier_bytes(stages: int) -> int:
    """The shared bytes of a ring's barriers: full and empty, a pair a buffer."""
    return 2 * stages * BARRIER_BYTES


@dataclass(frozen=True)
class BarrierRing:
    """The mbarriers of a `stages`-buffer ring: full[0..stages), then
    empty[0..stages), 8 bytes apart from the shared address `first`."""
    w: KernelBuilder
    stages: int
    first: ir.Value

    @staticmethod
    def initialized(w: KernelBuilder, first: ir.Value, stages: int, thread: ir.Value, consumers: int,
                    producers: int = 1) -> BarrierRing:
        """The ring's barriers at `first`, initialized by thread 0 (`full`
        expecting the arrivals of `producers` threads, `empty` every
        consumer thread's) before the whole block meets."""
        ring = BarrierRing(w, stages, first)
        with w.only_if(arith.cmpi(arith.CmpIPredicate.eq, thread, w.index(0))):
            for s in range(stages):
                nvvm.MBarrierInitOp(ring._fixed(s), w.constant(producers, "i32"))
                nvvm.MBarrierInitOp(ring._fixed(stages + s), w.constant(consumers, "i32"))
            nvvm.FenceMbarrierInitOp()
        w.barrier()
        return ring

    def slot(self, step: ir.Value) -> tuple[ir.Value, ir.Value]:
        """(buffer, the parity of its round: i32) of step `step`."""
        w = self.w
        parity = arith.index_cast(ir.IntegerType.get_signless(32), w.rem(w.div(step, self.stages), 2))
        return w.rem(step, self.stages), parity

    def full(self, stage: ir.Value) -> ir.Value:
        return self._at(stage, 0)

    def empty(self, stage: ir.Value) -> ir.Value:
        return self._at(stage, self.stages)

    def wait_full(self, step: ir.Value) -> ir.Value:
        """Wait until step `step`'s copies have landed; its buffer."""
        stage, parity = self.slot(step)
        self._wait(self.full(stage), parity)
        return stage

    def wait_empty(self, step: ir.Value) -> ir.Value:
        """Wait until the consumers are done with the buffer step `step`
        refills (the round before's); the buffer."""
        stage, parity = self.slot(step)
        self._wait(self.empty(stage), arith.xori(parity, self.w.constant(1, "i32")))
        return stage

    def expect(self, stage: ir.Value, size: int) -> ir.Value:
        """The producer's arrival on full[stage], expecting `size` bytes of copies; the barrier."""
        full = self.full(stage)
        nvvm.MBarrierArriveExpectTxOp(None, full, self.w.constant(size, "i32"))
        return full

    def arrive_when_copied(self, stage: ir.Value) -> None:
        """This producer thread's arrival on full[stage], once the cp.async
        copies it has issued so far have landed (noinc: the arrival is one
        of those the barrier was set up to expect)."""
        nvvm.CpAsyncMBarrierArriveOp(self.full(stage), noinc=True)

    def release(self, step: ir.Value) -> None:
        """This consumer thread is done with step `step`'s buffer."""
        stage, _ = self.slot(step)
        nvvm.MBarrierArriveOp(ir.IntegerType.get_signless(64), self.empty(stage))

    def _wait(self, barrier: ir.Value, parity: ir.Value) -> None:
        nvvm.MBarrierTryWaitParityOp(barrier, parity, self.w.constant(WAIT_HINT_NS, "i32"))

    def _fixed(self, n: int) -> ir.Value:
        return shared_pointer(self.w, self.w.add(self.first, n * BARRIER_BYTES))

    def _at(self, stage: ir.Value, first: int) -> ir.Value:
        """Barrier `first` + stage, for a run-time stage."""
        w = self.w
        offset = arith.index_cast(ir.IntegerType.get_signless(32), w.mul(stage, BARRIER_BYTES))
        base = self._fixed(first)
        return llvm.getelementptr(base.type, base, [offset], [GEP_DYNAMIC_INDEX],
                                  ir.IntegerType.get_signless(8), llvm.GEPNoWrapFlags.none)


def tma_load(w: KernelBuilder, tensor_map: ir.Value, shared_address: ir.Value, coordinates: list[ir.Value],
             barrier: ir.Value, im2col_offsets: list[ir.Value] | None = None) -> None:
    """One TMA copy of the box at `coordinates` (innermost first) into
    `shared_address`, completing on `barrier`. With `im2col_offsets` (a
    filter tap, innermost first) the map is an im2col one and the
    coordinates those of the first window's corner."""
    i32, i16 = ir.IntegerType.get_signless(32), ir.IntegerType.get_signless(16)
    destination = llvm.addrspacecast(llvm.PointerType.get(7), shared_pointer(w, shared_address))
    offsets = [arith.index_cast(i16, o) for o in im2col_offsets or []]
    nvvm.CpAsyncBulkTensorGlobalToSharedClusterOp(
        destination, tensor_map, [arith.index_cast(i32, c) for c in coordinates], barrier, offsets,
        mode=nvvm.TMALoadMode.IM2COL if im2col_offsets is not None else None)
