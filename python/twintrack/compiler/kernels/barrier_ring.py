"""A ring of shared buffers that TMA fills, paced by mbarriers (sm_90a): the
kernels whose producer warpgroup copies tiles for consumer warpgroups
(tma_matmul, tma_flash_attention).

Two mbarriers a buffer: `full[s]` completes when the TMA copies of buffer s
have landed (the producer arrives on it expecting the tile's bytes),
`empty[s]` when every consumer thread is done reading it. Step `step`
(counted over everything the block copies) uses buffer step % stages in
round step / stages; a wait for the round's parity (round % 2) returns once
that round's phase has completed. The producer's first wait on each
`empty[s]` asks for parity 1, which a fresh barrier reports complete.

In a cluster whose blocks share their copies (TMA multicast: a copy
lands at the same offset of each block's shared memory and completes on
each block's `full[s]`), a producer may refill buffer s only once every
block's consumers are done with it: `empty[s]` then counts the releases
of the whole cluster, one a consumer warp from each block."""

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
WARP_THREADS = 32
# An arrival on the mbarrier at shared address $0 of the cluster's block $1 (release at the
# CTA scope: a cluster-scope release fences every arrival, and the wgmmas wrote nothing to order).
REMOTE_ARRIVE = ("{ .reg .b32 at; mapa.shared::cluster.u32 at, $0, $1; "
                 "mbarrier.arrive.shared::cluster.b64 _, [at]; }")


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
class ClusterPeers:
    """The `size` blocks of a cluster that share their copies;
    `warp_leader` (i1): whether this thread releases buffers for its warp."""
    size: int
    warp_leader: ir.Value


@dataclass(frozen=True)
class BarrierRing:
    """The mbarriers of a `stages`-buffer ring: full[0..stages), then
    empty[0..stages), 8 bytes apart from the shared address `first`;
    `peers`: the cluster whose consumers release each buffer (None: this
    block's alone)."""
    w: KernelBuilder
    stages: int
    first: ir.Value
    peers: ClusterPeers | None = None

    @staticmethod
    def initialized(w: KernelBuilder, first: ir.Value, stages: int, thread: ir.Value, consumers: int,
                    producers: int = 1, peers: ClusterPeers | None = None) -> BarrierRing:
        """The ring's barriers at `first`, initialized by thread 0 (`full`
        expecting the arrivals of `producers` threads, `empty` every
        consumer thread's, or with `peers` each consumer warp's of every
        block of the cluster) before the whole block (cluster) meets."""
        ring = BarrierRing(w, stages, first, peers)
        releases = consumers if peers is None else peers.size * (consumers // WARP_THREADS)
        with w.only_if(arith.cmpi(arith.CmpIPredicate.eq, thread, w.index(0))):
            for s in range(stages):
                nvvm.MBarrierInitOp(ring._fixed(s), w.constant(producers, "i32"))
                nvvm.MBarrierInitOp(ring._fixed(stages + s), w.constant(releases, "i32"))
            nvvm.FenceMbarrierInitOp()
        if peers is None:
            w.barrier()
        else:  # a peer's copies and releases reach these barriers: they must be initialized first
            cluster_barrier()
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
        arrive_expecting(self.w, full, size)
        return full

    def arrive_when_copied(self, stage: ir.Value) -> None:
        """This producer thread's arrival on full[stage], once the cp.async
        copies it has issued so far have landed (noinc: the arrival is one
        of those the barrier was set up to expect)."""
        nvvm.CpAsyncMBarrierArriveOp(self.full(stage), noinc=True)

    def release(self, step: ir.Value) -> None:
        """This consumer thread is done with step `step`'s buffer (in a
        cluster: its warp is, each block's barrier told by the warp's first thread)."""
        stage, _ = self.slot(step)
        empty = self.empty(stage)
        if self.peers is None:
            nvvm.MBarrierArriveOp(ir.IntegerType.get_signless(64), empty)
            return
        with self.w.only_if(self.peers.warp_leader):
            address = llvm.ptrtoint(ir.IntegerType.get_signless(32), empty)
            for rank in range(self.peers.size):
                llvm.inline_asm(None, [address, self.w.constant(rank, "i32")], REMOTE_ARRIVE, "r,r",
                                has_side_effects=True)

    def _wait(self, barrier: ir.Value, parity: ir.Value) -> None:
        wait_parity(self.w, barrier, parity)

    def _fixed(self, n: int) -> ir.Value:
        return shared_pointer(self.w, self.w.add(self.first, n * BARRIER_BYTES))

    def _at(self, stage: ir.Value, first: int) -> ir.Value:
        """Barrier `first` + stage, for a run-time stage."""
        w = self.w
        offset = arith.index_cast(ir.IntegerType.get_signless(32), w.mul(stage, BARRIER_BYTES))
        base = self._fixed(first)
        return llvm.getelementptr(base.type, base, [offset], [GEP_DYNAMIC_INDEX],
                                  ir.IntegerType.get_signless(8), llvm.GEPNoWrapFlags.none)


def arrive_expecting(w: KernelBuilder, barrier: ir.Value, size: int) -> None:
    """This thread's arrival on mbarrier `barrier`, expecting `size` bytes of copies to complete on it."""
    nvvm.MBarrierArriveExpectTxOp(None, barrier, w.constant(size, "i32"))


def wait_parity(w: KernelBuilder, barrier: ir.Value, parity: ir.Value) -> None:
    """Wait until mbarrier `barrier`'s phase of parity `parity` (i32) has completed."""
    nvvm.MBarrierTryWaitParityOp(barrier, parity, w.constant(WAIT_HINT_NS, "i32"))


def cluster_barrier() -> None:
    """Every thread of the cluster meets (release, then acquire: what each
    block wrote to its shared memory before is seen by the others)."""
    nvvm.ClusterArriveOp()
    nvvm.ClusterWaitOp()


def tma_load(w: KernelBuilder, tensor_map: ir.Value, shared_address: ir.Value, coordinates: list[ir.Value],
             barrier: ir.Value, im2col_offsets: list[ir.Value] | None = None, multicast_blocks: int = 0) -> None:
    """One TMA copy of the box at `coordinates` (innermost first) into
    `shared_address`, completing on `barrier`. With `im2col_offsets` (a
    filter tap, innermost first) the map is an im2col one and the
    coordinates those of the first window's corner. With
    `multicast_blocks` (a mask of cluster ranks) the box lands at the same
    address of each of those blocks and completes on each one's barrier
    at `barrier`'s address."""
    i32, i16 = ir.IntegerType.get_signless(32), ir.IntegerType.get_signless(16)
    destination = llvm.addrspacecast(llvm.PointerType.get(7), shared_pointer(w, shared_address))
    offsets = [arith.index_cast(i16, o) for o in im2col_offsets or []]
    nvvm.CpAsyncBulkTensorGlobalToSharedClusterOp(
        destination, tensor_map, [arith.index_cast(i32, c) for c in coordinates], barrier, offsets,
        multicastMask=w.constant(multicast_blocks, "i16") if multicast_blocks else None,
        mode=nvvm.TMALoadMode.IM2COL if im2col_offsets is not None else None)
