"""Flash attention: softmax(Q·Kᵀ)·V in one kernel, the scores never in memory.

One block per (BM query rows, batch·head). Q's tile is staged once; the loop
over the keys stages a BN-key tile of K and of V (the next ones prefetched
into registers, as the matmul kernels do: `TiledMatmulWriter.k_loop`),
computes the BM x BN scores, applies the score epilogue to each (scale,
mask, a narrowing), and updates the online softmax: each row's running max
m and sum l; when m grows, l and the output rows are rescaled by
exp(m_old - m_new) before P·V of this tile is added. After the loop O / l is
stored through the P·V matmul's store (its epilogue and output view).

A row whose scores are all -inf so far keeps m = -inf; its exponentials are
then taken against 0, so they give 0, not NaN. A row masked entirely ends as
0 / 0 = NaN, as the unfused softmax gives.

Two generators: CUDA-core FMAs (f32, or head dims mma.sync cannot take),
R threads per query row, P going through shared memory to the P·V step; and
mma.sync m16n8k16 for f16/bf16 (a warp per 16 query rows, FlashAttention-2's
layout: the scores' accumulator fragments are, narrowed, P·V's A fragments,
so P stays in registers). Shapes must be multiples of the tiles (the caller
checks).
"""

from __future__ import annotations

from dataclasses import dataclass

from .epilogue import Epilogue, EpilogueWriter
from .matmul_common import KernelNames, MatmulOperands, TileCopy, TiledMatmulWriter, accumulator_position, \
    element_bytes, vector_type
from .mma_matmul import MMA_K, MMA_M, MMA_N, ROW_PAD, WARP, a_fragment, b_fragment, mma
from .simt_matmul import outer_product_update, transposing_store

NEGATIVE_INFINITY = "0xFF800000"
SHARED = "#gpu.address_space<workgroup>"


@dataclass(frozen=True)
class AttentionOperands:
    """The two matmuls of an attention and what sits around them."""
    scores: MatmulOperands               # Q·Kᵀ: A = Q (batch, Sq, D), B = Kᵀ (batch, D, Sk), or K if b_transposed
    values: MatmulOperands               # P·V: B = V (batch, Sk, D), or Vᵀ; C the output, through its view
    score_epilogue: Epilogue | None      # applied to each score (its view gives the loop indices)
    value_epilogue: Epilogue | None      # applied to each output element as it is stored
    max_op: str = "arith.maximumf"       # the softmax's max (how it treats NaN)

    @property
    def head_dim(self) -> int:
        return self.scores.k

    @property
    def keys(self) -> int:
        return self.scores.n

    @property
    def queries(self) -> int:
        return self.scores.m


@dataclass(frozen=True)
class FlashTileConfig:
    """BM query rows per block, BN keys per step; CUDA cores: `lanes` threads
    per query row, `tm` rows each; tensor cores (`tensor_cores`): a warp per
    16 rows."""
    bm: int
    keys: int
    head_dim: int
    tensor_cores: bool = False
    tm: int = 4
    lanes: int = 8

    @property
    def bn(self) -> int:  # the output tile's width: the whole head (one block column)
        return self.head_dim

    @property
    def threads(self) -> int:
        return WARP * self.bm // MMA_M if self.tensor_cores else self.bm // self.tm * self.lanes

    def label(self) -> str:
        return f"{self.bm}x{self.keys}x{self.head_dim}" + ("" if self.tensor_cores else f"/{self.tm}x{self.lanes}")


