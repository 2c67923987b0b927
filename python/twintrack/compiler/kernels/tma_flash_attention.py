"""Flash attention on wgmma with K and V copied by TMA from a producer
warpgroup (sm_90a; FlashAttention-3's warp specialization).

The consumer warpgroups compute as the wgmma flash kernel does
(wgmma_flash_attention: Q in registers, tile i + 1's scores and tile i's
P·V issued together, the softmax between their waits), but copy nothing
and never meet at a block barrier: a producer warpgroup, whose one thread
issues a `cp.async.bulk.tensor` per 64 columns of each K and V tile
through tensor maps the host encodes, keeps the ring full. Each buffer has
two mbarriers (barrier_ring): `full` completes when the tile's copies have
landed, `empty` when every consumer thread has finished the P·V that read
its V tile (its K tile's scores were waited for a step before). The
producer gives most of its registers to the consumers (setmaxnreg). Rows
of K and V past a ragged end arrive as zeros, as cp.async's zero fill gave
them; their scores are masked as before.

Taking turns (`FlashTileConfig.turns`, FlashAttention-3's ping-pong): the
consumer warpgroups issue their matmuls one after another, each waiting at
a named barrier of its own for the warpgroup before it to have issued
(the last passes the turn to the first), so that one warpgroup's softmax
runs while the next one's matmuls have the tensor cores.
"""

from __future__ import annotations

from mlir import ir
from mlir.dialects import arith, nvvm

from .barrier_ring import BARRIER_BYTES, BarrierRing, consumer_registers, ring_barrier_bytes, tma_load
from .flash_attention import AttentionKernelOperands, AttentionOperands, FlashTileConfig, OperandSlice
from .matmul_common import element_bytes, round_up
from .tensor_maps import SWIZZLE_BYTES, erase_tensor_map, tensor_map
from .wgmma_flash_attention import WgmmaFlashWriter
from .wgmma_matmul import ATOM_BYTES, N_ATOM_ELEMENTS, WARPGROUP, AlignedSharedMemory

CONSUMERS_BARRIER = 1  # the consumer warpgroups' named barrier (0 is the block's)
FIRST_TURN_BARRIER = 2  # warpgroup g waits for its turn to issue at named barrier 2 + g
PRODUCER_REGISTERS = 24  # one thread's loop of TMA copies


