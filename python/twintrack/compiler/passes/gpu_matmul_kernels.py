"""gpu-matmul-kernels: linalg.matmul / linalg.batch_matmul on memrefs become
a shared-memory tiled kernel: tensor cores for f16 and bf16 operands
(Hopper's warpgroup MMA, twintrack.compiler.kernels.wgmma_matmul, when the option
`arch` is sm_90a; else, or when no wgmma tile fits, mma.sync,
twintrack.compiler.kernels.mma_matmul), CUDA cores (twintrack.compiler.kernels.simt_matmul)
otherwise or when no tensor-core tile fits.

The tile shapes come from lowering/tuning/matmul.toml; a wgmma tile's
ring takes as many of the table's stages as the matmul's K steps and the
shared memory of an SM allow (`ring_depth`). A zero fill of the
output right before the matmul is folded into the kernel's first write, and
the first op reading its result into its stores, as an epilogue
(twintrack.compiler.kernels.epilogue), when that op is elementwise (bias, activation,
residual, narrowing) or a transpose, reads the result through any
expand_shape and any permutation of its loops, and does not write over A or
B: the kernel splits each result's indices into the epilogue's loop
indices (an OutputView) and stores it where the epilogue's output map puts
it. The matmuls of one horizontal dispatch share one kernel, unless the
persistent TMA kernel takes each on its own. Matmuls the
kernels cannot take (shapes not a multiple of any tile, dynamic or
unaligned layouts, other element types) stay linalg ops for the generic
pipeline.
"""

from __future__ import annotations

import functools
import json
import math
import tomllib
from dataclasses import dataclass, replace
from pathlib import Path

from mlir import ir
from mlir.dialects import arith, memref, scf

from ..autotune import TuningKey, TuningRequest, compiler_version, request_for, tile_record
from ..kernels.epilogue import Epilogue, EpilogueInput
from ..kernels.launch_reuse import LaunchReuse
from ..kernels.matmul_common import (
    VECTOR_BYTES,
    KernelOperands,
    MatmulOperands,
    OutputView,
    build_horizontal,
    element_bytes,
)
from ..dispatch_kinds import DispatchKind, dispatch_kind
from ...errors import UsageError
from ..kernels.registry import GENERATORS_BY_NAME, MATMUL_GENERATORS, KernelGenerator
from ..kernels.tf32_rounding import is_tf32_rounding
from ..kernels.transpose import TransposeCopy, build_transpose
from ..kernels.tma_matmul import TmaWgmmaMatmulWriter, tma_takes_tile
from ..kernels.wgmma_matmul import ATOM_BYTES, WgmmaMatmulWriter, WgmmaTileConfig
from ..target import DEFAULT_ARCH, DEFAULT_LOWERING_DIR, GpuTarget, gpu_target
from .generic_body import describe_body, indexing_maps, map_dims
from .kernel_fallback import kernel_site, record_refusal
from .matmul_buckets import BucketPlan, plan_buckets, tile_blocks
from .matmul_sites import b_is_transposed, zero_fill_before
from .plan_workspace import UpperBounds
from .window_operands import FoundWindow, window_operand
from .ir_helpers import (
    RESHAPE_OPS,
    VIEW_OPS,
    PythonPass,
    buffer_root,
    defining_op,
    dispatch_label,
    elementwise_into,
    nested_ops,
    ops_between,
    reassociation,
    row_major,
    users_of,
    vectors_fit,
    written_between,
    written_buffers,
)

ELEMENTS = ("f32", "f16", "bf16")  # element types the kernels take
MIN_REFILLED_STAGES = 3  # a ring refilled in the loop: one step computing, one queued, one arriving
TUNING_ATTR = "twintrack.tuning"  # module attribute: {kernel: its tuning key and tile, as JSON}

class TileTables(dict):
    """Tile tables by generator name: (schedule, the fewest blocks it must
    give), largest first. `max_padding`: the most work (a fraction of the
    matmul's) that rounding its sizes up to whole tiles may add, where no
    tile divides them (ragged edges)."""

    def __init__(self, tables: dict[str, list[tuple[object, int]]], max_padding: float):
        super().__init__(tables)
        self.max_padding = max_padding


TABLE_SETTINGS = ("min_blocks", "max_padding")


def load_tile_tables(lowering_dir: Path = DEFAULT_LOWERING_DIR) -> TileTables:
    """lowering/tuning/matmul.toml: each generator's tiles, under its name,
    each with its own `min_blocks` or the table's."""
    data = tomllib.loads((Path(lowering_dir) / "tuning" / "matmul.toml").read_text())
    unknown = set(data) - set(TABLE_SETTINGS) - set(GENERATORS_BY_NAME)
    if unknown:
        raise UsageError(f"{lowering_dir}/tuning/matmul.toml: no kernel generator named {', '.join(sorted(unknown))} "
                         f"(known: {', '.join(GENERATORS_BY_NAME)})")

    def entries(generator: KernelGenerator):
        return [(generator.schedule(**{k: v for k, v in e.items() if k != "min_blocks"}),
                 e.get("min_blocks", data["min_blocks"])) for e in data.get(generator.name, ())]
    return TileTables({g.name: entries(g) for g in MATMUL_GENERATORS}, data.get("max_padding", 0.0))


def choose_kernel(operands: list[MatmulOperands], tables: TileTables, arch: str = DEFAULT_ARCH,
                  target: GpuTarget | None = None, request: TuningRequest = TuningRequest()):
    """(writer class, tile, generator name, tuning note) for one matmul's
    operands, or one tile for several (a horizontal kernel), or None: the
    generic pipeline. The note is {"candidates": how many tiles fit,
    "untuned": the cache had no entry}. The heuristic takes the registry's first generator that
    applies and has a fitting tile, and within it the table's rule
    (`choose_tile`); with --autotune the tuning cache (or, for a tuning
    variant, the candidate's rank) decides among them all."""
    candidates, heuristic = [], None
    for writer_class, name, tiles in _generators(operands, tables, arch, target):
        fitting = _fitting(operands, tiles, tables.max_padding)
        if heuristic is None and fitting:
            heuristic = len(candidates) + [t for t, _ in fitting].index(
                choose_tile(operands, fitting, tables.max_padding))
        candidates += [(writer_class, tile, name) for tile, _ in fitting]
    if not candidates:
        return None
    index, untuned = request.choose(tuning_key(operands, arch), [(name, tile) for _, tile, name in candidates],
                                    heuristic)
    return (*candidates[index], {"candidates": len(candidates), "untuned": untuned})


