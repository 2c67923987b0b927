"""Flash attention: softmax(Q·Kᵀ)·V in one kernel, the scores never in memory.

One block per (BM query rows, batch·head). Q's tile is staged once; the loop
over the keys stages a BN-key tile of K and of V, computes the BM x BN
scores, applies the score epilogue to each (scale, mask; a narrowing that
ends it is left out, `_scores_in_f32`), and updates the online softmax:
each row's running max m and sum l; when m grows, l and the output rows
are rescaled by exp(m_old - m_new) before P·V of this tile is added.
After the loop O / l is stored through the P·V matmul's store (its
epilogue and output view).

A row whose scores are all -inf so far keeps m = -inf; its exponentials are
then taken against 0, so they give 0, not NaN. A row masked entirely ends as
0 / 0 = NaN, as the unfused softmax gives.

Where the score epilogue is a causal mask (`masked_key_reach`: -inf for
every key past row + reach, read off the epilogue's ops; alone, or one of
the conditions a kept score must meet, as Hugging Face's LLaMA ands it with
a padding mask's gather), a block's loop ends at the first key tile masked
for all its rows: those tiles would change neither m, l nor the output.

Where the score epilogue hides scores by a boolean mask tensor
(`mask_tiles`: SDPA's `attn_mask`, a `masked_fill` of -inf; per query row,
or a key padding mask the same for every row), a kernel launched first
classes the mask's tiles (the flash kernel's own BM x BN; where a row of
blocks has `MIN_KEY_TILES` key tiles at least), and each block's
loop ends after the last key tile any of its rows sees. That kernel also
packs the mask a bit a key: a thread reads its row's bits of a key tile in
one load (else, two neighbouring keys a load). (Skipping a tile hidden entirely leaves
NaN in its V rows unread, as the causal skip does: eager's 0 · NaN would
give NaN.)

Two generators: CUDA-core FMAs (f32, or head dims mma.sync cannot take),
R threads per query row, P going through shared memory to the P·V step, the
next key tile prefetched into registers (as `TiledMatmulWriter.k_loop`);
and mma.sync m16n8k16 for f16/bf16 (a warp per 16 query rows,
FlashAttention-2's layout: the scores' accumulator fragments are, narrowed,
P·V's A fragments, so P stays in registers), K and V coming through a ring
of shared buffers filled by cp.async, each tile's scores computed a step
ahead of its softmax, exp as PTX's flushing ex2.

Ragged edges (197 tokens): a sequence the tiles do not divide is tiled
anyway; so is one whose length, or batch·heads, is known only at run
time (dynamic shapes: read off Q and K in the kernel, the grid counted on
the host, the tiles chosen for the largest sizes). Q rows and K/V rows
past its end are read as zeros (cp.async's
source size, or a guarded load), the scores of keys past it are -inf (in
the last key tile only, its own loop), and no output row past it is
stored. Keys may run ragged only where they are K's and V's rows (the
vectors run along the head dim).

The kernel is built in place through the `mlir` bindings, as a gpu.launch
right before the P·V matmul it replaces (`build_flash_attention`), reading
Q, K, V, O and the epilogues' tensors as the values they are there.
"""

from __future__ import annotations

import functools
import tomllib
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from mlir import ir
from mlir.dialects import arith, llvm, memref, nvgpu, nvvm, vector
from mlir.dialects import math as mlir_math

from ...errors import UsageError
from ..target import DEFAULT_ARCH, DEFAULT_LOWERING_DIR, gpu_target
from .builder import LaunchIds, KernelBuilder, build_launch, element_type, vector_of, workgroup_memref
from .causal_mask import masked_key_reach, masks_only_past_reach
from .epilogue import Epilogue, EpilogueWriter
from .mask_tiles import (
    MIN_KEY_TILES,
    MaskTileBuffers,
    MaskTiles,
    build_mask_tiles,
    erase_mask_tiles,
    free_mask_tiles,
    tensor_mask_of,
)
from .matmul_common import (
    KernelOperands,
    MatmulOperands,
    TileCopy,
    TiledMatmulWriter,
    accumulator_position,
    element_bytes,
    round_up,
    vector_position,
    vector_type,
)
from .mma_matmul import MMA_K, MMA_M, MMA_N, ROW_PAD, WARP, a_fragment, accumulator_type, b_fragments, mma
from .simt_matmul import outer_product_update, transposing_store
from .tensor_maps import TENSOR_MAP_ELEMENTS, tma_layout_problem
from .wgmma_matmul import ATOM_BYTES, WARPGROUP

NEGATIVE_INFINITY = float("-inf")
LOG2_E = 1.4426950408889634
# exp2 as PTX's ex2.approx.ftz.f32, one MUFU.EX2. math.exp2 becomes the
# non-flushing ex2.approx.f32, which ptxas wraps in a compare and two
# multiplications for subnormal results: a fifth of the fp16 kernel's
# instructions. Flushing changes nothing a softmax can see (p < 2^-126).
_EXP2_FLUSHING = "ex2.approx.ftz.f32 $0, $1;"
# 1 / x within 1 ulp (MUFU.RCP). The IEEE-rounded rcp.rn.f32 is a ptxas
# subroutine: a call, across which ptxas serializes wgmma and ignores
# setmaxnreg.
RECIPROCAL_APPROXIMATE = "rcp.approx.ftz.f32 $0, $1;"
# The softmax's combining ops (its max, how it treats NaN; its sum), by name.
_COMBINE: dict[str, Callable[[ir.Value, ir.Value], ir.Value]] = {
    "arith.maximumf": arith.maximumf, "arith.maxnumf": arith.maxnumf, "arith.addf": arith.addf,
}


@dataclass(frozen=True)
class OperandSlice:
    """Where a block finds its batch entry's tile of Q, K or V in the kernel
    argument (shape `sizes`): each dim of the argument is the batch index,
    its outer part (batch / (heads·group)) or its head ((batch / group) %
    heads), or one of the tile's two dims ("tile"), in the argument's order,
    so Q, K and V may be read where a projection wrote them, heads
    interleaved, instead of from a permuted copy. With grouped KV heads
    (`group` query heads share one), K and V are read at their group's head
    instead of from a copy repeating each. The tile is a rank-2 subview
    whose first dim has stride `row_stride` in the argument and whose second
    is contiguous."""
    sizes: tuple[int, ...]
    dims: tuple[str, ...]   # each "batch", "outer", "head" or "tile"
    row_stride: int
    element: str
    heads: int = 1
    group: int = 1
    argument_type: str | None = None  # the argument's memref type, where recorded

    def tile_dim(self, which: int) -> int:
        """The argument's dim that holds the tile's first (0) or second (1) dim."""
        return [d for d, name in enumerate(self.dims) if name == "tile"][which]

    def open(self, which: int) -> bool:
        """Is the tile's first (0) or second (1) dim's size known only at run time?"""
        return ir.ShapedType.is_dynamic_size(self.sizes[self.tile_dim(which)])

    @property
    def open_batch(self) -> bool:
        return any(ir.ShapedType.is_dynamic_size(size) for d, size in zip(self.dims, self.sizes) if d != "tile")

    def tile_type(self) -> ir.MemRefType:
        """memref<rows x cols x element, strided<[row_stride, 1], offset: ?>> (rows or cols ? where open)."""
        rows, cols = (size for d, size in zip(self.dims, self.sizes) if d == "tile")
        layout = ir.StridedLayoutAttr.get(ir.ShapedType.get_dynamic_stride_or_offset(), [self.row_stride, 1])
        return ir.MemRefType.get([rows, cols], element_type(self.element), layout=layout, loc=ir.Location.unknown())


@dataclass(frozen=True)
class AttentionOperands:
    """The two matmuls of an attention and what sits around them."""
    scores: MatmulOperands               # Q·Kᵀ: A = Q (batch, Sq, D), B = Kᵀ (batch, D, Sk), or K if b_transposed
    values: MatmulOperands               # P·V: B = V (batch, Sk, D), or Vᵀ; C the output, through its view
    score_epilogue: Epilogue | None      # applied to each score (its view gives the loop indices)
    value_epilogue: Epilogue | None      # applied to each output element as it is stored
    slices: tuple[OperandSlice, OperandSlice, OperandSlice]  # how Q, K and V are read
    max_op: str = "arith.maximumf"       # the softmax's max (how it treats NaN)
    q_scale: float | None = None         # Q times this, in its element type, as it is staged
    score_scale: float | None = None     # the scores times this before the softmax (softmax_scale.py)
    copies_read_through: int = 0         # of Q, K, V: permuted copies the kernel reads the sources of
    output_vectors: bool = False         # O's layout takes 16-byte vectors along the head dim

    @property
    def head_dim(self) -> int:
        return self.scores.k

    @property
    def keys(self) -> int:
        return self.scores.n

    @property
    def queries(self) -> int:
        return self.scores.m

    @property
    def open_sizes(self) -> bool:
        """Are the queries, the keys or the batch known only at run time (then
        `queries`, `keys` and the batch are their largest)?"""
        return self.slices[0].open(0) or self.slices[0].open_batch or self.keys_open

    @property
    def keys_dim(self) -> int:
        """Which of K's tile dims holds the keys: its rows (0), or its columns (1: Kᵀ stored)."""
        return 0 if self.scores.b_transposed else 1

    @property
    def keys_open(self) -> bool:
        return self.slices[1].open(self.keys_dim)


