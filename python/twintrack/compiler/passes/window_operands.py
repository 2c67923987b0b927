"""A matmul whose A is a convolution's patch matrix, written by the windows
op right before it (conv-as-matmul's im2col, after bufferization): the op
and its buffer, described so that the matmul kernel reads A straight from
the convolution's input (twintrack.compiler.kernels.window_read) and the
patch matrix is never written.

The windows op is a linalg.generic writing the patches (N, OH, OW, KH, KW,
C, collapsed to rows x cols) and reading one buffer X, either through its
indexing map (a strided window, no padding) or by a load in its body,
guarded where the window reads padding (fold-patch-padding's form):

    patch[l…] = select(inside(l…), X[indices(l…)], 0)   (casts around it allowed)
"""

from __future__ import annotations

from dataclasses import dataclass

from mlir import ir

from ..kernels.epilogue import BodyOp, Ref, uncast
from ..kernels.matmul_common import VECTOR_BYTES, element_bytes
from ..kernels.window_read import WindowRead
from .generic_body import describe_body, indexing_maps, uses_dim
from .ir_helpers import (RESHAPE_OPS, block_positions, buffer_root, defining_op, is_zero_constant, nested_ops,
                         reassociation, reshape_aliases, users_of, vectors_fit, written_between)


@dataclass(frozen=True)
class FoundWindow:
    read: WindowRead
    source: ir.Value                 # X, what the kernel reads A from
    absorbed: list[ir.Operation]     # the windows op, the patch buffer and its views: gone with the matmul


def window_operand(matmul: ir.Operation) -> FoundWindow | None:
    """The windows op writing the matmul's A, if the kernel can read A through it; else None.

    The patch buffer may serve several convolutions in turn (bufferization
    reuses it): the windows op must be the last access to it before the
    matmul, and the next access after it a write (or its dealloc), so no
    one else reads these patches."""
    if matmul.name != "linalg.matmul":
        return None
    collapse = defining_op(matmul.operands[0])
    if collapse is None or collapse.name != "memref.collapse_shape":
        return None
    found_rows = _patch_rows(collapse)
    if found_rows is None:
        return None
    patches, rows, views = found_rows
    allocation = defining_op(patches)
    if allocation is None or allocation.name != "memref.alloc":
        return None
    accesses = _accesses(patches, matmul.block)
    if accesses is None:
        return None
    at = accesses.index(matmul)
    windows = accesses[at - 1] if at else None
    after = accesses[at + 1] if at + 1 < len(accesses) else None
    if windows is None or windows.name != "linalg.generic" or not _overwrites(after, patches):
        return None
    found = _described(windows, patches, rows)
    if found is None or written_between(windows, matmul, buffer_root(found[1])):
        return None
    absorbed = [windows]
    reader = matmul
    for view in (collapse, *views):  # each view read only by the op after it goes with them
        if users_of(view.results[0]) != [reader]:
            return FoundWindow(found[0], found[1], absorbed)
        absorbed.append(view)
        reader = view
    if len(accesses) == 2:  # the buffer's only use: it goes
        absorbed += [u for u in users_of(patches) if u.name == "memref.dealloc"] + [allocation]
    return FoundWindow(found[0], found[1], absorbed)


def _patch_rows(collapse: ir.Operation) -> tuple[ir.Value, int, list[ir.Operation]] | None:
    """(the patch buffer A collapses, how many of its leading dims make A's
    rows, the views between them): the collapse's source, or the buffer an
    expand_shape of it views (a pointwise convolution's patches, written
    without their unit window dims) where the rows end at one of its groups."""
    rows = _row_dims(collapse)
    if rows is None:
        return None
    patches = collapse.operands[0]
    expand = defining_op(patches)
    if expand is None or expand.name != "memref.expand_shape":
        return patches, rows, []
    source_rows = _source_dims_before(reassociation(expand), ir.MemRefType(patches.type).shape, rows)
    return (expand.operands[0], source_rows, [expand]) if source_rows is not None else None


def _source_dims_before(groups: list[list[int]], shape: list[int], dims: int) -> int | None:
    """How many source dims of an expand_shape (its `groups`, into `shape`)
    make its first `dims` result dims, where a group split between them has
    only unit dims on one side; None where one does not."""
    for index, group in enumerate(groups):
        before = [shape[d] for d in group if d < dims]
        after = [shape[d] for d in group if d >= dims]
        if not after:
            continue
        if not before:
            return index
        if all(size == 1 for size in after):
            return index + 1
        return index if all(size == 1 for size in before) else None
    return len(groups)


def _accesses(buffer: ir.Value, block: ir.Block) -> list[ir.Operation] | None:
    """The ops of `block` reading or writing `buffer` (through reshapes, or
    inside them: a kernel built before), in order, deallocs aside; None if
    one is outside `block`."""
    _, position = block_positions(block)
    accesses = set()
    for user in (u for alias in reshape_aliases(buffer) for u in users_of(alias)):
        if user.name in RESHAPE_OPS or user.name == "memref.dealloc":
            continue
        while user.block != block:
            parent = user.parent
            if parent is None:
                return None
            user = parent.operation
        accesses.add(user)
    return sorted(accesses, key=lambda user: position[user])


