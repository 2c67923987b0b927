"""elementwise-through-concat: an elementwise op reading a concatenation
computes each part of its result from that part's piece, and its results
are concatenated instead.

A concatenation copies its pieces into one buffer (a copy step or a kernel
each) before the op reads it, and a piece some op computed (the rotary
embedding's `cat((-x2, x1), -1)`: a negation) is a kernel of its own
besides. Split at the pieces, each part of the op reads its piece where it
lies, fusion folds the piece's producer into that part, and only the op's
results are concatenated (which `concat-in-place` then has their kernels
write where they go). Likewise an elementwise op whose result is read
only through slices computes each slice from slices of its operands, so
each part fuses with its reader. The rotary embedding of a LLaMA layer,
`x * cos + cat((-x2, x1)) * sin`, becomes two kernels, one per half, where
it was a negation kernel, a copy per piece and a kernel.

Taken where the concatenation has one user, reached through reshapes that
keep the concatenated dim whole, and that user is a linalg.generic of
parallel loops reading it as an input whose concatenated dim is a loop of
its own; every other operand has that loop as one plain dim or not at all,
every result has it, the body computes something (`_moves_only`), reads
no output's old value and no index of that loop, and there are at most
MAX_PIECES pieces (each part is a kernel), none empty.

A sliced op must be all parallel loops with one result that names each
loop once, operands indexed by plain loops or constants, and every use of
its result a static slice of unit strides.
"""

from __future__ import annotations

from dataclasses import dataclass

from mlir import ir

from .generic_body import indexing_maps, uses_dim
from .ir_helpers import PythonPass, defining_op, erase_if_unused, nested_ops, reassociation, users_of

MAX_PIECES = 4
RESHAPES = ("tensor.collapse_shape", "tensor.expand_shape")


@dataclass(frozen=True)
class _Site:
    concat: ir.Operation
    views: list[ir.Operation]     # the reshapes from the concatenation to the generic, in order
    view_dims: list[int]          # the concatenated dim in each view's result
    generic: ir.Operation
    operand: int                  # the generic's operand that reads the concatenation
    places: list[int | None]      # each operand's dim indexed by the split loop (None: not indexed by it)


def _dim_through(view: ir.Operation, dim: int) -> int | None:
    """The concatenated dim `dim` of a reshape's source in its result, where it stays a dim of its own."""
    groups = reassociation(view)
    for position, group in enumerate(groups):
        if view.name == "tensor.collapse_shape" and dim in group:
            return position if group == [dim] else None
        if view.name == "tensor.expand_shape" and position == dim:
            return group[0] if len(group) == 1 else None
    return None


def _plain_place(affine_map: ir.AffineMap, loop: int) -> tuple[bool, int | None]:
    """(usable, the result position indexed by `loop` alone); unusable where
    the loop appears inside a compound expression or twice."""
    places = []
    for position, expr in enumerate(affine_map.results):
        expr = expr.maybe_downcast()
        if isinstance(expr, ir.AffineDimExpr) and expr.position == loop:
            places.append(position)
        elif not isinstance(expr, ir.AffineDimExpr) and uses_dim(expr, loop):
            return False, None
    if len(places) > 1:
        return False, None
    return True, (places[0] if places else None)


def _reader(concat: ir.Operation) -> tuple[ir.Operation, int, list, list, int] | None:
    """(the op reading the concatenation, its operand, the reshapes between,
    the concatenated dim after each, that dim as the op reads it), where
    the concatenation has one reader through reshapes keeping that dim whole."""
    dim = ir.IntegerAttr(concat.attributes["dim"]).value
    value, views, view_dims = concat.results[0], [], []
    while True:
        uses = list(value.uses)
        if len(uses) != 1:
            return None
        user = users_of(value)[0]
        if user.name not in RESHAPES:
            return user, uses[0].operand_number, views, view_dims, dim
        dim = _dim_through(user, dim)
        if dim is None or not ir.RankedTensorType(user.results[0].type).has_static_shape:
            return None
        views.append(user)
        view_dims.append(dim)
        value = user.results[0]


def _splittable(generic: ir.Operation, operand: int, dim: int) -> list[int | None] | None:
    """Each operand's dim indexed by the loop that reads `dim` of the
    concatenation (None: not indexed by it), where the generic can be split
    along that loop (module docstring); else None."""
    if generic.name != "linalg.generic" \
            or any("parallel" not in str(t) for t in ir.ArrayAttr(generic.attributes["iterator_types"])):
        return None
    inputs = len(generic.operands) - len(generic.results)
    maps = indexing_maps(generic)
    expr = maps[operand].results[dim].maybe_downcast() if operand < inputs else None
    if not isinstance(expr, ir.AffineDimExpr):
        return None
    loop = expr.position
    places = []
    for affine_map in maps:
        usable, place = _plain_place(affine_map, loop)
        if not usable:
            return None
        places.append(place)
    body = generic.regions[0].blocks[0]
    if any(place is None for place in places[inputs:]) \
            or any(list(argument.uses) for argument in list(body.arguments)[inputs:]) \
            or _moves_only(body) \
            or nested_ops(generic, lambda op: op.name == "linalg.index"
                          and ir.IntegerAttr(op.attributes["dim"]).value == loop):
        return None
    return places


