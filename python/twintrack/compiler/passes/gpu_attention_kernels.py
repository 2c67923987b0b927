"""gpu-attention-kernels: attention's three kernels become one flash-attention
kernel (twintrack.compiler.kernels.flash_attention; on sm_90a, f16 and bf16
with a head dim of 64 or 128, the wgmma kernel of
twintrack.compiler.kernels.wgmma_flash_attention), the scores never in memory.

The chain it takes, in one block of the bufferized IR:
- a zero fill and linalg.batch_matmul Q·Kᵀ (B transposed or not), with the
  elementwise epilogue gpu-matmul-kernels would fold into it (scale, a mask
  through linalg.index, a narrowing to f16): the scores;
- the row-wise softmax over the keys (one `reduction_rows_N` dispatch,
  twintrack-dissolve-dispatches' label on each op): the max, the sum of
  exp(s - max) and their division, read through reshapes of the scores,
  maybe widened to f32 and narrowed back (fp16);
- a zero fill and linalg.batch_matmul P·V with the store gpu-matmul-kernels
  would give it (an epilogue through an expand_shape and a permutation: the
  heads back in place, a narrowing).
The matmul ends are gpu-matmul-kernels' own matching (`MatmulSite`). The
scores, P and the softmax's per-row buffers must be temporaries nothing else
reads, and nothing but the chain (allocations and views aside) may sit
between the two matmuls; anything else stays as it was, three kernels.

Q, K and V are often permuted copies: a projection writes (batch, seq,
heads·dim), and a transpose (Q's also scaled) copies each into (batch,
heads, seq, dim) for the matmuls. With grouped KV heads the copies of K and
V also repeat each KV head for its group of query heads (batch, kv heads,
group, seq, dim). Where such a copy's buffer is read by the attention
alone, the kernel reads the copy's source instead (each block its head's
tile, `OperandSlice`; Q's scale applied as it is staged), and the copy
goes: one kernel and one round trip through memory less each.

The kernel is built in place, as a gpu.launch before the P·V matmul
(`build_flash_attention`), reading the chain's values directly, the
epilogues' gathered tables too. A kernel that fails to build or verify (a
compiler bug) leaves its chain as it was, for the matmul and row kernels,
and is recorded as a fallback (`kernel_fallback`); with `strict` it fails
the compile.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from pathlib import Path

from mlir import ir
from mlir.dialects import memref

from ..kernels.flash_attention import (
    AttentionKernelOperands,
    AttentionOperands,
    FlashTileConfig,
    OperandSlice,
    WgmmaFlashTile,
    build_flash_attention,
    choose_flash_tile,
    load_flash_tiles,
)
from ..dispatch_kinds import DispatchKind, dispatch_kind
from ..target import DEFAULT_ARCH, DEFAULT_LOWERING_DIR
from ..kernels.epilogue import uncast
from ..kernels.softmax_scale import peel_softmax_scale
from ..kernels.matmul_common import VECTOR_BYTES, element_bytes
from .generic_body import describe_body, indexing_maps, map_dims, permute_loops
from .gpu_matmul_kernels import MatmulSite, erase_site
from .matmul_sites import b_is_transposed
from .row_sites import row_groups
from .ir_helpers import (
    VIEW_OPS,
    PythonPass,
    buffer_root,
    defining_op,
    nested_ops,
    reassociation,
    row_major,
    users_of,
    vectors_fit,
    view_vectors_fit,
    written_buffers,
)
from .kernel_fallback import kernel_site

MAX_OPS = ("arith.maximumf", "arith.maxnumf")
_RESHAPES = ("memref.expand_shape", "memref.collapse_shape")


@dataclass
class _Softmax:
    ops: list[ir.Operation]       # its fills and generics, in order
    probabilities: ir.Value       # where the division writes P
    row_buffers: list[ir.Value]   # the max and the sum
    max_op: str


@dataclass
class _Read:
    """How the kernel reads one of Q, K and V: the argument and its slice;
    for a permuted copy it takes over, the copy (`producer`, erased with
    its buffer `copy`), whether the tile's dims are swapped against the
    matmul's operand, and Q's scale. A read `relaid` has no argument yet:
    that op, which writes Kᵀ, will write K into a new buffer instead
    (`_relay_keys`)."""
    argument: ir.Value | None
    slice: OperandSlice
    producer: ir.Operation | None = None
    copy: ir.Value | None = None
    swapped: bool = False
    scale: float | None = None
    relaid: ir.Operation | None = None


@dataclass
class _Chain:
    scores: MatmulSite
    softmax: _Softmax
    values: MatmulSite
    attention: AttentionOperands
    config: FlashTileConfig | None
    reads: list[_Read]

    def ops(self) -> list[ir.Operation]:
        """The ops the kernel replaces."""
        return [site_op for site in (self.scores, self.values) for site_op in (site.op, *site.absorbed())] \
            + self.softmax.ops


@dataclass(frozen=True)
class GpuAttentionKernels(PythonPass):
    name = "gpu-attention-kernels"
    strict: bool = False  # a kernel that fails to build is an error, not a fallback (--strict-kernels)
    arch: str = DEFAULT_ARCH  # the GPU the kernels are for: sm_90a has wgmma
    lowering_dir: str = str(DEFAULT_LOWERING_DIR)  # where the flash kernel's tile table is read (--lowering-dir)

    def _run(self, module: ir.Operation, pass_) -> None:
        search = _Search(self.arch, load_flash_tiles(Path(self.lowering_dir)))
        chains = [chain for op in nested_ops(module, lambda op: op.name == "linalg.batch_matmul")
                  if (chain := _find_chain(op, search)) is not None]
        for number, chain in enumerate(chains):  # disjoint: a P·V matmul starts no chain
            with kernel_site(module, self.strict):
                _replace(chain, f"forward_attention_{number}")


# ------------------------------------------------------------ matching
@dataclass
class _Search:
    """What finding the chains reads: the target, the flash kernel's tiles,
    and each block's row-wise groups, found once (no chain is replaced
    while they are found)."""
    arch: str
    tiles: tuple[WgmmaFlashTile, ...]
    groups: dict[ir.Block, list[list[ir.Operation]]] = field(default_factory=dict)

    def row_groups(self, block: ir.Block) -> list[list[ir.Operation]]:
        if block not in self.groups:
            self.groups[block] = row_groups(block)
        return self.groups[block]


def _find_chain(op: ir.Operation, search: _Search) -> _Chain | None:
    scores = MatmulSite.of(op)
    # The scores and P are the kernel's own: their rows need no 16-byte vectors
    # (197 keys); Q, K and V are checked as the kernel reads them (`_reads`).
    scores_operands = scores.operands(vector_operands=False, open_sizes=True)
    if scores.fill is None or scores_operands is None:
        return None
    softmax = _softmax_after(scores, search)
    if softmax is None:
        return None
    values_op = _next_matmul(softmax.ops[-1])
    if values_op is None:
        return None
    values = MatmulSite.of(values_op)
    values_operands = values.operands(vector_operands=False, open_sizes=True)
    if values.fill is None or values_operands is None or buffer_root(values_op.operands[0]) != buffer_root(softmax.probabilities):
        return None
    if not _consistent(scores_operands, values_operands) or not _reshaped(values_op.operands[0]):
        return None
    reads = _reads(scores.op, values_op)
    if any(read is None for read in reads):
        return None
    scores_operands = replace(scores_operands, b_transposed=scores_operands.b_transposed != reads[1].swapped)
    values_operands = replace(values_operands, b_transposed=values_operands.b_transposed != reads[2].swapped)
    score_epilogue, score_scale = peel_softmax_scale(scores.epilogue)
    attention = AttentionOperands(scores_operands, values_operands, score_epilogue, values.epilogue,
                                  tuple(r.slice for r in reads), softmax.max_op, reads[0].scale, score_scale,
                                  sum(r.producer is not None for r in reads),
                                  _tile_contiguous(ir.MemRefType(values.output.type), -1))
    config = choose_flash_tile(attention, search.arch, search.tiles)
    chain = _Chain(scores, softmax, values, attention, config, reads)
    return chain if config and _only_chain_between(chain) and _temporaries_private(chain) else None


# ------------------------------------------------------------ reading Q, K, V
def _reads(scores: ir.Operation, values: ir.Operation) -> list[_Read | None]:
    """Q, K and V's reads: through the permuted copy each comes from where
    the kernel can take it over (Q's only unswapped), else as they are
    (None where a tile's rows are no whole 16-byte vectors)."""
    operands = [(scores, 0, True), (scores, 1, False), (values, 1, False)]
    reads = []
    for reader, index, is_query in operands:
        value = reader.operands[index]
        folded = _through_copy(value, reader, values, allow_scale=is_query)
        reads.append(folded if folded is not None and not (is_query and folded.swapped) else _plain_read(value))
    # Kᵀ read as it is, or not at all: written as K instead where it cannot be read, or was written transposing.
    if not b_is_transposed(scores) and (reads[1] is None or reads[1].producer is None):
        relaid = _relaid_keys(scores.operands[1], scores, values, only_transposing=reads[1] is not None)
        reads[1] = relaid or reads[1]
    return reads


def _plain_read(value: ir.Value) -> _Read | None:
    """A (batch, rows, cols) operand read as it is, if its rows are whole 16-byte vectors."""
    memref_type = ir.MemRefType(value.type)
    if not _tile_contiguous(memref_type, -1):
        return None
    found = _slice(memref_type, ("batch", "tile", "tile"))
    return None if found is None else _Read(value, found)


def _slice(memref_type: ir.MemRefType, dims: tuple[str, ...], heads: int = 1,
           group: int = 1) -> OperandSlice | None:
    """How a block finds its tile in an operand of this type (None where
    the tile's rows lie a run-time stride apart)."""
    strides, _ = memref_type.get_strides_and_offset()
    tiles = [d for d, name in enumerate(dims) if name == "tile"]
    if strides[tiles[0]] == ir.ShapedType.get_dynamic_stride_or_offset():
        return None
    return OperandSlice(tuple(memref_type.shape), dims, strides[tiles[0]], str(memref_type.element_type), heads,
                        group, str(memref_type))


def _through_copy(value: ir.Value, reader: ir.Operation, kernel_at: ir.Operation, allow_scale: bool) -> _Read | None:
    """The read of `value` from the source of the permuted copy that fills its
    buffer, if the copy can go: the buffer is a row-major allocation (batch,
    rows, cols) or (outer, heads, rows, cols) that only the copy writes and
    only this attention reads (through collapsing reshapes) while it holds
    the copy (another layer may reuse it before or after); the copy is a
    transpose, or a permuting generic yielding its input (times a constant,
    for Q); its source keeps the tile's last dim contiguous and 16-byte
    aligned; and nothing between the copy and the kernel (`kernel_at`) writes it."""
    copy = _collapsed_from(value)
    if copy is None:
        return None
    block_ops = [o.operation for o in reader.block.operations]
    producer = _last_writer_before(copy, reader, block_ops)
    if producer is None or kernel_at not in block_ops \
            or not _free_outside(copy, [producer, reader], block_ops, block_ops.index(producer),
                                 block_ops.index(kernel_at)):
        return None
    permuted = _permutation_source(producer, copy, allow_scale)
    if permuted is None:
        return None
    source, source_dims, scale = permuted
    copy_shape = ir.MemRefType(copy.type).shape
    repeating = len(source_dims) < len(copy_shape)
    names = (_REPEATING_COPY_DIMS if repeating else _COPY_DIMS)[len(copy_shape)]
    dims = tuple(names[d] for d in source_dims)
    tiles = [d for d in range(len(dims)) if dims[d] == "tile"]
    source_type = ir.MemRefType(source.type)
    if not _view_tile_contiguous(source, tiles[1]) or not _untouched_between(producer, kernel_at, source):
        return None
    heads = copy_shape[names.index("head")] if "head" in names else 1
    group = copy_shape[names.index("group")] if "group" in names else 1
    swapped = source_dims[tiles[0]] > source_dims[tiles[1]]
    found = _slice(source_type, dims, heads, group)
    return None if found is None else _Read(source, found, producer, copy, swapped, scale)


def _relaid_keys(value: ir.Value, reader: ir.Operation, kernel_at: ir.Operation,
                 only_transposing: bool = False) -> _Read | None:
    """Kᵀ (batch, D, keys), (outer, heads, D, keys), or with grouped KV
    heads repeated (outer, kv heads, group, D, keys), written whole by one
    all-parallel generic (a key projection's epilogue, a rotary embedding)
    or a transpose: read as K from a buffer (…, keys, D) that the op writes
    instead, if nothing but this attention reads Kᵀ while it holds it (as
    for `_through_copy`). Where Kᵀ's rows are whole 16-byte vectors (it
    could be read as it is: `only_transposing`), only if the op writes it
    transposing, its stores then as contiguous as its reads. A repeated
    K's three outer dims are the attention's batch, in order: the kernel
    reads it as (batch, keys, D)."""
    buffer = _collapsed_from(value)
    if buffer is None or len(ir.MemRefType(buffer.type).shape) not in (3, 4, 5) \
            or ir.ShapedType.is_dynamic_size(ir.MemRefType(buffer.type).shape[-2]):  # the head dim
        return None
    block_ops = [o.operation for o in reader.block.operations]
    producer = _last_writer_before(buffer, reader, block_ops)
    if producer is None or producer.name not in ("linalg.generic", "linalg.transpose") \
            or len(written_buffers(producer)) != 1 \
            or not _overwrites(producer, buffer) or kernel_at not in block_ops \
            or not _free_outside(buffer, [producer, reader], block_ops, block_ops.index(producer),
                                 block_ops.index(kernel_at)) \
            or (producer.name == "linalg.generic" and map_dims(indexing_maps(producer)[-1]) is None) \
            or (only_transposing and not _writes_transposing(producer)):
        return None
    keys_type = _batch_of_three(_transposed_type(ir.MemRefType(buffer.type)))
    rank = keys_type.rank
    dims = ("batch", "tile", "tile") if rank == 3 else ("outer", "head", "tile", "tile")
    found = _slice(keys_type, dims, keys_type.shape[1] if rank == 4 else 1)
    return None if found is None else _Read(None, found, copy=buffer, swapped=True, relaid=producer)


def _batch_of_three(memref_type: ir.MemRefType) -> ir.MemRefType:
    """A row-major (outer, kv heads, group, rows, cols) as (batch, rows, cols); other ranks as they are."""
    if memref_type.rank != 5:
        return memref_type
    *outer, rows, cols = memref_type.shape
    batch = ir.ShapedType.get_dynamic_size() if any(ir.ShapedType.is_dynamic_size(s) for s in outer) \
        else math.prod(outer)
    return ir.MemRefType.get([batch, rows, cols], memref_type.element_type, loc=ir.Location.unknown())


def _writes_transposing(producer: ir.Operation) -> bool:
    """Does the op store its output's innermost dim along what one of its
    inputs holds second-innermost, and read that input's innermost dim
    along the output's second-innermost (a transpose of the last two dims)?"""
    if producer.name == "linalg.transpose":
        permutation = list(ir.DenseI64ArrayAttr(producer.attributes["permutation"]))
        return permutation[-2:] == [len(permutation) - 1, len(permutation) - 2]
    *inputs, output = [map_dims(m) for m in indexing_maps(producer)]
    return output is not None and len(output) >= 2 and any(
        dims is not None and len(dims) >= 2 and dims[-1] == output[-2] for dims in inputs)


def _transposed_type(memref_type: ir.MemRefType) -> ir.MemRefType:
    """A row-major memref of `memref_type`'s shape with its last two dims swapped."""
    *outer, rows, cols = memref_type.shape
    return ir.MemRefType.get([*outer, cols, rows], memref_type.element_type, loc=ir.Location.unknown())


def _relay_keys(read: _Read) -> None:
    """Make `read.relaid` write K into a new buffer (allocated before it,
    of Kᵀ's sizes swapped; the caller frees it) instead of Kᵀ into
    `read.copy`: a transpose's permutation swaps its last two dims, a
    generic's loops over them trade places (`_swap_stored_loops`)."""
    producer = read.relaid
    keys_type = _transposed_type(ir.MemRefType(read.copy.type))
    with ir.InsertionPoint(producer), producer.location:
        # The head dim is static: the run-time sizes keep their order.
        keys = memref.AllocOp(keys_type, list(defining_op(read.copy).operands), []).result
    if producer.name == "linalg.transpose":
        permutation = list(ir.DenseI64ArrayAttr(producer.attributes["permutation"]))
        permutation[-2:] = permutation[:-3:-1]
        producer.attributes["permutation"] = ir.DenseI64ArrayAttr.get(permutation)
    else:
        _swap_stored_loops(producer)
    producer.operands[len(producer.operands) - 1] = keys
    if keys_type.rank == 5:  # the kernel reads the repeated heads as one batch dim
        with ir.InsertionPoint(producer), producer.location:
            keys = memref.collapse_shape(_batch_of_three(keys_type), keys, ir.ArrayAttr.get(
                [ir.ArrayAttr.get([ir.IntegerAttr.get(ir.IntegerType.get_signless(64), d) for d in group])
                 for group in ([0, 1, 2], [3], [4])]))
    read.argument = keys


def _swap_stored_loops(generic: ir.Operation) -> None:
    """Make an all-parallel generic writing Kᵀ write K into an output of its
    last two dims swapped: its loops over those two dims trade places
    (`permute_loops`) while its output map stays, so the innermost loop
    still runs along the output's rows, now K's (head dim)."""
    output_map = list(ir.ArrayAttr(generic.attributes["indexing_maps"]))[-1]
    stored = map_dims(ir.AffineMapAttr(output_map).value)
    order = list(range(len(stored)))
    order[stored[-2]], order[stored[-1]] = stored[-1], stored[-2]
    permute_loops(generic, order)
    maps = list(ir.ArrayAttr(generic.attributes["indexing_maps"]))
    generic.attributes["indexing_maps"] = ir.ArrayAttr.get([*maps[:-1], output_map])


def _last_writer_before(buffer: ir.Value, reader: ir.Operation, block_ops: list[ir.Operation]) -> ir.Operation | None:
    """The last op before `reader` in its block that writes `buffer`."""
    writers = [u for u in _view_users(buffer) if u in block_ops and u.name.startswith("linalg.")
               and block_ops.index(u) < block_ops.index(reader)
               and any(buffer_root(v) == buffer for v in written_buffers(u))]
    return max(writers, key=block_ops.index, default=None)


def _collapsed_from(value: ir.Value) -> ir.Value | None:
    """The row-major allocation (batch, r, c), (outer, heads, r, c) or
    (outer, kv heads, group, r, c) whose leading dims `value` (batch, r, c)
    collapses, else None."""
    root = value
    while (owner := defining_op(root)) is not None and owner.name == "memref.collapse_shape":
        root = owner.operands[0]
    owner = defining_op(root)
    if owner is None or owner.name != "memref.alloc" or not row_major(ir.MemRefType(root.type)):
        return None
    shape, collapsed = ir.MemRefType(root.type).shape, ir.MemRefType(value.type).shape
    return root if len(shape) in (3, 4, 5) and shape[-2:] == collapsed[-2:] else None


# The KV head's group in a copy repeating K or V for grouped heads: (outer,
# kv heads, group, rows, cols), or (kv heads, group, rows, cols).
_GROUP_DIM = {5: 2, 4: 1}
_COPY_DIMS = {3: ("batch", "tile", "tile"), 4: ("outer", "head", "tile", "tile"),
              5: ("outer", "head", "group", "tile", "tile")}
_REPEATING_COPY_DIMS = {4: ("head", "group", "tile", "tile"), 5: _COPY_DIMS[5]}


def _permutation_source(op: ir.Operation, copy: ir.Value, allow_scale: bool):
    """(source, the copy's dim each source dim is, scale or None) of a copy
    writing `copy` whole as a permutation of its one input (or one
    repeating the source along the KV head's group: dim 2 of a 5-D copy,
    dim 1 of a 4-D one whose unit batch dim is gone); else None."""
    rank = len(ir.MemRefType(copy.type).shape)
    if op.name == "linalg.transpose" and op.operands[1] == copy:
        permutation = list(ir.DenseI64ArrayAttr(op.attributes["permutation"]))
        return op.operands[0], tuple(permutation.index(d) for d in range(rank)), None
    if op.name != "linalg.generic" or len(op.opview.inputs) != 1 or op.opview.outputs[0] != copy:
        return None
    maps = indexing_maps(op)
    source_dims = map_dims(maps[0])
    repeating = [d for d in range(rank) if d != _GROUP_DIM.get(rank)]
    permuting = [list(range(rank))] if rank < 5 else []  # a 5-D copy only repeats: its group is no head of Q's
    if map_dims(maps[1]) != tuple(range(rank)) or source_dims is None \
            or sorted(source_dims) not in [repeating, *permuting]:
        return None
    body = describe_body(op)
    if body is None:
        return None
    if body[1] == ("arg", 0):
        return op.operands[0], source_dims, None
    scale = _scale(*body)
    return (op.operands[0], source_dims, scale) if allow_scale and scale is not None else None


def _scale(ops, result) -> float | None:
    """c of a body yielding input 0 times a constant c (each maybe cast), else None."""
    result = uncast(ops, result)
    if result[0] != "op" or ops[result[1]].name != "arith.mulf":
        return None
    operands = [uncast(ops, operand) for operand in ops[result[1]].operands]
    if ("arg", 0) not in operands:
        return None
    factor = operands[1 - operands.index(("arg", 0))]
    if factor[0] != "const" or not isinstance(factor[1].attributes["value"], ir.FloatAttr):
        return None
    return ir.FloatAttr(factor[1].attributes["value"]).value


def _tile_contiguous(source_type: ir.MemRefType, inner: int) -> bool:
    """The tile's inner dim has stride 1, and its rows start 16 bytes apart."""
    return vectors_fit(source_type, VECTOR_BYTES // element_bytes(str(source_type.element_type)), inner)


def _view_tile_contiguous(source: ir.Value, inner: int) -> bool:
    """`_tile_contiguous`, or proved from the views `source` is made of (a
    stride known only at run time: a slice of a projection's (B, S, 3·H·D) output)."""
    source_type = ir.MemRefType(source.type)
    width = VECTOR_BYTES // element_bytes(str(source_type.element_type))
    return _tile_contiguous(source_type, inner) or view_vectors_fit(source, width, inner)


def _untouched_between(producer: ir.Operation, kernel_at: ir.Operation, source: ir.Value) -> bool:
    """Between the copy and the kernel: only ops that touch no data,
    deallocations and linalg ops that write other buffers than `source`'s."""
    ops = [o.operation for o in producer.block.operations]
    if kernel_at not in ops or ops.index(producer) > ops.index(kernel_at):
        return False
    root = buffer_root(source)
    for op in ops[ops.index(producer) + 1:ops.index(kernel_at)]:
        if op.name == "memref.dealloc" or _touches_no_data(op):
            continue
        if not op.name.startswith("linalg.") or any(buffer_root(v) == root for v in written_buffers(op)):
            return False
    return True


def _consistent(scores, values) -> bool:
    """Q·Kᵀ (batch, Sq, Sk) and P·V (batch, Sq, D) of one attention, one element type."""
    return (scores.batch is not None and scores.batch == values.batch and scores.m == values.m
            and scores.n == values.k and scores.k == values.n and scores.in_element == values.in_element)


def _following(op: ir.Operation) -> list[ir.Operation]:
    """The ops after `op` in its block, those that touch no data passed over."""
    ops = [o.operation for o in op.block.operations]
    return [o for o in ops[ops.index(op) + 1:] if not _touches_no_data(o)]


def _touches_no_data(op: ir.Operation) -> bool:
    """An allocation, a view, or size arithmetic (sizes known at run time)."""
    arithmetic = op.name.startswith("arith.") or op.name in ("affine.apply", "affine.min", "affine.max")
    return op.name in ("memref.alloc", "memref.dim") or op.name in VIEW_OPS or \
        (arithmetic and not any(isinstance(v.type, ir.MemRefType) for v in op.operands))


def _next_matmul(op: ir.Operation) -> ir.Operation | None:
    """The batch_matmul right after `op` (its zero fill between)."""
    after = _following(op)[:2]
    return after[1] if len(after) == 2 and after[1].name == "linalg.batch_matmul" else None


def _reshaped(value: ir.Value) -> bool:
    """Is `value` its buffer (contiguous, row-major) or a reshape of it, so
    that its elements in row-major order are the buffer's?"""
    while (owner := defining_op(value)) is not None and owner.name in _RESHAPES:
        value = owner.operands[0]
    owner = defining_op(value)
    return owner is not None and owner.name == "memref.alloc" and row_major(ir.MemRefType(value.type))


def _softmax_after(scores: MatmulSite, search: _Search) -> _Softmax | None:
    """The row-wise softmax over the keys of the scores, right after their matmul."""
    last = scores.found.consumer if scores.found else scores.op
    after = _following(last)
    if not after or dispatch_kind(after[0]) is not DispatchKind.REDUCTION_ROWS:
        return None
    group = next((g for g in search.row_groups(after[0].block) if after[0] in g), None)
    ops = [o for o in group or [] if o.name != "memref.alloc"]
    if [o.name for o in ops] != ["linalg.fill", "linalg.generic"] * 2 + ["linalg.generic"]:
        return None
    return _match_softmax(ops, scores.output)


def _match_softmax(ops: list[ir.Operation], scores: ir.Value) -> _Softmax | None:
    """fill(-inf), max; fill(0), sum of exp(s - max); exp(s - max) / sum,
    each reading s as the scores (maybe widened), the division maybe narrowed."""
    max_fill, max_op, sum_fill, sum_op, divide = ops
    maximum, total = max_op.opview.outputs[0], sum_op.opview.outputs[0]
    if not (_fills(max_fill, maximum, float("-inf")) and _fills(sum_fill, total, 0.0)):
        return None
    names = {maximum: "max", total: "sum"}
    trees = [_tree(op, scores, names) for op in (max_op, sum_op, divide)]
    if None in trees or not _row_reduction(max_op) or not _row_reduction(sum_op):
        return None
    pre = _widening(trees[0])
    if pre is None or trees[0][0] not in MAX_OPS:
        return None
    exponential = ("math.exp", ("arith.subf", pre, "max"))
    quotient = ("arith.divf", exponential, "sum")
    if trees[1] not in (("arith.addf", exponential, "out"), ("arith.addf", "out", exponential)) \
            or trees[2] not in (quotient, ("arith.truncf", quotient)):
        return None
    probabilities = divide.opview.outputs[0]
    if map_dims(indexing_maps(divide)[-1]) != tuple(range(len(ir.MemRefType(probabilities.type).shape))) \
            or not _reshaped(probabilities):
        return None
    return _Softmax(ops, probabilities, [maximum, total], trees[0][0])


def _widening(max_tree: tuple) -> object | None:
    """The scores as the max reads them: s, or s widened (fp16)."""
    operands = [t for t in max_tree[1:] if t != "out"]
    if len(max_tree) != 3 or len(operands) != 1 or operands[0] not in ("s", ("arith.extf", "s")):
        return None
    return operands[0]


def _fills(fill: ir.Operation, buffer: ir.Value, value: float) -> bool:
    constant = defining_op(fill.operands[0])
    return (fill.operands[1] == buffer and constant is not None and constant.name == "arith.constant"
            and isinstance(constant.attributes["value"], ir.FloatAttr)
            and ir.FloatAttr(constant.attributes["value"]).value == value)


def _row_reduction(op: ir.Operation) -> bool:
    """Reduces the last loop dim only, into a buffer indexed by the others."""
    iterators = [str(it) for it in ir.ArrayAttr(op.attributes["iterator_types"])]
    rows = len(iterators) - 1
    return all("parallel" in it for it in iterators[:-1]) and "reduction" in iterators[-1] \
        and map_dims(indexing_maps(op)[-1]) == tuple(range(rows))


def _tree(op: ir.Operation, scores: ir.Value, names: dict) -> tuple | str | None:
    """The generic's yielded value as a nested tuple (op name, operands...),
    its inputs named: "s" (the scores, each element), "max" and "sum" (per
    row), "out" (the output's old value); None if an input is anything else."""
    body = describe_body(op)
    if body is None:
        return None
    ops, result = body
    maps, inputs = indexing_maps(op), list(op.opview.inputs)
    rows = maps[0].n_dims - 1
    leaves = {("arg", len(inputs)): "out"}
    for k, (value, affine_map) in enumerate(zip(inputs, maps)):
        dims = map_dims(affine_map)
        if buffer_root(value) == buffer_root(scores) and dims == tuple(range(rows + 1)) and _reads_scores(value, scores):
            leaves[("arg", k)] = "s"
        elif value in names and dims == tuple(range(rows)):
            leaves[("arg", k)] = names[value]
        else:
            return None

    def build(ref):
        if ref in leaves:
            return leaves[ref]
        if ref[0] == "op":
            return (ops[ref[1]].name, *(build(r) for r in ops[ref[1]].operands))
        return ref  # an index or a constant: never part of a softmax the kernel takes
    return build(result)


def _reads_scores(value: ir.Value, scores: ir.Value) -> bool:
    """A row-major reshape of the scores with the keys innermost (sizes
    known at run time: no reshape on the way groups the keys with another dim)."""
    memref_type, whole = ir.MemRefType(value.type), ir.MemRefType(scores.type)
    if not _reshaped(value) or memref_type.shape[-1] != whole.shape[-1]:
        return False
    if memref_type.has_static_shape and whole.has_static_shape:
        return math.prod(memref_type.shape) == math.prod(whole.shape)
    return _keys_kept_apart(value)


def _keys_kept_apart(value: ir.Value) -> bool:
    """Does every reshape from `value` to its buffer keep the last dim a group of its own?"""
    while (owner := defining_op(value)) is not None and owner.name in _RESHAPES:
        if len(reassociation(owner)[-1]) != 1:
            return False
        value = owner.operands[0]
    return True


def _only_chain_between(chain: _Chain) -> bool:
    """Between Q·Kᵀ and P·V (where the kernel goes), does every op that
    touches data go with the kernel?"""
    ops = [o.operation for o in chain.scores.op.block.operations]
    absorbed = chain.ops()
    return all(o in absorbed or _touches_no_data(o) for o in ops[ops.index(chain.scores.op):ops.index(chain.values.op)])


def _temporaries(chain: _Chain) -> list[ir.Value]:
    """The buffers that go with the kernel: the scores, P, the max and the sum."""
    found = []
    for value in [chain.scores.output, chain.softmax.probabilities, *chain.softmax.row_buffers]:
        if buffer_root(value) not in found:
            found.append(buffer_root(value))
    return found


def _temporaries_private(chain: _Chain) -> bool:
    """Is each temporary an allocation that nothing outside the chain uses
    while the chain's values live in it? Memory planning gives one buffer
    to several layers' attentions: uses before the chain are fine, and so
    are uses after it that start by overwriting the whole buffer."""
    absorbed = chain.ops()
    block_ops = [o.operation for o in chain.scores.op.block.operations]
    positions = [block_ops.index(op) for op in absorbed
                 if op in block_ops and op.name not in ("memref.alloc", "memref.dealloc")]
    for buffer in _temporaries(chain):
        owner = defining_op(buffer)
        if owner is None or owner.name != "memref.alloc" \
                or not _free_outside(buffer, absorbed, block_ops, min(positions), max(positions)):
            return False
    return True


def _free_outside(buffer: ir.Value, inside: list[ir.Operation], block_ops: list[ir.Operation], first: int,
                  last: int) -> bool:
    """Do the ops using `buffer` other than `inside` (views and deallocations
    aside) all come before block position `first`, or after `last` with the
    first of those overwriting it whole?"""
    others = [u for u in _view_users(buffer) if u not in inside and u.name not in ("memref.dealloc", *VIEW_OPS)]
    if any(u not in block_ops or first <= block_ops.index(u) <= last for u in others):
        return False
    after = sorted((u for u in others if block_ops.index(u) > last), key=block_ops.index)
    return not after or _overwrites(after[0], buffer)


def _overwrites(op: ir.Operation, buffer: ir.Value) -> bool:
    """Does `op` write every element of `buffer` without reading it first: a
    fill, or an all-parallel generic with an identity output map that
    neither takes the buffer as an input nor reads its output's old value?"""
    written = written_buffers(op) if op.name.startswith("linalg.") else []
    if len(written) != 1 or buffer_root(written[0]) != buffer \
            or math.prod(ir.MemRefType(written[0].type).shape) != math.prod(ir.MemRefType(buffer.type).shape):
        return False
    if op.name in ("linalg.fill", "linalg.transpose"):
        return True
    if op.name != "linalg.generic" or any(buffer_root(v) == buffer for v in op.opview.inputs):
        return False
    output_map = indexing_maps(op)[-1]
    iterators = [str(it) for it in ir.ArrayAttr(op.attributes["iterator_types"])]
    body = op.regions[0].blocks[0]
    old_value = body.arguments[len(body.arguments) - 1]
    return map_dims(output_map) == tuple(range(len(iterators))) and all("parallel" in it for it in iterators) \
        and not list(old_value.uses)


def _view_users(buffer: ir.Value) -> list[ir.Operation]:
    """The users of `buffer` and, through views, of its views (views included)."""
    users = []
    for user in users_of(buffer):
        users.append(user)
        if user.name in VIEW_OPS:
            users += _view_users(user.results[0])
    return users


# ------------------------------------------------------------ rewriting
def _replace(chain: _Chain, kernel: str) -> None:
    """The kernel, built in place of the P·V matmul; then the chain's ops
    and temporaries go. (A kernel that fails to build leaves them all.)"""
    values, scores = chain.values.kernel_operands(), chain.scores.kernel_operands()
    relaid = [read for read in chain.reads if read.relaid is not None]
    for read in relaid:
        _relay_keys(read)
    q, k, v = (read.argument for read in chain.reads)
    operands = AttentionKernelOperands(q, k, v, values.c, values.epilogue, values.captured, scores.epilogue,
                                       scores.captured)
    build_flash_attention(chain.values.op, kernel, chain.attention, chain.config, operands)
    with ir.InsertionPoint(chain.values.op), chain.values.op.location:
        for read in relaid:  # freed after the kernel, its last reader (the allocation under a collapsed view)
            argument = read.argument.owner
            collapsed = isinstance(argument, (ir.Operation, ir.OpView)) and argument.name == "memref.collapse_shape"
            memref.DeallocOp(argument.operands[0] if collapsed else read.argument)
    temporaries = _temporaries(chain)
    erase_site(chain.values)
    for op in reversed(chain.softmax.ops):
        op.erase()
    erase_site(chain.scores)
    for buffer in temporaries:
        _erase_buffer(buffer)
    for read in chain.reads:
        if read.producer is not None:
            read.producer.erase()
        if read.producer is not None or read.relaid is not None:
            _erase_buffer(read.copy)


def _erase_buffer(buffer: ir.Value) -> None:
    """Erase an allocation no kernel reads any more, with its views and
    deallocations; one that later ops still use (another layer's) stays."""
    if any(u.name not in ("memref.dealloc", *VIEW_OPS) for u in _view_users(buffer)):
        return
    for user in users_of(buffer):
        if user.name in VIEW_OPS:
            _erase_buffer(user.results[0])
        else:
            user.erase()
    defining_op(buffer).erase()
