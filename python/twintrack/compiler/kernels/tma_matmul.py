"""Warpgroup-MMA matmul fed by TMA, warp-specialized and persistent
(sm_90a): C[b] = A[b] @ B[b] (or +=) for f16/bf16, or f32 as tf32 with a
K-major B.

The wgmma_matmul kernel's warps both copy (16-byte cp.async, one address
each) and multiply, and meet at a block barrier every K step; each block
computes one tile, so a block's epilogue leaves its SM's tensor cores idle
until the next block starts. Here:

- **Tensor memory access (TMA).** One thread copies a whole operand tile
  with one `cp.async.bulk.tensor` instruction, through a tensor map (the
  operand's sizes, strides, the box of one tile and the 128-byte swizzle
  the wgmma descriptors read) that the runtime encodes on the host and
  passes as a 128-byte kernel parameter (`.param`, grid constant). Rows
  and columns past a ragged edge arrive as zeros.
- **Warp specialization.** Warpgroups 0..W-1 (the consumers) issue the
  wgmmas of their 64 rows; warpgroup W (the producer) keeps the ring of
  `stages` buffers full. Two mbarriers per buffer replace the block
  barrier: `full[s]` completes when the TMA copies of buffer s have landed
  (the producer arrives on it expecting the tile's bytes), `empty[s]` when
  every consumer thread has finished the wgmmas that read it. The producer
  gives its registers to the consumers (setmaxnreg). With tf32 the
  consumers load A's fragments from the stage into registers and round
  them to nearest on their way to the wgmmas (wgmma_matmul's K loop).
- **A persistent tile loop.** The grid holds one block per SM; block i
  computes tiles i, i + G, ... (in bands of row tiles: `_tile_place`). The
  producer starts the next tile's copies while the consumers store this
  one's results (their epilogue).
- **A read through a convolution's windows** (an implicit im2col,
  window_read). Where the windows are a channels-last convolution's
  (window_geometry), an im2col tensor map of its input describes them: one
  copy a K step loads the step's filter tap for the tile's 128 output
  pixels, 64 channels each, zeros where a window hangs over the edge, as a
  stored A's tile is loaded. Otherwise no tensor map describes the
  patches, so the whole producer warpgroup copies A's tile, 16 bytes a
  cp.async, and each producer thread arrives on `full[s]` once its copies
  have landed; one of them still copies B with TMA. The consumers fence
  those copies to the async proxy the wgmmas read through.
- **Clusters sharing B** (`cluster_rows`, a K-major B). Two blocks of a
  cluster take adjacent row tiles of one column tile: each copies its own
  A and half of the B tile they share, multicast to both, so each block
  reads 32 of its 48 KiB a step from L2 (cuBLAS's 4096³ fp16 kernel runs
  clusters of 2). Both walk the same tiles in step; a buffer is refilled
  once both blocks' consumers are done with it (barrier_ring).
- **TMA stores.** Where a tensor map can describe C, each consumer
  warpgroup writes its 64 rows of results (the epilogue applied) 128 bytes
  of columns at a time into one of two swizzled staging buffers of its
  own, and one of its threads stores the buffer with one
  `cp.async.bulk.tensor` to global memory: the warpgroup goes on to fill
  the other buffer, then to the next tile's wgmmas, while the store drains
  (a buffer is refilled once its store has read it). Stored from registers,
  two elements a store and half of each 32-byte sector, the epilogue took
  about 12% of a 4096³ fp16 GEMM's time with the tensor cores idle.
- **Ping-pong** (`pingpong`): each consumer warpgroup computes whole
  tiles, all bm rows (bm / 64 accumulators), the two taking the block's
  tiles in turn, so one warpgroup's K loop runs while the other applies
  its epilogue and stores: the tensor cores are not idle through an
  epilogue (a cooperative tile's warpgroups reach theirs together). Each
  buffer is released by the one warpgroup that read it. The K loops take
  turns (a barrier each warpgroup, the other's arrival when its K loop is
  issued): a warpgroup that started its tile at once would wait on ring
  buffers rounds ahead of the producer, where a parity wait passes
  wrongly. Not yet run on a GPU with the turns (matmul.toml).
- **An epilogue operand staged by TMA** (staged_operand; where the tile
  asks, `staged_operand`): a tensor the epilogue reads as C is indexed
  (SwiGLU's `up`, a residual) is copied box by box into those staging
  buffers, the first two parts of a tile while its K loop runs; each
  thread reads its operands where it then writes its results.

The ring's barriers and phases: barrier_ring."""

from __future__ import annotations

import functools
from dataclasses import dataclass, replace

from mlir import ir
from mlir.dialects import arith, llvm, nvvm