def _site(concat: ir.Operation) -> _Site | None:
    pieces = [ir.RankedTensorType(p.type) for p in concat.operands]
    dim = ir.IntegerAttr(concat.attributes["dim"]).value
    if not 2 <= len(pieces) <= MAX_PIECES or not all(p.has_static_shape and p.shape[dim] > 0 for p in pieces):
        return None
    reader = _reader(concat)
    if reader is None:
        return None
    generic, operand, views, view_dims, read_dim = reader
    places = _splittable(generic, operand, read_dim)
    return None if places is None else _Site(concat, views, view_dims, generic, operand, places)


def _moves_only(body: ir.Block) -> bool:
    """Whether a generic's body yields block arguments and computes nothing
    (a copy, a transpose, a repeat: its concatenation is better written in
    place by the pieces' producers, and the attention kernels read through it)."""
    ops = [op.operation for op in body.operations]
    return len(ops) == 1 and all(isinstance(v, ir.BlockArgument) for v in ops[0].operands)


def _sliced(value: ir.Value, place: int, offset: int, size: int) -> ir.Value:
    from mlir.dialects import tensor
    shape = list(ir.RankedTensorType(value.type).shape)
    offsets, sizes = [0] * len(shape), list(shape)
    offsets[place], sizes[place] = offset, size
    result = ir.RankedTensorType.get(sizes, ir.RankedTensorType(value.type).element_type)
    return tensor.extract_slice(result, value, [], [], [], offsets, sizes, [1] * len(shape))


def _with_size(value_type: ir.Type, place: int, size: int) -> ir.RankedTensorType:
    t = ir.RankedTensorType(value_type)
    shape = list(t.shape)
    shape[place] = size
    return ir.RankedTensorType.get(shape, t.element_type)


def _reshaped(piece: ir.Value, site: _Site, size: int) -> ir.Value:
    """The piece through the site's reshapes, each result `size` long in the concatenated dim."""
    from mlir.dialects import tensor
    for view, dim in zip(site.views, site.view_dims):
        result = _with_size(view.results[0].type, dim, size)
        if view.name == "tensor.collapse_shape":
            piece = tensor.collapse_shape(result, piece, reassociation(view))
        else:
            piece = tensor.expand_shape(result, piece, reassociation(view), [], list(result.shape))
    return piece


def _clone_with(generic: ir.Operation, operands: list[ir.Value], result_types: list[ir.Type],
                before: ir.Operation) -> ir.Operation:
    """The generic again, before `before`, on `operands`, its results of `result_types`."""
    clone = generic.clone(ir.InsertionPoint(before))
    for k, operand in enumerate(operands):
        clone.operands[k] = operand
    for result, result_type in zip(clone.results, result_types):
        result.set_type(result_type)
    return clone


def _part(site: _Site, piece: ir.Value, offset: int, size: int) -> ir.Operation:
    """The site's generic over the piece's part of the split loop, built before it."""
    from mlir.dialects import tensor
    generic = site.generic
    inputs = len(generic.operands) - len(generic.results)
    operands, result_types = list(generic.operands), []
    for k, operand in enumerate(operands):
        place = site.places[k]
        if k == site.operand:
            operands[k] = _reshaped(piece, site, size)
        elif k >= inputs:
            result_types.append(_with_size(operand.type, place, size))
            operands[k] = tensor.empty(list(result_types[-1].shape), result_types[-1].element_type)
        elif place is not None:
            operands[k] = _sliced(operand, place, offset, size)
    return _clone_with(generic, operands, result_types, generic)


def _split(site: _Site) -> None:
    """The site's generic computed per piece, its results concatenated (module docstring)."""
    from mlir.dialects import tensor
    generic, concat = site.generic, site.concat
    concat_dim = ir.IntegerAttr(concat.attributes["dim"]).value
    inputs = len(generic.operands) - len(generic.results)
    parts, offset = [], 0
    with ir.InsertionPoint(generic), generic.location:
        for piece in concat.operands:
            size = ir.RankedTensorType(piece.type).shape[concat_dim]
            parts.append(_part(site, piece, offset, size))
            offset += size
        for r, result in enumerate(list(generic.results)):
            joined = tensor.concat(result.type, site.places[inputs + r], [part.results[r] for part in parts])
            result.replace_all_uses_with(joined)
    old_outputs = [generic.operands[k] for k in range(inputs, len(generic.operands))]
    generic.erase()
    for view in reversed(site.views):
        view.erase()
    concat.erase()
    for output in old_outputs:
        erase_if_unused(defining_op(output))