def _generators(operands: list[MatmulOperands], tables: TileTables, arch: str, target: GpuTarget | None = None):
    """(writer class, generator name, tiles) of each registered generator
    that applies to the matmuls, preferred first. A wgmma tile's ring is
    deepened for the shapes (`ring_depth`)."""
    target = target or gpu_target()
    for generator in MATMUL_GENERATORS:
        if generator.applies(operands, target, arch) is not None:
            continue
        tiles = tables.get(generator.name, [])
        if generator.writer is WgmmaMatmulWriter:
            tiles = _deepened(tiles, operands, target)
        elif generator.writer is TmaWgmmaMatmulWriter:  # a persistent grid: a block per SM
            size = element_bytes(operands[0].in_element)
            tiles = [(replace(t.for_element(size), persistent_blocks=target.sm_count), least) for t, least in tiles
                     if tma_takes_tile(t, operands)]
        yield generator.writer, generator.name, tiles


def refusals(operands: list[MatmulOperands], tables: TileTables, arch: str, target: GpuTarget | None = None) -> str:
    """Why no generator takes the matmuls: each one's reason (the registry's, or no fitting tile)."""
    target = target or gpu_target()
    reasons = []
    for generator in MATMUL_GENERATORS:
        why = generator.applies(operands, target, arch)
        if why is None and not _fitting(operands, tables.get(generator.name, []), tables.max_padding):
            why = "no tile of lowering/tuning/matmul.toml divides " + " and ".join(
                f"{o.m}x{o.n}x{o.k}" for o in operands) + f" or pads it by at most {tables.max_padding:.0%}"
        if why is not None:
            reasons.append(f"{generator.name}: {why}")
    return "; ".join(reasons)


def _deepened(tiles: list[tuple], operands: list[MatmulOperands], target: GpuTarget) -> list[tuple]:
    """Each wgmma tile with its ring as deep as helps; tiles that end up alike once."""
    size = element_bytes(operands[0].in_element)
    deepened = [(ring_depth(t.for_element(size), operands, size, target), least) for t, least in tiles]
    return [(t, least) for i, (t, least) in enumerate(deepened) if t not in [u for u, _ in deepened[:i]]]


