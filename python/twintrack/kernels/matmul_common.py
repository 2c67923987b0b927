"""What the matmul kernel generators share: the operand description, the
launch around a kernel body, and the global-to-shared tile copy."""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass, replace

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
    view: OutputView | None = None  # how the epilogue sees C, and where C is stored
    tf32: bool = False  # f32 operands may be multiplied as tf32 (10 mantissa bits: --allow-tf32)


@dataclass(frozen=True)
class OutputView:
    """C (batch?, M, N) as the epilogue's loops see it, and stored through
    them. Each dim of C splits into `splits[d]` (an expand_shape: a 3-D
    linear's rows (B·S) as (B, S), a projection's columns as (heads, dim),
    attention's batch (B·H) as (B, H)); split dim r is loop dim
    `loop_dims[r]` (the epilogue's indexing map of C); the output element of
    loop indices i is at (i[d] for d in `store_dims`) (its output map)."""
    splits: tuple[tuple[int, ...], ...]
    loop_dims: tuple[int, ...]
    store_dims: tuple[int, ...]

    def loop_indices(self, w: MlirWriter, c_indices: list[str]) -> list[str]:
        split = [part for index, sizes in zip(c_indices, self.splits) for part in _delinearize(w, index, sizes)]
        loops = [""] * len(split)
        for r, index in enumerate(split):
            loops[self.loop_dims[r]] = index
        return loops

    def contiguous(self, width: int) -> bool:
        """Do `width` consecutive columns of C (from a multiple of `width`)
        land side by side in the output (one vector store)?"""
        return self.splits[-1][-1] % width == 0 and self.loop_dims[-1] == self.store_dims[-1]


def _delinearize(w: MlirWriter, index: str, sizes: tuple[int, ...]) -> list[str]:
    """`index` into a dim of sizes[0]·sizes[1]·… as one index per size (row-major)."""
    parts, inner = [], 1
    for k in range(len(sizes) - 1, -1, -1):
        part = w.div(index, inner) if k == 0 else w.rem(w.div(index, inner), sizes[k])
        parts.append(part)
        inner *= sizes[k]
    return parts[::-1]