from .barrier_ring import (BARRIER_BYTES, WARP_THREADS, BarrierRing, ClusterPeers, arrive_expecting, cluster_barrier,
                           consumer_registers, ring_barrier_bytes, tma_load, wait_parity)
from .builder import BLOCKS_PER_SM_ATTR, CLUSTER_BLOCKS_ATTR
from .matmul_common import KernelOperands, MatmulOperands, element_bytes, vector_type
from .staged_operand import OperandBarriers, staged_operand
from .tensor_maps import (SWIZZLE_BYTES, TENSOR_MAP_ELEMENTS, as_stored, im2col_tensor_map, shared_pointer,
                          tensor_map, tma_layout_problem)
from .window_geometry import Im2colGeometry
from .wgmma_matmul import (N_ATOM_ELEMENTS, STORE_BUFFERS, WARPGROUP, WGMMA_M, StepCopies, WgmmaMatmulWriter,
                           WgmmaTileConfig, wgmma_wait)

# Registers a producer thread keeps after setmaxnreg: it gives most of its
# share to the consumers (`consumer_registers`). One that computes where
# each window's chunk of A comes from keeps more.
PRODUCER_REGISTERS = 40
GATHERING_PRODUCER_REGISTERS = 96
# A gathered A (a convolution's windows) is copied by the producer's 128
# threads, 16 bytes a copy: only tiles this wide give the tensor cores work
# enough per gathered row, and only where their tiles cover this share of
# the SMs (H100, 3x3 convolutions channels-last at batch 64: 14x14x256,
# 98 tiles of 128 x 256, 0.036 ms against the wgmma kernel's best 0.041;
# 128 x 128 tiles 0.062; 7x7x512, 50 tiles, 0.074 against 0.053).
GATHERED_TILE_COLUMNS = 256
GATHERED_SM_SHARE = 2 / 3
# Windows TMA's im2col mode reads (window_geometry) cost the producer one
# copy a step, as a stored A: any tile, where the narrowest (128 x 64)
# cover this share of the SMs.
IM2COL_SM_SHARE = 2 / 3
IM2COL_TILE = (128, 64)


def warp_uniform(w, value: ir.Value) -> ir.Value:
    """`value` (an index the same across each warp) as lane 0 of the warp
    has it: ptxas then knows it is warp-uniform. A loop whose bounds it
    cannot prove so (a warpgroup's turn, from the thread id) is a divergent
    path, and wgmmas in it are serialized (C7520)."""
    i32 = ir.IntegerType.get_signless(32)
    word = arith.index_cast(i32, value)
    every_lane, first_lane, clamp = (w.constant(c, "i32") for c in (-1, 0, 31))
    shuffled = nvvm.ShflOp(i32, every_lane, word, first_lane, clamp, nvvm.ShflKind.idx).result
    return arith.index_cast(ir.IndexType.get(), shuffled)


@dataclass(frozen=True)
class TmaWgmmaTileConfig(WgmmaTileConfig):
    """A wgmma tile, `warpgroups` consumer warpgroups and one producer;
    `persistent_blocks`: the grid's blocks, at most one per SM (the
    target's SM count, filled in where the tile is chosen); `group_rows`:
    the row tiles a band of the tile order spans (`tile_place`);
    `cluster_rows`: the blocks of a cluster, each a row tile of one column
    tile, sharing B's tile (1: no clusters); `staged_operand`: an epilogue
    operand indexed as C is copied by TMA into the staging buffers
    (staged_operand.py), else read from global memory by each thread
    (bench/NOTES.md v79d: the LLaMA layer's SwiGLU GEMM 8% faster);
    `pingpong`: each consumer warpgroup computes whole tiles, the two in
    turn (module docstring)."""
    persistent_blocks: int = 0
    group_rows: int = 16
    tma_stores: bool = True
    cluster_rows: int = 1
    staged_operand: bool = True
    pingpong: bool = False

    @property
    def threads(self) -> int:
        return WARPGROUP * (self.warpgroups + 1)

    def label(self) -> str:
        return f"{super().label()}/TMA producer warpgroup/persistent" + ("/ping-pong" if self.pingpong else "")