@dataclass(frozen=True)
class MaskLimits:
    """A row's masks as key offsets (i32) from a base key: a score at base +
    offset is masked where offset > `causal` (its key past row + reach) or
    offset >= `edge` (past the keys' ragged end); None where none applies."""
    causal: ir.Value | None
    edge: ir.Value | None


@dataclass(frozen=True)
class AttentionKernelOperands:
    """The values the kernel reads and writes, where its launch is built:
    the arguments Q, K and V are read from (`OperandSlice`), the output, and
    each epilogue's tensor inputs (in `tensor_inputs` order) and the buffers
    it gathers from."""
    q: ir.Value
    k: ir.Value
    v: ir.Value
    o: ir.Value
    value_tensors: tuple[ir.Value, ...] = ()
    value_captured: tuple[ir.Value, ...] = ()
    score_tensors: tuple[ir.Value, ...] = ()
    score_captured: tuple[ir.Value, ...] = ()
    mask_tiles: MaskTileBuffers | None = None  # the boolean mask's tile classes, and its bits


@dataclass(frozen=True)
class FlashTileConfig:
    """The flash kernel's schedule: BM query rows per block, BN keys per
    step; CUDA cores: `lanes` threads per query row, `tm` rows each; tensor
    cores (`tensor_cores`: a warp per 16 rows, P kept in registers as P·V's
    A fragments): a ring of `stages` K/V buffers, the next tile's scores
    computed a step ahead (`lookahead`, which needs 3 buffers), O stored 16
    bytes a lane through Q's shared tile (`staged_store`), exp2 as PTX's
    flushing ex2 (`flushing_exp2`; else math.exp2)."""
    bm: int
    keys: int
    head_dim: int
    tensor_cores: bool = False
    tm: int = 4
    lanes: int = 8
    stages: int = 2
    lookahead: bool = False
    staged_store: bool = False
    flushing_exp2: bool = True
    warpgroups: int = 0  # wgmma (sm_90a): BM = 64 rows a warpgroup; 0: mma.sync or CUDA cores
    blocks_per_sm: int = 1  # the resident blocks its registers are held to (nvvm.minctasm)
    producer: bool = False  # wgmma: K and V copied by TMA from a warpgroup of their own
    turns: bool = False  # with a producer: the consumer warpgroups issue their matmuls in turn

    def __post_init__(self):
        if self.lookahead and self.stages < 3:
            raise ValueError(f"flash schedule {self}: scores a tile ahead need a ring of 3 buffers or more")
        if self.warpgroups and (self.bm != 64 * self.warpgroups or self.stages < 3 or self.head_dim % 64):
            raise ValueError(f"flash schedule {self}: wgmma takes 64 rows a warpgroup, a ring of 3 buffers "
                             "or more and a head dim of whole 128-byte rows")
        if self.producer and not self.warpgroups:
            raise ValueError(f"flash schedule {self}: a TMA producer feeds wgmma consumers only")
        if self.turns and not (self.producer and self.warpgroups > 1):
            raise ValueError(f"flash schedule {self}: turns are taken by the consumer warpgroups of a producer")

    @property
    def bn(self) -> int:  # the output tile's width: the whole head (one block column)
        return self.head_dim

    @property
    def bk(self) -> int:  # P·V's K step: a key tile
        return self.keys

    @property
    def threads(self) -> int:
        """The threads that compute (and, without a producer, copy)."""
        return WARP * self.bm // MMA_M if self.tensor_cores else self.bm // self.tm * self.lanes

    @property
    def launch_threads(self) -> int:
        return self.threads + (WARPGROUP if self.producer else 0)

    def label(self) -> str:
        if self.warpgroups:
            return f"{self.bm}x{self.keys}x{self.head_dim}/{self.warpgroups} warpgroups/{self.stages} stages" + \
                (f"/{self.blocks_per_sm} blocks an SM" if self.blocks_per_sm > 1 else "") + \
                ("/TMA producer warpgroup" if self.producer else "") + ("/turns" if self.turns else "")
        return f"{self.bm}x{self.keys}x{self.head_dim}" + ("" if self.tensor_cores else f"/{self.tm}x{self.lanes}")