def choose_flash_tile(attention: AttentionOperands) -> FlashTileConfig | None:
    """The tile for this attention: tensor cores for f16/bf16 whose head dim
    takes m16n8k16 steps, CUDA cores otherwise; None when no tile divides it."""
    d, element = attention.head_dim, attention.values.in_element
    bm = _largest_divisor(attention.queries, (64, 32, 16))
    if element in ("f16", "bf16") and d % MMA_K == 0 and d <= 128:
        keys = _largest_divisor(attention.keys, (64, 32, 16))
        return FlashTileConfig(bm, keys, d, tensor_cores=True) if bm and keys else None
    lanes = 8 if d >= 16 else 4
    # Shared memory (static, 48 KiB at most) holds Q and P (BM x D, BN x BM) and K, V (BN x D) in f32.
    keys = _largest_divisor(attention.keys, (64, 32, 16) if d <= 32 else (32, 16))
    if not bm or not keys or d % lanes or d > 64:
        return None
    tm = min(4, bm * lanes // WARP)  # rows per thread: fewer on small tiles, so a block is a warp at least
    return FlashTileConfig(bm, keys, d, tm=tm, lanes=lanes)


def _largest_divisor(size: int, tiles: tuple[int, ...]) -> int | None:
    return next((t for t in tiles if size % t == 0), None)


class FlashAttentionWriter(TiledMatmulWriter):
    """What both generators share: the operands, the scores' epilogue, the
    online-softmax update of one row and the final store. The matmul base
    sees the P·V matmul: its grid (query tiles x batch), K loop (over the
    keys) and store are P·V's."""

    def __init__(self, attention: AttentionOperands, config: FlashTileConfig, kind: str):
        super().__init__(attention.values, config, kind, accumulate=False, epilogue=attention.value_epilogue,
                         names=KernelNames(a="%Q", b="%V", c="%O"))
        self.attention = attention
        self.t = attention.values.in_element
        self.vec = 16 // element_bytes(self.t)
        self.score_epilogue = EpilogueWriter(attention.score_epilogue, self.w, "%F") \
            if attention.score_epilogue is not None else None

    def arguments(self) -> list[tuple[str, str]]:
        """Q, K, V, the output, then the output epilogue's tensors (%E<k>) and the scores' (%F<k>)."""
        a = self.attention
        arguments = [("%Q", a.scores.a_type), ("%K", a.scores.b_type), ("%V", a.values.b_type), ("%O", a.values.c_type)]
        for prefix, epilogue in (("%E", a.value_epilogue), ("%F", a.score_epilogue)):
            arguments += [(f"{prefix}{k}", inp.memref_type) for k, inp in (epilogue.tensor_inputs() if epilogue else [])]
        return arguments

    # ------------------------------------------------------------ scores
    def score(self, value: str, row: str, key: str) -> str:
        """One score as the softmax reads it: the epilogue applied (with the
        loop indices of its element), widened back to f32."""
        if self.score_epilogue is None:
            return value
        w, view = self.w, self.attention.scores.view
        c_indices = [self.names.batch, row, key]
        value = self.score_epilogue.apply(value, view.loop_indices(w, c_indices) if view else c_indices)
        stored = self.attention.scores.out_element
        return value if stored == "f32" else w.op(f"arith.extf {value} : {stored} to f32")

    def lane_reduce(self, value: str, op: str, lanes: int) -> str:
        """`op` over the `lanes` neighbouring lanes that share a row (xor
        shuffles; among the block's threads only, when it is less than a warp)."""
        w, offset = self.w, 1
        width = w.constant(min(WARP, self.threads), "i32")
        while offset < lanes:
            name = w.fresh("shuffle")
            w.emit(f"{name}:2 = gpu.shuffle xor {value}, {w.constant(offset, 'i32')}, {width} : f32")
            value = w.op(f"{op} {value}, {name}#0 : f32")
            offset *= 2
        return value

    def softmax_update(self, scores: list[str], m_old: str, l_old: str, lanes: int) -> tuple[str, str, str, list[str]]:
        """One row's online-softmax step over this thread's `scores` (f32),
        the row spread over `lanes` lanes: (new max, rescale factor of the
        old sums, new partial sum of this thread, exp(score - max) each)."""
        w = self.w
        tile_max = scores[0]
        for value in scores[1:]:
            tile_max = w.op(f"{self.attention.max_op} {tile_max}, {value} : f32")
        m_new = w.op(f"{self.attention.max_op} {m_old}, {self.lane_reduce(tile_max, self.attention.max_op, lanes)} : f32")
        infinite = w.op(f"arith.cmpf oeq, {m_new}, {w.constant(NEGATIVE_INFINITY, 'f32')} : f32")
        base = w.op(f"arith.select {infinite}, {w.constant(0.0, 'f32')}, {m_new} : f32")
        alpha = self._exp_minus(m_old, base)
        probabilities = [self._exp_minus(value, base) for value in scores]
        l_new = w.op(f"arith.mulf {l_old}, {alpha} : f32")
        for p in probabilities:
            l_new = w.op(f"arith.addf {l_new}, {p} : f32")
        return m_new, alpha, l_new, probabilities

    def _exp_minus(self, value: str, base: str) -> str:
        return self.w.op(f"math.exp {self.w.op(f'arith.subf {value}, {base} : f32')} : f32")

    def row_total(self, partial: str, lanes: int) -> str:
        return self.lane_reduce(partial, "arith.addf", lanes)

    def initial_row_state(self, rows: int) -> list[str]:
        """m = -inf, l = 0 for each of this thread's rows."""
        w = self.w
        return [w.constant(NEGATIVE_INFINITY, "f32")] * rows + [w.constant(0.0, "f32")] * rows

    # ------------------------------------------------------------ staging
    def shared(self, rows: int, cols: int, element: str | None = None) -> str:
        return f"memref<{rows}x{cols}x{element or self.t}, {SHARED}>"

    def vector_store_into(self, buffer: str, buffer_type: str, width: int):
        return lambda v, r, c: self.w.emit(f"vector.store {v}, {buffer}[{r}, {c}] {{alignment = {width * element_bytes(self.t)}}}"
                                           f" : {buffer_type}, {vector_type(width, self.t)}")

    def copy(self, rows: int, cols: int, source: str, source_type: str, origin: tuple[str, str], store) -> TileCopy:
        return TileCopy(rows, cols, min(self.vec, cols), source, source_type, origin, store)


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

    def workgroup_buffers(self) -> list[tuple[str, str]]:
        return [("%Qs", self.q_smem), ("%Ks", self.k_smem), ("%Vs", self.v_smem), ("%Ps", self.p_smem)]

    def kernel_body(self) -> None:
        w, cfg = self.w, self.cfg
        self.row0 = w.mul(w.div("%tid", cfg.lanes), cfg.tm)    # this thread's first row within the tile
        self.lane = w.rem("%tid", cfg.lanes)
        self.key0 = w.mul(self.lane, self.tn)                  # its first key within a key tile
        self.col0 = w.mul(self.lane, self.to)                  # its first output column
        self.m0 = w.mul(self.names.block_m, cfg.bm)
        self.copy_tile(self.copy(cfg.bm, cfg.head_dim, "%Q", self.attention.scores.a_type, (self.m0, w.index(0)),
                                 transposing_store(w, "%Qs", self.q_smem, min(self.vec, cfg.head_dim), self.t)))
        zero = w.constant(0.0, vector_type(self.to, "f32"))
        types = [vector_type(self.to, "f32")] * cfg.tm + ["f32"] * (2 * cfg.tm)
        results = self.k_loop(cfg.keys, [zero] * cfg.tm + self.initial_row_state(cfg.tm), types)
        self._store(results)

    def stage_copies(self, k: str) -> list[TileCopy]:
        w, cfg, d, a = self.w, self.cfg, self.cfg.head_dim, self.attention
        zero = w.index(0)
        if a.scores.b_transposed:  # K (keys x D): transposed into Ks
            k_copy = self.copy(cfg.keys, d, "%K", a.scores.b_type, (k, zero),
                               transposing_store(w, "%Ks", self.k_smem, min(self.vec, d), self.t))
        else:
            k_copy = self.copy(d, cfg.keys, "%K", a.scores.b_type, (zero, k),
                               self.vector_store_into("%Ks", self.k_smem, min(self.vec, cfg.keys)))
        if a.values.b_transposed:  # Vᵀ (D x keys): transposed into Vs
            v_copy = self.copy(d, cfg.keys, "%V", a.values.b_type, (zero, k),
                               transposing_store(w, "%Vs", self.v_smem, min(self.vec, cfg.keys), self.t))
        else:
            v_copy = self.copy(cfg.keys, d, "%V", a.values.b_type, (k, zero),
                               self.vector_store_into("%Vs", self.v_smem, min(self.vec, d)))
        return [k_copy, v_copy]

    def compute(self, accumulators: list[str]) -> list[str]:
        w, cfg = self.w, self.cfg
        tm = cfg.tm
        outputs, m_old, l_old = accumulators[:tm], accumulators[tm:2 * tm], accumulators[2 * tm:]
        scores = self._scores()
        m_new, l_new, rescaled = [], [], []
        columns = [[] for _ in range(self.tn)]  # per key of this thread: p of each of its rows
        for i in range(tm):
            row = w.add(self.m0, w.add(self.row0, w.index(i)))
            values = [self.score(w.op(f"vector.extract {scores[i]}[{j}] : f32 from {vector_type(self.tn, 'f32')}"),
                                 row, w.add("%k0", w.add(self.key0, w.index(j)))) for j in range(self.tn)]
            m, alpha, l, probabilities = self.softmax_update(values, m_old[i], l_old[i], cfg.lanes)
            m_new.append(m)
            l_new.append(l)
            splat = w.op(f"vector.broadcast {alpha} : f32 to {vector_type(self.to, 'f32')}")
            rescaled.append(w.op(f"arith.mulf {outputs[i]}, {splat} : {vector_type(self.to, 'f32')}"))
            for j, p in enumerate(probabilities):
                columns[j].append(p)
        for j, column in enumerate(columns):
            vector = w.op(f"vector.from_elements {', '.join(column)} : {vector_type(tm, 'f32')}")
            w.emit(f"vector.store {vector}, %Ps[{w.add(self.key0, w.index(j))}, {self.row0}] {{alignment = {4 * tm}}}"
                   f" : {self.p_smem}, {vector_type(tm, 'f32')}")
        self.barrier()
        return self._add_values(rescaled) + m_new + l_new

    def _scores(self) -> list[str]:
        """This thread's tm x tn scores of the tile, unscaled, as tm f32 vectors."""
        w, cfg, t = self.w, self.cfg, self.t
        scores = [w.constant(0.0, vector_type(self.tn, "f32"))] * cfg.tm
        for d in range(cfg.head_dim):
            q = self._load("%Qs", self.q_smem, w.index(d), self.row0, cfg.tm, t)
            k = self._load("%Ks", self.k_smem, w.index(d), self.key0, self.tn, t)
            scores = outer_product_update(w, q, k, self.tn, scores)
        return scores

    def _add_values(self, outputs: list[str]) -> list[str]:
        w, cfg = self.w, self.cfg
        for key in range(cfg.keys):
            p = self._load("%Ps", self.p_smem, w.index(key), self.row0, cfg.tm, "f32")
            v = self._load("%Vs", self.v_smem, w.index(key), self.col0, self.to, self.t)
            outputs = outer_product_update(w, p, v, self.to, outputs)
        return outputs

    def _load(self, buffer: str, buffer_type: str, row: str, col: str, width: int, element: str) -> str:
        """`width` elements at [row, col..] of a shared buffer, as f32."""
        value = self.w.op(f"vector.load {buffer}[{row}, {col}] {{alignment = {min(16, width * element_bytes(element))}}}"
                          f" : {buffer_type}, {vector_type(width, element)}")
        return self.to_f32(value, width, element)

    def _store(self, results: list[str]) -> None:
        w, cfg = self.w, self.cfg
        tm = cfg.tm
        for i in range(tm):
            total = self.row_total(results[2 * tm + i], cfg.lanes)
            splat = w.op(f"vector.broadcast {total} : f32 to {vector_type(self.to, 'f32')}")
            output = w.op(f"arith.divf {results[i]}, {splat} : {vector_type(self.to, 'f32')}")
            self.store_results(output, self.to, w.add(self.m0, w.add(self.row0, w.index(i))), self.col0)


class MmaFlashWriter(FlashAttentionWriter):
    """Tensor cores (mma.sync m16n8k16, f32 accumulation). Warp w owns query
    rows 16w … 16w+15 of the block's tile; Q's fragments stay in registers
    for the whole loop. Each lane holds, of every 16x8 accumulator tile, rows
    lane/4 and lane/4 + 8: a row's statistics combine over 4 lanes. The
    scores of keys 16k … 16k+15, narrowed, are P·V's A fragment for that
    K step (FlashAttention-2), so P never leaves registers."""

    def __init__(self, attention: AttentionOperands, config: FlashTileConfig):
        super().__init__(attention, config, "flash-attention-mma.sync")
        cfg, d = config, config.head_dim
        self.q_smem = self.shared(cfg.bm, d + ROW_PAD)
        self.k_smem = self.shared(cfg.keys, d + ROW_PAD) if attention.scores.b_transposed \
            else self.shared(d, cfg.keys + ROW_PAD)
        self.v_smem = self.shared(d, cfg.keys + ROW_PAD) if attention.values.b_transposed \
            else self.shared(cfg.keys, d + ROW_PAD)
        self.score_tiles, self.output_tiles = cfg.keys // MMA_N, d // MMA_N

    def workgroup_buffers(self) -> list[tuple[str, str]]:
        return [("%Qs", self.q_smem), ("%Ks", self.k_smem), ("%Vs", self.v_smem)]

    def kernel_body(self) -> None:
        w, cfg = self.w, self.cfg
        lane = w.rem("%tid", WARP)
        self.m0 = w.mul(self.names.block_m, cfg.bm)
        self.warp_row = w.mul(w.div("%tid", WARP), MMA_M)
        self.c_row, self.c_col = accumulator_position(w, lane)
        self.copy_tile(self.copy(cfg.bm, cfg.head_dim, "%Q", self.attention.scores.a_type, (self.m0, w.index(0)),
                                 self.vector_store_into("%Qs", self.q_smem, self.vec)))
        self.barrier()
        self.q_fragments = [a_fragment(w, "%Qs", self.q_smem, self.t, self.warp_row, w.index(kk))
                            for kk in range(0, cfg.head_dim, MMA_K)]
        zero = w.constant(0.0, "vector<2x2xf32>")
        types = ["vector<2x2xf32>"] * self.output_tiles + ["f32"] * 4
        results = self.k_loop(cfg.keys, [zero] * self.output_tiles + self.initial_row_state(2), types)
        self._store(results)

    def stage_copies(self, k: str) -> list[TileCopy]:
        cfg, d, a, zero = self.cfg, self.cfg.head_dim, self.attention, self.w.index(0)
        k_tile = (cfg.keys, d, (k, zero)) if a.scores.b_transposed else (d, cfg.keys, (zero, k))
        v_tile = (d, cfg.keys, (zero, k)) if a.values.b_transposed else (cfg.keys, d, (k, zero))
        return [self.copy(*k_tile[:2], "%K", a.scores.b_type, k_tile[2], self.vector_store_into("%Ks", self.k_smem, self.vec)),
                self.copy(*v_tile[:2], "%V", a.values.b_type, v_tile[2], self.vector_store_into("%Vs", self.v_smem, self.vec))]

    def compute(self, accumulators: list[str]) -> list[str]:
        w, a = self.w, self.attention
        outputs, state = accumulators[:self.output_tiles], accumulators[self.output_tiles:]
        scores = [w.constant(0.0, "vector<2x2xf32>")] * self.score_tiles
        for step, q in enumerate(self.q_fragments):
            scores = [mma(w, self.t, q, b_fragment(w, "%Ks", self.k_smem, self.t, a.scores.b_transposed,
                                                    w.index(step * MMA_K), w.index(j * MMA_N)), acc)
                      for j, acc in enumerate(scores)]
        halves, new_state = [], [None] * 4
        for half in range(2):  # rows lane/4 and lane/4 + 8
            row = w.add(self.m0, w.add(self.warp_row, w.add(self.c_row, w.index(8 * half))))
            values = []
            for j, acc in enumerate(scores):
                for e in range(2):
                    value = w.op(f"vector.extract {acc}[{half}, {e}] : f32 from vector<2x2xf32>")
                    values.append(self.score(value, row, w.add("%k0", w.add(self.c_col, w.index(j * MMA_N + e)))))
            m, alpha, l, probabilities = self.softmax_update(values, state[half], state[2 + half], 4)
            new_state[half], new_state[2 + half] = m, l
            halves.append((alpha, probabilities))
        outputs = [self._rescale(acc, [alpha for alpha, _ in halves]) for acc in outputs]
        for step in range(self.cfg.keys // MMA_K):
            p = self._p_fragment([probabilities for _, probabilities in halves], step)
            outputs = [mma(w, self.t, p, b_fragment(w, "%Vs", self.v_smem, self.t, a.values.b_transposed,
                                                    w.index(step * MMA_K), w.index(j * MMA_N)), acc)
                       for j, acc in enumerate(outputs)]
        return outputs + new_state

    def _rescale(self, acc: str, factors: list[str]) -> str:
        """An accumulator tile with each half's row times its factor."""
        w = self.w
        for half, factor in enumerate(factors):
            pair = w.op(f"vector.extract {acc}[{half}] : vector<2xf32> from vector<2x2xf32>")
            splat = w.op(f"vector.broadcast {factor} : f32 to vector<2xf32>")
            scaled = w.op(f"arith.mulf {pair}, {splat} : vector<2xf32>")
            acc = w.op(f"vector.insert {scaled}, {acc} [{half}] : vector<2xf32> into vector<2x2xf32>")
        return acc

    def _p_fragment(self, probabilities: list[list[str]], step: int) -> str:
        """The A fragment (16 rows x 16 keys) of P for keys 16·step …: the
        registers a0..a3 are (row g, keys 2c..), (g+8, 2c..), (g, 2c+8..),
        (g+8, 2c+8..), i.e. score tiles 2·step and 2·step+1, each half."""
        w, t = self.w, self.t
        fragment = w.constant(0.0, f"vector<4x2x{t}>")
        for register, (tile, half) in enumerate(((0, 0), (0, 1), (1, 0), (1, 1))):
            first = (2 * step + tile) * 2
            pair = w.op(f"vector.from_elements {', '.join(probabilities[half][first:first + 2])} : vector<2xf32>")
            narrow = w.op(f"arith.truncf {pair} : vector<2xf32> to vector<2x{t}>")
            fragment = w.op(f"vector.insert {narrow}, {fragment} [{register}] : vector<2x{t}> into vector<4x2x{t}>")
        return fragment

    def _store(self, results: list[str]) -> None:
        w = self.w
        outputs, state = results[:self.output_tiles], results[self.output_tiles:]
        totals = [self.row_total(state[2 + half], 4) for half in range(2)]
        inverse = [w.op(f"arith.divf {w.constant(1.0, 'f32')}, {total} : f32") for total in totals]
        for j, acc in enumerate(outputs):
            acc = self._rescale(acc, inverse)
            col = w.add(w.index(j * MMA_N), self.c_col)
            for half in range(2):
                row = w.add(self.m0, w.add(self.warp_row, w.add(self.c_row, w.index(8 * half))))
                pair = w.op(f"vector.extract {acc}[{half}] : vector<2xf32> from vector<2x2xf32>")
                self.store_results(pair, 2, row, col)


def flash_attention_module(symbol: str, kernel: str, attention: AttentionOperands, config: FlashTileConfig,
                           location: str) -> tuple[str, str]:
    """(MLIR text of a module holding func @symbol(Q, K, V, O, E..., F...),
    which launches the kernel; the kernel's path for the report)."""
    writer = (MmaFlashWriter if config.tensor_cores else SimtFlashWriter)(attention, config)
    return writer.module(symbol, kernel, location), writer.path
