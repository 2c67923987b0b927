"""concat-in-place: an elementwise op whose result is copied into a slice of
another buffer (a concatenation's piece) writes it there itself.

Bufferization gives each piece of a concatenation its own allocation and
copies it into the concatenated buffer: a copy step or a kernel each,
moving every piece once more. Where a piece is an allocation written only
by elementwise ops (`elementwise-through-concat` leaves the rotary
embedding's halves so), read by nothing else, and the copy is its last use,
the allocation becomes the slice, seen through the inverse reshapes, and
the copy goes. Between the allocation and the copy nothing may read the
target buffer, and nothing may write it but other pieces going to
disjoint slices (static subviews); an allocated target is moved up to
before the piece's allocation.
"""

from __future__ import annotations

from dataclasses import dataclass

from mlir import ir
from mlir.dialects import memref

from .ir_helpers import (RESHAPE_OPS, PythonPass, block_positions, buffer_root, defined_functions, defining_op,
                         identity_layout, ops_between, reassociation, reshape_aliases, users_of,
                         written_buffers)
from .outputs_in_place import reshapes_from_alloc

ELEMENTWISE_KIND = "elementwise"


@dataclass(frozen=True)
class _Piece:
    copy: ir.Operation
    chain: list[ir.Operation]        # reshapes from the piece's allocation to the copy's source
    allocation: ir.Operation
    target_views: list[ir.Operation]  # the subview of the target buffer, then reshapes, to the copy's target
    target: ir.Value                 # the target buffer (an allocation or an argument)


def _slice_chain(value: ir.Value) -> tuple[ir.Value, list[ir.Operation]] | None:
    """(buffer, [its static subview, reshapes...]) where `value` is one slice of a buffer seen through reshapes."""
    views = []
    while (owner := defining_op(value)) is not None and owner.name in RESHAPE_OPS:
        views.insert(0, owner)
        value = owner.operands[0]
    owner = defining_op(value)
    if owner is None or owner.name != "memref.subview" or len(owner.operands) != 1:
        return None  # not a subview, or one with run-time offsets or sizes
    if any(s != 1 for s in ir.DenseI64ArrayAttr(owner.attributes["static_strides"])):
        return None
    root = owner.operands[0]
    if buffer_root(root) != root:
        return None
    return root, [owner, *views]


def _box(subview: ir.Operation) -> list[tuple[int, int]]:
    return list(zip(ir.DenseI64ArrayAttr(subview.attributes["static_offsets"]),
                    ir.DenseI64ArrayAttr(subview.attributes["static_sizes"])))


def _disjoint(first: list[tuple[int, int]], second: list[tuple[int, int]]) -> bool:
    return any(a + n <= b or b + m <= a for (a, n), (b, m) in zip(first, second))


def _elementwise(op: ir.Operation) -> bool:
    return op.name == "linalg.generic" and "twintrack.dispatch_kind" in op.attributes \
        and ELEMENTWISE_KIND in str(op.attributes["twintrack.dispatch_kind"])


def _piece(copy: ir.Operation, position: dict) -> _Piece | None:
    source, target = copy.operands
    chain = reshapes_from_alloc(source)
    sliced = _slice_chain(target)
    if chain is None or sliced is None or not ir.MemRefType(source.type).has_static_shape:
        return None
    allocation = defining_op(chain[0].operands[0]) if chain else defining_op(source)
    buffer, target_views = sliced
    if allocation.block != copy.block or allocation.operands:
        return None
    if any(len(users_of(op.results[0])) != 1 for op in chain):
        return None  # the chain's views are the copy's alone (they go with it)
    for alias in reshape_aliases(allocation.results[0]):
        for user in users_of(alias):
            if user in chain or user == copy or user.name == "memref.dealloc":
                continue
            if not _elementwise(user) or user.block != copy.block or position[user] > position[copy]:
                return None  # viewed otherwise, used by another op, or after the copy
    piece = _Piece(copy, chain, allocation, target_views, buffer)
    return piece if _target_untouched(piece) else None


def _target_untouched(piece: _Piece) -> bool:
    """Whether, between the piece's allocation and its copy, the target
    buffer is only viewed, or written by ops whose slices of it are disjoint from the piece's."""
    box = _box(piece.target_views[0])
    for op in ops_between(piece.allocation, piece.copy):
        if op.regions and op.name != "linalg.generic":
            return False
        touching = [v for v in op.operands if isinstance(v.type, ir.MemRefType) and buffer_root(v) == piece.target]
        if not touching or op.name in ("memref.subview", *RESHAPE_OPS):
            continue
        written = written_buffers(op)
        for value in touching:
            sliced = _slice_chain(value)
            if value not in written or sliced is None or not _disjoint(_box(sliced[1][0]), box):
                return False
    return True