def tma_applies(operands, target, arch: str) -> str | None:
    """None where the TMA kernel takes the matmuls, else why not."""
    if not target.has("tma", arch) or not target.has("wgmma", arch):
        return f"{arch} has no TMA and wgmma (only {', '.join(target.archs_with('tma'))})"
    if len(operands) != 1:
        return "one matmul a kernel (a horizontal kernel's matmuls keep their own ring)"
    ops: MatmulOperands = operands[0]
    if ops.open_m:
        return "its tensor maps need static operands (M is known only at run time)"
    if ops.in_element == "f32" and not (ops.tf32 and ops.b_transposed):
        return "f32 only as tf32 with B read K-major (Bᵀ)"
    if ops.in_element not in TENSOR_MAP_ELEMENTS:
        return f"no tensor map for {ops.in_element}"
    outputs = (ops.batch or 1) * ops.m * ops.n
    gathered = False  # A's windows copied by the producer's cp.async, no tensor map describing them
    if ops.a_window is not None:
        if outputs < IM2COL_SM_SHARE * target.sm_count * IM2COL_TILE[0] * IM2COL_TILE[1]:  # any window's least
            return (f"a convolution's windows: fewer {IM2COL_TILE[0]} x {IM2COL_TILE[1]} tiles than "
                    f"{IM2COL_SM_SHARE:.0%} of the SMs (the wgmma kernel's smaller tiles spread over more)")
        gathered = not reads_im2col(ops)
        if gathered and ops.in_element == "f32":
            return (f"a convolution's windows as tf32, gathered (no im2col copy: {im2col_problem(ops)}): the "
                    "producer gathers only 16-bit elements (wgmma_matmul takes them)")
        if gathered and (ops.n % GATHERED_TILE_COLUMNS or
                         outputs < GATHERED_SM_SHARE * target.sm_count * 128 * GATHERED_TILE_COLUMNS):
            return (f"a convolution's windows, gathered (no im2col copy: {im2col_problem(ops)}): fewer 128 x "
                    f"{GATHERED_TILE_COLUMNS} tiles than {GATHERED_SM_SHARE:.0%} of the SMs (the wgmma kernel's "
                    "smaller tiles spread over more)")
    # A persistent grid pays where the tiles outnumber the SMs: the largest tile, two waves.
    elif outputs < 2 * target.sm_count * 128 * 256:
        return "fewer than two waves of 128 x 256 tiles (the wgmma kernel's grid is as fast there)"
    mapped = (("B", ops.b_type),) if gathered else \
        (("A", ops.a_window.source_type if ops.a_window is not None else ops.a_type), ("B", ops.b_type))
    for name, memref_type in mapped:
        problem = tma_layout_problem(memref_type)
        if problem:
            return f"{name}: {problem}"
    return None


def im2col_problem(ops: MatmulOperands, pixels: int = 128) -> str | None:
    """Why TMA's im2col mode cannot read A's windows, `pixels` and one K
    step of channels a copy (None: it can)."""
    step = SWIZZLE_BYTES // element_bytes(ops.in_element)
    if ops.a_window.col_sizes[-1] % step:  # (before the geometry is read: it evaluates the windows)
        return f"{ops.a_window.col_sizes[-1]} channels are no multiple of a {step}-channel step"
    geometry = ops.a_window.geometry
    return geometry if isinstance(geometry, str) else geometry.problem(pixels, step)


def reads_im2col(ops: MatmulOperands, pixels: int = 128) -> bool:
    """Are A's windows read by TMA's im2col mode (else gathered by cp.async)?"""
    return ops.a_window is not None and im2col_problem(ops, pixels) is None


def tma_takes_tile(tile: TmaWgmmaTileConfig, operands) -> bool:
    """Does the TMA kernel take this tile for the matmuls? Any, except that
    a convolution's windows gathered by cp.async take only the widest (module constants)."""
    return tile.bn >= GATHERED_TILE_COLUMNS or all(o.a_window is None or reads_im2col(o, tile.bm) for o in operands)