def choose_flash_tile(attention: AttentionOperands, arch: str = DEFAULT_ARCH,
                      flash_tiles: tuple[WgmmaFlashTile, ...] | None = None) -> FlashTileConfig | None:
    """The tile for this attention: tensor cores for f16/bf16 whose head dim
    takes m16n8k16 steps (wgmma where `arch` has it and `_wgmma_tile`
    finds one among `flash_tiles`, lowering/tuning/attention.toml's by
    default), CUDA cores otherwise; None where the keys, ragged or known
    only at run time, run along a vector (Kᵀ stored, or Vᵀ)."""
    d, element = attention.head_dim, attention.values.in_element
    flash_tiles = default_flash_tiles() if flash_tiles is None else flash_tiles
    keys_in_rows = attention.scores.b_transposed and not attention.values.b_transposed
    if (attention.keys % 16 or attention.keys_open) and not keys_in_rows:
        return None
    bm = _edge_tile(attention.queries, (64, 32, 16))
    if element in ("f16", "bf16") and d % MMA_K == 0 and d <= 128:
        if gpu_target().has("wgmma", arch) and (wgmma := _wgmma_tile(attention, flash_tiles)) is not None:
            return wgmma
        # Static shared memory holds Q and a ring of two K and V tiles at least.
        fitting = tuple(t for t in (64, 32, 16) if _mma_shared_bytes(bm, t, d, 2) <= gpu_target().static_shared_bytes)
        if not fitting:
            return None
        keys = _edge_tile(attention.keys, fitting)
        stages = _ring_stages(attention, bm, keys)
        return FlashTileConfig(bm, keys, d, tensor_cores=True, stages=stages, lookahead=stages >= 3,
                               staged_store=_stores_staged(attention))

    lanes = 8 if d >= 16 else 4
    # Shared memory (static, 48 KiB at most) holds Q and P (BM x D, BN x BM) and K, V (BN x D) in f32.
    # Run-time sizes cost registers (bounds, masks): a 64-key tile spilled there.
    keys = _edge_tile(attention.keys, (64, 32, 16) if d <= 32 and not attention.open_sizes else (32, 16))
    if d % lanes or d > 64:
        return None
    tm = min(4, bm * lanes // WARP)  # rows per thread: fewer on small tiles, so a block is a warp at least
    return FlashTileConfig(bm, keys, d, tm=tm, lanes=lanes)


@dataclass(frozen=True)
class WgmmaFlashTile:
    """An entry of lowering/tuning/attention.toml's `wgmma_flash` table (its comments say what each means)."""
    warpgroups: int
    keys: int
    max_stages: int
    blocks_per_sm: int
    producer: bool
    turns: bool = False
    head_dims: tuple[int, ...] = (64, 128)
    boolean_masks: bool = True
    fewer_rows: bool = True
    min_keys: int = 0

    def __post_init__(self):
        counts = (self.warpgroups, self.keys, self.max_stages, self.blocks_per_sm)
        if not all(isinstance(n, int) and n > 0 for n in counts) or self.keys % MMA_K:
            raise ValueError("warpgroups, keys, max_stages and blocks_per_sm are positive integers, "
                             f"keys a multiple of {MMA_K} (got {counts})")

    def takes(self, attention: AttentionOperands) -> str | None:
        """Why this entry does not take the attention (None: it does)."""
        if attention.head_dim not in self.head_dims:
            return f"a head dim of {attention.head_dim}"
        if attention.keys < self.min_keys:
            return f"fewer than {self.min_keys} keys"
        if not self.boolean_masks and tensor_mask_of(attention.score_epilogue, attention.scores.view) is not None:
            return "a boolean mask"
        if not self.fewer_rows and _query_rows(attention.queries, 64 * self.warpgroups) != 64 * self.warpgroups:
            return f"{attention.queries} queries in blocks of fewer rows"
        return _tma_problem(attention) if self.producer else None


def load_flash_tiles(lowering_dir: Path = DEFAULT_LOWERING_DIR) -> tuple[WgmmaFlashTile, ...]:
    """The wgmma flash kernel's tiles, first that fits first."""
    path = Path(lowering_dir) / "tuning" / "attention.toml"
    if not path.is_file():
        raise UsageError(f"{path}: no such file (the wgmma flash kernel's tiles; a lowering directory "
                         "copied before it existed needs lowering/tuning/attention.toml)")
    try:
        entries = tomllib.loads(path.read_text()).get("wgmma_flash", ())
        return tuple(WgmmaFlashTile(**{**entry, "head_dims": tuple(entry.get("head_dims", (64, 128)))})
                     for entry in entries)
    except (TypeError, ValueError) as error:
        raise UsageError(f"{path}: a wgmma_flash entry: {error}") from None


@functools.cache
def default_flash_tiles() -> tuple[WgmmaFlashTile, ...]:
    return load_flash_tiles()


def _wgmma_tile(attention: AttentionOperands, tiles: tuple[WgmmaFlashTile, ...]) -> FlashTileConfig | None:
    """The first of `tiles` that fits this attention: 64 query rows a
    consumer warpgroup (`_query_rows`), K and V tiles in a ring of 3
    buffers or more in dynamic shared memory beside Q's tile, as many
    blocks an SM as the entry asks where their shared memory fits, else
    fewer. None where the kernel does not apply: a head dim of no whole
    128-byte rows, keys not K's rows, Vᵀ stored, or sizes known only at
    run time (the mma.sync kernel takes those); an entry skips what it
    does not take (`WgmmaFlashTile.takes`)."""
    a, d = attention, attention.head_dim
    if d % 64 or d > 128 or not a.scores.b_transposed or a.values.b_transposed or a.open_sizes:
        return None
    target, size = gpu_target(), element_bytes(a.values.in_element)
    for tile in tiles:
        if tile.takes(attention) is not None:
            continue
        bm = _query_rows(a.queries, 64 * tile.warpgroups)
        fixed = bm * (d + ROW_PAD) * size + ATOM_BYTES  # Q's tile and the ring's alignment
        for blocks in range(tile.blocks_per_sm, 0, -1):
            room = min(target.shared_bytes_per_sm // blocks - target.reserved_shared_bytes,
                       target.shared_bytes_per_block) - fixed
            stages = min(tile.max_stages, room // (2 * tile.keys * d * size))
            if stages >= 3:
                return FlashTileConfig(bm, tile.keys, d, tensor_cores=True, stages=stages,
                                       staged_store=_stores_staged(attention), warpgroups=bm // 64,
                                       blocks_per_sm=blocks, producer=tile.producer,
                                       turns=tile.turns and bm > 64)
    return None


def _query_rows(queries: int, rows: int) -> int:
    """A block's query rows: the entry's `rows` where they pad the queries
    by a sixteenth at most (2048 in 192-row tiles: 3%), else 128 or 64 as
    `_edge_tile` takes them."""
    if round_up(queries, rows) * 16 <= queries * 17:
        return rows
    return _edge_tile(queries, (128, 64))


def _tma_problem(attention: AttentionOperands) -> str | None:
    """Why tensor maps cannot read K and V where the kernel reads them (None: they can)."""
    for name, s in (("K", attention.slices[1]), ("V", attention.slices[2])):
        if s.element not in TENSOR_MAP_ELEMENTS:
            return f"{name}: no tensor map for {s.element}"
        if s.argument_type is None:
            return f"{name}: its argument's layout is not recorded"
        problem = tma_layout_problem(s.argument_type)
        if problem:
            return f"{name}: {problem}"
    return None


def _ring_stages(attention: AttentionOperands, bm: int, keys: int) -> int:
    """As many K/V buffers as key tiles, 4 at most, within static shared
    memory beside Q's tile (2 at least: `choose_flash_tile` keeps the tile that small)."""
    d, size = attention.head_dim, element_bytes(attention.values.in_element)
    tile_bytes = (_k_shape(attention, keys)[0] * _k_shape(attention, keys)[1]
                  + _v_shape(attention, keys)[0] * _v_shape(attention, keys)[1]) * size
    room = (gpu_target().static_shared_bytes - bm * (d + ROW_PAD) * size) // tile_bytes
    return max(2, min(4, -(-attention.keys // keys), room))


def _k_shape(attention: AttentionOperands, keys: int) -> tuple[int, int]:
    """A K tile in shared memory (rows padded against bank conflicts)."""
    d = attention.head_dim
    return (keys, d + ROW_PAD) if attention.scores.b_transposed else (d, keys + ROW_PAD)


def _v_shape(attention: AttentionOperands, keys: int) -> tuple[int, int]:
    d = attention.head_dim
    return (d, keys + ROW_PAD) if attention.values.b_transposed else (keys, d + ROW_PAD)


def _stores_staged(attention: AttentionOperands) -> bool:
    """Can O go out 16 bytes a lane through Q's tile: its layout takes 16-byte vectors
    along the head dim, in the operand type, and its view keeps them contiguous?"""
    ops, vec = attention.values, 16 // element_bytes(attention.values.in_element)
    return attention.output_vectors and ops.out_element == ops.in_element and \
        (ops.view is None or ops.view.contiguous(vec))


def _scores_in_f32(epilogue: Epilogue | None, stored: str) -> tuple[Epilogue | None, str]:
    """The score epilogue the kernel applies, and the type it yields: an
    epilogue ending in a narrowing (fp16 scores, which the softmax widens
    again) ends before it, so the scores stay f32 as the softmax reads
    them. Intermediates of a fused kernel stay in f32, as Inductor keeps
    them and SDPA's own kernels never round the scores; it also saves a
    conversion each way per score."""
    if epilogue is None or epilogue.result[0] != "op":
        return epilogue, stored
    index = epilogue.result[1]
    narrowing = epilogue.ops[index]
    if narrowing.name != "arith.truncf" or narrowing.operand_types[0] != "f32" or \
            any(epilogue.result in op.operands for op in epilogue.ops):
        return epilogue, stored
    return epilogue.without_op(index, narrowing.operands[0]), "f32"


def _mma_shared_bytes(bm: int, keys: int, d: int, stages: int) -> int:
    """Q's tile and `stages` K and V tiles, 2-byte elements, rows padded (K
    or V transposed or not: the larger)."""
    tile = max(keys * (d + ROW_PAD), d * (keys + ROW_PAD))
    return 2 * (bm * (d + ROW_PAD) + stages * 2 * tile)


def _edge_tile(size: int, tiles: tuple[int, ...]) -> int:
    """The tile along a dim of `size`: the largest of `tiles` (in decreasing
    order) that divides it; else, its last tile masked, the largest that
    pads it by a quarter at most (197 -> 32: 224), else the smallest."""
    divisor = next((t for t in tiles if size % t == 0), None)
    if divisor is not None:
        return divisor
    return next((t for t in tiles if round_up(size, t) * 4 <= size * 5), tiles[-1])


class FlashAttentionWriter(TiledMatmulWriter):
    """What both generators share: the operands, the scores' epilogue, the
    online-softmax update of one row and the final store. The matmul base
    sees the P·V matmul: its grid (query tiles x batch), K loop (over the
    keys) and store are P·V's."""

    def __init__(self, attention: AttentionOperands, config: FlashTileConfig, kind: str):
        super().__init__(attention.values, config, kind, accumulate=False, epilogue=attention.value_epilogue)
        self.attention = attention
        if attention.copies_read_through:
            self.path += f" ({attention.copies_read_through} copies read through)"
        if attention.open_sizes:
            self.path += " masked edges (sizes at run time)"
        elif self.m_edge is not None or self.k_edge is not None:
            self.path += " masked edges"
        self.t = attention.values.in_element
        self.vec = 16 // element_bytes(self.t)
        self.score_description, self.score_type = _scores_in_f32(attention.score_epilogue,
                                                                 attention.scores.out_element)
        self.score_epilogue: EpilogueWriter | None = None
        # A causal mask's reach is read at compile-time sizes; with open sizes the epilogue masks each score.
        self.reach = None if attention.open_sizes else masked_key_reach(
            attention.score_epilogue, attention.scores.view, attention.queries, attention.keys)
        # Where the score epilogue is a causal mask alone, a subclass may
        # apply the mask itself, to the tiles it reaches into (`masking`).
        self.own_mask, self.masking = False, False
        # Where it hides scores by a boolean mask tensor, its tiles are
        # classed before the kernel: the keys end after the last tile a row
        # of the block sees, and a subclass that sets `clear_tiles_unmasked`
        # reads no mask in the tiles that hide no key.
        self.mask_tiles = self._mask_tiles()
        self.clear_tiles_unmasked = False

    def _mask_tiles(self) -> MaskTiles | None:
        a = self.attention
        if a.open_sizes or self.reach is not None:
            return None
        mask = tensor_mask_of(a.score_epilogue, a.scores.view)
        if mask is None or mask.keys != a.keys or mask.per_row and mask.queries != a.queries:
            return None
        tiles = MaskTiles(mask, self.cfg.bm if mask.per_row else 1, self.cfg.keys)
        return tiles if tiles.key_tiles >= MIN_KEY_TILES else None

    # ------------------------------------------------------------ launch
    def build(self, before: ir.Operation, kernel: str, operands: AttentionKernelOperands) -> ir.Operation:
        """The kernel's gpu.launch, built right before `before` (the P·V
        matmul), after the values it reads that are made on the host."""
        with ir.InsertionPoint(before), before.location:
            made = self.host_values(operands)
        try:
            return self._launch(before, kernel, operands)
        except Exception:
            self.discard_host_values(made)
            raise

    def _launch(self, before: ir.Operation, kernel: str, operands: AttentionKernelOperands) -> ir.Operation:
        def body(w: KernelBuilder, ids: LaunchIds) -> None:
            self.bind(w, ids, KernelOperands(operands.q, operands.v, operands.o, operands.value_tensors,
                                             operands.value_captured), ids.block_x, ids.block_y, ids.block_z)
            self.arguments = (operands.q, operands.k, operands.v)
            self.mask_buffers, self.mask_batch = operands.mask_tiles, None
            self._read_run_time_sizes()
            if self.score_description is not None:
                positions = (k for k, _ in self.score_description.tensor_inputs())
                self.score_epilogue = EpilogueWriter(self.score_description, w,
                                                     dict(zip(positions, operands.score_tensors)),
                                                     operands.score_captured)
            self.masking = False
            self.kernel_body()
        return build_launch(before, kernel, self.path, self._launch_grid(before, operands.q), self.cfg.launch_threads,
                            body, self.path, self.workgroup_types(), self.dynamic_shared_bytes())

    def _launch_grid(self, before: ir.Operation, q: ir.Value) -> tuple[int | ir.Value, ...]:
        """(1, query tiles, batch), counted on the host before the launch
        where Q's sizes are known only at run time (at least one block each)."""
        s = self.attention.slices[0]
        if not (s.open(0) or s.open_batch):
            return self.grid()
        with ir.InsertionPoint(before), before.location:
            index = ir.IndexType.get()
            sizes = [memref.dim(q, arith.constant(index, d)) if ir.ShapedType.is_dynamic_size(size)
                     else arith.constant(index, size) for d, size in enumerate(s.sizes)]
            one = arith.constant(index, 1)
            rows = arith.maxui(arith.ceildivui(sizes[s.tile_dim(0)], arith.constant(index, self.cfg.bm)), one)
            batch = one
            for d, name in enumerate(s.dims):
                if name != "tile":
                    batch = arith.muli(batch, sizes[d])
            return (1, rows, arith.maxui(batch, one))

    def _read_run_time_sizes(self) -> None:
        """Sizes known only at run time, read off Q and K in the kernel: the
        queries end at Q's rows (`m_edge`), the keys at K's (`k_edge`), the
        key tiles at `k_end` (whole tiles)."""
        w, a = self.w, self.attention
        q, k, _ = self.arguments
        if a.slices[0].open(0):
            self.m_edge = memref.dim(q, w.index(a.slices[0].tile_dim(0)))
        if a.keys_open:
            self.k_edge = memref.dim(k, w.index(a.slices[1].tile_dim(a.keys_dim)))
            self.k_end = w.mul(arith.ceildivui(self.k_edge, w.index(self.cfg.keys)), self.cfg.keys)

    def first_query_row(self) -> ir.Value:
        """The block's first query row. Under a causal mask the blocks take
        the query tiles last first: those with the most key tiles start
        first, and the short ones fill the last wave."""
        w, cfg = self.w, self.cfg
        if self.reach is None:
            return w.mul(self.block_m, cfg.bm)
        last = -(-self.attention.queries // cfg.bm) - 1
        return w.mul(arith.subi(w.index(last), self.block_m), cfg.bm)

    def mark_useful_work(self, loop) -> None:
        if not self.attention.open_sizes:  # the share is known at compile time only
            super().mark_useful_work(loop)

    # ------------------------------------------------------------ scores
    def score(self, value: ir.Value, row: ir.Value, key: ir.Value, offset: int | None = None,
              limits: MaskLimits | None = None, known: dict[int, ir.Value] | None = None) -> ir.Value:
        """One score as the softmax reads it: the epilogue applied (with the
        loop indices of its element), widened back to f32; in the tiles
        that need it (`masking`), the kernel's own causal mask and -inf past
        a ragged end of the keys. Given the row's `limits` (`mask_limits`)
        and the key's `offset` from their base, each mask is one compare
        with a constant. `known`: epilogue inputs already read (`mask_reader`)."""
        if not self.own_mask and self.score_epilogue is not None:
            value = self._epilogue_score(value, row, key, known)
        if not self.masking:
            return value
        w, negative_infinity = self.w, self.w.constant(NEGATIVE_INFINITY, "f32")
        if limits is not None:
            at = w.constant(offset, "i32")
            masked = [arith.cmpi(arith.CmpIPredicate.sgt, at, limits.causal) if limits.causal is not None else None,
                      arith.cmpi(arith.CmpIPredicate.sge, at, limits.edge) if limits.edge is not None else None]
            for past in masked:
                if past is not None:
                    value = arith.select(past, negative_infinity, value)
            return value
        if self.own_mask:  # -inf for a key past row + reach
            past = arith.cmpi(arith.CmpIPredicate.sgt, key, w.add(row, w.index(self.reach)))
            value = arith.select(past, negative_infinity, value)
        if self.k_edge is not None:
            value = arith.select(w.less(key, self.k_edge), value, negative_infinity)
        return value

    def mask_limits(self, row: ir.Value, key_base: ir.Value) -> MaskLimits | None:
        """A row's masks as key offsets from `key_base` (None outside the tiles that need them)."""
        if not self.masking:
            return None
        w, i32 = self.w, ir.IntegerType.get_signless(32)

        def relative(key: ir.Value) -> ir.Value:  # signed: the causal limit may lie before the base
            return arith.index_cast(i32, arith.subi(key, key_base))
        return MaskLimits(relative(w.add(row, w.index(self.reach))) if self.own_mask else None,
                          relative(w.index_of(self.k_edge)) if self.k_edge is not None else None)

    def _epilogue_score(self, value: ir.Value, row: ir.Value, key: ir.Value,
                        known: dict[int, ir.Value] | None) -> ir.Value:
        """The score epilogue at (row, key), its tensors read inside their
        bounds where a tile runs past the sequence (those scores go unused),
        but those `known`."""
        if self._reads_no_mask():  # a tile that hides no key: the mask is its visible value
            known = {self.mask_tiles.mask.position: self.w.constant(int(self.mask_tiles.mask.visible_if), "i1")}
        value = self.score_epilogue.apply(value, self._score_loop_indices(row, key, 1), known=known)
        return value if self.score_type == "f32" else arith.extf(ir.F32Type.get(), value)

    def _score_loop_indices(self, row: ir.Value, key: ir.Value, width: int) -> list[ir.Value]:
        """The score epilogue's loop indices at (row, key), clamped inside
        the sequence for a read of `width` keys."""
        w, view = self.w, self.attention.scores.view
        if self.m_edge is not None:
            row = arith.minui(row, self._last_place(self.m_edge, 1))
        if self.k_edge is not None:
            key = arith.minui(key, self._last_place(self.k_edge, width))
        c_indices = [self.batch, row, key]
        return view.loop_indices(w, c_indices) if view else c_indices

    def _reads_no_mask(self) -> bool:
        return self.clear_tiles_unmasked and not self.masking

    def mask_reader(self, row: ir.Value, key_base: ir.Value) -> Callable[[int], dict[int, ir.Value] | None]:
        """The boolean mask of `row` at key `key_base` + offset, as `score`'s
        `known` (None: the epilogue reads it itself, where the scores read
        no mask or it is read by bytes). A thread's scores of a tile are
        pairs of neighbouring keys 8 apart, from `key_base` (a key tile's
        start + the thread's column): the packed mask gives the row's bits
        of the tile in one load, else a load reads a pair."""
        tiles = self.mask_tiles
        if tiles is None or tiles.vector_width() < 2 or self.own_mask or self._reads_no_mask():
            return lambda offset: None
        position, w = tiles.mask.position, self.w
        if self.mask_buffers.packed is not None:
            words = self._packed_mask_bits(row, key_base)

            def bit(offset: int) -> dict[int, ir.Value]:
                word = words[offset // 32]
                selected = arith.andi(word, w.constant(1 << offset % 32, word.type))
                return {position: arith.cmpi(arith.CmpIPredicate.ne, selected, w.constant(0, word.type))}
            return bit
        pairs = {}

        def pair(offset: int) -> dict[int, ir.Value]:
            even = offset - offset % 2
            if even not in pairs:
                loops = self._score_loop_indices(row, w.add(key_base, w.index(even)), 2)
                dims = self.score_description.inputs[position].dims
                pairs[even] = w.load(2, "i1", self.score_epilogue.tensors[position], [loops[d] for d in dims], 2)
            return {position: w.lane(pairs[even], offset % 2)}
        return pair

    def _packed_mask_bits(self, row: ir.Value, key_base: ir.Value) -> list[ir.Value]:
        """The packed mask's bits of `row` in the key tile of `key_base`,
        shifted so that bit 0 is `key_base`'s, in words of 32 bits at most
        (a 64-bit test costs two instructions)."""
        w, tiles = self.w, self.mask_tiles
        packed = self.mask_buffers.packed
        chunks = tiles.keys // tiles.vector_width()
        word = ir.IntegerType.get_signless(tiles.keys)
        if self.m_edge is not None:
            row = arith.minui(row, self._last_place(self.m_edge, 1))
        tile = w.div(key_base, tiles.keys)
        at = [*self._mask_batch(), row if tiles.mask.per_row else w.index(0), w.mul(tile, chunks)]
        chunk_type = ir.MemRefType(packed.type).element_type
        bits = vector.extract(vector.bitcast(vector_of(1, word), w.load(chunks, chunk_type, packed, at, tiles.keys // 8)),
                              [], [0])
        within = arith.index_cast(word, w.sub(key_base, w.mul(tile, tiles.keys)))
        shifted = arith.shrui(bits, within)
        if tiles.keys <= 32:
            return [shifted]
        i32 = ir.IntegerType.get_signless(32)
        return [arith.trunci(i32, shifted), arith.trunci(i32, arith.shrui(shifted, w.constant(32, word)))]

    def lane_reduce(self, value: ir.Value, op: str, lanes: int) -> ir.Value:
        """`op` over the `lanes` neighbouring lanes that share a row (xor
        shuffles; among the block's threads only, when it is less than a warp)."""
        return self.w.xor_reduce(value, _COMBINE[op], lanes, min(WARP, self.threads))

    def softmax_update(self, scores: list[ir.Value], m_old: ir.Value, l_old: ir.Value | None,
                       lanes: int) -> tuple[ir.Value, ir.Value, ir.Value | None, list[ir.Value]]:
        """One row's online-softmax step over this thread's `scores` (f32),
        the row spread over `lanes` lanes: (new max, rescale factor of the
        old sums, new partial sum of this thread, exp(score - max) each)."""
        w, maximum = self.w, _COMBINE[self.attention.max_op]
        tile_max = w.tree(scores, maximum)
        m_new = maximum(m_old, self.lane_reduce(tile_max, self.attention.max_op, lanes))
        infinite = arith.cmpf(arith.CmpFPredicate.OEQ, m_new, w.constant(NEGATIVE_INFINITY, "f32"))
        base = arith.select(infinite, w.constant(0.0, "f32"), m_new)
        alpha, *probabilities = self.exponentials([m_old, *scores], base)
        if l_old is None:  # the caller sums the row itself
            return m_new, alpha, None, probabilities
        l_new = mlir_math.fma(l_old, alpha, w.tree(probabilities, arith.addf))
        return m_new, alpha, l_new, probabilities

    def exponentials(self, values: list[ir.Value], base: ir.Value) -> list[ir.Value]:
        """exp((value - base)·c) of each value, c the softmax's scale."""
        differences = [arith.subf(value, base) for value in values]
        if self.attention.score_scale is not None:
            scale = self.w.constant(self.attention.score_scale, "f32")
            differences = [arith.mulf(d, scale) for d in differences]
        return [mlir_math.exp(d) for d in differences]

    def row_total(self, partial: ir.Value, lanes: int) -> ir.Value:
        return self.lane_reduce(partial, "arith.addf", lanes)

    def initial_row_state(self, rows: int) -> list[ir.Value]:
        """m = -inf, l = 0 for each of this thread's rows."""
        w = self.w
        return [w.constant(NEGATIVE_INFINITY, "f32")] * rows + [w.constant(0.0, "f32")] * rows

    # ------------------------------------------------------------ the key loop
    def key_end(self) -> ir.Value:
        """Where this block's keys end: all of them (whole key tiles, the
        last maybe ragged: `k_end`), or under a causal mask (`reach`) at the
        first key tile whose keys are all masked for each of the block's
        rows (past m0 + BM - 1 + reach), which the loop skips."""
        w, cfg, keys = self.w, self.cfg, self.attention.keys
        if self.mask_tiles is not None:  # the tiles to run, counted by the mask's tile classes
            tiles = arith.index_cast(ir.IndexType.get(), self.summary_at(w.index(self.mask_tiles.key_tiles)))
            return arith.minui(w.mul(tiles, cfg.keys), w.index_of(self.k_end))
        if self.reach is None or cfg.bm + self.reach >= keys:
            return self.w.index_of(self.k_end)
        past = cfg.bm + self.reach + cfg.keys - 1  # rounds up to whole key tiles
        return self._whole_tiles_below(past, w.index(self.k_end))

    def summary_at(self, key_tile: ir.Value) -> ir.Value:
        """The mask-tiles summary's entry of this block (its batch entry of
        the mask, its query tile) at `key_tile`."""
        w = self.w
        query_tile = w.div(self.m0, self.cfg.bm) if self.mask_tiles.mask.per_row else w.index(0)
        return memref.load(self.mask_buffers.summary, [*self._mask_batch(), query_tile, key_tile])

    def _mask_batch(self) -> list[ir.Value]:
        """This block's batch entry of the boolean mask (its indices)."""
        if self.mask_batch is None:
            w, view = self.w, self.attention.scores.view
            zero = w.index(0)
            loops = view.loop_indices(w, [self.batch, zero, zero]) if view else [self.batch, zero, zero]
            self.mask_batch = [loops[d] for d in self.mask_tiles.mask.batch_loop_dims]
        return self.mask_batch

    def unmasked_end(self, end: ir.Value) -> ir.Value:
        """Where the key tiles that need no mask end, at most `end`: those
        before a ragged last tile and, under the kernel's own causal mask,
        wholly within m0 + reach (every row of the block sees them in full)."""
        bound = end if self.k_edge is None else arith.minui(end, self.w.index_of(self._whole_key_tiles()))
        if not self.own_mask:
            return bound
        return self._whole_tiles_below(self.reach + 1, bound)  # row m0 sees keys below m0 + reach + 1

    def _whole_key_tiles(self) -> int | ir.Value:
        """The keys in whole tiles (all but a ragged last tile's)."""
        if isinstance(self.k_edge, ir.Value):
            return self.w.mul(self.w.div(self.k_edge, self.cfg.keys), self.cfg.keys)
        return self.attention.keys // self.cfg.keys * self.cfg.keys

    # The same bounds in Python, per block (m0 = its first query row), for
    # the mean trips the kernel report counts.
    def key_end_at(self, m0: int) -> int:
        cfg, keys = self.cfg, self.attention.keys
        if self.reach is None or cfg.bm + self.reach >= keys:
            return self.k_end
        return self._whole_tiles_below_at(m0, cfg.bm + self.reach + cfg.keys - 1, self.k_end)

    def unmasked_end_at(self, m0: int) -> int:
        bound = self.key_end_at(m0) if self.k_edge is None else min(self.key_end_at(m0), self._whole_key_tiles())
        return self._whole_tiles_below_at(m0, self.reach + 1, bound) if self.own_mask else bound

    def _whole_tiles_below_at(self, m0: int, offset: int, bound: int) -> int:
        return min(max(m0 + offset, 0) // self.cfg.keys * self.cfg.keys, bound)

    def mean_key_tiles(self, start, stop) -> float | None:
        """Key tiles from start(m0) to stop(m0), averaged over the blocks;
        None without a causal mask (the bounds are the same for every block).
        Under a boolean mask's tile classes, known only at run time, every
        tile counts: the most the blocks can run."""
        if self.reach is None and self.mask_tiles is None:
            return None
        firsts = range(0, self.attention.queries, self.cfg.bm)
        return sum(stop(m0) - start(m0) for m0 in firsts) / len(firsts) / self.cfg.keys

    def _whole_tiles_below(self, offset: int, bound: ir.Value) -> ir.Value:
        """The key-tile boundary at or below m0 + `offset` (0 where that is
        negative), at most `bound`."""
        w, keys = self.w, self.cfg.keys
        key = w.add(self.m0, w.index(offset)) if offset >= 0 else \
            arith.maxsi(arith.subi(self.m0, w.index(-offset)), w.index(0))
        return arith.minui(w.mul(w.div(key, keys), keys), bound)

    # ------------------------------------------------------------ staging
    def shared(self, rows: int, cols: int, element: str | None = None) -> ir.MemRefType:
        return workgroup_memref((rows, cols), element or self.t)

    def vector_store_into(self, buffer: ir.Value, width: int):
        return lambda v, r, c: self.w.store(v, buffer, [r, c], width * element_bytes(self.t))

    def copy(self, rows: int, cols: int, source: ir.Value, origin: tuple[ir.Value, ir.Value], store,
             rows_end: int | ir.Value | None = None) -> TileCopy:
        """A tile copy; rows from `rows_end` on (a ragged edge) read as zeros."""
        return TileCopy(rows, cols, min(self.vec, cols), source, origin, store, (rows_end, None))

    # ------------------------------------------------------------ operands
    def operand_tiles(self) -> None:
        """This block's Q, K and V tiles (self.tiles), as rank-2 subviews of
        the arguments: every operand access is 2-D."""
        self.tiles = [self._tile_view(argument, s) for argument, s in zip(self.arguments, self.attention.slices)]

    def batch_offsets(self, s: OperandSlice) -> list[ir.Value | None]:
        """This block's index in each dim of an argument read as `s` says
        (None in the tile's dims)."""
        w, batch = self.w, self.batch
        where = {"batch": lambda: batch, "outer": lambda: w.div(batch, s.heads * s.group),
                 "head": lambda: w.rem(w.div(batch, s.group), s.heads), "tile": lambda: None}
        return [where[d]() for d in s.dims]

    def _tile_view(self, argument: ir.Value, s: OperandSlice) -> ir.Value:
        w = self.w
        offsets = self.batch_offsets(s)
        dynamic = ir.ShapedType.get_dynamic_stride_or_offset()
        sizes = [size if d == "tile" else 1 for d, size in zip(s.dims, s.sizes)]
        open_sizes = [memref.dim(argument, w.index(d)) for d, size in enumerate(sizes)
                      if ir.ShapedType.is_dynamic_size(size)]
        return memref.SubViewOp(s.tile_type(), argument, [o for o in offsets if o is not None], open_sizes, [],
                                [0 if o is None else dynamic for o in offsets], sizes, [1] * len(s.dims)).result

    def at(self, row: ir.Value, col: ir.Value) -> list[ir.Value]:
        """An element of an operand tile (`operand_tiles`): no batch index."""
        return [row, col]

    def loop_indices(self, row: ir.Value, col: ir.Value) -> list[ir.Value]:
        """The indices of O[batch, row, col] in the output epilogue's loops."""
        c_indices = [self.batch, row, col]
        return self.ops.view.loop_indices(self.w, c_indices, self.c) if self.ops.view else c_indices

    def scaled_q(self, value: ir.Value, vector: ir.VectorType) -> ir.Value:
        """A staged vector of Q times `q_scale` (the multiplication it was read through)."""
        if self.attention.q_scale is None:
            return value
        return arith.mulf(value, self.w.constant(self.attention.q_scale, vector))


class SimtFlashWriter(FlashAttentionWriter):
    """CUDA cores. Thread t owns rows tm·(t / R) … +tm of the block's query
    tile and, of each key tile, the BN/R keys (t % R)·BN/R …; of the output,
    the D/R columns (t % R)·D/R …: a row's statistics stay with the threads
    that own its output. Q and K are staged d-major (Q transposed), so each
    step is outer products of vectors, as in simt_matmul; P goes through
    shared memory, key-major, to the P·V outer products."""

    def __init__(self, attention: AttentionOperands, config: FlashTileConfig):
        super().__init__(attention, config, "flash-attention-simt")
        cfg, d = config, config.head_dim
        self.tn, self.to = cfg.keys // cfg.lanes, d // cfg.lanes
        pad = 16 // element_bytes(self.t)
        self.q_smem = self.shared(d, cfg.bm + pad)
        self.k_smem = self.shared(d, cfg.keys)
        self.v_smem = self.shared(cfg.keys, d)
        self.p_smem = self.shared(cfg.keys, cfg.bm + 4, "f32")

    def workgroup_types(self) -> list[ir.MemRefType]:
        return [self.q_smem, self.k_smem, self.v_smem, self.p_smem]

    def kernel_body(self) -> None:
        w, cfg = self.w, self.cfg
        self.q_shared, self.k_shared, self.v_shared, self.p_shared = self.shared
        self.row0 = w.mul(w.div(self.tid, cfg.lanes), cfg.tm)  # this thread's first row within the tile
        self.lane = w.rem(self.tid, cfg.lanes)
        self.key0 = w.mul(self.lane, self.tn)                  # its first key within a key tile
        self.col0 = w.mul(self.lane, self.to)                  # its first output column
        self.m0 = self.first_query_row()
        self.operand_tiles()
        width = min(self.vec, cfg.head_dim)
        store_q = transposing_store(w, self.q_shared, width)
        self.copy_tile(self.copy(cfg.bm, cfg.head_dim, self.tiles[0], (self.m0, w.index(0)),
                                 lambda v, r, c: store_q(self.scaled_q(v, vector_type(width, self.t)), r, c),
                                 rows_end=self.m_edge))
        self.masking = self.k_edge is not None  # every tile: a compare per score, on the CUDA-core path only
        zero = w.constant(0.0, vector_type(self.to, "f32"))
        results = self.k_loop(cfg.keys, [zero] * cfg.tm + self.initial_row_state(cfg.tm), self.key_end(),
                              self.mean_key_tiles(lambda m0: 0, self.key_end_at))
        self._store(results)

    def stage_copies(self, k: ir.Value) -> list[TileCopy]:
        w, cfg, d, a = self.w, self.cfg, self.cfg.head_dim, self.attention
        zero = w.index(0)
        _, k_tile, v_tile = self.tiles
        if a.scores.b_transposed:  # K (keys x D): transposed into Ks; only keys in rows run ragged
            k_copy = self.copy(cfg.keys, d, k_tile, (k, zero), transposing_store(w, self.k_shared, min(self.vec, d)),
                               self.k_edge)
        else:
            k_copy = self.copy(d, cfg.keys, k_tile, (zero, k),
                               self.vector_store_into(self.k_shared, min(self.vec, cfg.keys)))
        if a.values.b_transposed:  # Vᵀ (D x keys): transposed into Vs
            v_copy = self.copy(d, cfg.keys, v_tile, (zero, k),
                               transposing_store(w, self.v_shared, min(self.vec, cfg.keys)))
        else:
            v_copy = self.copy(cfg.keys, d, v_tile, (k, zero), self.vector_store_into(self.v_shared, min(self.vec, d)),
                               self.k_edge)
        return [k_copy, v_copy]

    def compute(self, accumulators: list[ir.Value]) -> list[ir.Value]:
        w, cfg = self.w, self.cfg
        tm = cfg.tm
        # `k_loop` builds this step in its loop's body: the block's first argument is the step's first key.
        k0 = ir.InsertionPoint.current.block.arguments[0]
        outputs, m_old, l_old = accumulators[:tm], accumulators[tm:2 * tm], accumulators[2 * tm:]
        scores = self._scores()
        m_new, l_new, rescaled = [], [], []
        columns = [[] for _ in range(self.tn)]  # per key of this thread: p of each of its rows
        for i in range(tm):
            row = w.add(self.m0, w.add(self.row0, w.index(i)))
            values = [self.score(w.lane(scores[i], j), row, w.add(k0, w.add(self.key0, w.index(j))))
                      for j in range(self.tn)]
            m, alpha, l, probabilities = self.softmax_update(values, m_old[i], l_old[i], cfg.lanes)
            m_new.append(m)
            l_new.append(l)
            splat = vector.broadcast(vector_type(self.to, "f32"), alpha)
            rescaled.append(arith.mulf(outputs[i], splat))
            for j, p in enumerate(probabilities):
                columns[j].append(p)
        for j, column in enumerate(columns):
            packed = vector.from_elements(vector_type(tm, "f32"), column)
            w.store(packed, self.p_shared, [w.add(self.key0, w.index(j)), self.row0], 4 * tm)
        self.barrier()
        return self._add_values(rescaled) + m_new + l_new

    def _scores(self) -> list[ir.Value]:
        """This thread's tm x tn scores of the tile, unscaled, as tm f32 vectors."""
        w, cfg, t = self.w, self.cfg, self.t
        scores = [w.constant(0.0, vector_type(self.tn, "f32"))] * cfg.tm
        for d in range(cfg.head_dim):
            q = self._load(self.q_shared, w.index(d), self.row0, cfg.tm, t)
            k = self._load(self.k_shared, w.index(d), self.key0, self.tn, t)
            scores = outer_product_update(w, q, k, self.tn, scores)
        return scores

    def _add_values(self, outputs: list[ir.Value]) -> list[ir.Value]:
        w, cfg = self.w, self.cfg
        for key in range(cfg.keys):
            p = self._load(self.p_shared, w.index(key), self.row0, cfg.tm, "f32")
            v = self._load(self.v_shared, w.index(key), self.col0, self.to, self.t)
            outputs = outer_product_update(w, p, v, self.to, outputs)
        return outputs

    def _load(self, buffer: ir.Value, row: ir.Value, col: ir.Value, width: int, element: str) -> ir.Value:
        """`width` elements at [row, col..] of a shared buffer, as f32."""
        value = self.w.load(width, element, buffer, [row, col], min(16, width * element_bytes(element)))
        return self.to_f32(value, width, element)

    def _store(self, results: list[ir.Value]) -> None:
        w, cfg = self.w, self.cfg
        tm = cfg.tm
        for i in range(tm):
            total = self.row_total(results[2 * tm + i], cfg.lanes)
            splat = vector.broadcast(vector_type(self.to, "f32"), total)
            output = arith.divf(results[i], splat)
            self.store_results(output, self.to, w.add(self.m0, w.add(self.row0, w.index(i))), self.col0)


class MmaFlashWriter(FlashAttentionWriter):
    """Tensor cores (mma.sync m16n8k16, f32 accumulation). Warp w owns query
    rows 16w … 16w+15 of the block's tile; Q's fragments stay in registers
    for the whole loop. Each lane holds, of every 16x8 accumulator tile, rows
    lane/4 and lane/4 + 8: a row's max combines over 4 lanes; its sum is
    one more mma.sync per K step, P times a B of ones. The
    scores of keys 16k … 16k+15, narrowed, are P·V's A fragment for that
    K step (FlashAttention-2), so P never leaves registers.

    K and V tiles go through a ring of `stages` shared buffers filled by
    cp.async (16 bytes a copy, no registers): the copies of tile i +
    stages - 1 are issued as tile i is computed on, so global latency hides
    behind `stages` - 1 tiles of work, and one barrier per tile suffices
    (at step i everyone is past step i - 1, whose buffer is refilled).
    With three buffers or more, step i also computes tile i + 1's scores
    (`_key_ring`). The exponentials are exp2 with log2(e) folded into one
    FMA per score; K's and V's fragments come two per ldmatrix."""

    def __init__(self, attention: AttentionOperands, config: FlashTileConfig, kind: str = "flash-attention-mma.sync"):
        super().__init__(attention, config, kind)
        cfg, d = config, config.head_dim
        self.q_smem = self.shared(cfg.bm, d + ROW_PAD)
        self.k_shape, self.v_shape = _k_shape(attention, cfg.keys), _v_shape(attention, cfg.keys)
        # Scores a tile ahead need its K copied before the step's barrier: a
        # third buffer, or the refill would overwrite the tile being read.
        self.stages, self.lookahead = cfg.stages, cfg.lookahead
        # A causal mask costs a compare and a select per score: only the
        # tiles on the diagonal need it, so they get their own loop.
        self.own_mask = masks_only_past_reach(attention.score_epilogue, self.reach, attention.scores.view)
        self.k_smem = self.shared(self.stages * self.k_shape[0], self.k_shape[1])
        self.v_smem = self.shared(self.stages * self.v_shape[0], self.v_shape[1])
        self.score_tiles, self.output_tiles = cfg.keys // MMA_N, d // MMA_N
        # Carried through the key loop: the output tiles, the row sums' tile
        # (`_add_values`), each half's running max; then, looking ahead, the
        # next tile's scores.
        self.carried = self.output_tiles + 1 + 2

    def workgroup_types(self) -> list[ir.MemRefType]:
        return [self.q_smem, self.k_smem, self.v_smem]

    def _fragment_type(self, count: int) -> ir.VectorType:
        """`count` pairs of the operand type: an ldmatrix fragment."""
        return ir.VectorType.get([count, 2], element_type(self.t))

    def kernel_body(self) -> None:
        w, cfg = self.w, self.cfg
        self.q_shared, self.k_shared, self.v_shared = self.shared
        lane = w.rem(self.tid, WARP)
        self.m0 = self.first_query_row()
        self.warp_row = w.mul(w.div(self.tid, WARP), MMA_M)
        self.c_row, self.c_col = accumulator_position(w, lane)
        end = self.key_end()
        self.copy_first_tiles(end)
        # Q's copies (and, looking ahead, the first key tile's) must have landed.
        nvvm.CpAsyncWaitGroupOp(self.stages - 2 if self.lookahead else self.stages - 1)
        self.barrier()
        self.q_fragments = self.query_fragments()
        zero = w.constant(0.0, accumulator_type())
        accumulators = [zero] * (self.output_tiles + 1) + [w.constant(NEGATIVE_INFINITY, "f32")] * 2
        if self.lookahead:
            accumulators += self._scores(w.index(0))
        if self.own_mask or self.k_edge is not None:  # the tiles that need no mask, then those that do
            unmasked = self.unmasked_end(end)
            accumulators = self._key_ring(w.index(0), unmasked, end, accumulators,
                                          self.mean_key_tiles(lambda m0: 0, self.unmasked_end_at))
            self.masking = True
            results = self._key_ring(unmasked, end, end, accumulators,
                                     self.mean_key_tiles(self.unmasked_end_at, self.key_end_at))
        else:
            results = self._key_ring(w.index(0), end, end, accumulators,
                                     self.mean_key_tiles(lambda m0: 0, self.key_end_at))
        results = results[:self.carried]
        nvvm.CpAsyncWaitGroupOp(0)  # the last, empty copies
        self._store(results)

    def copy_first_tiles(self, end: ir.Value) -> None:
        """cp.async Q's tile, then the first `stages` - 1 K and V tiles (none
        past the block's keys, which end at `end`), a commit group each."""
        w, cfg = self.w, self.cfg
        self.operand_tiles()
        self._copy_async(self.tiles[0], (cfg.bm, cfg.head_dim), (self.m0, w.index(0)), self.q_shared,
                         self._padded_place(cfg.head_dim, w.index(0)), None, self.m_edge)
        nvvm.CpAsyncCommitGroupOp()
        static_end = isinstance(self.k_end, int) and end == w.index(self.k_end)
        for stage in range(self.stages - 1):
            past = stage * cfg.keys >= self.k_end if static_end else None
            self._copy_keys(w.index(stage * cfg.keys), w.index(stage), end, past)
            nvvm.CpAsyncCommitGroupOp()

    def query_fragments(self) -> list[ir.Value]:
        """This warp's 16 rows of Q (scaled), as A fragments, one per 16 of the head dim."""
        w = self.w
        return [self.scaled_q(a_fragment(w, self.q_shared, self.warp_row, w.index(kk)), self._fragment_type(4))
                for kk in range(0, self.cfg.head_dim, MMA_K)]

    def _key_ring(self, start: ir.Value, stop: ir.Value, end: ir.Value, accumulators: list[ir.Value],
                  mean_trips: float | None) -> list[ir.Value]:
        """The loop over the key tiles from `start` to `stop` (of the block's
        keys, which end at `end`), each step waiting for the
        tiles it reads, then issuing the copies `stages` - 1 tiles ahead.
        Looking ahead, step i also computes the scores of tile i + 1, which
        it carries to the next step: those mma.sync have no dependence on
        step i's softmax, so they run in its shadow. (Past the last tile
        they read a stale or zeroed buffer; their scores go unused.)"""
        w, cfg, s = self.w, self.cfg, self.stages
        with w.loop(start, stop, cfg.keys, accumulators) as loop:
            if mean_trips is not None:
                w.mean_trips(loop.op, mean_trips)
            self.mark_useful_work(loop.op)
            self.k0 = loop.induction
            nvvm.CpAsyncWaitGroupOp(s - 3 if self.lookahead else s - 2)
            self.barrier()
            step = w.div(self.k0, cfg.keys)
            ahead = w.add(self.k0, w.index((s - 1) * cfg.keys))
            self._copy_keys(ahead, w.rem(w.add(step, w.index(s - 1)), s), end, None)
            nvvm.CpAsyncCommitGroupOp()
            carried = loop.carried
            if self.lookahead:
                state, scores = carried[:self.carried], carried[self.carried:]
                upcoming = self._scores(w.rem(w.add(step, w.index(1)), s))
                updated = self.compute(state, w.rem(step, s), scores) + upcoming
            else:
                updated = self.compute(carried, w.rem(step, s))
            loop.yield_(updated)
        return loop.results

    def _copy_keys(self, key: ir.Value, stage: ir.Value, end: ir.Value, past: bool | None) -> None:
        """cp.async the K and V tiles of the keys from `key` into ring `stage`;
        `past`: the tile is past the end (None: known only at run time, then
        a copy past `end` reads key 0 and writes zeros)."""
        w, a = self.w, self.attention
        if past:
            return
        key, elements = self.key_copy_source(key, end, past)
        zero = w.index(0)
        k_origin = (key, zero) if a.scores.b_transposed else (zero, key)
        v_origin = (zero, key) if a.values.b_transposed else (key, zero)
        _, k_tile, v_tile = self.tiles
        for source, shape, origin, buffer in ((k_tile, self.k_shape, k_origin, self.k_shared),
                                              (v_tile, self.v_shape, v_origin, self.v_shared)):
            tile = (shape[0], shape[1] - ROW_PAD)
            # Ragged keys are K's and V's rows (`choose_flash_tile`).
            self._copy_async(source, tile, origin, buffer, self._padded_place(tile[1], w.mul(stage, shape[0])),
                             elements, self.k_edge)

    def key_copy_source(self, key: ir.Value, end: ir.Value, past: bool | None) -> tuple[ir.Value, ir.Value | None]:
        """The key a tile's copies read from, and the elements each reads (None:
        all): where it is not known whether the tile is `past` the end, one past it reads key 0 and writes zeros."""
        if past is not None:
            return key, None
        inside = self.w.less(key, end)
        return arith.select(inside, key, self.w.index(0)), arith.select(inside, self.w.index(self.vec), self.w.index(0))

    def _padded_place(self, cols: int, row0: ir.Value) -> Callable[[ir.Value], tuple[ir.Value, ir.Value, list]]:
        """Where copy `flat` of a tile `cols` wide goes in a padded buffer, from its row `row0`."""
        def place(flat: ir.Value):
            row, col = vector_position(self.w, flat, cols, self.vec)
            return row, col, [self.w.add(row0, row), col]
        return place

    def _copy_async(self, source: ir.Value, tile: tuple[int, int], origin: tuple[ir.Value, ir.Value],
                    buffer: ir.Value, place: Callable[[ir.Value], tuple[ir.Value, ir.Value, list]],
                    elements: ir.Value | None, rows_end: int | ir.Value | None) -> None:
        """A tile of `source` at `origin` into `buffer`, 16 bytes per copy,
        consecutive threads along a row (coalesced), copy `flat` at the
        (row, col) of the tile and the buffer indices `place(flat)` gives;
        `elements` of each copy read (the rest zero), or all; rows from
        `rows_end` on (a ragged edge) read as zeros, from the last row's place."""
        w = self.w
        rows, cols = tile
        copies = rows * cols // self.vec
        for first in range(0, copies, self.threads):
            flat = w.add(self.tid, w.index(first)) if first else self.tid
            with w.only_if(self.thread_guard(flat, first, copies)):  # a tile smaller than the block
                row, col, target = place(flat)
                source_row, count = w.add(origin[0], row), elements
                if rows_end is not None:
                    inside = w.less(source_row, rows_end)
                    count = arith.select(inside, w.index(self.vec) if count is None else count, w.index(0))
                    source_row = arith.minui(source_row, self._last_place(rows_end, 1))
                at = self.at(source_row, w.add(origin[1], col))
                nvgpu.DeviceAsyncCopyOp(buffer, target, source, at,
                                        ir.IntegerAttr.get(ir.IndexType.get(), self.vec), srcElements=count,
                                        bypassL1=True)

    def _scores(self, stage: ir.Value) -> list[ir.Value]:
        """Q·Kᵀ of the key tile in ring `stage`: this warp's 16 rows, as
        `score_tiles` accumulator tiles."""
        w = self.w
        k_row0 = w.mul(stage, self.k_shape[0])
        scores = [w.constant(0.0, accumulator_type())] * self.score_tiles
        for step, q in enumerate(self.q_fragments):
            keys = self._b_fragments(self.k_shared, self.attention.scores.b_transposed, k_row0, step * MMA_K,
                                     len(scores))
            scores = [mma(w, self.t, q, k, acc) for k, acc in zip(keys, scores)]
        return scores

    def compute(self, accumulators: list[ir.Value], stage: ir.Value,
                scores: list[ir.Value] | None = None) -> list[ir.Value]:
        """One key tile's online-softmax step and P·V, on its scores (or
        those of the K tile in ring `stage`)."""
        w = self.w
        outputs, maxima = accumulators[:self.output_tiles + 1], accumulators[self.output_tiles + 1:]
        scores = scores or self._scores(stage)
        halves, new_maxima = [], [None] * 2
        for half in range(2):  # rows lane/4 and lane/4 + 8
            row = w.add(self.m0, w.add(self.warp_row, w.add(self.c_row, w.index(8 * half))))
            key_base = w.add(self.k0, self.c_col)
            limits = self.mask_limits(row, key_base)
            values = []
            mask = self.mask_reader(row, key_base)
            for j, acc in enumerate(scores):
                for e in range(2):
                    value = vector.extract(acc, [], [half, e])
                    offset = j * MMA_N + e
                    values.append(self.score(value, row, w.add(key_base, w.index(offset)), offset, limits,
                                             mask(offset)))
            new_maxima[half], alpha, _, probabilities = self.softmax_update(values, maxima[half], None, 4)
            halves.append((alpha, probabilities))
        outputs = [self._rescale(acc, [alpha for alpha, _ in halves]) for acc in outputs]
        return self._add_values(outputs, [probabilities for _, probabilities in halves], stage) + new_maxima

    def _add_values(self, outputs: list[ir.Value], probabilities: list[list[ir.Value]],
                    stage: ir.Value) -> list[ir.Value]:
        """The output tiles plus P·V of the tile in ring `stage`, and the
        row sums' tile (the last) plus P·1: P's own narrowed values summed by
        the tensor cores, a constant B of ones, where summing in FADDs took
        one instruction per score and shuffles across the row's lanes."""
        w, t = self.w, self.t
        ones = w.constant(1.0, self._fragment_type(2))
        v_row0 = w.mul(stage, self.v_shape[0])
        for step in range(self.cfg.keys // MMA_K):
            p = self._p_fragment(probabilities, step)
            values = self._b_fragments(self.v_shared, self.attention.values.b_transposed, v_row0, step * MMA_K,
                                       self.output_tiles) + [ones]
            outputs = [mma(w, t, p, v, acc) for v, acc in zip(values, outputs)]
        return outputs

    def _b_fragments(self, buffer: ir.Value, transposed: bool, row0: ir.Value, k0: int,
                     count: int) -> list[ir.Value]:
        """The `count` B fragments at (k0, 0), (k0, 8), … of the tile in the
        ring from row `row0` (its rows are K's, or N's when `transposed`)."""
        k, n = self.w.index(k0), self.w.index(0)
        k, n = (k, row0) if transposed else (self.w.add(row0, k), n)
        return b_fragments(self.w, buffer, transposed, k, n, count)

    def exponentials(self, values: list[ir.Value], base: ir.Value) -> list[ir.Value]:
        """exp((value - base)·c) as exp2(value·c·log2(e) - base·c·log2(e)),
        c the softmax's scale: one FMA each (the row shares base·c·log2(e))
        and ex2, as FlashAttention does."""
        w, f32 = self.w, ir.F32Type.get()
        factor = LOG2_E * (self.attention.score_scale or 1.0)
        shift, log2_e = arith.mulf(base, w.constant(-factor, "f32")), w.constant(factor, "f32")

        def exp2(value: ir.Value) -> ir.Value:
            scaled = mlir_math.fma(value, log2_e, shift)
            if self.cfg.flushing_exp2:
                return llvm.inline_asm(f32, [scaled], _EXP2_FLUSHING, "=f,f")
            return mlir_math.exp2(scaled)
        return [exp2(value) for value in values]

    def reciprocal(self, value: ir.Value) -> ir.Value:
        """1 / value (a row's sum), IEEE-rounded."""
        return arith.divf(self.w.constant(1.0, "f32"), value)

    def _rescale(self, acc: ir.Value, factors: list[ir.Value]) -> ir.Value:
        """An accumulator tile with each half's row times its factor."""
        for half, factor in enumerate(factors):
            pair = vector.extract(acc, [], [half])
            splat = vector.broadcast(vector_of(2, "f32"), factor)
            scaled = arith.mulf(pair, splat)
            acc = vector.insert(scaled, acc, [], [half])
        return acc

    def _p_fragment(self, probabilities: list[list[ir.Value]], step: int) -> ir.Value:
        """The A fragment (16 rows x 16 keys) of P for keys 16·step …: the
        registers a0..a3 are (row g, keys 2c..), (g+8, 2c..), (g, 2c+8..),
        (g+8, 2c+8..), i.e. score tiles 2·step and 2·step+1, each half."""
        w, t = self.w, self.t
        fragment = w.constant(0.0, self._fragment_type(4))
        for register, (tile, half) in enumerate(((0, 0), (0, 1), (1, 0), (1, 1))):
            first = (2 * step + tile) * 2
            pair = vector.from_elements(vector_of(2, "f32"), probabilities[half][first:first + 2])
            narrow = arith.truncf(vector_of(2, t), pair)
            fragment = vector.insert(narrow, fragment, [], [register])
        return fragment

    def _store(self, results: list[ir.Value]) -> None:
        """O / l. A lane holds pairs of columns, 8 apart: where O takes
        16-byte vectors, each warp's finished rows go through its rows of
        Q's shared tile (read into registers long before) and out 16 bytes a
        store, 4 times fewer stores for the kernel's end to wait on."""
        w = self.w
        outputs, sums = results[:self.output_tiles], results[self.output_tiles]
        totals = [vector.extract(sums, [], [half, 0]) for half in range(2)]
        inverse = [self.reciprocal(total) for total in totals]
        staged = self.cfg.staged_store
        for j, acc in enumerate(outputs):
            acc = self._rescale(acc, inverse)
            col = w.add(w.index(j * MMA_N), self.c_col)
            for half in range(2):
                local_row = w.add(self.warp_row, w.add(self.c_row, w.index(8 * half)))
                row = w.add(self.m0, local_row)
                pair = vector.extract(acc, [], [half])
                if not staged:
                    self.store_results(pair, 2, row, col)
                    continue
                value = self.finish(pair, 2, row, col, self.loop_indices(row, col))
                w.store(value, self.q_shared, [local_row, col], 2 * element_bytes(self.t))
        if staged:
            self._store_staged_rows()

    def _store_staged_rows(self) -> None:
        """This warp's 16 finished rows, from Q's shared tile to O, a vector
        of 16 bytes per lane and store (the warp synchronised first: its
        lanes read what others wrote)."""
        w, d, vec = self.w, self.cfg.head_dim, self.vec
        nvvm.SyncWarpOp(w.constant(-1, "i32"))
        lane, chunks = w.rem(self.tid, WARP), MMA_M * d // vec
        for first in range(0, chunks, WARP):
            flat = w.add(lane, w.index(first)) if first else lane
            local_row = w.add(self.warp_row, w.div(flat, d // vec))
            col = w.mul(w.rem(flat, d // vec), vec)
            value = w.load(vec, self.t, self.q_shared, [local_row, col], 16)
            row = w.add(self.m0, local_row)
            with w.only_if(self.inside(row, col, self.c_limits())):  # no row past a ragged end
                self.store_finished(value, vec, row, col, self.loop_indices(row, col))


def flash_writer(attention: AttentionOperands, config: FlashTileConfig) -> FlashAttentionWriter:
    """The generator for this attention and tile: wgmma, mma.sync or CUDA cores."""
    from .tma_flash_attention import TmaFlashWriter  # they build on this module's writers
    from .wgmma_flash_attention import WgmmaFlashWriter
    if config.warpgroups:
        return (TmaFlashWriter if config.producer else WgmmaFlashWriter)(attention, config)
    return (MmaFlashWriter if config.tensor_cores else SimtFlashWriter)(attention, config)


def build_flash_attention(before: ir.Operation, kernel: str, attention: AttentionOperands, config: FlashTileConfig,
                          operands: AttentionKernelOperands) -> tuple[ir.Operation, str]:
    """The kernel's gpu.launch, built right before `before` (the P·V matmul);
    and the kernel's path for the report."""
    writer = flash_writer(attention, config)
    if writer.mask_tiles is None:
        return writer.build(before, kernel, operands), writer.path
    positions = [k for k, _ in attention.score_epilogue.tensor_inputs()]
    mask = operands.score_tensors[positions.index(writer.mask_tiles.mask.position)]
    classes, buffers = build_mask_tiles(before, f"{kernel}_mask_tiles", writer.mask_tiles, mask)
    try:
        launch = writer.build(before, kernel, replace(operands, mask_tiles=buffers))
    except Exception:
        classes.erase()
        erase_mask_tiles(buffers)
        raise
    free_mask_tiles(buffers, before)
    return launch, writer.path
