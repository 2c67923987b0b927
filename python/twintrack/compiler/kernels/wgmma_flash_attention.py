"""Flash attention on Hopper's warpgroup MMA (wgmma, sm_90a only), f16 and
bf16, head dims of whole 128-byte rows (64, 128).

A block is `warpgroups` warpgroups, 64 query rows each. Q's tile is staged
once (as the mma.sync kernel stages it) and each warp keeps its 16 rows in
registers as A fragments: wgmma's register A operand has mma.sync's
m16n8k16 A layout, warp by warp. K and V tiles (keys x head dim, keys in
rows) go through a ring of `stages` buffers in dynamic shared memory,
128-byte swizzled as wgmma_matmul lays its operands out, filled by cp.async.

For each key tile, S = Q·Kᵀ is one wgmma m64nBNk16 per 16 of the head dim
(B = the K tile, K-major: its rows are N); O += P·V is one wgmma m64nDk16
per 16 keys, A = P in registers (the scores' accumulators narrowed: a
warp's share of wgmma's accumulators is mma.sync's m16n8 layout repeated
along N, so P never leaves registers, as in FlashAttention-2), B = the V
tile (N-major: its rows are K; wgmma transposes it). Each thread keeps
partial sums of its two rows, rescaled with O; the row's four lanes
combine them once, at the end.

The steps overlap the exponentials with the tensor cores, as
FlashAttention-3 does within a warpgroup: step i issues tile i + 1's scores
and tile i's P·V together, waits for the scores alone, runs tile i + 1's
softmax while P·V runs, then waits for P·V and rescales O by the new
maximum. So the loop makes one step fewer than there are key tiles: the
first tile's scores and softmax come before it, the last P·V after it.

One barrier a step, after the wait for tile i + 1's copies: past it every
warpgroup is done with tile i - 1 (its scores were waited for in step
i - 2, its P·V in step i - 1), whose buffer the step refills with tile
i + stages - 1. Tiles that need a mask (a causal mask's diagonal, a
ragged last key tile, a tile a boolean mask hides some key of, by its tile
classes copied to shared memory) take the masked softmax in a branch,
uniform over the block; the others read no mask.
"""

from __future__ import annotations

from dataclasses import dataclass

from mlir import ir
from mlir.dialects import arith, llvm, memref, nvvm, vector

from .builder import BLOCKS_PER_SM_ATTR, vector_of
from .flash_attention import (
    NEGATIVE_INFINITY,
    RECIPROCAL_APPROXIMATE,
    AttentionOperands,
    FlashTileConfig,
    MmaFlashWriter,
)
from .mask_tiles import HIDDEN
from .matmul_common import accumulator_position, element_bytes
from .mma_matmul import MMA_K, MMA_N, accumulator_type, fragment_register
from .wgmma_matmul import (
    ATOM_BYTES,
    SWIZZLE_BYTES,
    advance_descriptor,
    AlignedSharedMemory,
    descriptor_at_stage,
    matrix_descriptor,
    swizzled_place,
    wgmma_wait,
    wgmma_with_registers_a,
)