class TmaWgmmaMatmulWriter(WgmmaMatmulWriter):
    stages_over_ring = False

    def __init__(self, ops: MatmulOperands, config: TmaWgmmaTileConfig, accumulate: bool, epilogue):
        super().__init__(ops, config, accumulate, epilogue)
        self.path = self.path.replace("wgmma-matmul", "tma-wgmma-matmul", 1)
        if not self.b_k_major and ops.in_element == "f32":
            raise ValueError("the TMA kernel takes tf32 only with B read K-major")
        self.b_k_major = ops.b_transposed
        self.im2col = reads_im2col(ops, config.bm)  # one TMA copy a step reads A's windows
        self.gathers_a = ops.a_window is not None and not self.im2col  # the producer warpgroup copies A (module docstring)
        if self.im2col:
            self.path = self.path.replace("implicit im2col", "implicit im2col by TMA's im2col mode", 1)
        self.pingpong = config.pingpong
        if self.pingpong and (self.a_in_registers or ops.a_window is not None or config.warpgroups != 2):
            raise ValueError("ping-pong: two consumer warpgroups, A copied by TMA as stored and read from shared "
                             "memory (not tf32's A in registers)")
        self.row_blocks = config.bm // WGMMA_M if self.pingpong else 1  # a warpgroup's 64-row accumulators
        self.producer_registers = GATHERING_PRODUCER_REGISTERS if self.gathers_a else PRODUCER_REGISTERS
        self.consumer_threads = WARPGROUP * config.warpgroups
        self.stage_bytes = self.stage_elements * self.element_bytes
        self.columns, self.rows, batch = super().grid()
        self.tiles = self.columns * self.rows * batch
        self.cluster = self._cluster_size()
        if self.cluster > 1:
            self.path += f" clusters of {self.cluster} sharing B"
        blocks = config.persistent_blocks or self.tiles
        self.blocks = min(self.tiles, blocks) // self.cluster * self.cluster
        self.staged = None if self.store_problem or not config.staged_operand else \
            staged_operand(ops, epilogue, WGMMA_M, self.store_columns)
        self.tile_parts = self.row_blocks * self.parts  # the boxes a warpgroup stores a tile
        if self.staged is not None:
            self.path += " epilogue operand by TMA"

    def _cluster_size(self) -> int:
        """The tile's clusters, where B is read K-major and its tile splits
        into shares of whole swizzle atoms, the row tiles pair up and A is
        copied by TMA (a gathered A keeps one block a cluster). A B read
        N-major (its 64-column boxes shared out) left output tiles unwritten
        on the H200 (bench/NOTES.md v69): not yet understood, so refused."""
        size = self.cfg.cluster_rows
        atoms = self.cfg.bn // 8  # 8 rows of 128 bytes
        return size if (size > 1 and self.b_k_major and not self.gathers_a and not self.pingpong
                        and self.rows % size == 0 and atoms % size == 0) else 1

    def grid(self) -> tuple[int, int, int]:
        return (self.blocks, 1, 1)

    def dynamic_shared_bytes(self) -> int:
        """The ring, the staging buffers of the TMA stores, then the mbarriers
        (the ring's, and the staged epilogue operand's)."""
        return super().dynamic_shared_bytes() + ring_barrier_bytes(self.cfg.stages) + self._operand_barrier_bytes() \
            + self._turn_barrier_bytes()

    def _operand_barrier_bytes(self) -> int:
        return OperandBarriers.bytes(self.cfg.warpgroups, STORE_BUFFERS) if self.staged else 0

    def _turn_barrier_bytes(self) -> int:
        return self.cfg.warpgroups * BARRIER_BYTES if self.pingpong else 0

    # ------------------------------------------------------------ host side
    def host_values(self, operands: KernelOperands) -> list[ir.Value]:
        """The tensor maps of A (unless gathered) and B (and C's: `WgmmaMatmulWriter.host_values`)."""
        cfg, batch = self.cfg, self.ops.batch is not None
        unit = [1] if batch else []
        b_box = unit + ([cfg.bn // self.cluster, cfg.bk] if self.b_k_major else [cfg.bk, N_ATOM_ELEMENTS])
        self.b_map = tensor_map(operands.b, b_box)
        if self.gathers_a:
            return [self.b_map, *super().host_values(operands)]
        if self.im2col:
            self.a_map = im2col_tensor_map(operands.a, self.ops.a_window.geometry, cfg.bm, cfg.bk)
        else:
            self.a_map = tensor_map(operands.a, unit + [cfg.bm, cfg.bk])
        return [self.a_map, self.b_map, *super().host_values(operands), *self._operand_map(operands)]

    def _operand_map(self, operands: KernelOperands) -> list[ir.Value]:
        """The staged epilogue operand's tensor map: C's boxes, in its own layout."""
        if self.staged is None:
            return []
        layout = self.staged.layout
        operand = as_stored(operands.epilogue[self.staged.tensor], layout)
        self.operand_map = tensor_map(operand, layout.box(WGMMA_M, self.store_columns))
        return [self.operand_map]

    # ------------------------------------------------------------ kernel
    def kernel_body(self) -> None:
        w = self.w
        self.cluster_rank = w.rem(self.block_n, self.cluster)  # the launch's block_x: clusters are 1-d
        self._ring()
        self._barriers()
        with w.either(w.less(self.tid, self.consumer_threads), self.cfg.warpgroups / (self.cfg.warpgroups + 1)) \
                as (consumers, producer):
            with consumers():
                if self.cfg.warpgroups > 1:
                    nvvm.SetMaxRegisterOp(consumer_registers(self.cfg.warpgroups, self.producer_registers),
                                          nvvm.SetMaxRegisterAction.increase)
                self.turn = self._turn()
                self._tiles(self._consume, self.turn)
                self.drain_stores()
            with producer():
                if self.cfg.warpgroups > 1:
                    nvvm.SetMaxRegisterOp(self.producer_registers, nvvm.SetMaxRegisterAction.decrease)
                if self.gathers_a:
                    self._tiles(self._produce)
                else:
                    with w.only_if(self._lead_producer()):
                        self._tiles(self._produce)
        if self.cluster > 1:  # a block's barriers and buffers stay until its peers are done with them
            cluster_barrier()

    def _barriers(self) -> None:
        """The ring's barriers, after the ring and the staging buffers."""
        w = self.w
        first = w.add(self.ring_address, self.ring_bytes + self.staging_beside_ring())
        if self.staged is not None:  # initialized before the block meets in BarrierRing.initialized
            self.operand_barriers = OperandBarriers(w, w.add(first, ring_barrier_bytes(self.cfg.stages)),
                                                    self.cfg.warpgroups, STORE_BUFFERS)
            with w.only_if(arith.cmpi(arith.CmpIPredicate.eq, self.tid, w.index(0))):
                self.operand_barriers.initialize()
        if self.pingpong:  # after the operand's: also initialized before the block meets
            self.turn_barriers = w.add(first, ring_barrier_bytes(self.cfg.stages) + self._operand_barrier_bytes())
            with w.only_if(arith.cmpi(arith.CmpIPredicate.eq, self.tid, w.index(0))):
                for warpgroup in range(self.cfg.warpgroups):
                    nvvm.MBarrierInitOp(self._turn_barrier(w.index(warpgroup)), w.constant(1, "i32"))
        peers = None
        if self.cluster > 1:
            peers = ClusterPeers(self.cluster, arith.cmpi(arith.CmpIPredicate.eq, w.rem(self.tid, WARP_THREADS),
                                                          w.index(0)))
        releases = WARPGROUP if self.pingpong else self.consumer_threads  # the threads that read a buffer
        self.ring_barriers = BarrierRing.initialized(w, first, self.cfg.stages, self.tid, releases,
                                                     1 + (WARPGROUP if self.gathers_a else 0), peers)

    def _turn(self) -> tuple[ir.Value, int] | None:
        """Ping-pong: (this consumer warpgroup's turn, the turns): it takes
        every second of the block's tiles. None: every consumer takes every
        tile. Computed once, at the consumers' start (`self.turn`)."""
        if not self.pingpong:
            return None
        return warp_uniform(self.w, self.w.div(self.tid, WARPGROUP)), self.cfg.warpgroups

    def _first_row_block(self) -> ir.Value:
        """Ping-pong: a warpgroup computes every row block of its tiles, from the first."""
        return self.w.index(0) if self.pingpong else super()._first_row_block()

    def _warp_first_row(self, row_block: int = 0) -> ir.Value:
        """Ping-pong: warp v of either warpgroup holds rows 16v.. of each row block."""
        if not self.pingpong:
            return super()._warp_first_row(row_block)
        w = self.w
        return w.add(self._row_block_start(row_block), w.mul(w.rem(w.div(self.tid, 32), WARPGROUP // 32), 16))

    def _tiles(self, body, turn: tuple[ir.Value, int] | None = None) -> None:
        """`body(first_step)` for each tile of this block, with the tile's
        block ids bound (block_n, block_m, batch, m0, n0) and `first_step`
        its first K step counted over the block's tiles. A cluster walks
        units of `cluster` row tiles, each block its rank's tile of each.
        `turn` (this thread's turn, the turns): only the block's tiles of
        that turn (ping-pong), the steps still counted over all of them."""
        w, size = self.w, self.cluster
        block = self.block_n  # the launch's block_x: the persistent grid (and its clusters) 1-D
        first, units, clusters = w.div(block, size), self.tiles // size, self.blocks // size
        start, stride = first, clusters
        if turn is not None:
            start, stride = w.add(first, w.mul(turn[0], clusters)), clusters * turn[1]
        with w.loop(start, units, stride) as tiles:
            w.mean_trips(tiles.op, units / stride)
            if size > 1:  # kernel-occupancy makes it the kernel's cluster shape
                tiles.op.attributes[CLUSTER_BLOCKS_ATTR] = ir.IntegerAttr.get(ir.IntegerType.get_signless(64), size)
            unit = tiles.induction
            self.block_n, row_unit, self.batch = self._tile_place(unit, self.rows // size)
            self.block_m = w.add(w.mul(row_unit, size), self.cluster_rank) if size > 1 else row_unit
            self.m0, self.n0 = w.mul(self.block_m, self.cfg.bm), w.mul(self.block_n, self.cfg.bn)
            body(w.mul(w.div(w.sub(unit, first), clusters), self.k_steps))
            tiles.yield_([])
        self.block_n = block

    def _tile_place(self, tile: ir.Value, rows: int) -> tuple[ir.Value, ir.Value, ir.Value]:
        """(column tile, row tile, batch) of tile number `tile` of a grid of
        `rows` row tiles (units of a cluster's row tiles). The tiles
        run in bands of `group_rows` row tiles, row tiles fastest within a
        band: the blocks at work at one time cover a near-square patch of
        C, so they read fewer rows of A and columns of B from memory than a
        few whole rows of tiles would (L2 keeps what they share)."""
        w, group = self.w, min(self.cfg.group_rows, rows)
        per_batch = self.columns * rows
        batch, within = w.div(tile, per_batch), w.rem(tile, per_batch)
        band, place = w.div(within, group * self.columns), w.rem(within, group * self.columns)
        first_row = w.mul(band, group)
        if rows % group:  # the last band is shorter
            height = arith.minui(w.index(group), w.sub(w.index(rows), first_row))
        else:
            height = w.index(group)
        return w.div(place, height), w.add(first_row, w.rem(place, height)), batch

    # ------------------------------------------------------------ producer
    def _lead_producer(self) -> ir.Value:
        """Is this thread the producer warpgroup's first, the one that issues its TMA copies?"""
        return arith.cmpi(arith.CmpIPredicate.eq, self.tid, self.w.index(self.consumer_threads))

    def _produce(self, first_step: ir.Value) -> None:
        w, cfg, ring = self.w, self.cfg, self.ring_barriers
        with w.loop(0, self.k_steps, 1) as steps:
            stage = ring.wait_empty(w.add(first_step, steps.induction))
            k = w.mul(steps.induction, cfg.bk)
            if self.gathers_a:
                self._gather_a(stage, k)
                with w.only_if(self._lead_producer()):
                    self._load_b(stage, k, ring.expect(stage, self.stage_bytes - self.a_elements * self.element_bytes))
            else:
                full = ring.expect(stage, self.stage_bytes)
                if self.im2col:
                    self._load_windows(stage, k, full)
                else:
                    self._load(self.a_map, self._stage_address(stage), [k, self.m0], full)
                self._load_b(stage, k, full)
            steps.yield_([])

    def _stage_address(self, stage: ir.Value) -> ir.Value:
        return self.w.add(self.ring_address, self.w.mul(stage, self.stage_bytes))

    def _load_b(self, stage: ir.Value, k: ir.Value, full: ir.Value) -> None:
        """B's tile of the K step at `k` into ring stage `stage`, after A's;
        in a cluster, this block's share of it, multicast to every block."""
        w, cfg, size = self.w, self.cfg, self.cluster
        b_origin = w.add(self._stage_address(stage), self.a_elements * self.element_bytes)
        multicast = (1 << size) - 1 if size > 1 else 0
        if self.b_k_major:  # bn rows of 128 bytes
            rows = cfg.bn // size
            first = w.mul(self.cluster_rank, rows)
            self._load(self.b_map, w.add(b_origin, w.mul(first, SWIZZLE_BYTES)), [k, w.add(self.n0, first)], full,
                       multicast)
        else:  # N-major: one box per 64 columns, an atom column of BK rows each (never shared: _cluster_size)
            for column in range(cfg.bn // N_ATOM_ELEMENTS):
                self._load(self.b_map, w.add(b_origin, column * cfg.bk * SWIZZLE_BYTES),
                           [w.add(self.n0, column * N_ATOM_ELEMENTS), k], full)

    def _gather_a(self, stage: ir.Value, k: ir.Value) -> None:
        """A's tile of the K step at `k`, read through the convolution's
        windows by the producer warpgroup's cp.async copies (zeros over the
        image's edges, past M and past K) into ring stage `stage`; each
        thread arrives on the stage's `full` barrier once its copies land."""
        w, cfg = self.w, self.cfg
        copiers = (w.sub(self.tid, w.index(self.consumer_threads)), WARPGROUP)
        self._copy_tile(self.a, cfg.bm, cfg.bk, (self.m0, k), w.mul(stage, self.stage_elements),
                        StepCopies(None, None), self.a_limits(), self.ops.a_window, copiers)
        self.ring_barriers.arrive_when_copied(stage)

    def _load_windows(self, stage: ir.Value, k: ir.Value, full: ir.Value) -> None:
        """A's tile of the K step at `k` with one im2col TMA copy: the
        windows of output pixels m0.. at the step's filter tap, its 64
        channels each (a step never straddles two taps: C is a multiple)."""
        w, g = self.w, self.ops.a_window.geometry
        tap = w.delinearize(w.div(k, g.channels), list(g.taps))
        pixel = w.delinearize(self.m0, [g.batch, *g.out])
        corners = [w.sub(w.mul(o, stride), padding) for o, stride, padding in zip(pixel[1:], g.stride, g.padding)]
        offsets = [w.mul(t, dilation) for t, dilation in zip(tap, g.dilation)]
        coordinates = [w.rem(k, g.channels), *reversed(corners), pixel[0]]
        tma_load(w, self.a_map, self._stage_address(stage), coordinates, full, list(reversed(offsets)))

    def _load(self, tensor_map_: ir.Value, shared_address: ir.Value, coordinates: list[ir.Value],
              barrier: ir.Value, multicast_blocks: int = 0) -> None:
        """One TMA copy of a box at `coordinates` (innermost first; the
        batch appended) to `shared_address`, completing on `barrier`
        (multicast: tma_load)."""
        if self.ops.batch is not None:
            coordinates = coordinates + [self.batch]
        tma_load(self.w, tensor_map_, shared_address, coordinates, barrier, multicast_blocks=multicast_blocks)

    # ------------------------------------------------------------ consumers
    def _consume(self, first_step: ir.Value) -> None:
        w = self.w
        # this warpgroup's how-manieth tile (ping-pong: every second of the block's)
        self.tile_ordinal = w.div(first_step, self.k_steps * (self.cfg.warpgroups if self.pingpong else 1))
        if self.staged is not None:
            with w.only_if(self._storing_thread()):
                nvvm.CpAsyncBulkWaitGroupOp(0, read=True)  # the tile before's stores have read their buffers
                for part in range(min(STORE_BUFFERS, self.tile_parts)):
                    self._load_operand(w.div(self.tid, WARPGROUP), part)
        if self.a_in_registers:
            step = functools.partial(self._consumer_step, first_step)
            accumulators = [self._a_in_registers_loop(self._initial_accumulators(), step)]
        else:
            self._await_turn()
            initial = [self._initial_accumulators(row_block) for row_block in range(self.row_blocks)]
            with w.loop(0, self.k_steps, 1, initial) as steps:
                self._mark_k_loop(steps.op)
                updated = self._consumer_step_rows(first_step, steps.induction, list(steps.carried))
                steps.yield_(updated)
            accumulators = list(steps.results)
            self._pass_turn()
            nvvm.WgmmaWaitGroupSyncOp(0)
        self.ring_barriers.release(w.add(first_step, self.k_steps - 1))
        self._store(accumulators)

    # ------------------------------------------------------------ ping-pong turns
    def _turn_barrier(self, warpgroup: ir.Value) -> ir.Value:
        """Warpgroup `warpgroup`'s turn barrier: one arrival (the other's) a turn."""
        w = self.w
        return shared_pointer(w, w.add(self.turn_barriers, w.mul(warpgroup, BARRIER_BYTES)))

    def _await_turn(self) -> None:
        """Ping-pong: wait until the other warpgroup's K loop of the tile
        before this one is done. The K loops then run in turn, so neither
        warpgroup waits on a ring buffer more than one round ahead of its
        last fill (a parity wait two rounds ahead would pass at once).
        Warpgroup 0's j-th tile waits for turn j - 1 of its barrier (parity
        1 of a fresh barrier passes: its first tile goes at once),
        warpgroup 1's for turn j."""
        if not self.pingpong:
            return
        w = self.w
        turn = self.turn[0]
        parity = w.rem(w.add(self.tile_ordinal, w.add(turn, w.index(1))), 2)
        wait_parity(w, self._turn_barrier(turn), arith.index_cast(ir.IntegerType.get_signless(32), parity))

    def _pass_turn(self) -> None:
        """Ping-pong: this warpgroup's K loop is issued; the other's may start."""
        if not self.pingpong:
            return
        w = self.w
        other = w.sub(w.index(1), self.turn[0])
        with w.only_if(self._storing_thread()):
            nvvm.MBarrierArriveOp(ir.IntegerType.get_signless(64), self._turn_barrier(other))

    def _consumer_step_rows(self, first_step: ir.Value, index: ir.Value,
                            accumulators: list[ir.Value]) -> list[ir.Value]:
        """K step `index` of the tile whose first is `first_step` (counted
        over the block's tiles), A read from the ring: wait for its stage,
        issue the wgmmas of each of this warpgroup's row blocks as one
        group, wait for the step before's and release its stage. The accumulators."""
        step, stage = self._await_step(first_step, index)
        descriptors = [self._stage_descriptors(stage, row_block) for row_block in range(len(accumulators))]
        nvvm.WgmmaFenceAlignedOp()
        accumulators = [self._wgmmas(d, acc) for d, acc in zip(descriptors, accumulators)]
        nvvm.WgmmaGroupSyncAlignedOp()
        nvvm.WgmmaWaitGroupSyncOp(1)
        self._release_step_before(step, index)
        return accumulators

    def _consumer_step(self, first_step: ir.Value, index: ir.Value, acc: ir.Value,
                       in_flight: list[ir.Value] | None) -> tuple[ir.Value, list[ir.Value]]:
        """As `_consumer_step_rows`, tf32's A in registers: the step before's
        wgmmas read the registers `in_flight`. The accumulators and this step's A registers."""
        step, stage = self._await_step(first_step, index)
        acc, registers = self._multiply_a_in_registers(stage, acc)
        wgmma_wait(self.w, 1, [], in_flight or [])
        self._release_step_before(step, index)
        return acc, registers

    def _await_step(self, first_step: ir.Value, index: ir.Value) -> tuple[ir.Value, ir.Value]:
        """(step, its ring stage) of K step `index`, once its copies have landed."""
        step = self.w.add(first_step, index)
        stage = self.ring_barriers.wait_full(step)
        if self.gathers_a:  # cp.async wrote A through the generic proxy; the wgmmas read through the async one
            nvvm.FenceProxyOp(nvvm.ProxyKind.async_shared, space=nvvm.SharedSpace.shared_cta)
        return step, stage

    def _release_step_before(self, step: ir.Value, index: ir.Value) -> None:
        """The wgmmas of the step before `step` have finished reading their buffer (none before the first)."""
        w = self.w
        with w.only_if(arith.cmpi(arith.CmpIPredicate.ugt, index, w.index(0))):
            self.ring_barriers.release(w.sub(step, 1))

    def _mark_k_loop(self, loop: ir.Operation) -> None:
        super()._mark_k_loop(loop)
        # One block an SM: ptxas then knows the registers at entry, and honours
        # setmaxnreg where the kernel's own count stays under the share (128 x 64 tiles).
        loop.attributes[BLOCKS_PER_SM_ATTR] = ir.IntegerAttr.get(ir.IntegerType.get_signless(64), 1)

    # ------------------------------------------------------------ the staged epilogue operand
    def _load_operand(self, warpgroup: ir.Value, part: int) -> None:
        """The storing thread copies part `part` (counted over the tile's row
        blocks, as `_staged_store` stores them) of the epilogue operand's box
        of `warpgroup`'s rows into the part's staging buffer (free)."""
        w = self.w
        barrier = self.operand_barriers.of(warpgroup, part % STORE_BUFFERS)
        arrive_expecting(w, barrier, WGMMA_M * SWIZZLE_BYTES)
        row_block, column_part = divmod(part, self.parts)
        column = w.add(self.n0, column_part * self.store_columns)
        coordinates = self.staged.layout.coordinates(w, self.at(self._row_block_start(row_block), column))
        tma_load(w, self.operand_map, self._staging_buffer(warpgroup, part), coordinates, barrier)

    def _claim_staging(self, warpgroup: ir.Value, part: int) -> None:
        """With a staged operand: its part has landed in the buffer (copied
        once the buffer's last store had read it). The storing thread waits
        and the warpgroup meets: every thread's wait, a loop on a divergent
        path with the accumulators live, made ptxas serialize the wgmmas (C7520)."""
        if self.staged is None:
            super()._claim_staging(warpgroup, part)
            return
        buffer = part % STORE_BUFFERS
        uses = len(range(buffer, self.tile_parts, STORE_BUFFERS))
        with self.w.only_if(self._storing_thread()):
            self.operand_barriers.wait(self.operand_barriers.of(warpgroup, buffer), self.tile_ordinal, uses,
                                       part // STORE_BUFFERS)
        self._warpgroup_barrier(warpgroup)

    def _after_store(self, warpgroup: ir.Value, part: int) -> None:
        """With a staged operand: the part two on is copied into this buffer once its store has read it."""
        if self.staged is not None and part + STORE_BUFFERS < self.tile_parts:
            nvvm.CpAsyncBulkWaitGroupOp(0, read=True)
            self._load_operand(warpgroup, part + STORE_BUFFERS)

    def staged_inputs(self, row: ir.Value, col: ir.Value, width: int) -> list[dict[int, ir.Value]]:
        """While staging with a staged operand: its `width` elements at
        (row, col..), read where this thread writes their results."""
        if self.staged is None or self._staging is None:
            return super().staged_inputs(row, col, width)
        size = element_bytes(self.ops.out_element)
        pair = llvm.load(vector_type(width, self.ops.out_element), self._staged_place(row, col),
                         alignment=width * size)
        return [{self.staged.position: self.w.lane(pair, lane)} for lane in range(width)]
