"""What the matmul kernel generators share: the operand description, the
launch around a kernel body, and the global-to-shared tile copy."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from .epilogue import Epilogue, EpilogueWriter
from .mlir_text import MlirWriter, launch_module

VECTOR_BYTES = 16
KERNEL_PATH_ATTR = "twintrack.kernel_path"  # read by annotate-kernels for the kernel report


@dataclass(frozen=True)
class MatmulOperands:
    """A (batch?, M, K) @ B (batch?, K, N) -> C (batch?, M, N), as memref types.
    With `b_transposed`, the B buffer holds Bᵀ (batch?, N, K), as a linear
    layer's weight does."""
    a_type: str
    b_type: str
    c_type: str
    batch: int | None
    m: int
    n: int
    k: int
    in_element: str   # f32, f16, bf16
    out_element: str
    b_transposed: bool = False
    # C stored permuted: its batch split into (batch / heads, heads), then the
    # dims of (batch / heads, heads, M, N) reordered by `permutation` (as
    # attention's output is stored (B, S, H, D) from (B*H, S, D)).
    heads: int | None = None
    permutation: tuple[int, ...] | None = None


def element_bytes(element: str) -> int:
    return 4 if element == "f32" else 2


def vector_type(width: int, element: str) -> str:
    return f"vector<{width}x{element}>"


@dataclass(frozen=True)
class TileCopy:
    """rows x cols elements at `origin` of a global operand (`source`, of
    `source_type`), read as `width`-wide vectors spread over the block's
    threads; `store(value, row, col)` puts each into shared memory."""
    rows: int
    cols: int
    width: int
    source: str
    source_type: str
    origin: tuple[str, str]
    store: Callable[[str, str, str], None]