@dataclass(frozen=True)
class _RowState:
    """A thread's online-softmax state after a key tile: each half-row's
    max and partial sum, the factors that rescale what came before, and P's
    registers (the tile's probabilities, narrowed: P·V's A fragments)."""
    maxima: list[ir.Value]
    sums: list[ir.Value]
    factors: list[ir.Value]
    probabilities: list[ir.Value]

    def flat(self) -> list[ir.Value]:
        return [*self.maxima, *self.sums, *self.factors, *self.probabilities]

    @staticmethod
    def of(values: list[ir.Value]) -> _RowState:
        return _RowState(values[0:2], values[2:4], values[4:6], values[6:])

    @staticmethod
    def types(keys: int) -> list[ir.Type]:
        return [ir.F32Type.get()] * 6 + [ir.IntegerType.get_signless(32)] * (4 * keys // MMA_K)


class WgmmaFlashWriter(MmaFlashWriter):
    def __init__(self, attention: AttentionOperands, config: FlashTileConfig):
        super().__init__(attention, config, "flash-attention-wgmma")
        self.tile_elements = config.keys * config.head_dim
        self.stage_bytes = 2 * self.tile_elements * element_bytes(self.t)
        self.clear_tiles_unmasked = self.mask_tiles is not None

    def workgroup_types(self) -> list[ir.MemRefType]:
        return []

    def dynamic_shared_bytes(self) -> int:
        """The K/V ring, then Q's tile (the only shared memory: a static
        buffer beside it would land where the dynamic one's declaration
        leaves it, unaligned), the mask's tile classes, + the boundary's alignment."""
        return self.stages * self.stage_bytes + self._q_bytes() + self._class_bytes() + ATOM_BYTES

    def _class_bytes(self) -> int:
        return 0 if self.mask_tiles is None else 4 * self.mask_tiles.key_tiles

    def _q_bytes(self) -> int:
        rows, cols = ir.MemRefType(self.q_smem).shape
        return rows * cols * element_bytes(self.t)

    # ------------------------------------------------------------ the kernel
    def kernel_body(self) -> None:
        w = self.w
        self.m0 = self.first_query_row()
        self.thread_places()
        shared = AlignedSharedMemory.take(w)
        self.shared_buffers(shared)
        self._descriptors(shared.address)
        end = self.key_end()
        self.prepare_keys(shared, end)
        self.copy_first_tiles(end)
        nvvm.CpAsyncWaitGroupOp(self.stages - 2)  # Q and the first key tile
        nvvm.FenceProxyOp(nvvm.ProxyKind.async_shared, space=nvvm.SharedSpace.shared_cta)
        self.barrier()
        self.attend(end)

    def thread_places(self) -> None:
        """This thread's warp's first row of the block's tile, and its place in an m16n8 accumulator tile."""
        w = self.w
        lane = w.rem(self.tid, 32)
        self.warp_row = w.mul(w.div(self.tid, 32), 16)
        self.c_row, self.c_col = accumulator_position(w, lane)

    def shared_buffers(self, shared: AlignedSharedMemory) -> None:
        """The K/V ring, then Q's tile, in dynamic shared memory."""
        ring_bytes = self.stages * self.stage_bytes
        self.ring = shared.view(self.w, 0, [ring_bytes // element_bytes(self.t)], self.t)
        self.q_shared = shared.view(self.w, ring_bytes, ir.MemRefType(self.q_smem).shape, self.t)

    def prepare_keys(self, shared: AlignedSharedMemory, end: ir.Value) -> None:
        """The mask's tile classes staged after Q's tile, and where the key tiles that need no mask end."""
        if self.mask_tiles is not None:
            offset = self.stages * self.stage_bytes + self._q_bytes()
            self._stage_tile_classes(shared.view(self.w, offset, [self.mask_tiles.key_tiles], "i32"))
        self.unmasked = self.unmasked_end(end) if self.own_mask or self.k_edge is not None else None

    def attend(self, end: ir.Value) -> None:
        """Once Q has landed: Q's fragments, the first tile's scores and
        softmax, the key loop, the last tile's P·V and the store."""
        w, cfg = self.w, self.cfg
        self.q_registers = [[fragment_register(w, fragment, r) for r in range(4)]
                            for fragment in self.query_fragments()]
        hides_keys = self.tile_hides_keys(w.index(0))
        self.wait_first_tile()
        self.first_turn()
        nvvm.WgmmaFenceAlignedOp()
        scores = self._scores(w.index(0))
        nvvm.WgmmaGroupSyncAlignedOp()
        self.pass_turn()
        scores, = wgmma_wait(w, 0, [scores])
        infinity, zero = w.constant(NEGATIVE_INFINITY, "f32"), w.constant(0.0, "f32")
        state = self._softmax(scores, w.index(0), [infinity] * 2, [zero] * 2, hides_keys)
        output = llvm.mlir_zero(self._struct(cfg.head_dim))
        output, maxima, sums, probabilities = self._key_loop(end, output, state)
        self.take_turn()
        nvvm.WgmmaFenceAlignedOp()
        output = self._add_values(output, probabilities, w.rem(w.div(w.sub(end, cfg.keys), cfg.keys), self.stages))
        nvvm.WgmmaGroupSyncAlignedOp()
        self.pass_last_turn()
        output, = wgmma_wait(w, 0, [output], probabilities)
        nvvm.CpAsyncWaitGroupOp(0)  # the last, empty copies (none with a producer)
        self._store(self._finished_tiles(output, sums))

    def _key_loop(self, end: ir.Value, output: ir.Value, state: _RowState) -> tuple[ir.Value, ...]:
        """Steps 0 … tiles - 2 (module docstring), carrying O, each half's
        max and partial sum, and P's registers of the tile to multiply next;
        their values after the last step."""
        w, cfg, s = self.w, self.cfg, self.stages
        static_end = self.reach is None and self.mask_tiles is None and isinstance(self.k_end, int)
        last = w.index(self.k_end - cfg.keys) if static_end else w.sub(end, cfg.keys)
        carried = [output, *state.maxima, *state.sums, *state.probabilities]
        with w.loop(0, last, cfg.keys, carried) as loop:
            mean = self.mean_key_tiles(lambda m0: 0, self.key_end_at)
            if mean is not None:
                w.mean_trips(loop.op, mean - 1)
            self.mark_useful_work(loop.op)
            # With a producer, ptxas honours setmaxnreg only where the entry's registers follow from the blocks asked.
            if cfg.blocks_per_sm > 1 or cfg.producer:
                loop.op.attributes[BLOCKS_PER_SM_ATTR] = ir.IntegerAttr.get(ir.IntegerType.get_signless(64),
                                                                            cfg.blocks_per_sm)
            k0 = loop.induction
            output, maxima, sums, probabilities = _unpacked(loop.carried)
            upcoming_hides_keys = self.tile_hides_keys(w.add(k0, w.index(cfg.keys)))  # loaded early: a branch waits on it
            upcoming, output = self.next_step(k0, end, output, probabilities)
            upcoming, = wgmma_wait(w, 1, [upcoming])  # the scores; P·V still running
            state = self._softmax(upcoming, w.add(k0, w.index(cfg.keys)), maxima, sums, upcoming_hides_keys)
            output, = wgmma_wait(w, 0, [output], probabilities)  # P·V, which reads this P
            self.step_done(k0)
            output = self._rescaled(output, state.factors)
            loop.yield_([output, *state.maxima, *state.sums, *state.probabilities])
        return _unpacked(loop.results)

    def next_step(self, k0: ir.Value, end: ir.Value, output: ir.Value,
                  probabilities: list[ir.Value]) -> tuple[ir.Value, ir.Value]:
        """Step k0 / keys's copies and matmuls issued: once tile i + 1 has
        landed and every warpgroup is done with tile i - 1, the copies of
        tile i + stages - 1 into its buffer, then tile i + 1's scores and
        tile i's P·V; (the upcoming scores, the output)."""
        w, cfg, s = self.w, self.cfg, self.stages
        nvvm.CpAsyncWaitGroupOp(s - 3)  # tile i + 1 has landed
        nvvm.FenceProxyOp(nvvm.ProxyKind.async_shared, space=nvvm.SharedSpace.shared_cta)
        self.barrier()
        step = w.div(k0, cfg.keys)
        self._copy_keys(w.add(k0, w.index((s - 1) * cfg.keys)), w.rem(w.add(step, w.index(s - 1)), s), end, None)
        nvvm.CpAsyncCommitGroupOp()
        return self.issue_step(step, output, probabilities)

    def issue_step(self, step: ir.Value, output: ir.Value, probabilities: list[ir.Value]) -> tuple[ir.Value, ir.Value]:
        """Tile `step` + 1's scores and tile `step`'s P·V issued, in the
        warpgroup's turn; (the upcoming scores, the output)."""
        w, s = self.w, self.stages
        self.take_turn()
        nvvm.WgmmaFenceAlignedOp()
        upcoming = self._scores(w.rem(w.add(step, w.index(1)), s))
        nvvm.WgmmaGroupSyncAlignedOp()
        output = self._add_values(output, probabilities, w.rem(step, s))
        nvvm.WgmmaGroupSyncAlignedOp()
        self.pass_turn()
        return upcoming, output

    def step_done(self, k0: ir.Value) -> None:
        """Step k0 / keys's P·V has been waited for (the next barrier frees its buffer)."""

    def wait_first_tile(self) -> None:
        """Wait for the first key tile (here it landed with Q)."""

    # Turns at the tensor cores: none here (tma_flash_attention's consumers take them).
    def first_turn(self) -> None:
        """Before the first matmuls: wait for this warpgroup's first turn."""

    def take_turn(self) -> None:
        """Wait for this warpgroup's turn to issue matmuls."""

    def pass_turn(self) -> None:
        """This warpgroup has issued: the next one's turn."""

    def pass_last_turn(self) -> None:
        """After this warpgroup's last matmuls."""

    # ------------------------------------------------------------ shared memory
    def _stage_tile_classes(self, buffer: ir.Value) -> None:
        """The block's row of the mask's tile classes, copied into `buffer`
        (the first barrier comes before their first use): a shared load a
        step keeps no global address live through the loop."""
        w, tiles = self.w, self.mask_tiles.key_tiles
        self.tile_classes = buffer
        for first in range(0, tiles, self.threads):
            tile = w.add(self.tid, w.index(first)) if first else self.tid
            with w.only_if(w.less(tile, tiles) if first + self.threads > tiles else None):
                memref.store(self.summary_at(tile), buffer, [tile])

    def tile_hides_keys(self, k0: ir.Value) -> ir.Value | None:
        """Does the boolean mask hide a key of the tile from `k0` from some
        row of the block (i1)? None without mask tiles."""
        if self.mask_tiles is None:
            return None
        i32 = ir.IntegerType.get_signless(32)
        tile_class = memref.load(self.tile_classes, [self.w.div(k0, self.cfg.keys)])
        hidden = arith.andi(tile_class, self.w.constant(HIDDEN, i32))
        return arith.cmpi(arith.CmpIPredicate.ne, hidden, self.w.constant(0, i32))

    def _descriptors(self, ring_address: ir.Value) -> None:
        """Stage 0's K and V descriptors. K (N = keys in rows, K-major): the
        stride is one 8-row atom; V (K = keys in rows, N-major): the leading
        offset is one 64-wide column of atoms, all the tile's rows."""
        w, keys = self.w, self.cfg.keys
        v_address = w.add(ring_address, w.index(self.tile_elements * element_bytes(self.t)))
        self.k_descriptor = matrix_descriptor(w, ring_address, 16, ATOM_BYTES)
        self.v_descriptor = matrix_descriptor(w, v_address, keys * SWIZZLE_BYTES, ATOM_BYTES)

    def _copy_keys(self, key: ir.Value, stage: ir.Value, end: ir.Value, past: bool | None) -> None:
        """cp.async the K and V tiles of the keys from `key` into ring `stage`, swizzled."""
        if past:
            return
        w, cfg = self.w, self.cfg
        key, elements = self.key_copy_source(key, end, past)
        origin = w.mul(stage, 2 * self.tile_elements)
        size = element_bytes(self.t)
        for which, source in enumerate(self.tiles[1:]):
            tile_origin = w.add(origin, w.index(which * self.tile_elements))

            def place(flat: ir.Value, tile_origin=tile_origin):
                row, col, offset = swizzled_place(w, flat, cfg.keys, cfg.head_dim, size)
                return row, col, [w.add(tile_origin, offset)]
            self._copy_async(source, (cfg.keys, cfg.head_dim), (key, w.index(0)), self.ring, place, elements,
                             self.k_edge)

    # ------------------------------------------------------------ the two matmuls
    def _scores(self, stage: ir.Value) -> ir.Value:
        """Q·Kᵀ of the K tile in ring `stage`: the warpgroup's 64 rows x BN keys (issued, not waited for)."""
        w, cfg = self.w, self.cfg
        base = descriptor_at_stage(w, self.k_descriptor, stage, self.stage_bytes)
        scores = llvm.mlir_undef(self._struct(cfg.keys))
        for step, registers in enumerate(self.q_registers):
            d0 = step * MMA_K  # 64-wide columns of atoms, all the tile's rows each; 32 bytes a step within one
            offset = d0 // 64 * cfg.keys * SWIZZLE_BYTES + d0 % 64 * element_bytes(self.t)
            scores = wgmma_with_registers_a(w, scores, registers, advance_descriptor(w, base, offset), cfg.keys,
                                            self.t, False, accumulate=step > 0)
        return scores

    def _add_values(self, output: ir.Value, probabilities: list[ir.Value], stage: ir.Value) -> ir.Value:
        """O + P·V of the V tile in ring `stage` (issued, not waited for)."""
        w, cfg = self.w, self.cfg
        base = descriptor_at_stage(w, self.v_descriptor, stage, self.stage_bytes)
        for step in range(cfg.keys // MMA_K):
            registers = probabilities[4 * step:4 * step + 4]
            output = wgmma_with_registers_a(w, output, registers,
                                            advance_descriptor(w, base, step * MMA_K * SWIZZLE_BYTES),
                                            cfg.head_dim, self.t, True)
        return output

    # ------------------------------------------------------------ the softmax
    def _softmax(self, scores: ir.Value, k0: ir.Value, maxima: list[ir.Value], sums: list[ir.Value],
                 hides_keys: ir.Value | None) -> _RowState:
        """The online-softmax step of the tile of keys from `k0`, from each
        half's max and partial sum so far; masked where the tile needs it:
        past the unmasked tiles, or where the boolean mask hides some key
        of it (`hides_keys`, from its tile classes)."""
        conditions = [] if self.unmasked is None else [arith.cmpi(arith.CmpIPredicate.uge, k0, self.unmasked)]
        conditions += [] if hides_keys is None else [hides_keys]
        if not conditions:
            return _RowState.of(self._softmax_of(scores, k0, maxima, sums, masking=False))
        needs_mask = self.w.tree(conditions, arith.ori)
        return _RowState.of(self.w.choose(
            needs_mask, _RowState.types(self.cfg.keys),
            lambda: self._softmax_of(scores, k0, maxima, sums, masking=True),
            lambda: self._softmax_of(scores, k0, maxima, sums, masking=False), self._masked_share()))

    def _softmax_of(self, scores: ir.Value, k0: ir.Value, maxima: list[ir.Value], sums: list[ir.Value],
                    masking: bool) -> list[ir.Value]:
        """`_softmax`'s step with or without the masks, as `_RowState.flat` lists it."""
        w, f32 = self.w, ir.F32Type.get()
        self.masking = masking
        new_maxima, new_sums, factors, halves = [], [], [], []
        for half in range(2):  # rows lane/4 and lane/4 + 8 of the warp's 16
            row = w.add(self.m0, w.add(self.warp_row, w.add(self.c_row, w.index(8 * half))))
            key_base = w.add(k0, self.c_col)
            limits = self.mask_limits(row, key_base)
            values = []
            mask = self.mask_reader(row, key_base)
            for j in range(self.cfg.keys // MMA_N):
                for e in range(2):
                    value = llvm.extractvalue(f32, scores, [4 * j + 2 * half + e])
                    offset = j * MMA_N + e
                    values.append(self.score(value, row, w.add(key_base, w.index(offset)), offset, limits,
                                             mask(offset)))
            m_new, alpha, l_new, probabilities = self.softmax_update(values, maxima[half], sums[half], 4)
            new_maxima.append(m_new)
            new_sums.append(l_new)
            factors.append(alpha)
            halves.append(probabilities)
        self.masking = False
        registers = [fragment_register(w, self._p_fragment(halves, step), r)
                     for step in range(self.cfg.keys // MMA_K) for r in range(4)]
        return _RowState(new_maxima, new_sums, factors, registers).flat()

    def _masked_share(self) -> float:
        """The share of the key tiles that take the masked softmax, over the blocks."""
        tiles = self.mean_key_tiles(lambda m0: 0, self.key_end_at)
        if tiles is None:  # no causal mask: the ragged last tile alone
            return self.cfg.keys / self.k_end
        return self.mean_key_tiles(self.unmasked_end_at, self.key_end_at) / tiles

    # ------------------------------------------------------------ accumulators
    def reciprocal(self, value: ir.Value) -> ir.Value:
        """1 / value within 1 ulp: no call among the wgmmas (`RECIPROCAL_APPROXIMATE`)."""
        return llvm.inline_asm(ir.F32Type.get(), [value], RECIPROCAL_APPROXIMATE, "=f,f")

    def _struct(self, n: int) -> ir.Type:
        return llvm.StructType.get_literal([ir.F32Type.get()] * (n // 2))

    def _rescaled(self, output: ir.Value, factors: list[ir.Value]) -> ir.Value:
        """O with each half's rows times its factor."""
        f32 = ir.F32Type.get()
        for register in range(self.cfg.head_dim // 2):
            value = llvm.extractvalue(f32, output, [register])
            output = llvm.insertvalue(output, arith.mulf(value, factors[register // 2 % 2]), [register])
        return output

    def _finished_tiles(self, output: ir.Value, sums: list[ir.Value]) -> list[ir.Value]:
        """O as the mma.sync kernel's store takes it: its m16n8 tiles, then a
        tile holding each half's row sum (combined over the row's lanes)."""
        f32 = ir.F32Type.get()
        totals = [self.row_total(total, 4) for total in sums]
        tiles = [self._tile([[llvm.extractvalue(f32, output, [4 * j + 2 * half + e]) for e in range(2)]
                             for half in range(2)]) for j in range(self.cfg.head_dim // MMA_N)]
        return tiles + [self._tile([[total, total] for total in totals])]

    def _tile(self, halves: list[list[ir.Value]]) -> ir.Value:
        """An m16n8 accumulator tile of each half's pair."""
        tile = self.w.constant(0.0, accumulator_type())
        for half, pair in enumerate(halves):
            tile = vector.insert(vector.from_elements(vector_of(2, "f32"), pair), tile, [], [half])
        return tile


def _unpacked(carried: list[ir.Value]) -> tuple[ir.Value, list[ir.Value], list[ir.Value], list[ir.Value]]:
    """The key loop's carried values: O, each half's max and sum, P's registers."""
    return carried[0], list(carried[1:3]), list(carried[3:5]), list(carried[5:])