def vector_position(w: MlirWriter, flat: str, cols: int, width: int) -> tuple[str, str]:
    """(row, col) of the `flat`-th `width`-wide vector of a tile `cols` wide, row by row."""
    return w.div(flat, cols // width), w.mul(w.rem(flat, cols // width), width)


def accumulator_position(w: MlirWriter, lane: str) -> tuple[str, str]:
    """(row, col) of a lane's first accumulator pair in the m16n8 fragment
    of mma.sync (and of each warp's part of wgmma): rows lane/4 and
    lane/4 + 8, columns 2*(lane%4) and the next."""
    return w.div(lane, 4), w.mul(w.rem(lane, 4), 2)


def element_bytes(element: str) -> int:
    """Bytes of an element type (f32, bf16, i64, f8E4M3FN; index: 8)."""
    bits = re.match(r"[a-z]+(\d+)", element)
    return max(1, int(bits.group(1)) // 8) if bits else 8


def vector_type(width: int, element: str) -> str:
    return f"vector<{width}x{element}>"


@dataclass(frozen=True)
class KernelNames:
    """The SSA names a kernel body reads: its operands (%E<k>: the
    epilogue's tensors) and its block's place in the grid. A horizontal
    kernel gives each matmul its own."""
    a: str = "%A"
    b: str = "%B"
    c: str = "%C"
    epilogue: str = "%E"
    block_n: str = "%block_n"
    block_m: str = "%block_m"
    batch: str = "%batch"


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

    def __init__(self, ops: MatmulOperands, config, kind: str, accumulate: bool, epilogue: Epilogue | None = None,
                 writer: MlirWriter | None = None, names: KernelNames = KernelNames()):
        """`config`: a tile configuration (bm, bn, threads, label()); `kind`
        names the generator in the kernel report's path. Several writers
        share one `writer` (and take distinct `names`) in a horizontal kernel."""
        self.ops, self.cfg, self.accumulate = ops, config, accumulate
        self.bm, self.bn, self.threads = config.bm, config.bn, config.threads
        self.path = f"{kind} {config.label()}"
        self.w = writer or MlirWriter()
        self.names = names
        self.epilogue = EpilogueWriter(epilogue, self.w, names.epilogue) if epilogue is not None else None

    # ------------------------------------------------------------ module
    def module(self, symbol: str, kernel: str, location: str) -> str:
        """A module holding func @symbol(%A, %B, %C, %E...), which launches the kernel."""
        self.w.indent = 4
        self.kernel_body()
        return launch_module(symbol, kernel, self.arguments(), self.grid(), self.threads, self.w, location,
                             self.workgroup_buffers(), (self.names.block_n, self.names.block_m, self.names.batch),
                             self.dynamic_shared_bytes())

    def arguments(self) -> list[tuple[str, str]]:
        """The kernel's operands (name, memref type): A, B, C, then the
        epilogue's tensors and the buffers it gathers from."""
        ops, names = self.ops, self.names
        arguments = [(names.a, ops.a_type), (names.b, ops.b_type), (names.c, ops.c_type)]
        if self.epilogue is None:
            return arguments
        epilogue = self.epilogue.epilogue
        return (arguments + [(f"{names.epilogue}{k}", inp.memref_type) for k, inp in epilogue.tensor_inputs()]
                + [(f"{names.epilogue}c{i}", t) for i, t in enumerate(epilogue.captured)])

    def grid(self) -> tuple[int, int, int]:
        return (self.ops.n // self.bn, self.ops.m // self.bm, self.ops.batch or 1)

    def workgroup_buffers(self) -> list[tuple[str, str]]:
        raise NotImplementedError

    def dynamic_shared_bytes(self) -> int:
        """Dynamic shared memory the kernel takes (gpu.dynamic_shared_memory), beyond its workgroup buffers."""
        return 0

    def kernel_body(self) -> None:
        raise NotImplementedError

    # ------------------------------------------------------------ helpers
    def at(self, row: str, col: str) -> str:
        return f"[{self.names.batch}, {row}, {col}]" if self.ops.batch is not None else f"[{row}, {col}]"

    def loop_indices(self, row: str, col: str) -> list[str]:
        """The indices of C[batch?, row, col] in the epilogue's loops."""
        c_indices = [self.names.batch, row, col] if self.ops.batch is not None else [row, col]
        return self.ops.view.loop_indices(self.w, c_indices) if self.ops.view else c_indices

    def load_results(self, width: int, row: str, col: str) -> str:
        """The `width` values at (row, col..col+width) of C, as f32 (to accumulate onto)."""
        out = self.ops.out_element
        value = self.w.op(f"vector.load {self.names.c}{self.at(row, col)} {{alignment = {width * element_bytes(out)}}}"
                          f" : {self.ops.c_type}, {vector_type(width, out)}")
        return self.to_f32(value, width, out)

    def store_results(self, accumulators: str, width: int, row: str, col: str) -> None:
        """Store the `width` f32 results at (row, col..col+width) of C: the
        epilogue applied to each, narrowed to the output type; one vector
        store, or element by element where the output view scatters them."""
        loops = self.loop_indices(row, col)
        self.store_finished(self.finish(accumulators, width, row, col, loops), width, row, col, loops)

    def store_finished(self, value: str, width: int, row: str, col: str, loops: list[str]) -> None:
        """Store `width` results already finished (`finish`: in the output
        type) at (row, col..col+width) of C, loop indices `loops`."""
        w, out = self.w, self.ops.out_element
        if self.ops.view is None or self.ops.view.contiguous(width):
            w.emit(f"vector.store {value}, {self.names.c}{self.c_at(loops)} {{alignment = {min(16, width * element_bytes(out))}}}"
                   f" : {self.ops.c_type}, {vector_type(width, out)}")
            return
        for lane in range(width):
            element = w.op(f"vector.extract {value}[{lane}] : {out} from {vector_type(width, out)}")
            w.emit(f"memref.store {element}, {self.names.c}{self.c_at(self._lane_indices(loops, row, col, lane, width))}"
                   f" : {self.ops.c_type}")

    def c_at(self, loops: list[str]) -> str:
        """Where the result at loop indices `loops` is stored."""
        if self.ops.view is None:
            return "[" + ", ".join(loops) + "]"
        return "[" + ", ".join(loops[d] for d in self.ops.view.store_dims) + "]"

    def to_f32(self, value: str, width: int, element: str) -> str:
        if element == "f32":
            return value
        return self.w.op(f"arith.extf {value} : {vector_type(width, element)} to {vector_type(width, 'f32')}")

    def finish(self, accumulators: str, width: int, row: str, col: str, first: list[str]) -> str:
        """The `width` f32 results at (row, col..col+width) (loop indices
        `first` for col) as stored: the epilogue applied to each, or just
        narrowed to the output type."""
        out = self.ops.out_element
        if self.epilogue is None:
            return self.from_f32(accumulators, width, out)
        w, results = self.w, []
        for lane in range(width):
            value = w.op(f"vector.extract {accumulators}[{lane}] : f32 from {vector_type(width, 'f32')}")
            results.append(self.epilogue.apply(value, self._lane_indices(first, row, col, lane, width)))
        return w.op(f"vector.from_elements {', '.join(results)} : {vector_type(width, out)}")

    def _lane_indices(self, first: list[str], row: str, col: str, lane: int, width: int) -> list[str]:
        """Loop indices of column col + lane, from those of col (`first`):
        the innermost one moves where the lanes stay in one split group."""
        if lane == 0:
            return first
        view = self.ops.view
        if view is not None and view.splits[-1][-1] % width != 0:
            return self.loop_indices(row, self.w.add(col, self.w.index(lane)))
        inner = view.loop_dims[-1] if view is not None else len(first) - 1
        moved = list(first)
        moved[inner] = self.w.add(first[inner], self.w.index(lane))
        return moved

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
            with w.only_if(self.thread_guard(flat, first, vectors)):
                copy.store(*self._load_vector(copy, flat))

    def thread_guard(self, flat: str, first: int, count: int) -> str | None:
        """`flat` < `count`, where this round of the block's threads (from
        `first`) runs past `count` items; None where every thread has one."""
        if first + self.threads <= count:
            return None
        return self.w.op(f"arith.cmpi ult, {flat}, {self.w.index(count)} : index")

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
        r, c = vector_position(w, flat, copy.cols, copy.width)
        value = w.op(f"vector.load {copy.source}{self.at(w.add(copy.origin[0], r), w.add(copy.origin[1], c))}"
                     f" {{alignment = {copy.width * element_bytes(t)}}} : {copy.source_type}, {vector_type(copy.width, t)}")
        return value, r, c

    def barrier(self) -> None:
        """gpu.barrier, naming the kernel's path too: when K is one step, the
        K loop (which names it as well) folds away, and the barriers stay."""
        self.w.emit(f'gpu.barrier {{{KERNEL_PATH_ATTR} = "{self.path}"}}')

    def k_loop(self, step: int, accumulators: list[str], acc_type: str | list[str], end: str | None = None) -> list[str]:
        """scf.for over K (or up to `end`, an SSA index known only at run
        time) in `step`s carrying the accumulators (of one type,
        or of a type each: `acc_type` a list). Each step
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
        types = ", ".join(acc_type if isinstance(acc_type, list) else [acc_type] * len(accumulators))
        bound = end or w.index(self.ops.k)
        w.emit(f"{results}:{len(accumulators)} = scf.for %k0 = {w.index(0)} to {bound}"
               f" step {w.index(step)} iter_args({iter_args}) -> ({types}) {{")
        w.indent += 2
        current = [f"%a{i}" for i in range(len(accumulators))]
        if prefetch:
            # The last step reloads its own tiles: harmless, and no branch.
            last = w.op(f"arith.subi {end}, {w.index(step)} : index") if end else w.index(self.ops.k - step)
            following = w.op(f"arith.minui {w.add('%k0', w.index(step))}, {last} : index")
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


def horizontal_module(symbol: str, kernel: str, writers: list[TiledMatmulWriter], location: str) -> str:
    """One kernel for several matmuls (horizontal fusion: Q/K/V projections
    reading one input): a 1-D grid holds each matmul's blocks in turn, and a
    block runs the body of the matmul its index falls in. The writers share
    one MlirWriter, the tile shape and the shared-memory buffers, and have
    distinct operand names; the function takes each one's operands in turn."""
    w = writers[0].w
    w.indent = 4
    ends = []
    for writer in writers:
        ends.append((ends[-1] if ends else 0) + math.prod(writer.grid()))
    for index, writer in enumerate(writers):
        start = ends[index - 1] if index else 0
        if index < len(writers) - 1:
            inside = w.op(f"arith.cmpi ult, %block_x, {w.index(ends[index])} : index")
            w.emit(f"scf.if {inside} {{")
            w.indent += 2
        _place_in_grid(writer, w.op(f"arith.subi %block_x, {w.index(start)} : index") if start else "%block_x")
        writer.kernel_body()
        if index < len(writers) - 1:
            w.emit("scf.yield")
            w.indent -= 2
            w.emit("} else {")
            w.indent += 2
    for _ in writers[:-1]:
        w.emit("scf.yield")
        w.indent -= 2
        w.emit("}")
    arguments = [argument for writer in writers for argument in writer.arguments()]
    first = writers[0]
    return launch_module(symbol, kernel, arguments, (ends[-1], 1, 1), first.threads, w, location,
                         first.workgroup_buffers(), dynamic_shared_bytes=first.dynamic_shared_bytes())


def _place_in_grid(writer: TiledMatmulWriter, block: str) -> None:
    """The writer's block ids (n, m, batch) from its linear block index."""
    w, (columns, rows, _) = writer.w, writer.grid()
    writer.names = replace(writer.names, block_n=w.rem(block, columns), block_m=w.rem(w.div(block, columns), rows),
                           batch=w.div(block, columns * rows))