class TiledMatmulWriter:
    """Base of the generators: one block per (BM x BN tile of C, batch)."""

    path = "tiled-matmul"

    def __init__(self, ops: MatmulOperands, config, kind: str, accumulate: bool, epilogue: Epilogue | None = None):
        """`config`: a tile configuration (bm, bn, threads, label()); `kind`
        names the generator in the kernel report's path."""
        self.ops, self.cfg, self.accumulate = ops, config, accumulate
        self.bm, self.bn, self.threads = config.bm, config.bn, config.threads
        self.path = f"{kind} {config.label()}"
        self.w = MlirWriter()
        self.epilogue = EpilogueWriter(epilogue, self.w) if epilogue is not None else None

    # ------------------------------------------------------------ module
    def module(self, symbol: str, kernel: str, location: str) -> str:
        """A module holding func @symbol(%A, %B, %C, %E...), which launches the kernel."""
        ops = self.ops
        self.w.indent = 4
        self.kernel_body()
        arguments = [("%A", ops.a_type), ("%B", ops.b_type), ("%C", ops.c_type)]
        arguments += [(f"%E{k}", inp.memref_type) for k, inp in (self.epilogue.epilogue.tensor_inputs()
                                                                  if self.epilogue else [])]
        grid = (ops.n // self.bn, ops.m // self.bm, ops.batch or 1)
        return launch_module(symbol, kernel, arguments, grid, self.threads, self.w, location,
                             self.workgroup_buffers(), ("%block_n", "%block_m", "%batch"))

    def workgroup_buffers(self) -> list[tuple[str, str]]:
        raise NotImplementedError

    def kernel_body(self) -> None:
        raise NotImplementedError

    # ------------------------------------------------------------ helpers
    def at(self, row: str, col: str) -> str:
        return f"[%batch, {row}, {col}]" if self.ops.batch is not None else f"[{row}, {col}]"

    def loop_indices(self, row: str, col: str) -> list[str]:
        """The indices of C[batch, row, col] in the epilogue's loops: (batch?,
        row, col), or (batch / heads, batch % heads, row, col) for a split batch."""
        if self.ops.heads is not None:
            return [self.w.div("%batch", self.ops.heads), self.w.rem("%batch", self.ops.heads), row, col]
        return ["%batch", row, col] if self.ops.batch is not None else [row, col]

    def c_at(self, row: str, col: str) -> str:
        """Where C[batch, row, col] is stored: `at`, or permuted (see MatmulOperands)."""
        if self.ops.permutation is None:
            return self.at(row, col)
        split = self.loop_indices(row, col)
        return "[" + ", ".join(split[d] for d in self.ops.permutation) + "]"

    def to_f32(self, value: str, width: int, element: str) -> str:
        if element == "f32":
            return value
        return self.w.op(f"arith.extf {value} : {vector_type(width, element)} to {vector_type(width, 'f32')}")

    def finish(self, accumulators: str, width: int, row: str, col: str) -> str:
        """The `width` f32 results at (row, col..col+width) as stored: the
        epilogue applied to each, or just narrowed to the output type."""
        out = self.ops.out_element
        if self.epilogue is None:
            return self.from_f32(accumulators, width, out)
        w, results = self.w, []
        for lane in range(width):
            value = w.op(f"vector.extract {accumulators}[{lane}] : f32 from {vector_type(width, 'f32')}")
            column = w.add(col, w.index(lane)) if lane else col
            results.append(self.epilogue.apply(value, self.loop_indices(row, column)))
        return w.op(f"vector.from_elements {', '.join(results)} : {vector_type(width, out)}")

    def from_f32(self, value: str, width: int, element: str) -> str:
        if element == "f32":
            return value
        return self.w.op(f"arith.truncf {value} : {vector_type(width, 'f32')} to {vector_type(width, element)}")

    def copy_tile(self, copy: TileCopy) -> None:
        """Copy one operand tile into shared memory (guarded where the
        block's threads do not divide it into whole rounds)."""
        w = self.w
        vectors = copy.rows * copy.cols // copy.width
        for first in range(0, vectors, self.threads):
            flat = w.add("%tid", w.index(first)) if first else "%tid"
            guarded = first + self.threads > vectors
            if guarded:
                inside = w.op(f"arith.cmpi ult, {flat}, {w.index(vectors)} : index")
                w.emit(f"scf.if {inside} {{")
                w.indent += 2
            copy.store(*self._load_vector(copy, flat))
            if guarded:
                w.emit("scf.yield")  # explicit, so it carries the source location too
                w.indent -= 2
                w.emit("}")

    def load_tile(self, copy: TileCopy) -> list[tuple[str, str, str]]:
        """This thread's vectors of an operand tile, into registers: (value,
        row, col) each, for `copy.store` later. The tile must split into whole
        rounds of the block's threads (see `prefetchable`)."""
        vectors = copy.rows * copy.cols // copy.width
        return [self._load_vector(copy, self.w.add("%tid", self.w.index(first)) if first else "%tid")
                for first in range(0, vectors, self.threads)]

    def prefetchable(self, copies: list[TileCopy]) -> bool:
        return all((c.rows * c.cols // c.width) % self.threads == 0 for c in copies)

    def _load_vector(self, copy: TileCopy, flat: str) -> tuple[str, str, str]:
        w, t = self.w, self.ops.in_element
        r = w.div(flat, copy.cols // copy.width)
        c = w.mul(w.rem(flat, copy.cols // copy.width), copy.width)
        value = w.op(f"vector.load {copy.source}{self.at(w.add(copy.origin[0], r), w.add(copy.origin[1], c))}"
                     f" {{alignment = {copy.width * element_bytes(t)}}} : {copy.source_type}, {vector_type(copy.width, t)}")
        return value, r, c

    def barrier(self) -> None:
        """gpu.barrier, naming the kernel's path too: when K is one step, the
        K loop (which names it as well) folds away, and the barriers stay."""
        self.w.emit(f'gpu.barrier {{{KERNEL_PATH_ATTR} = "{self.path}"}}')

    def k_loop(self, step: int, accumulators: list[str], acc_type: str) -> list[str]:
        """scf.for over K in `step`s carrying the accumulators. Each step
        stages the operand tiles (`stage_copies(k)`) in shared memory and
        computes on them (`compute(accumulators)`). Where the tiles split
        into whole rounds of threads, the next step's tiles are loaded into
        registers before this step computes, so their global-memory latency
        hides behind the tensor-core or FMA work; they go to shared memory
        after it."""
        w = self.w
        prefetch = self.prefetchable(self.stage_copies("%k0"))
        if prefetch:  # the first step's tiles, before the loop
            for copy in self.stage_copies(w.index(0)):
                self.copy_tile(copy)
            self.barrier()
        results = w.fresh("acc")
        iter_args = ", ".join(f"%a{i} = {v}" for i, v in enumerate(accumulators))
        types = ", ".join([acc_type] * len(accumulators))
        w.emit(f"{results}:{len(accumulators)} = scf.for %k0 = {w.index(0)} to {w.index(self.ops.k)}"
               f" step {w.index(step)} iter_args({iter_args}) -> ({types}) {{")
        w.indent += 2
        current = [f"%a{i}" for i in range(len(accumulators))]
        if prefetch:
            # The last step reloads its own tiles: harmless, and no branch.
            following = w.op(f"arith.minui {w.add('%k0', w.index(step))}, {w.index(self.ops.k - step)} : index")
            staged = [(copy, self.load_tile(copy)) for copy in self.stage_copies(following)]
            updated = self.compute(current)
            self.barrier()
            for copy, vectors in staged:
                for value, r, c in vectors:
                    copy.store(value, r, c)
            self.barrier()
        else:
            for copy in self.stage_copies("%k0"):
                self.copy_tile(copy)
            self.barrier()
            updated = self.compute(current)
            self.barrier()
        w.emit(f"scf.yield {', '.join(updated)} : {types}")
        w.indent -= 2
        w.emit(f'}} {{{KERNEL_PATH_ATTR} = "{self.path}"}}')
        return [f"{results}#{i}" for i in range(len(accumulators))]

    def stage_copies(self, k: str) -> list[TileCopy]:
        """The operand tiles of the K step starting at `k`."""
        raise NotImplementedError

    def compute(self, accumulators: list[str]) -> list[str]:
        """One K step on the staged tiles; the updated accumulators."""
        raise NotImplementedError