def ring_depth(tile: WgmmaTileConfig, operands: list[MatmulOperands], size: int, target: GpuTarget) -> WgmmaTileConfig:
    """The wgmma tile with as many stages as help, up to the table's: no
    more than the K steps (the whole K in the ring), and no more than fit
    beside the other blocks that must share an SM for the grid to run in
    one wave, where that many could share it at all. A short, latency-bound
    matmul then has all of K in flight; a long one, more steps ahead."""
    k_steps = max(-(-o.k // tile.bk) for o in operands)
    stage = tile.stage_bytes(size)
    smallest = min(MIN_REFILLED_STAGES, k_steps) * stage + ATOM_BYTES  # + the ring's alignment
    one_wave = -(-tile_blocks(operands, tile) // target.sm_count)  # blocks per SM
    sharing = max(1, min(one_wave, target.blocks_fitting(smallest)))
    stages = min(tile.stages, k_steps, (target.shared_room(sharing) - ATOM_BYTES) // stage)
    return replace(tile, stages=stages if stages >= k_steps else max(stages, MIN_REFILLED_STAGES))


def tuning_key(operands: list[MatmulOperands], arch: str) -> TuningKey:
    """What a tile's speed depends on: the op and B's layout, the shapes (of
    each matmul of a horizontal kernel), the dtypes, the arch, the compiler."""
    first = operands[0]
    op = ("batch_matmul" if first.batch else "matmul") + (".bT" if first.b_transposed else "") \
        + (f".horizontal{len(operands)}" if len(operands) > 1 else "") + (".epilogue" if first.view else "") \
        + (".im2col" if first.a_window else "") + (".open_m" if first.open_m else "")
    shapes = tuple(size for o in operands for size in (o.batch or 1, o.m, o.n, o.k))
    multiplied = "tf32" if first.tf32 else first.in_element
    return TuningKey(op, shapes, f"{multiplied}->{first.out_element}", arch, compiler_version())


def _fitting(operands: list[MatmulOperands], tiles: list[tuple], max_padding: float) -> list[tuple]:
    """The (tile, min_blocks) entries whose tile divides every matmul; where
    none does, those that take ragged edges and pad the work by at most
    `max_padding`."""
    if any(o.open_m for o in operands):
        return [(t, least) for t, least in tiles if all(_takes_open_rows(t, o, max_padding) for o in operands)]
    dividing = [(t, least) for t, least in tiles if all(_divides(t, o) for o in operands)]
    if dividing:
        return dividing
    return [(t, least) for t, least in tiles
            if all(_takes_ragged(t, o) for o in operands) and padding(t, operands) <= max_padding]


def _divides(tile, o: MatmulOperands) -> bool:
    """Does the tile divide the matmul? A schedule with conditions of its own decides by them."""
    own = getattr(tile, "divides", None)
    if own is not None:
        return own(o)
    return o.m % tile.bm == 0 and o.n % tile.bn == 0 and o.k % tile.bk == 0


def _takes_open_rows(tile, o: MatmulOperands, max_padding: float) -> bool:
    """Can the tile's kernel take a matmul whose M ends anywhere (masked rows)?
    A schedule with conditions of its own (skinny) decides by them at the
    M planned; a tile takes ragged edges, N and K padded by at most `max_padding`."""
    own = getattr(tile, "divides", None)
    if own is not None:
        return own(o)
    whole_rows = replace(o, m=-(-o.m // tile.bm) * tile.bm)  # M's padding is the run time's, not planned
    return _takes_ragged(tile, o) and padding(tile, [whole_rows]) <= max_padding


def _takes_ragged(tile, o: MatmulOperands) -> bool:
    """Can the tile's kernel take the matmul with ragged edges? (Not a
    schedule that decides by its own conditions.)"""
    ragged = getattr(tile, "takes_ragged", None)
    return getattr(tile, "divides", None) is None and ragged is not None and ragged(o)


def padding(tile, operands: list[MatmulOperands]) -> float:
    """The work that rounding each matmul up to whole tiles adds, as a fraction of the matmuls'."""
    def work(o: MatmulOperands, rounded: bool) -> int:
        sizes = ((o.m, tile.bm), (o.n, tile.bn), (o.k, tile.bk))
        return (o.batch or 1) * math.prod(-(-size // step) * step if rounded else size for size, step in sizes)
    return sum(work(o, True) for o in operands) / sum(work(o, False) for o in operands) - 1


def choose_tile(operands: list[MatmulOperands], tiles: list[tuple], max_padding: float = 0.0):
    """The first fitting tile (`_fitting`) that gives at least its
    `min_blocks` blocks in all, else the fitting tile with the most blocks,
    else None."""
    fitting = _fitting(operands, tiles, max_padding)
    for tile, least in fitting:
        if tile_blocks(operands, tile) >= least:
            return tile
    return max((t for t, _ in fitting), key=lambda t: tile_blocks(operands, t), default=None)


def _aligned(memref_type: ir.Type) -> bool:
    """Static layout, unit innermost stride, rows and offset 16-byte aligned."""
    return _static(memref_type) and vectors_fit(memref_type, VECTOR_BYTES // element_bytes(memref_type.element_type))


def _static(memref_type: ir.Type) -> bool:
    """A memref of a kernel element type with a static shape and layout."""
    if not isinstance(memref_type, ir.MemRefType) or str(memref_type.element_type) not in ELEMENTS \
            or not memref_type.has_static_shape:
        return False
    strides, offset = memref_type.get_strides_and_offset()
    dynamic = ir.ShapedType.get_dynamic_stride_or_offset()
    return offset != dynamic and dynamic not in strides


def matmul_operands(op: ir.Operation, output: ir.Value, target: GpuTarget | None = None,
                    vector_operands: bool = True, open_sizes: bool = False) -> MatmulOperands | None:
    """The kernel's view of `op` writing into `output` (its own or a
    narrower one). A and B are read in 16-byte vectors (unless
    `vector_operands` is off: a caller that reads them otherwise, as the
    flash kernel reads Q, K and V, checks them itself); C, where its rows are
    not aligned to them (a key projection transposed into rows of 197
    tokens), is stored one element at a time. A 2-D matmul whose M is known
    only at run time (A's and C's rows) is tiled as for its largest M (from
    the arguments' largest sizes), at most the target's
    `dynamic_matmul_rows`, and masks its last row tile (`open_m`). With
    `open_sizes` (and `vector_operands` off) any size may be known only at
    run time: each such size is given as its largest, as M is; the caller
    reads them at run time."""
    a, b, c = op.operands[0].type, op.operands[1].type, output.type
    transposed = b_is_transposed(op)
    # The matmul's own result (the epilogue may store it split: B·S as B, S).
    open_m = _m_open(op)
    readable = _aligned if vector_operands else _kernel_memref if open_sizes else _static
    stored = _kernel_memref if open_sizes and not vector_operands else _static
    if transposed is None or not (readable(b) and (open_m or (readable(a) and stored(c)))):
        return None
    if str(a.element_type) != str(b.element_type):
        return None
    batched = op.name == "linalg.batch_matmul"
    most = (target or gpu_target()).dynamic_matmul_rows
    *batch, m, k = _planned_shape(op, 0, most)
    n = _planned_shape(op, 1, most)[-2 if transposed else -1]
    return MatmulOperands(str(a), str(b), str(c), batch[0] if batched else None, m, n, k,
                          str(a.element_type), str(c.element_type), transposed,
                          c_vectors=_aligned(c) or ((open_m or open_sizes) and _vector_rows(c)), open_m=open_m)


def operands_problem(op: ir.Operation, output: ir.Value) -> str:
    """Why `matmul_operands` (A and B read in vectors) takes no view of
    `op`: the first of its conditions that fails, named."""
    a, b, c = op.operands[0].type, op.operands[1].type, output.type
    for name, memref_type in (("A", a), ("B", b), ("C", c)):
        if not isinstance(memref_type, ir.MemRefType) or str(memref_type.element_type) not in ELEMENTS:
            element = getattr(memref_type, "element_type", memref_type)
            return f"{name} is {element}: the kernels multiply {', '.join(ELEMENTS)}"
    if str(a.element_type) != str(b.element_type):
        return f"A is {a.element_type} and B {b.element_type}: the kernels take one type"
    if b_is_transposed(op) is None:
        return "B is read through a layout the kernels do not read (neither K x N nor N x K)"
    open_m = _m_open(op)
    checked = [("B", b)] if open_m else [("A", a), ("B", b)]
    for name, memref_type in checked:
        if not _static(memref_type):
            return f"{name}'s sizes or layout are known only at run time"
        if not _vector_rows(memref_type):
            row_bytes = memref_type.shape[-1] * element_bytes(memref_type.element_type)
            return (f"{name}'s rows ({row_bytes} bytes, or its offset) are not whole {VECTOR_BYTES}-byte vectors: "
                    "the kernels read them in vectors")
    if not open_m and not _static(c):
        return "C's sizes or layout are known only at run time"
    return "operands the kernels do not read"


def _kernel_memref(memref_type: ir.Type) -> bool:
    return isinstance(memref_type, ir.MemRefType) and str(memref_type.element_type) in ELEMENTS


def _planned_shape(op: ir.Operation, operand: int, most: int) -> list[int]:
    """The shape of `op`'s operand, each size known only at run time as its largest (`_planned_size`)."""
    value = op.operands[operand]
    return [_planned_size(op, value, dim, most) if ir.ShapedType.is_dynamic_size(size) else size
            for dim, size in enumerate(ir.MemRefType(value.type).shape)]


def _planned_size(op: ir.Operation, value: ir.Value, dim: int, most: int) -> int:
    """The size a kernel is tiled for where dim `dim` of `value` is known
    only at run time: its largest (bounded through the IR from the
    arguments' largest sizes), at most `most`."""
    function = op
    while function.name != "func.func":
        function = function.parent
    largest = UpperBounds(function).dim(value, dim)
    return min(most, largest) if largest else most


def _m_open(op: ir.Operation) -> bool:
    """A 2-D matmul whose M (A's and its result's rows) is known only at run time."""
    return op.name == "linalg.matmul" and _open_rows(op.operands[0].type) and _open_rows(op.operands[2].type)


def _open_rows(memref_type: ir.Type) -> bool:
    """A row-major 2-D memref of a kernel element type whose rows are known
    only at run time, its columns at compile time, 16-byte aligned."""
    if not isinstance(memref_type, ir.MemRefType) or memref_type.rank != 2 \
            or str(memref_type.element_type) not in ELEMENTS:
        return False
    rows, cols = memref_type.shape
    return ir.ShapedType.is_dynamic_size(rows) and not ir.ShapedType.is_dynamic_size(cols) \
        and _vector_rows(memref_type)


def _vector_rows(memref_type: ir.MemRefType) -> bool:
    return vectors_fit(memref_type, VECTOR_BYTES // element_bytes(memref_type.element_type))


def describe_epilogue(consumer: ir.Operation, accumulator: ir.Value) -> tuple[Epilogue, tuple, tuple, list] | None:
    """(epilogue, loop dims of the accumulator, loop dims of the output, the
    buffers its body gathers from) of an elementwise linalg.generic or a
    linalg.transpose reading `accumulator` once, through a permutation of
    its loops, and writing one output through another; None for anything else."""
    if consumer.name == "linalg.transpose":
        permutation = tuple(ir.DenseI64ArrayAttr(consumer.attributes["permutation"]))
        read = [0] * len(permutation)
        for out_dim, in_dim in enumerate(permutation):
            read[in_dim] = out_dim
        return Epilogue((EpilogueInput(None),), (), ("arg", 0)), tuple(read), tuple(range(len(permutation))), []
    if any("reduction" in str(it) for it in consumer.attributes["iterator_types"]):
        return None
    view = consumer.opview
    inputs, outputs = list(view.inputs), list(view.outputs)
    dims = [map_dims(m) for m in indexing_maps(consumer)]
    loops = tuple(range(indexing_maps(consumer)[0].n_dims))
    if len(outputs) != 1 or sum(v == accumulator for v in inputs) != 1 \
            or any(d is None or sorted(d) != list(loops) for d in (dims[-1], dims[inputs.index(accumulator)])):
        return None
    if list(consumer.regions[0].blocks[0].arguments[len(inputs)].uses):
        return None  # reads the output's old value
    described = []
    for value, read in zip(inputs, dims):
        if value == accumulator:
            described.append(EpilogueInput(None))
        elif isinstance(value.type, ir.MemRefType) and read is not None:
            described.append(EpilogueInput(str(value.type), read))
        else:
            return None
    captured: list[ir.Value] = []  # tables it gathers from (an embedding looked up again for a residual)
    body = describe_body(consumer, captured=captured)
    if body is None:
        return None
    epilogue = Epilogue(tuple(described), *body, tuple(str(v.type) for v in captured))
    return epilogue, dims[inputs.index(accumulator)], dims[-1], captured


@dataclass(frozen=True)
class _FoundEpilogue:
    consumer: ir.Operation              # a linalg.generic or linalg.transpose
    epilogue: Epilogue
    output_view: OutputView
    view: ir.Operation | None           # the expand_shape (or unit-dim collapse_shape) it reads the result through
    allocations: list[ir.Operation]     # allocations and views between matmul and epilogue: the kernel writes into them
    captured: list[ir.Value]            # the buffers the epilogue gathers from, in the order of Epilogue.captured

    @property
    def output(self) -> ir.Value:
        return self.consumer.operands[-1]


def _output_view(result: ir.Value, view: ir.Operation | None, read_dims, store_dims) -> OutputView:
    """C's dims split as an expand_shape `view` splits them, or dropped where
    a collapse_shape drops unit dims (no loop index left), or kept; read and
    stored as the consumer's maps say."""
    shape = ir.MemRefType(result.type).shape
    if view is None:
        splits = tuple((size,) for size in shape)
    elif view.name == "memref.collapse_shape":
        kept = {_kept_dim(group, shape) for group in reassociation(view)}
        splits = tuple((size,) if d in kept else () for d, size in enumerate(shape))
    else:
        expanded = ir.MemRefType(view.results[0].type).shape
        splits = tuple(tuple(expanded[d] for d in group) for group in reassociation(view))
    return OutputView(splits, tuple(read_dims), tuple(store_dims))


def _kept_dim(group: list[int], shape: list[int]) -> int:
    """The dim of a collapsed group that carries its index: the one not of size 1 (the last if all are)."""
    return next((d for d in group if shape[d] != 1), group[-1])


def _drops_unit_dims(view: ir.Operation) -> bool:
    """Is `view` a collapse_shape that only drops dims of size 1, C's last dim kept?"""
    if view.name != "memref.collapse_shape":
        return False
    shape = ir.MemRefType(view.operands[0].type).shape
    groups = reassociation(view)
    if not groups:  # to 0-d: a 1x1 result, no dim kept
        return False
    return all(sum(1 for d in group if shape[d] != 1) <= 1 for group in groups) \
        and _kept_dim(groups[-1], shape) == len(shape) - 1


def epilogue_after(op: ir.Operation, result: ir.Value | None = None,
                   sources: list[ir.Value] | None = None) -> _FoundEpilogue | None:
    """The elementwise op (or transpose) after the matmul that is the only
    reader of its (temporary) result, maybe through an expand_shape: bias,
    activation, residual, a narrowing to f16, a split into heads and their
    permutation. The kernel applies it to each result and stores it where it
    goes, so the temporary never exists. Another kernel's op names its
    `result` and the buffers it reads (`sources`; a matmul's: A and B)."""
    result = op.operands[2] if result is None else result
    sources = list(op.operands[:2]) if sources is None else sources
    first = _first_reader(op, result)
    if first is None or first[0].name not in ("linalg.generic", "linalg.transpose"):
        return None
    after, view = first
    read = view.results[0] if view is not None else result
    between = _ops_between(op, after)
    described = describe_epilogue(after, read) if between is not None else None
    if described is None:
        return None
    moved, skipped = between
    epilogue, read_dims, store_dims, captured = described
    output_view = _output_view(result, view, read_dims, store_dims)
    found = _FoundEpilogue(after, epilogue, output_view, view, moved, captured)
    in_place = buffer_root(found.output) == buffer_root(result)  # it overwrites the result (reuse-buffers, outputs-in-place)
    owner = defining_op(result)
    users = users_of(result) + (users_of(read) if view is not None else [])
    ours = [o for o in (op, after, view) if o is not None]  # Operation == None raises in the bindings
    if not in_place and (owner is None or owner.name != "memref.alloc" or any(
            u.name not in ("linalg.fill", "memref.dealloc") and u not in ours for u in users)):
        return None
    # The kernel stores results while other blocks still read A and B (its
    # sources): the output must not be (a view of) one. (Separate kernels were ordered.)
    output = buffer_root(found.output)
    if output in {buffer_root(source) for source in sources}:
        return None
    for value, inp in zip(after.operands, epilogue.inputs):
        if inp.memref_type is not None and buffer_root(value) == output and inp.dims != store_dims:
            return None  # read at other elements than the one being written
    if output in {buffer_root(table) for table in found.captured}:
        return None  # gathered at any element, maybe one another block has stored
    return found if not _conflicts(after, skipped) else None


def _first_reader(op: ir.Operation, result: ir.Value) -> tuple[ir.Operation, ir.Operation | None] | None:
    """The first linalg op after the matmul to read its result, directly or
    through an expand_shape or a collapse_shape dropping unit dims (that
    view, or None)."""
    candidates = [(user, None) for user in users_of(result)]
    candidates += [(user, view) for view in users_of(result)
                   if view.name == "memref.expand_shape" or _drops_unit_dims(view)
                   for user in users_of(view.results[0])]
    first = None
    for user, view in candidates:
        if user.name.startswith("linalg.") and user.name != "linalg.fill" and user.block == op.block \
                and op.is_before_in_block(user) and (first is None or user.is_before_in_block(first[0])):
            first = (user, view)
    return first


def _ops_between(op: ir.Operation, consumer: ir.Operation) -> tuple[list, list] | None:
    """The ops between a matmul and its epilogue: (allocations and views,
    which the kernel's operands may need moved before it; the other linalg
    ops of its horizontal dispatch, which the epilogue moves across), or
    None if anything else sits there."""
    label, moved, skipped = dispatch_label(op), [], []
    for between in ops_between(op, consumer):
        if between.name == "memref.alloc" or between.name in VIEW_OPS:
            moved.append(between)
        elif dispatch_kind(op) is DispatchKind.MATMUL_HORIZONTAL and dispatch_label(between) == label:
            skipped.append(between)
        else:
            return None
    return moved, skipped


def _conflicts(consumer: ir.Operation, others: list[ir.Operation]) -> bool:
    """Would running `consumer` before `others` change what either sees
    (one writes a buffer the other touches)?"""
    touched = {buffer_root(v) for v in consumer.operands if isinstance(v.type, ir.MemRefType)}
    written = buffer_root(consumer.operands[-1])
    for other in others:
        other_written = {buffer_root(v) for v in written_buffers(other)}
        other_read = {buffer_root(v) for v in other.operands if isinstance(v.type, ir.MemRefType)}
        if other_written & touched or written in other_read:
            return True
    return False


@dataclass
class MatmulSite:
    """A matmul and the ops around it that its kernel absorbs."""
    op: ir.Operation
    fill: ir.Operation | None = None       # zero fill of the output: the kernel overwrites instead
    found: _FoundEpilogue | None = None    # the op applied as the kernel's epilogue
    window: FoundWindow | None = None      # A is a convolution's patches: the kernel reads them from its input

    @classmethod
    def of(cls, op: ir.Operation, windows: bool = False) -> MatmulSite:
        """The site of `op`; with `windows`, A may be read through a windows op (an implicit im2col)."""
        fill = zero_fill_before(op)
        found = epilogue_after(op) if fill is not None else None
        if found is not None:
            # The kernel, in the matmul's place, writes into them (harmless if
            # the matmul stays: they touch no data); an epilogue in place
            # writes through the view.
            for allocation in found.allocations + ([found.view] if found.view is not None else []):
                allocation.move_before(op)
        windows = windows and ir.MemRefType(op.operands[0].type).has_static_shape  # an open M reads A as stored
        return cls(op, fill, found, window_operand(op) if windows else None)

    def operands(self, target: GpuTarget | None = None, vector_operands: bool = True,
                 open_sizes: bool = False) -> MatmulOperands | None:
        operands = matmul_operands(self.op, self.output, target, vector_operands, open_sizes)
        if operands is not None and self.found is not None:
            operands = replace(operands, view=self.found.output_view)
        if operands is not None and self.window is not None:
            operands = replace(operands, a_window=self.window.read)
        return operands

    @property
    def epilogue(self) -> Epilogue | None:
        return self.found.epilogue if self.found else None

    @property
    def output(self) -> ir.Value:
        """Where the kernel stores: the epilogue's output, else the matmul's."""
        return self.found.output if self.found else self.op.operands[2]

    def kernel_operands(self) -> KernelOperands:
        """What the kernel reads and writes: A (or the input it is gathered from), B, the output, the
        epilogue's tensors and tables."""
        a = self.window.source if self.window else self.op.operands[0]
        if self.found is None:
            return KernelOperands(a, self.op.operands[1], self.output)
        tensors = tuple(self.found.consumer.operands[k] for k, _ in self.epilogue.tensor_inputs())
        return KernelOperands(a, self.op.operands[1], self.output, tensors, tuple(self.found.captured))

    def absorbed(self) -> list[ir.Operation]:
        """Ops that go away with the matmul (the temporary too, with an epilogue; the patches, read
        through their window)."""
        ops = [o for o in (self.fill, self.found.consumer if self.found else None) if o is not None]
        temporary = self.op.operands[2]
        if self.found is not None and buffer_root(self.output) != buffer_root(temporary):
            if self.found.view is not None:
                ops.append(self.found.view)  # read only by the epilogue
            ops += [use.owner for use in temporary.uses if use.owner.name == "memref.dealloc"] + [defining_op(temporary)]
        return ops + (self.window.absorbed if self.window else [])


@dataclass(frozen=True)
class GpuMatmulKernels(PythonPass):
    name = "gpu-matmul-kernels"
    arch: str = DEFAULT_ARCH  # the GPU the kernels are for: sm_90a has wgmma
    tf32: bool = False        # f32 matmuls may use tf32 tensor cores (--allow-tf32)
    strict: bool = False      # a kernel that fails to build is an error, not a fallback (--strict-kernels)
    lowering_dir: str = str(DEFAULT_LOWERING_DIR)  # where the tile tables and the target are read (--lowering-dir)
    tuning_cache: str = ""    # --autotune: tiles from this cache where it has them ("" for none)
    tuning_variant: str = ""  # a tuning variant: every matmul its k-th fitting tile ("" for none)

    def _run(self, module: ir.Operation, pass_) -> None:
        matmuls = nested_ops(module, lambda op: op.name in ("linalg.matmul", "linalg.batch_matmul"))
        table = load_tile_tables(Path(self.lowering_dir))
        target = gpu_target(Path(self.lowering_dir))
        request = request_for(self.tuning_cache, self.tuning_variant)
        tuned: dict[str, str] = {}  # kernel -> its tuning key and tile, for the kernel report and tools/tune.py
        reuse = LaunchReuse()  # a repeated layer's kernels built once
        for group in _horizontal_groups(matmuls):
            sites = [MatmulSite.of(op, windows=len(group) == 1) for op in group]
            operands = [self._precision(site.operands(target)) for site in sites]
            if len(sites) > 1 and None not in operands and \
                    not self._each_persistent(operands, table, target, request) and \
                    self._horizontal(module, sites, operands, table, target, request, tuned, reuse):
                continue
            for site, single in zip(sites, operands):
                b_copy = self._transposed_b(site, single, target)
                chosen = None
                if b_copy is not None:  # a tf32 matmul on the copy's Bᵀ, where wgmma takes it
                    transposed = _reading_transposed(single, b_copy)
                    chosen = choose_kernel([transposed], table, self.arch, target, request)
                    if chosen is None or not issubclass(chosen[0], WgmmaMatmulWriter):
                        chosen, b_copy = None, None
                    else:
                        single = transposed
                if chosen is None:
                    chosen = choose_kernel([single], table, self.arch, target, request) if single else None
                if chosen is None and site.window is not None:  # read the patches as written instead
                    site.window = None
                    single = self._precision(site.operands(target))
                    chosen = choose_kernel([single], table, self.arch, target, request) if single else None
                if chosen is None:
                    record_refusal(module, site.op, refusals([single], table, self.arch, target) if single
                                   else operands_problem(site.op, site.output))
                    continue
                with kernel_site(module, self.strict):
                    plan = plan_buckets(single, target, lambda o: choose_kernel([o], table, self.arch, target,
                                                                              request)) if single.open_m else None
                    if plan is not None and len(plan.buckets) > 1:
                        _replace_by_buckets(site, plan, tuned, self.arch)
                        continue
                    kernel = f"forward_{chosen[2]}_{len(tuned)}"
                    _replace(module, site, single, *chosen[:2], kernel, target, b_copy, reuse)
                    tuned[kernel] = _tuning_note([single], chosen, self.arch, plan)
        if tuned:
            module.attributes[TUNING_ATTR] = ir.DictAttr.get({k: ir.StringAttr.get(v) for k, v in tuned.items()})

    def _horizontal(self, module, sites, operands, table, target, request, tuned, reuse) -> bool:
        """One kernel for the group's matmuls; False (each then on its own) where none is built."""
        built = False
        with kernel_site(module, self.strict):
            built = _replace_horizontal(module, sites, operands, table, self.arch, target, request, len(tuned), tuned,
                                        reuse)
        return built

    def _each_persistent(self, operands: list[MatmulOperands], table, target, request) -> bool:
        """Does the TMA kernel take each matmul of a horizontal group on its own?
        Each then fills the GPU with its own persistent grid, and a
        horizontal kernel (cp.async, one tile a block) would only be slower."""
        for single in operands:
            chosen = choose_kernel([single], table, self.arch, target, request)
            if chosen is None or chosen[0] is not TmaWgmmaMatmulWriter:
                return False
        return True

    def _transposed_b(self, site: MatmulSite, operands: MatmulOperands | None,
                      target: GpuTarget) -> TransposeCopy | None:
        """The copy that gives a tf32 matmul's plain B (K x N) as Bᵀ, where
        wgmma takes the matmul: it reads tf32 only K-major. None elsewhere,
        and where B is not a static row-major buffer of 16-byte rows."""
        if operands is None or not operands.tf32 or operands.b_transposed or operands.open_m or \
                not target.has("wgmma", self.arch):
            return None
        b = ir.MemRefType(site.op.operands[1].type)
        copy = TransposeCopy(operands.batch, operands.k, operands.n, str(b.element_type))
        return copy if b.has_static_shape and row_major(b) and copy.fits() else None

    def _precision(self, operands: MatmulOperands | None) -> MatmulOperands | None:
        if operands is None or not self.tf32 or operands.in_element != "f32":
            return operands
        return replace(operands, tf32=True)


def kernel_takes(batch: int | None, m: int, n: int, k: int, in_element: str, out_element: str, arch: str,
                 tf32: bool, lowering_dir: Path = DEFAULT_LOWERING_DIR) -> bool:
    """Would a generator take a contiguous matmul of these sizes, B read
    transposed (a linear layer's weight)? For a pass that makes matmuls
    only where a kernel will take them (conv-as-matmul)."""
    return chosen_generator(batch, m, n, k, in_element, out_element, arch, tf32, lowering_dir) is not None


def chosen_generator(batch: int | None, m: int, n: int, k: int, in_element: str, out_element: str, arch: str,
                     tf32: bool, lowering_dir: Path = DEFAULT_LOWERING_DIR) -> str | None:
    """The generator that would take a contiguous matmul of these sizes, B
    read transposed, or None (the generic pipeline's), for the passes that
    act ahead of this one on what it will do."""
    batched = [batch] if batch else []

    def memref(*sizes: int, element: str) -> str:
        return f"memref<{'x'.join(map(str, [*batched, *sizes]))}x{element}>"
    c_vectors = n * element_bytes(out_element) % VECTOR_BYTES == 0
    operands = MatmulOperands(memref(m, k, element=in_element), memref(n, k, element=in_element),
                              memref(m, n, element=out_element), batch, m, n, k, in_element, out_element,
                              b_transposed=True, tf32=tf32 and in_element == "f32", c_vectors=c_vectors)
    chosen = choose_kernel([operands], _cached_tables(str(lowering_dir)), arch, gpu_target(Path(lowering_dir)))
    return None if chosen is None else chosen[2]


@functools.lru_cache(maxsize=4)
def _cached_tables(lowering_dir: str) -> TileTables:
    return load_tile_tables(Path(lowering_dir))


def _horizontal_groups(matmuls: list[ir.Operation]) -> list[list[ir.Operation]]:
    """The matmuls in program order, those of one horizontal dispatch
    (twintrack-form-dispatches' matmul_horizontal_N, in one block) together."""
    groups: list[tuple[ir.Block | None, str | None, list[ir.Operation]]] = []
    for op in matmuls:
        label = dispatch_label(op)
        horizontal = dispatch_kind(op) is DispatchKind.MATMUL_HORIZONTAL
        same = [ops for block, key, ops in groups if horizontal and key == label and block == op.block]
        if same:
            same[0].append(op)
        else:
            groups.append((op.block, label if horizontal else None, [op]))
    return [ops for _, _, ops in groups]


def _tuning_note(operands: list[MatmulOperands], chosen: tuple, arch: str, plan: BucketPlan | None = None) -> str:
    """The kernel's tuning key, tile and choice; for a matmul of run-time M,
    the cost model's buckets (`matmul_buckets`) and why."""
    _, tile, stem, note = chosen
    buckets = {"buckets": {**plan.note(), "decision": plan.describe()}} if plan else {}
    return json.dumps({"key": tuning_key(operands, arch).text(), "tile": tile_record(stem, tile), **note, **buckets})


def _replace_by_buckets(site: MatmulSite, plan: BucketPlan, tuned: dict, arch: str) -> None:
    """A kernel per bucket of M, each in its branch of an scf.if chain on
    M (A's rows) that the host plan evaluates per call; the site goes."""
    op = site.op
    with ir.InsertionPoint(op), op.location:
        rows = memref.dim(op.operands[0], arith.constant(ir.IndexType.get(), 0))
    branch_at = op
    for index, (operands, chosen) in enumerate(plan.buckets):
        writer_class, tile, stem, _ = chosen
        kernel = f"forward_{stem}_{len(tuned)}"
        last = index == len(plan.buckets) - 1
        if last:
            before = branch_at
        else:
            with ir.InsertionPoint(branch_at), op.location:
                bound = arith.constant(ir.IndexType.get(), operands.m)
                branch = scf.IfOp(arith.cmpi(arith.CmpIPredicate.ule, rows, bound), has_else=True)
                with ir.InsertionPoint(branch.then_block):
                    before = scf.YieldOp([]).operation
                with ir.InsertionPoint(branch.else_block):
                    branch_at = scf.YieldOp([]).operation
        writer_class(operands, tile, site.fill is None, site.epilogue).build(before, kernel, site.kernel_operands())
        tuned[kernel] = _tuning_note([operands], chosen, arch, plan)
    erase_site(site)


def _replace(module, site: MatmulSite, operands, writer_class, tile, kernel: str, target: GpuTarget,
             b_copy: TransposeCopy | None = None, reuse: LaunchReuse | None = None) -> None:
    """The kernel in place of the site (a clone of an identical one `reuse`
    holds, where it does); with `b_copy`, reading B through that transposed
    copy, made by a kernel of its own just before and freed just after; A
    through a rounding copy where its registers would cost a block an SM."""
    (operands,), rounded_a = _a_rounded_where_it_pays(writer_class, [operands], tile, [site], target)
    writer = writer_class(operands, tile, site.fill is None, site.epilogue)
    kernel_operands = site.kernel_operands()
    if rounded_a is not None:
        kernel_operands = replace(kernel_operands, a=rounded_a)
    if b_copy is None:
        writer.build(site.op, kernel, kernel_operands, reuse)
        _free_before(rounded_a, site.op)
        erase_site(site)
        return
    rounding = _b_rounding(kernel_operands.b, site.op)
    source = rounding.operands[0] if rounding else kernel_operands.b
    copy_launch, transposed = build_transpose(site.op, f"{kernel}_transpose_b",
                                              replace(b_copy, round_tf32=rounding is not None), source)
    try:
        writer.build(site.op, kernel, replace(kernel_operands, b=transposed))
    except Exception:
        copy_launch.erase()
        transposed.owner.erase()
        raise
    with ir.InsertionPoint(site.op), site.op.location:
        memref.DeallocOp(transposed)
    _free_before(rounded_a, site.op)
    erase_site(site)
    if rounding is not None:
        _erase_with_its_buffer(rounding)


def _a_rounded_where_it_pays(writer_class, operands: list[MatmulOperands], tile, sites: list[MatmulSite],
                             target: GpuTarget, before: ir.Operation | None = None
                             ) -> tuple[list[MatmulOperands], ir.Value | None]:
    """Where the cp.async wgmma kernel would lose a block an SM to tf32 A's
    registers (WgmmaMatmulWriter.a_registers_cost_a_block): A, a static
    row-major buffer every site reads, rounded by a copy just before
    `before` (the first site), and the operands saying so; else the operands
    as they are and None."""
    if writer_class is not WgmmaMatmulWriter or not operands[0].tf32 or \
            any(o.a_window is not None or o.open_m for o in operands):
        return operands, None
    a = sites[0].kernel_operands().a
    a_type = ir.MemRefType(a.type)
    if not (a_type.has_static_shape and row_major(a_type)) or \
            not all(_same_elements(site.kernel_operands().a, a) for site in sites):
        return operands, None
    if not writer_class(operands[0], tile, sites[0].fill is None, sites[0].epilogue).a_registers_cost_a_block(target) \
            or not _rounding_copy_pays(operands, target):
        return operands, None
    return [replace(o, a_rounded=True) for o in operands], _tf32_rounded_copy(a, before or sites[0].op)


# A's rounding copy pays where it takes under this many times the kernels'
# ideal tf32 tensor-core time. The second block an SM it buys saved 2.2-2.5x
# that time where measured (ViT's QKV projection, N 2304; ResNet-50's 1x1
# convolutions), but as little as 0.3x where the N tiles are many (a
# 128x2048 expansion), and a copy of a 100,352 x 128 A cost 5x it (N 128).
A_COPY_PAYS_BELOW = 1.5


def _rounding_copy_pays(operands: list[MatmulOperands], target: GpuTarget) -> bool:
    """Does copying A (read and written once) take less than
    A_COPY_PAYS_BELOW times the kernels' ideal tf32 time: in effect, is
    the N that the copy serves (a horizontal group's, summed) wide enough?"""
    first = operands[0]
    copy_seconds = 2 * (first.batch or 1) * first.m * first.k * 4 / target.copy_bandwidth
    ideal_seconds = sum(2 * (o.batch or 1) * o.m * o.n * o.k for o in operands) / target.peak_flop_rate["tf32"]
    return copy_seconds < A_COPY_PAYS_BELOW * ideal_seconds


def _same_elements(value: ir.Value, other: ir.Value) -> bool:
    """Are two memrefs of one type the same elements: reshapes of one buffer (a horizontal group's A)?"""
    def reshaped_from(v: ir.Value) -> ir.Value:
        while (owner := defining_op(v)) is not None and owner.name in RESHAPE_OPS:
            v = owner.operands[0]
        return v
    return value == other or (str(value.type) == str(other.type) and reshaped_from(value) == reshaped_from(other))


def _tf32_rounded_copy(source: ir.Value, before: ir.Operation) -> ir.Value:
    """A new buffer holding `source` rounded to tf32 (to nearest), by an
    elementwise op just before `before` (the generic kernels take it)."""
    from ..kernels.tf32_rounding import round_to_tf32
    source_type = ir.MemRefType(source.type)
    with ir.InsertionPoint(before), before.location:
        target = memref.AllocOp(ir.MemRefType.get(source_type.shape, source_type.element_type), [], []).result
        elementwise_into(source, target, round_to_tf32)
    return target


def _free_before(buffer: ir.Value | None, op: ir.Operation) -> None:
    """A dealloc of `buffer` (where there is one) just before `op`: after the kernel built there."""
    if buffer is not None:
        with ir.InsertionPoint(op), op.location:
            memref.DeallocOp(buffer)


def _b_rounding(b: ir.Value, matmul: ir.Operation) -> ir.Operation | None:
    """The tf32 rounding (round-tf32-operands) that alone writes B, a buffer
    of its own only this matmul reads, where B's transposing copy can round
    instead and the rounding's pass over B go; None elsewhere."""
    if defining_op(b) is None or defining_op(b).name != "memref.alloc":
        return None
    users = users_of(b)
    roundings = [u for u in users if is_tf32_rounding(u) and u.operands[1] == b]
    if len(roundings) != 1 or any(u not in (roundings[0], matmul) and u.name != "memref.dealloc" for u in users):
        return None
    rounding = roundings[0]
    return None if written_between(rounding, matmul, buffer_root(rounding.operands[0])) else rounding


def _erase_with_its_buffer(op: ir.Operation) -> None:
    """Erase `op`, and the buffer it wrote if nothing but deallocations use it now."""
    buffer = op.operands[-1]
    op.erase()
    users = users_of(buffer)
    if all(u.name == "memref.dealloc" for u in users):
        for dealloc in users:
            dealloc.erase()
        defining_op(buffer).erase()


def _reading_transposed(operands: MatmulOperands, b_copy: TransposeCopy) -> MatmulOperands:
    return replace(operands, b_type=str(b_copy.target_type()), b_transposed=True)


def _replace_horizontal(module, sites: list[MatmulSite], operands: list[MatmulOperands], table: TileTables,
                        arch: str, target: GpuTarget, request: TuningRequest, number: int, tuned: dict,
                        reuse: LaunchReuse | None = None) -> bool:
    """One kernel for the matmuls of a horizontal dispatch, in place of the
    last (every operand is defined by then); False where they cannot share
    one: no tile for all, or different shared buffers."""
    if any(o.open_m for o in operands):
        return False  # one grid of each matmul's blocks needs their counts at compile time
    chosen = choose_kernel(operands, table, arch, target, request)
    if chosen is None:
        return False
    writer_class, tile, stem, _ = chosen
    writers = [writer_class(o, tile, site.fill is None, site.epilogue) for o, site in zip(operands, sites)]
    if any(w.workgroup_types() != writers[0].workgroup_types() for w in writers) or not _only_absorbed_between(sites) \
            or _reads_another_result(sites):
        return False
    operands, rounded_a = _a_rounded_where_it_pays(writer_class, operands, tile, sites, target, sites[-1].op)
    kernel_operands = [site.kernel_operands() for site in sites]
    if rounded_a is not None:
        writers = [writer_class(o, tile, site.fill is None, site.epilogue) for o, site in zip(operands, sites)]
        kernel_operands = [replace(k, a=rounded_a) for k in kernel_operands]
    for writer in writers:
        writer.path += f" horizontal x{len(writers)}"
    kernel = f"forward_{stem}_{number}"
    build_horizontal(sites[-1].op, kernel, writers, kernel_operands, reuse)
    _free_before(rounded_a, sites[-1].op)
    tuned[kernel] = _tuning_note(operands, chosen, arch)
    for site in sites:
        erase_site(site)
    return True


def _reads_another_result(sites: list[MatmulSite]) -> bool:
    """Does one matmul's epilogue read what another of the group writes (a
    SwiGLU's silu(gate) * up, on the up matmul)? One kernel would run the
    reading blocks beside the writing ones, in no order."""
    for site in sites:
        operands = site.kernel_operands()
        read = {buffer_root(v) for v in (*operands.epilogue, *operands.captured)}
        if any(buffer_root(other.output) in read or buffer_root(other.op.operands[2]) in read
               for other in sites if other is not site):
            return True
    return False


def _only_absorbed_between(sites: list[MatmulSite]) -> bool:
    """Between the first matmul and the last (where the kernel goes), does
    every op that touches data go with the kernel?"""
    absorbed = {o for site in sites for o in [site.op, *site.absorbed()]}
    block_ops = [o.operation for o in sites[0].op.block.operations]
    return all(o in absorbed or o.name == "memref.alloc" or o.name in VIEW_OPS
               for o in block_ops[block_ops.index(sites[0].op):block_ops.index(sites[-1].op)])


def erase_site(site: MatmulSite) -> None:
    absorbed = site.absorbed()
    site.op.erase()
    for other in absorbed:
        other.erase()