class TmaFlashWriter(WgmmaFlashWriter):
    def __init__(self, attention: AttentionOperands, config: FlashTileConfig):
        super().__init__(attention, config)
        self.path = self.path.replace("flash-attention-wgmma", "flash-attention-tma-wgmma", 1)
        self.maps: list[ir.Value] = []  # K's and V's tensor maps, made on the host

    # ------------------------------------------------------------ host side
    def host_values(self, operands: AttentionKernelOperands) -> list[ir.Value]:
        """K's and V's tensor maps."""
        _, k_slice, v_slice = self.attention.slices
        self.maps = [tensor_map(operands.k, self._box(k_slice)), tensor_map(operands.v, self._box(v_slice))]
        return self.maps

    def _box(self, s: OperandSlice) -> list[int]:
        """A tile's keys x 64 columns, 1 in every batch dim of the argument."""
        keys = s.tile_dim(0)
        return [self.cfg.keys if d == keys else N_ATOM_ELEMENTS if name == "tile" else 1
                for d, name in enumerate(s.dims)]

    def discard_host_values(self, values: list[ir.Value]) -> None:
        for value in values:
            erase_tensor_map(value)

    def dynamic_shared_bytes(self) -> int:
        """The wgmma kernel's (ring, Q, tile classes, + the alignment), then the ring's barriers."""
        return self._barriers_offset() + ring_barrier_bytes(self.stages) + ATOM_BYTES

    def _barriers_offset(self) -> int:
        """After the ring, Q's tile and the tile classes, 8-byte aligned."""
        return round_up(self.stages * self.stage_bytes + self._q_bytes() + self._class_bytes(), BARRIER_BYTES)

    def barrier(self) -> None:
        """The consumer threads meet (the producer goes its own way)."""
        nvvm.BarrierOp(None, barrierId=self.w.constant(CONSUMERS_BARRIER, "i32"),
                       numberOfThreads=self.w.constant(self.threads, "i32"))

    # ------------------------------------------------------------ the kernel
    def kernel_body(self) -> None:
        w, cfg = self.w, self.cfg
        self.m0 = self.first_query_row()
        shared = AlignedSharedMemory.take(w)
        self.ring_address = shared.address
        self.shared_buffers(shared)
        self.barriers = BarrierRing.initialized(w, w.add(shared.address, self._barriers_offset()), self.stages,
                                                self.tid, self.threads)
        end = self.key_end()
        with w.either(w.less(self.tid, self.threads), cfg.warpgroups / (cfg.warpgroups + 1)) as (consumers, producer):
            with consumers():
                if cfg.warpgroups > 1:  # (one warpgroup has all the registers it can address)
                    nvvm.SetMaxRegisterOp(consumer_registers(cfg.warpgroups, PRODUCER_REGISTERS, cfg.blocks_per_sm),
                                          nvvm.SetMaxRegisterAction.increase)
                self._consume(shared, end)
            with producer():
                if cfg.warpgroups > 1:
                    nvvm.SetMaxRegisterOp(PRODUCER_REGISTERS, nvvm.SetMaxRegisterAction.decrease)
                with w.only_if(arith.cmpi(arith.CmpIPredicate.eq, self.tid, w.index(self.threads))):
                    self._produce(end)

    # ------------------------------------------------------------ producer
    def _produce(self, end: ir.Value) -> None:
        """Tile after tile of the block's keys (one at least: the consumers
        compute the first tile's scores whatever the end) into the ring."""
        w, cfg = self.w, self.cfg
        tile_bytes = self.tile_elements * element_bytes(self.t)
        with w.loop(0, arith.maxui(end, w.index(cfg.keys)), cfg.keys) as loop:
            k0 = loop.induction
            stage = self.barriers.wait_empty(w.div(k0, cfg.keys))
            full = self.barriers.expect(stage, self.stage_bytes)
            origin = w.add(self.ring_address, w.mul(stage, self.stage_bytes))
            for which, (tensor_map_, s) in enumerate(zip(self.maps, self.attention.slices[1:])):
                offsets = self.batch_offsets(s)
                for column in range(0, cfg.head_dim, N_ATOM_ELEMENTS):
                    tile = iter([k0, w.index(column)])
                    coordinates = [next(tile) if offset is None else offset for offset in offsets]
                    # A 64-wide column of atoms holds all the tile's rows (`_descriptors`).
                    address = w.add(origin, which * tile_bytes + column // N_ATOM_ELEMENTS * cfg.keys * SWIZZLE_BYTES)
                    tma_load(w, tensor_map_, address, list(reversed(coordinates)), full)
            loop.yield_([])

    # ------------------------------------------------------------ consumers
    def _consume(self, shared: AlignedSharedMemory, end: ir.Value) -> None:
        w, cfg = self.w, self.cfg
        self.thread_places()
        self._descriptors(self.ring_address)
        self.prepare_keys(shared, end)
        self.tiles = [self._tile_view(self.arguments[0], self.attention.slices[0])]  # K and V come by their maps
        self._copy_async(self.tiles[0], (cfg.bm, cfg.head_dim), (self.m0, w.index(0)), self.q_shared,
                         self._padded_place(cfg.head_dim, w.index(0)), None, self.m_edge)
        nvvm.CpAsyncCommitGroupOp()
        nvvm.CpAsyncWaitGroupOp(0)
        self.barrier()
        self.warpgroup = w.div(self.tid, WARPGROUP)
        self.attend(end)

    def wait_first_tile(self) -> None:
        self.barriers.wait_full(self.w.index(0))

    def next_step(self, k0: ir.Value, end: ir.Value, output: ir.Value,
                  probabilities: list[ir.Value]) -> tuple[ir.Value, ir.Value]:
        """Step k0 / keys's matmuls issued once tile i + 1's copies have landed."""
        step = self.w.div(k0, self.cfg.keys)
        self.barriers.wait_full(self.w.add(step, self.w.index(1)))
        return self.issue_step(step, output, probabilities)

    def first_turn(self) -> None:
        """The last warpgroup passes the first turn to the first."""
        w, cfg = self.w, self.cfg
        if cfg.turns:
            with w.only_if(arith.cmpi(arith.CmpIPredicate.eq, self.warpgroup, w.index(cfg.warpgroups - 1))):
                self.pass_turn()
            self.take_turn()

    def pass_last_turn(self) -> None:
        """None passed back to the first warpgroup, which waits no more."""
        if self.cfg.turns:
            with self.w.only_if(self.w.less(self.warpgroup, self.cfg.warpgroups - 1)):
                self.pass_turn()

    def take_turn(self) -> None:
        """Wait until the warpgroup before this one has issued its matmuls."""
        if self.cfg.turns:
            nvvm.BarrierOp(None, barrierId=self._turn_barrier(self.warpgroup),
                           numberOfThreads=self.w.constant(2 * WARPGROUP, "i32"))

    def pass_turn(self) -> None:
        """The next warpgroup may issue."""
        if self.cfg.turns:
            following = self.w.rem(self.w.add(self.warpgroup, self.w.index(1)), self.cfg.warpgroups)
            nvvm.BarrierArriveOp(self.w.constant(2 * WARPGROUP, "i32"), barrierId=self._turn_barrier(following))

    def _turn_barrier(self, warpgroup: ir.Value) -> ir.Value:
        return arith.index_cast(ir.IntegerType.get_signless(32), self.w.add(warpgroup, self.w.index(FIRST_TURN_BARRIER)))

    def step_done(self, k0: ir.Value) -> None:
        """Tile k0 / keys's buffer is free: its P·V has been waited for."""
        self.barriers.release(self.w.div(k0, self.cfg.keys))