def _sliceable(generic: ir.Operation) -> list[ir.Operation] | None:
    """The slices an elementwise generic's result is read through, where
    each can be computed alone (module docstring), else None."""
    if generic.name != "linalg.generic" or len(generic.results) != 1 \
            or any("parallel" not in str(t) for t in ir.ArrayAttr(generic.attributes["iterator_types"])):
        return None
    maps = indexing_maps(generic)
    output_loops = [_loop_of(e) for e in maps[-1].results]
    if None in output_loops or sorted(output_loops) != list(range(maps[-1].n_dims)):
        return None  # the result names each loop once (a permutation)
    if any(_loop_of(e) is None and not isinstance(e.maybe_downcast(), ir.AffineConstantExpr)
           for m in maps[:-1] for e in m.results):
        return None
    body = generic.regions[0].blocks[0]
    if list(list(body.arguments)[-1].uses) or nested_ops(generic, lambda op: op.name == "linalg.index"):
        return None
    slices = users_of(generic.results[0])
    if not slices or any(not _static_unit_slice(op) for op in slices) or _overlap(slices):
        return None
    return slices


def _overlap(slices: list[ir.Operation]) -> bool:
    """Whether two of the slices share an element (computing each alone would compute it twice)."""
    boxes = [list(zip(ir.DenseI64ArrayAttr(op.attributes["static_offsets"]),
                      ir.DenseI64ArrayAttr(op.attributes["static_sizes"]))) for op in slices]
    return any(all(a0 < b0 + bn and b0 < a0 + an for (a0, an), (b0, bn) in zip(first, second))
               for i, first in enumerate(boxes) for second in boxes[i + 1:])


def _loop_of(expr: ir.AffineExpr) -> int | None:
    expr = expr.maybe_downcast()
    return expr.position if isinstance(expr, ir.AffineDimExpr) else None


def _static_unit_slice(op: ir.Operation) -> bool:
    if op.name != "tensor.extract_slice" or len(op.operands) != 1:
        return False  # run-time offsets or sizes
    strides = ir.DenseI64ArrayAttr(op.attributes["static_strides"])
    result = ir.RankedTensorType(op.results[0].type)
    return all(s == 1 for s in strides) and result.rank == ir.RankedTensorType(op.operands[0].type).rank


def _slice_computed(generic: ir.Operation, slice_op: ir.Operation) -> None:
    """`slice_op` of the generic's result replaced by the generic on slices of its operands."""
    from mlir.dialects import tensor
    maps = indexing_maps(generic)
    offsets = list(ir.DenseI64ArrayAttr(slice_op.attributes["static_offsets"]))
    sizes = list(ir.DenseI64ArrayAttr(slice_op.attributes["static_sizes"]))
    loop_range = {_loop_of(e): (offsets[p], sizes[p]) for p, e in enumerate(maps[-1].results)}
    with ir.InsertionPoint(slice_op), slice_op.location:
        operands = []
        for operand, affine_map in zip(list(generic.operands)[:-1], maps[:-1]):
            ranges = [loop_range.get(_loop_of(e)) for e in affine_map.results]
            shape = list(ir.RankedTensorType(operand.type).shape)
            if all(r is None or r == (0, shape[p]) for p, r in enumerate(ranges)):
                operands.append(operand)
                continue
            element = ir.RankedTensorType(operand.type).element_type
            starts = [0 if r is None else r[0] for r in ranges]
            lengths = [shape[p] if r is None else r[1] for p, r in enumerate(ranges)]
            operands.append(tensor.extract_slice(ir.RankedTensorType.get(lengths, element), operand, [], [], [],
                                                 starts, lengths, [1] * len(lengths)))
        result_type = ir.RankedTensorType(slice_op.results[0].type)
        operands.append(tensor.empty(list(result_type.shape), result_type.element_type))
    part = _clone_with(generic, operands, [result_type], slice_op)
    slice_op.results[0].replace_all_uses_with(part.results[0])
    slice_op.erase()


def _slice_producers(module: ir.Operation) -> bool:
    """Each elementwise generic read only through slices computed per slice,
    all those of one walk in turn (the parts they become are looked at by
    the next: looking again after each made the pass quadratic, 13 s of a
    GPU compile of six sorting networks); whether one was."""
    sliced, inits = 0, {}
    for generic in nested_ops(module, lambda op: op.name == "linalg.generic"):
        slices = _sliceable(generic)
        if slices is None:
            continue
        for slice_op in slices:
            _slice_computed(generic, slice_op)
        init = defining_op(generic.operands[-1])
        inits.pop(generic, None)  # an earlier one's init, erased here
        if init is not None:
            inits[init] = None
        generic.erase()
        sliced += 1
    for init in inits:  # after the walk: an init several share stays while one of them reads it
        erase_if_unused(init)
    return sliced > 0


@dataclass(frozen=True)
class ElementwiseThroughConcat(PythonPass):
    name = "elementwise-through-concat"

    def _run(self, module: ir.Operation, pass_) -> None:
        # The IR changes with each rewrite: look again (a joined result may feed another elementwise op).
        while True:
            sites = [s for s in map(_site, nested_ops(module, lambda op: op.name == "tensor.concat")) if s is not None]
            if sites:
                _split(sites[0])
            elif not _slice_producers(module):
                return
