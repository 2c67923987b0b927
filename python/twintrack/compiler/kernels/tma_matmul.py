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
  gives its registers to the consumers (setmaxnreg).
- **A persistent tile loop.** The grid holds one block per SM; block i
  computes tiles i, i + G, ... (in bands of row tiles: `_tile_place`). The
  producer starts the next tile's copies while the consumers store this
  one's results (their epilogue).
- **TMA stores.** Where a tensor map can describe C, each consumer
  warpgroup writes its 64 rows of results (the epilogue applied) 128 bytes
  of columns at a time into one of two swizzled staging buffers of its
  own, and one of its threads stores the buffer with one
  `cp.async.bulk.tensor` to global memory: the warpgroup goes on to fill
  the other buffer, then to the next tile's wgmmas, while the store drains
  (a buffer is refilled once its store has read it). Stored from registers,
  two elements a store and half of each 32-byte sector, the epilogue took
  about 12% of a 4096³ fp16 GEMM's time with the tensor cores idle.

The ring's phase bookkeeping: K step `it` (counted over all of a block's
tiles) uses buffer it % stages, in round it / stages; a wait for the
round's parity (round % 2) returns once that round's phase has completed.
The producer's first wait on each `empty[s]` asks for parity 1, which a
fresh barrier reports complete."""

from __future__ import annotations

from dataclasses import dataclass, replace

from mlir import ir
from mlir.dialects import arith, builtin, llvm, memref, nvgpu, nvvm, vector

from .builder import KernelBuilder, vector_of
from .matmul_common import VECTOR_BYTES, KernelOperands, MatmulOperands, element_bytes
from .wgmma_matmul import (
    ATOM_BYTES,
    N_ATOM_ELEMENTS,
    SWIZZLE_BYTES,
    WARPGROUP,
    WGMMA_M,
    AlignedSharedMemory,
    WgmmaMatmulWriter,
    WgmmaTileConfig,
)

BARRIER_BYTES = 8
# The longest a waiting thread sleeps before it tests its mbarrier again
# (ns): it wakes as soon as the phase completes.
WAIT_HINT_NS = 10_000_000
GEP_DYNAMIC_INDEX = -2**31  # llvm.getelementptr's marker of an index taken from its operands
# Registers a thread keeps after setmaxnreg: the producer warpgroup gives
# most of its share to the consumers (2 x 128 x 232 + 128 x 40 <= 65,536).
PRODUCER_REGISTERS = 40
CONSUMER_REGISTERS = 232
TENSOR_MAP_ELEMENTS = ("f16", "bf16", "f32")
# A consumer warpgroup's staging buffers for TMA stores: it fills one while
# the store of the other drains.
STORE_BUFFERS = 2
FIRST_WARPGROUP_BARRIER = 1  # named barrier of consumer warpgroup g: 1 + g (0 is the block's)


@dataclass(frozen=True)
class TmaWgmmaTileConfig(WgmmaTileConfig):
    """A wgmma tile, `warpgroups` consumer warpgroups and one producer;
    `persistent_blocks`: the grid's blocks, at most one per SM (the
    target's SM count, filled in where the tile is chosen); `group_rows`:
    the row tiles a band of the tile order spans (`tile_place`)."""
    persistent_blocks: int = 0
    group_rows: int = 16

    @property
    def threads(self) -> int:
        return WARPGROUP * (self.warpgroups + 1)

    def label(self) -> str:
        return f"{super().label()}/TMA producer warpgroup/persistent"


def tma_layout_problem(memref_type: str) -> str | None:
    """Why a tensor map cannot describe an operand of this type (None: it
    can): TMA needs the innermost stride 1, the others and the offset
    multiples of 16 bytes, and no broadcast (stride 0) dim."""
    if not memref_type.startswith("memref<"):  # (the parser aborts on what is no type at all)
        return f"not a memref type: {memref_type!r}"
    with ir.Context(), ir.Location.unknown():
        parsed = ir.MemRefType(ir.Type.parse(memref_type))
        strides, offset = parsed.get_strides_and_offset()
        return _strides_problem(strides, offset, element_bytes(str(parsed.element_type)))


def _strides_problem(strides: list[int], offset: int, size: int) -> str | None:
    """tma_layout_problem of a layout: element strides and offset, `size`-byte elements."""
    dynamic = ir.ShapedType.get_dynamic_stride_or_offset()
    if dynamic in strides or offset == dynamic:
        return "a layout known only at run time"
    if strides[-1] != 1:
        return "its rows are not contiguous"
    if any(s == 0 or s * size % 16 for s in strides[:-1]) or offset * size % 16:
        return "a stride or offset that is no multiple of 16 bytes (or a broadcast dim)"
    if len(strides) > 5:
        return "more than 5 dims"
    return None


@dataclass(frozen=True)
class StoredLayout:
    """The output as a TMA store sees it: C's dims split as the epilogue's
    view splits them (a 3-d linear's rows as (B, S), a projection's columns
    as (heads, dim)), in C's order, each with its stride in the output
    (which may hold them in another order: Q written as (B, H, S, D)).
    `groups[d]`: the split sizes of C's dim d (none for a unit dim the
    output drops); `strides` and `offset` in elements, outermost first."""
    groups: tuple[tuple[int, ...], ...]
    strides: tuple[int, ...]
    offset: int

    @property
    def sizes(self) -> list[int]:
        return [size for group in self.groups for size in group]

    def box(self, rows: int, columns: int) -> list[int]:
        """A `rows` x `columns` tile of C: the innermost split of M's and of N's dims, 1 in the others."""
        box = []
        for d, group in enumerate(self.groups):
            inner = {len(self.groups) - 2: rows, len(self.groups) - 1: columns}.get(d, 1)
            box += [1] * (len(group) - 1) + ([inner] if group else [])
        return box

    def coordinates(self, w: KernelBuilder, c_indices: list[ir.Value]) -> list[ir.Value]:
        """The tensor map's coordinates, innermost first, of C's element at `c_indices`."""
        split = []
        for index, group in zip(c_indices, self.groups):
            if group:
                split += w.delinearize(index, list(group))
        return list(reversed(split))


def stored_layout(ops: MatmulOperands, box_rows: int, box_columns: int) -> StoredLayout | str:
    """The layout TMA stores of `box_rows` x `box_columns` tiles write C
    through, or why there is none: each box must stay inside one index of
    the outer splits, the innermost dim be contiguous, the rest a tensor map
    can describe (16-byte strides and offset, at most 5 dims)."""
    with ir.Context(), ir.Location.unknown():
        output = ir.MemRefType(ir.Type.parse(ops.c_type)) if ops.c_type.startswith("memref<") else None
        if output is None:
            return f"C is no memref: {ops.c_type!r}"
        strides, offset = output.get_strides_and_offset()
    view = ops.view
    groups = view.splits if view is not None else tuple((size,) for size in output.shape)
    if any(ir.ShapedType.is_dynamic_size(size) for group in groups for size in group):
        return "C's split sizes are known only at run time"
    # Split dim r (C's order) is loop dim loop_dims[r], stored at the output dim that holds that loop.
    output_dims = [view.store_dims.index(view.loop_dims[r]) for r in range(len(view.loop_dims))] if view \
        else list(range(output.rank))
    layout = StoredLayout(tuple(tuple(group) for group in groups), tuple(strides[d] for d in output_dims), offset)
    for group, inner in ((groups[-2], box_rows), (groups[-1], box_columns)):
        if len(group) > 1 and group[-1] % inner:
            return f"a {inner}-wide box would straddle the split {group}"
    if not groups[-1]:
        return "C's columns are a dropped dim"
    problem = _strides_problem(list(layout.strides), offset, element_bytes(ops.out_element))
    return f"C: {problem}" if problem else layout


def tma_store_problem(ops: MatmulOperands) -> str | None:
    """Why the results cannot leave through TMA stores (None: they can):
    an element a tensor map holds, 16-byte rows, and a `stored_layout`."""
    if ops.out_element not in TENSOR_MAP_ELEMENTS:
        return f"no tensor map for {ops.out_element} results"
    if not ops.c_vectors:
        return "C's rows are not 16-byte aligned"
    layout = stored_layout(ops, WGMMA_M, SWIZZLE_BYTES // element_bytes(ops.out_element))
    return layout if isinstance(layout, str) else None


def tma_applies(operands, target, arch: str) -> str | None:
    """None where the TMA kernel takes the matmuls, else why not."""
    if not target.has("tma", arch) or not target.has("wgmma", arch):
        return f"{arch} has no TMA and wgmma (only {', '.join(target.archs_with('tma'))})"
    if len(operands) != 1:
        return "one matmul a kernel (a horizontal kernel's matmuls keep their own ring)"
    ops: MatmulOperands = operands[0]
    if ops.open_m or ops.a_window is not None:
        return "its tensor maps need static operands read as stored"
    if ops.in_element == "f32" and not (ops.tf32 and ops.b_transposed):
        return "f32 only as tf32 with B read K-major (Bᵀ)"
    if ops.in_element not in TENSOR_MAP_ELEMENTS:
        return f"no tensor map for {ops.in_element}"
    # A persistent grid pays where the tiles outnumber the SMs: the largest tile, two waves.
    if (ops.batch or 1) * ops.m * ops.n < 2 * target.sm_count * 128 * 256:
        return "fewer than two waves of 128 x 256 tiles (the wgmma kernel's grid is as fast there)"
    for name, memref_type in (("A", ops.a_type), ("B", ops.b_type)):
        problem = tma_layout_problem(memref_type)
        if problem:
            return f"{name}: {problem}"
    return None


def tensor_map(operand: ir.Value, box: list[int]) -> ir.Value:
    """The host side of a tensor map (built at the
    current insertion point, outside the launch) of memref `operand`: nvgpu's descriptor of
    `box` (outermost first) with the 128-byte swizzle and zeros out of
    bounds, as the kernel's pointer parameter. The host plan passes it as
    a tensor map the runtime encodes (`tensor_map` of the memref argument)."""
    source = ir.MemRefType(operand.type)
    unranked = memref.cast(ir.UnrankedMemRefType.get(source.element_type, source.memory_space), operand)
    tile = ir.MemRefType.get(box, source.element_type,
                             memory_space=ir.Attribute.parse("#gpu.address_space<workgroup>"))
    descriptor_type = ir.Type.parse(
        f"!nvgpu.tensormap.descriptor<tensor = {tile}, swizzle = swizzle_128b, l2promo = none, "
        "oob = zero, interleave = none>")
    index = ir.IndexType.get()
    sizes = [arith.constant(index, size) for size in box]
    descriptor = nvgpu.TmaCreateDescriptorOp(descriptor_type, unranked, sizes).result
    return builtin.unrealized_conversion_cast([llvm.PointerType.get()], [descriptor])


def makes_tensor_map(op: ir.Operation) -> bool:
    """Is `op` a host op of `tensor_map`: the descriptor, or its cast to the kernel's pointer?"""
    if op.name == "nvgpu.tma.create.descriptor":
        return True
    return op.name == "builtin.unrealized_conversion_cast" and len(op.operands) == 1 and \
        op.operands[0].owner.name == "nvgpu.tma.create.descriptor"