def _reshaped_type(collapse: bool, groups: list[list[int]], source_type: ir.MemRefType,
                   result_shape: list[int]) -> ir.MemRefType | None:
    """The type of a strided `source_type` collapsed or expanded by `groups`
    to `result_shape`; None where a group to collapse is not contiguous, or
    the result is 0-d."""
    strides, offset = source_type.get_strides_and_offset()
    shape, result_strides = list(source_type.shape), []
    for source_dim, group in enumerate(groups):
        if collapse:
            inner = [d for d in group if shape[d] != 1] or [group[-1]]
            if any(strides[a] != strides[b] * shape[b] for a, b in zip(inner, inner[1:])):
                return None
            result_strides.append(strides[inner[-1]])
            continue
        stride, group_strides = strides[source_dim], []
        for d in reversed(group):
            group_strides.insert(0, stride)
            stride *= result_shape[d]
        result_strides += group_strides
    if identity_layout(source_type):  # a row-major source's reshape is row-major (MLIR's inference)
        return ir.MemRefType.get(result_shape, source_type.element_type, None, source_type.memory_space)
    if not result_shape:
        return None  # a 0-d view of a slice: MLIR's layout for it is not the strided one (and one element is no copy)
    layout = ir.StridedLayoutAttr.get(offset, result_strides)
    return ir.MemRefType.get(result_shape, source_type.element_type, layout, source_type.memory_space)


def _inverse_view(reshape: ir.Operation, value: ir.Value) -> ir.Value | None:
    """`value` (strided, shaped as `reshape`'s result) reshaped back to the
    source's shape; None where its strides do not allow it."""
    source_shape = list(ir.MemRefType(reshape.operands[0].type).shape)
    collapse = reshape.name == "memref.expand_shape"  # an expansion is undone by a collapse
    result_type = _reshaped_type(collapse, reassociation(reshape), ir.MemRefType(value.type), source_shape)
    if result_type is None:
        return None
    groups = reshape.attributes["reassociation"]
    if collapse:
        return memref.CollapseShapeOp(result_type, value, groups).result
    return memref.ExpandShapeOp(result_type, value, groups, [], source_shape).result


def _target_before(piece: _Piece) -> bool:
    """Whether the target buffer is defined before the piece's allocation:
    an argument, or an allocation (of static sizes) moved up there."""
    owner = defining_op(piece.target)
    if owner is None:
        return True
    if owner.name != "memref.alloc" or owner.operands:
        return False
    _, position = block_positions(piece.allocation.block)
    if position[owner] > position[piece.allocation]:
        owner.move_before(piece.allocation)
    return True


def _slice_like_allocation(piece: _Piece) -> ir.Value | None:
    """The piece's slice of the target, seen as its allocation (the target's
    views, then the inverse of the allocation's reshapes), built before the
    allocation; None (nothing built) where the strides do not allow it."""
    built = []
    with ir.InsertionPoint(piece.allocation), piece.allocation.location:
        value = piece.target
        for view in piece.target_views:
            built.append(view.clone(ir.InsertionPoint(piece.allocation)))
            built[-1].operands[0] = value
            value = built[-1].results[0]
        for reshape in reversed(piece.chain):
            value = _inverse_view(reshape, value)
            if value is None:
                break
            built.append(defining_op(value))
    allocated = ir.MemRefType(piece.allocation.results[0].type).shape
    if value is None or list(ir.MemRefType(value.type).shape) != list(allocated):
        for op in reversed(built):
            op.erase()
        return None
    return value


def _write_in_place(piece: _Piece) -> bool:
    """The piece's allocation replaced by its slice of the target, and the
    copy gone; False (nothing changed but the target's place) where that cannot be."""
    if not _target_before(piece):
        return False
    value = _slice_like_allocation(piece)
    if value is None:
        return False
    for free in [u for u in users_of(piece.allocation.results[0]) if u.name == "memref.dealloc"]:
        free.erase()
    piece.copy.erase()
    for view in [*reversed(piece.chain), *reversed(piece.target_views)]:
        if not list(view.results[0].uses):
            view.erase()
    piece.allocation.results[0].replace_all_uses_with(value)
    piece.allocation.erase()
    return True


@dataclass(frozen=True)
class ConcatInPlace(PythonPass):
    name = "concat-in-place"

    def _run(self, module: ir.Operation, pass_) -> None:
        for func in defined_functions(module):
            block = func.regions[0].blocks[0]
            refused = []
            while (piece := _next_piece(block, refused)) is not None:
                if not _write_in_place(piece):
                    refused.append(piece.copy)


def _next_piece(block: ir.Block, refused: list[ir.Operation]) -> _Piece | None:
    ops, position = block_positions(block)
    candidates = (_piece(op, position) for op in ops if op.name == "memref.copy" and op not in refused)
    return next((piece for piece in candidates if piece is not None), None)