def _overwrites(op: ir.Operation | None, buffer: ir.Value) -> bool:
    """Is `op` (the next access to `buffer`) absent, or a linalg.generic
    writing all of it without reading it?"""
    if op is None:
        return True
    if op.name != "linalg.generic" or op.operands[-1] != buffer or len(op.results):
        return False
    maps = indexing_maps(op)
    reads_it = any(v == buffer for v in op.operands[:-1]) or list(op.regions[0].blocks[0].arguments[-1].uses)
    return maps[-1] == ir.AffineMap.get_identity(maps[-1].n_dims) and not reads_it


def _row_dims(collapse: ir.Operation) -> int | None:
    """How many leading dims of the patches make A's rows (two groups, in order), or None."""
    groups = reassociation(collapse)
    if len(groups) != 2 or groups[0] + groups[1] != list(range(len(groups[0]) + len(groups[1]))):
        return None
    return len(groups[0])


def _described(windows: ir.Operation, patches: ir.Value, rows: int) -> tuple[WindowRead, ir.Value] | None:
    """(the read, X) of a windows op writing all of `patches` as a copy of X's elements or zeros."""
    maps = indexing_maps(windows)
    inputs = len(windows.operands) - 1
    if len(windows.results) or windows.operands[-1] != patches or maps[-1] != ir.AffineMap.get_identity(maps[-1].n_dims) \
            or any("parallel" not in str(t) for t in windows.attributes["iterator_types"]) or inputs > 1 \
            or list(windows.regions[0].blocks[0].arguments[inputs].uses):
        return None
    captured: list[ir.Value] = []
    body = describe_body(windows, captured=captured)
    if body is None:
        return None
    ops, result = body
    shape = list(ir.MemRefType(patches.type).shape)
    sizes = dict(row_sizes=tuple(shape[:rows]), col_sizes=tuple(shape[rows:]))
    if inputs == 1:  # a strided window: X read through the map, copied
        source = windows.operands[0]
        if uncast(ops, result) != ("arg", 0) or captured:
            return None
        read = WindowRead(str(source.type), **sizes, index_map=maps[0])
    else:
        gathered = _gather(ops, result)
        if gathered is None or len(captured) != 1:
            return None
        source = captured[0]
        read = WindowRead(str(source.type), **sizes, ops=ops, indices=gathered[0], inside=gathered[1])
    element = ir.MemRefType(source.type).element_type
    if element != ir.MemRefType(patches.type).element_type or not _chunks_contiguous(read, source, element):
        return None
    return read, source


def _gather(ops: tuple[BodyOp, ...], result: Ref) -> tuple[tuple[Ref, ...], Ref | None] | None:
    """(the load's indices, the inside condition or None) of a body
    yielding a loaded element or a select of it against zero."""
    value, inside = uncast(ops, result), None
    if value[0] == "op" and ops[value[1]].name == "arith.select":
        inside, picked, other = ops[value[1]].operands
        other = uncast(ops, other)
        if other[0] != "const" or not is_zero_constant(other[1]):
            return None
        value = uncast(ops, picked)
    if value[0] != "op" or ops[value[1]].name != "memref.load":
        return None
    buffer, *indices = ops[value[1]].operands
    return (tuple(indices), inside) if buffer == ("captured", 0) else None


def _chunks_contiguous(read: WindowRead, source: ir.Value, element: ir.Type) -> bool:
    """Are A's 16-byte chunks (consecutive innermost loop indices from a
    multiple of the chunk) consecutive, aligned elements of X? The innermost
    loop must index X's innermost dim and nothing else."""
    chunk = VECTOR_BYTES // element_bytes(str(element))
    innermost = len(read.row_sizes) + len(read.col_sizes) - 1
    if read.col_sizes[-1] % chunk or not vectors_fit(ir.MemRefType(source.type), chunk):
        return False
    if read.index_map is not None:
        *outer, last = read.index_map.results
        return last == ir.AffineDimExpr.get(innermost) and not any(
            uses_dim(e, innermost) for e in outer)
    if read.indices[-1] != ("index", innermost) and not _is_loop(read, read.indices[-1], innermost):
        return False
    return not any(_depends_on(read.ops, ref, innermost) for ref in (*read.indices[:-1], read.inside) if ref)


def _is_loop(read: WindowRead, ref: Ref, dim: int) -> bool:
    """Is `ref` the body's linalg.index of loop `dim`?"""
    return ref[0] == "op" and read.ops[ref[1]].name == "linalg.index" and read.ops[ref[1]].operands[0] == ("index", dim)


def _depends_on(ops: tuple[BodyOp, ...], ref: Ref, dim: int) -> bool:
    """Is `ref` computed from loop index `dim`?"""
    pending = [ref]
    while pending:
        ref = pending.pop()
        if ref == ("index", dim):
            return True
        if ref[0] == "op":
            pending += ops[ref[1]].operands
    return False