def described_buffer(pointer: ir.Value) -> ir.Value | None:
    """The memref a kernel operand made by `tensor_map` describes (None for
    any other operand): a TMA kernel reads and writes it through the map."""
    cast = pointer.owner
    if not isinstance(cast, (ir.Operation, ir.OpView)) or not makes_tensor_map(cast.operation) \
            or cast.operation.name == "nvgpu.tma.create.descriptor":
        return None
    unranked = cast.operation.operands[0].owner.operands[0]
    return unranked.owner.operands[0]


def erase_tensor_map(pointer: ir.Value) -> None:
    """Erase what `tensor_map` built (a launch that failed to build reads it no more)."""
    cast = pointer.owner
    descriptor = cast.operands[0].owner
    unranked = descriptor.operands[0].owner
    sizes = [operand.owner for operand in list(descriptor.operands)[1:]]
    for op in [cast, descriptor, unranked, *sizes]:
        if not list(op.results[0].uses):
            op.erase()


class TmaWgmmaMatmulWriter(WgmmaMatmulWriter):
    def __init__(self, ops: MatmulOperands, config: TmaWgmmaTileConfig, accumulate: bool, epilogue):
        super().__init__(ops, config, accumulate, epilogue)
        self.path = self.path.replace("wgmma-matmul", "tma-wgmma-matmul", 1)
        if not self.b_k_major and ops.in_element == "f32":
            raise ValueError("the TMA kernel takes tf32 only with B read K-major")
        self.b_k_major = ops.b_transposed
        self.consumer_threads = WARPGROUP * config.warpgroups
        self.stage_bytes = self.stage_elements * self.element_bytes
        self.columns, self.rows, batch = super().grid()
        self.tiles = self.columns * self.rows * batch
        blocks = config.persistent_blocks or self.tiles
        self.blocks = min(self.tiles, blocks)
        self.store_problem = tma_store_problem(ops)
        self.stored = None if self.store_problem else \
            stored_layout(ops, WGMMA_M, SWIZZLE_BYTES // element_bytes(ops.out_element))
        self.store_columns = SWIZZLE_BYTES // element_bytes(ops.out_element)  # a staging buffer's: 128 bytes
        self.staging_bytes = 0 if self.store_problem else config.warpgroups * STORE_BUFFERS * WGMMA_M * SWIZZLE_BYTES
        if self.store_problem is None:
            self.path += " TMA stores"
        self._staging: ir.Value | None = None  # while results are staged: the buffer's shared address

    def grid(self) -> tuple[int, int, int]:
        return (self.blocks, 1, 1)

    def dynamic_shared_bytes(self) -> int:
        """The ring, the staging buffers of the TMA stores, then the mbarriers."""
        return super().dynamic_shared_bytes() + self.staging_bytes + 2 * self.cfg.stages * BARRIER_BYTES

    # ------------------------------------------------------------ host side
    def build(self, before: ir.Operation, kernel: str, operands: KernelOperands) -> ir.Operation:
        """The tensor maps of A and B, made before the launch, then the launch."""
        cfg, batch = self.cfg, self.ops.batch is not None
        unit = [1] if batch else []
        a_box = unit + [cfg.bm, cfg.bk]
        b_box = unit + ([cfg.bn, cfg.bk] if self.b_k_major else [cfg.bk, N_ATOM_ELEMENTS])
        with ir.InsertionPoint(before), before.location:
            maps = [tensor_map(operands.a, a_box), tensor_map(operands.b, b_box)]
            if self.store_problem is None:
                maps.append(tensor_map(self._c_as_stored(operands.c), self.stored.box(WGMMA_M, self.store_columns)))
        self.a_map, self.b_map = maps[:2]
        self.c_map = maps[2] if len(maps) > 2 else None
        try:
            return super().build(before, kernel, operands)
        except Exception:
            for value in maps:
                erase_tensor_map(value)
            raise

    def _c_as_stored(self, output: ir.Value) -> ir.Value:
        """The output as its `stored_layout` (host side): reinterpreted with
        C's split dims in C's order, where that is not its own layout."""
        layout = self.stored
        source = ir.MemRefType(output.type)
        strides, offset = source.get_strides_and_offset()
        if layout.sizes == list(source.shape) and list(layout.strides) == list(strides):
            return output
        stored = ir.MemRefType.get(layout.sizes, source.element_type,
                                   layout=ir.StridedLayoutAttr.get(layout.offset, list(layout.strides)),
                                   memory_space=source.memory_space)
        return memref.reinterpret_cast(stored, output, [], [], [], [layout.offset], layout.sizes,
                                       list(layout.strides))

    # ------------------------------------------------------------ kernel
    def kernel_body(self) -> None:
        w = self.w
        self._ring()
        self._barriers()
        with w.either(w.less(self.tid, self.consumer_threads), self.cfg.warpgroups / (self.cfg.warpgroups + 1)) \
                as (consumers, producer):
            with consumers():
                if self.cfg.warpgroups > 1:
                    nvvm.SetMaxRegisterOp(CONSUMER_REGISTERS, nvvm.SetMaxRegisterAction.increase)
                self._tiles(self._consume)
                if self.store_problem is None:  # the block's shared memory must outlive its last stores
                    with w.only_if(self._storing_thread()):
                        nvvm.CpAsyncBulkWaitGroupOp(0)
            with producer():
                if self.cfg.warpgroups > 1:
                    nvvm.SetMaxRegisterOp(PRODUCER_REGISTERS, nvvm.SetMaxRegisterAction.decrease)
                with w.only_if(arith.cmpi(arith.CmpIPredicate.eq, self.tid, w.index(self.consumer_threads))):
                    self._tiles(self._produce)

    def _barriers(self) -> None:
        """full[s] and empty[s] after the ring, initialized by thread 0 before every thread meets."""
        w, stages = self.w, self.cfg.stages
        first = w.add(self.ring_address, self.cfg.stages * self.stage_bytes + self.staging_bytes)
        self.full = [_shared_pointer(w, w.add(first, s * BARRIER_BYTES)) for s in range(stages)]
        self.empty = [_shared_pointer(w, w.add(first, (stages + s) * BARRIER_BYTES)) for s in range(stages)]
        with w.only_if(arith.cmpi(arith.CmpIPredicate.eq, self.tid, w.index(0))):
            for s in range(stages):
                nvvm.MBarrierInitOp(self.full[s], w.constant(1, "i32"))
                nvvm.MBarrierInitOp(self.empty[s], w.constant(self.consumer_threads, "i32"))
            nvvm.FenceMbarrierInitOp()
        self.barrier()

    def _tiles(self, body) -> None:
        """`body(first_step)` for each tile of this block, with the tile's
        block ids bound (block_n, block_m, batch, m0, n0) and `first_step`
        its first K step counted over the block's tiles."""
        w = self.w
        block = self.block_n  # the launch's block_x: the persistent grid is 1-D
        with w.loop(block, self.tiles, self.blocks) as tiles:
            w.mean_trips(tiles.op, self.tiles / self.blocks)
            tile = tiles.induction
            self.block_n, self.block_m, self.batch = self._tile_place(tile)
            self.m0, self.n0 = w.mul(self.block_m, self.cfg.bm), w.mul(self.block_n, self.cfg.bn)
            body(w.mul(w.div(w.sub(tile, block), self.blocks), self.k_steps))
            tiles.yield_([])
        self.block_n = block

    def _tile_place(self, tile: ir.Value) -> tuple[ir.Value, ir.Value, ir.Value]:
        """(column tile, row tile, batch) of tile number `tile`. The tiles
        run in bands of `group_rows` row tiles, row tiles fastest within a
        band: the blocks at work at one time cover a near-square patch of
        C, so they read fewer rows of A and columns of B from memory than a
        few whole rows of tiles would (L2 keeps what they share)."""
        w, group = self.w, min(self.cfg.group_rows, self.rows)
        per_batch = self.columns * self.rows
        batch, within = w.div(tile, per_batch), w.rem(tile, per_batch)
        band, place = w.div(within, group * self.columns), w.rem(within, group * self.columns)
        first_row = w.mul(band, group)
        if self.rows % group:  # the last band is shorter
            height = arith.minui(w.index(group), w.sub(w.index(self.rows), first_row))
        else:
            height = w.index(group)
        return w.div(place, height), w.add(first_row, w.rem(place, height)), batch

    def _slot(self, step: ir.Value) -> tuple[ir.Value, ir.Value]:
        """(ring buffer, the parity of its round: i32) of K step `step`."""
        w, stages = self.w, self.cfg.stages
        parity = arith.index_cast(ir.IntegerType.get_signless(32), w.rem(w.div(step, stages), 2))
        return w.rem(step, stages), parity

    def _barrier_at(self, barriers: list[ir.Value], stage: ir.Value) -> ir.Value:
        """barriers[stage] for a run-time stage: they are 8 bytes apart."""
        w = self.w
        offset = arith.index_cast(ir.IntegerType.get_signless(32), w.mul(stage, BARRIER_BYTES))
        return llvm.getelementptr(barriers[0].type, barriers[0], [offset], [GEP_DYNAMIC_INDEX],
                                  ir.IntegerType.get_signless(8), llvm.GEPNoWrapFlags.none)

    # ------------------------------------------------------------ producer
    def _produce(self, first_step: ir.Value) -> None:
        w, cfg = self.w, self.cfg
        with w.loop(0, self.k_steps, 1) as steps:
            step = w.add(first_step, steps.induction)
            stage, parity = self._slot(step)
            nvvm.MBarrierTryWaitParityOp(self._barrier_at(self.empty, stage), arith.xori(parity, w.constant(1, "i32")),
                                         w.constant(WAIT_HINT_NS, "i32"))
            full = self._barrier_at(self.full, stage)
            nvvm.MBarrierArriveExpectTxOp(None, full, w.constant(self.stage_bytes, "i32"))
            origin = w.add(self.ring_address, w.mul(stage, self.stage_bytes))
            k = w.mul(steps.induction, cfg.bk)
            self._load(self.a_map, origin, [k, self.m0], full)
            b_origin = w.add(origin, self.a_elements * self.element_bytes)
            if self.b_k_major:
                self._load(self.b_map, b_origin, [k, self.n0], full)
            else:  # N-major: one box per 64 columns, an atom column of BK rows each
                for column in range(cfg.bn // N_ATOM_ELEMENTS):
                    self._load(self.b_map, w.add(b_origin, column * cfg.bk * SWIZZLE_BYTES),
                               [w.add(self.n0, column * N_ATOM_ELEMENTS), k], full)
            steps.yield_([])

    def _load(self, tensor_map_: ir.Value, shared_address: ir.Value, coordinates: list[ir.Value],
              barrier: ir.Value) -> None:
        """One TMA copy of a box at `coordinates` (innermost first; the
        batch appended) to `shared_address`, completing on `barrier`."""
        w = self.w
        if self.ops.batch is not None:
            coordinates = coordinates + [self.batch]
        i32 = ir.IntegerType.get_signless(32)
        destination = llvm.addrspacecast(llvm.PointerType.get(7), _shared_pointer(w, shared_address))
        nvvm.CpAsyncBulkTensorGlobalToSharedClusterOp(destination, tensor_map_,
                                                      [arith.index_cast(i32, c) for c in coordinates], barrier, [])

    # ------------------------------------------------------------ consumers
    def _consume(self, first_step: ir.Value) -> None:
        w = self.w
        with w.loop(0, self.k_steps, 1, [self._initial_accumulators()]) as steps:
            self.mark_useful_work(steps.op)
            step = w.add(first_step, steps.induction)
            stage, parity = self._slot(step)
            nvvm.MBarrierTryWaitParityOp(self._barrier_at(self.full, stage), parity, w.constant(WAIT_HINT_NS, "i32"))
            updated = self._multiply(stage, steps.carried[0])
            nvvm.WgmmaWaitGroupSyncOp(1)
            # The wgmmas of the step before have finished reading their buffer.
            with w.only_if(arith.cmpi(arith.CmpIPredicate.ugt, steps.induction, w.index(0))):
                self._release(w.sub(step, 1))
            steps.yield_([updated])
        nvvm.WgmmaWaitGroupSyncOp(0)
        self._release(w.add(first_step, self.k_steps - 1))
        self._store(steps.results[0])

    # ------------------------------------------------------------ TMA stores
    def _store(self, acc: ir.Value) -> None:
        """The tile's results through the staging buffers (module doc), 128
        bytes of columns at a time; from registers where C takes no TMA store."""
        if self.store_problem is not None:
            super()._store(acc)
            return
        w, f32 = self.w, ir.F32Type.get()
        warpgroup = w.div(self.tid, WARPGROUP)
        box_row = w.add(self.m0, w.mul(warpgroup, WGMMA_M))
        positions = self._positions()
        per_buffer = len(positions) * self.store_columns // self.cfg.bn
        for part in range(self.cfg.bn // self.store_columns):
            buffer = (warpgroup, part % STORE_BUFFERS)
            self._staging = w.add(w.add(self.ring_address, self.cfg.stages * self.stage_bytes),
                                  w.mul(w.add(w.mul(buffer[0], STORE_BUFFERS), buffer[1]), WGMMA_M * SWIZZLE_BYTES))
            self._box = (box_row, w.add(self.n0, part * self.store_columns))
            with w.only_if(self._storing_thread()):  # the store that read this buffer last has read it
                nvvm.CpAsyncBulkWaitGroupOp(STORE_BUFFERS - 1, read=True)
            self._warpgroup_barrier(warpgroup)
            results = []
            for register, row, col in positions[part * per_buffer:(part + 1) * per_buffer]:
                values = [llvm.extractvalue(f32, acc, [register + lane]) for lane in range(2)]
                results.append((vector.from_elements(vector_of(2, "f32"), values), 2, row, col))
            self.store_all(results)  # each value through store_finished, into the buffer
            nvvm.FenceProxyOp(nvvm.ProxyKind.async_shared, space=nvvm.SharedSpace.shared_cta)
            self._warpgroup_barrier(warpgroup)
            with w.only_if(self._storing_thread()):
                i32 = ir.IntegerType.get_signless(32)
                coordinates = self.stored.coordinates(w, self.at(*self._box))
                nvvm.CpAsyncBulkTensorSharedCTAToGlobalOp(self.c_map, _shared_pointer(w, self._staging),
                                                          [arith.index_cast(i32, c) for c in coordinates])
                nvvm.CpAsyncBulkCommitGroupOp()
        self._staging = None

    def store_finished(self, value: ir.Value, width: int, row: ir.Value, col: ir.Value,
                       loops: list[ir.Value]) -> None:
        """A finished result pair into the staging buffer, at its place in
        the 128-byte swizzle the tensor map stores (the 16-byte chunk of a
        row moves by the row's place in its 8-row atom: the warp's 8 rows of
        one write fall in 8 distinct chunks, 32 banks)."""
        if self._staging is None:
            super().store_finished(value, width, row, col, loops)
            return
        w = self.w
        local_row = w.sub(row, self._box[0])
        byte = w.mul(w.sub(col, self._box[1]), element_bytes(self.ops.out_element))
        chunk = arith.xori(w.div(byte, VECTOR_BYTES), w.rem(local_row, 8))
        offset = w.add(w.mul(local_row, SWIZZLE_BYTES), w.add(w.mul(chunk, VECTOR_BYTES), w.rem(byte, VECTOR_BYTES)))
        llvm.store(value, _shared_pointer(w, w.add(self._staging, offset)),
                   alignment=width * element_bytes(self.ops.out_element))

    def _storing_thread(self) -> ir.Value:
        """Is this thread the one of its warpgroup that issues its TMA stores?"""
        return arith.cmpi(arith.CmpIPredicate.eq, self.w.rem(self.tid, WARPGROUP), self.w.index(0))

    def _warpgroup_barrier(self, warpgroup: ir.Value) -> None:
        """The 128 threads of consumer warpgroup `warpgroup` meet (its own named barrier)."""
        w, i32 = self.w, ir.IntegerType.get_signless(32)
        barrier = arith.index_cast(i32, w.add(warpgroup, FIRST_WARPGROUP_BARRIER))
        nvvm.BarrierOp(None, barrierId=barrier, numberOfThreads=w.constant(WARPGROUP, "i32"))

    def _release(self, step: ir.Value) -> None:
        stage, _ = self._slot(step)
        nvvm.MBarrierArriveOp(ir.IntegerType.get_signless(64), self._barrier_at(self.empty, stage))


def _shared_pointer(w: KernelBuilder, address: ir.Value) -> ir.Value:
    """A shared-memory pointer (address space 3) to a shared address (an index)."""
    return llvm.inttoptr(llvm.PointerType.get(3), arith.index_cast(ir.IntegerType.get_signless(64), address))
