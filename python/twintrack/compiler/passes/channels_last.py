"""channels-last: activations between convolutions stay in the layout the
convolution's matmul writes (batch, spatial…, channels), instead of going
back to torch's channels-first layout after every convolution.

conv-as-matmul ends each convolution with an op (marked
`twintrack.channels_last`) that reads the matmul's result (n, o…, f)
through a permutation of its loops and writes it channels-first. Three
rewrites, in program order, carry that layout on from there:
- write in place: an elementwise linalg.generic that reads a channels-last
  tensor through a permutation of its loops, and whose result only
  generics (or zero pads) read, writes its result in that layout (a
  channels-last tensor too), followed by a transpose back;
- absorb: a linalg.generic reading a transpose reads the transpose's input
  instead, its indexing map composed with the permutation (the transpose
  goes when nothing else reads it);
- pad: a tensor.pad of a transpose pads the transpose's input (the
  padding permuted) and is transposed after.
Function arguments a transpose reads (a channels-last image or weight,
taken as stored) carry their layout on as a convolution's result does.
Other tensors no convolution wrote keep their layouts (attention's heads,
say: the attention kernel reads them as they are).
Each keeps the loops and what every element computes; only where values
live changes. A transpose is left where its reader is not a generic (a
function result, a named pooling op): there the tensor is copied into
torch's layout once. So batch norm, activations and residual adds run
channels-last, the next convolution's patches read channels-last (a 1x1
convolution's patches are its input), and the matmul's epilogue stores
whole vectors of channels.
"""

from __future__ import annotations

from dataclasses import dataclass

from mlir import ir

from .conv_as_matmul import CHANNELS_LAST_ATTR
from .generic_body import indexing_maps
from .ir_helpers import PythonPass, defining_op, erase_if_unused, is_zero_constant, nested_ops
from .patch_padding import WINDOWS_ATTR, constant_pad


def _is_transpose(value: ir.Value) -> ir.Operation | None:
    op = defining_op(value)
    return op if op is not None and op.name == "linalg.transpose" else None


def _permutation(transpose: ir.Operation) -> list[int]:
    """Output dim i of the transpose is input dim permutation[i]."""
    return list(ir.DenseI64ArrayAttr(transpose.attributes["permutation"]))


def _through(reading: ir.AffineMap, permutation: list[int]) -> ir.AffineMap:
    """The map reading a transpose's input where `reading` read its output."""
    results = [None] * len(permutation)
    for output_dim, input_dim in enumerate(permutation):
        results[input_dim] = reading.results[output_dim]
    return ir.AffineMap.get(reading.n_dims, reading.n_symbols, results)


def _set_maps(generic: ir.Operation, maps: list[ir.AffineMap]) -> None:
    generic.attributes["indexing_maps"] = ir.ArrayAttr.get([ir.AffineMapAttr.get(m) for m in maps])


def _absorb(generic: ir.Operation, channels_last: set) -> None:
    """Read each input that is a transpose of a channels-last tensor through it."""
    maps = indexing_maps(generic)
    inputs = len(generic.operands) - len(generic.results)
    changed = False
    for index in range(inputs):
        transpose = _is_transpose(generic.operands[index])
        if transpose is None or transpose.operands[0] not in channels_last:
            continue
        maps[index] = _through(maps[index], _permutation(transpose))
        generic.operands[index] = transpose.operands[0]
        changed = True
    if changed:
        _set_maps(generic, maps)


def _permuted_dims(affine_map: ir.AffineMap) -> list[int] | None:
    """The loop dims of a map that is a permutation of all its loops, in result order; None for another map."""
    dims = [r.position if isinstance(r, ir.AffineDimExpr) else None for r in affine_map.results]
    if None in dims or sorted(dims) != list(range(affine_map.n_dims)):
        return None
    return dims


def _readers_take_layouts(value: ir.Value) -> bool:
    """Does only what can read through a transpose read `value`: generics
    (as inputs) and zero pads whose readers can?"""
    uses = list(value.uses)
    if not uses:
        return False
    for use in uses:
        owner = use.owner.operation if isinstance(use.owner, ir.OpView) else use.owner
        if owner.name == "linalg.generic":
            if use.operand_number >= len(owner.operands) - len(owner.results):
                return False  # an output's old value
        elif owner.name == "tensor.pad":
            if not _readers_take_layouts(owner.results[0]):
                return False
        else:
            return False
    return True


def _write_in_layout(generic: ir.Operation, channels_last: set) -> None:
    """An elementwise generic reading a tensor through a permutation of
    its loops writes its result in that layout, and a transpose back
    stands where its result was (module docstring)."""
    from mlir.dialects import linalg, tensor
    if len(generic.results) != 1 or any("reduction" in str(it) for it in generic.attributes["iterator_types"]):
        return
    maps = indexing_maps(generic)
    output_map, result = maps[-1], generic.results[0]
    if output_map != ir.AffineMap.get_identity(output_map.n_dims) or not _readers_take_layouts(result):
        return
    inputs = len(generic.operands) - 1
    layouts = [_permuted_dims(maps[i]) if generic.operands[i] in channels_last else None for i in range(inputs)]
    layout = next((dims for dims in layouts if dims is not None and dims != sorted(dims)), None)
    if layout is None:
        return
    init = generic.operands[-1]
    if list(generic.regions[0].blocks[0].arguments[-1].uses):
        return  # the body reads the output's old value
    shape, element = result.type.shape, result.type.element_type
    users = list(result.uses)
    with generic.location:
        with ir.InsertionPoint(generic):
            generic.operands[inputs] = tensor.empty([shape[d] for d in layout], element)
        result.set_type(ir.RankedTensorType.get([shape[d] for d in layout], element))
        _set_maps(generic, maps[:-1] + [ir.AffineMap.get(output_map.n_dims, 0,
                                                         [ir.AffineDimExpr.get(d) for d in layout])])
        back = [layout.index(d) for d in range(len(layout))]  # the original's dim d is dim back[d] here
        with ir.InsertionPoint.after(generic):
            transposed = linalg.transpose(result, outs=[tensor.empty(list(shape), element)], permutation=back).results[0]
    for use in users:
        owner = use.owner.operation if isinstance(use.owner, ir.OpView) else use.owner
        owner.operands[use.operand_number] = transposed
    channels_last.add(result)
    erase_if_unused(defining_op(init))


def _pad_before_transpose(pad: ir.Operation, channels_last: set) -> None:
    """pad(transpose(x)) -> transpose(pad'(x)), the padding permuted."""
    from mlir.dialects import linalg, tensor
    transpose = _is_transpose(pad.operands[0])
    if transpose is None or transpose.operands[0] not in channels_last or constant_pad(pad.results[0]) is None:
        return  # not a channels-last tensor; dynamic padding, or a padding value computed per element
    source = transpose.operands[0]
    with ir.InsertionPoint(pad), pad.location:
        inner = _permuted_pad(pad, source, _permutation(transpose))
        transposed = linalg.transpose(inner, outs=[tensor.empty(list(pad.results[0].type.shape),
                                                                 source.type.element_type)],
                                      permutation=_permutation(transpose)).results[0]
    pad.results[0].replace_all_uses_with(transposed)
    pad.erase()
    channels_last.add(inner)


def _permuted_pad(pad: ir.Operation, source: ir.Value, permutation: list[int]) -> ir.Value:
    """`pad`'s padding (and value) applied to `source`, of which pad's input is a transpose by `permutation`."""
    low, high = (list(ir.DenseI64ArrayAttr(pad.attributes[name])) for name in ("static_low", "static_high"))
    return _padded(source, _permuted(low, permutation), _permuted(high, permutation), _padding_value(pad))


def _permuted(sizes: list[int], permutation: list[int]) -> list[int]:
    """Per-dim `sizes` of a transpose's output (by `permutation`), as its input's dims."""
    inner = [0] * len(sizes)
    for output_dim, input_dim in enumerate(permutation):
        inner[input_dim] = sizes[output_dim]
    return inner


def _padding_value(pad: ir.Operation) -> ir.Value:
    return list(pad.regions[0].blocks[0].operations)[-1].operands[0]


def _padded(source: ir.Value, low: list[int], high: list[int], value: ir.Value) -> ir.Value:
    """`source` padded by `low` and `high` per dim with `value`; `source` itself where both are zeros."""
    from mlir.dialects import tensor
    if not any(low) and not any(high):
        return source
    padded_shape = [size + low[d] + high[d] for d, size in enumerate(source.type.shape)]
    pad = tensor.PadOp(ir.RankedTensorType.get(padded_shape, source.type.element_type), source, [], [], low, high)
    body = pad.regions[0].blocks.append(*[ir.IndexType.get()] * len(padded_shape))
    with ir.InsertionPoint(body):
        tensor.YieldOp(value)
    return pad.result


def _zero_pads(value: ir.Value) -> tuple[ir.Value, list[int], list[int], ir.Value | None]:
    """(the tensor under a chain of zero pads of `value`, their padding
    summed: low, high per dim, a zero value of theirs or None)."""
    rank = len(value.type.shape)
    low, high, zero = [0] * rank, [0] * rank, None
    while (pad := constant_pad(value)) is not None and is_zero_constant(defining_op(_padding_value(pad))):
        for d in range(rank):
            low[d] += ir.DenseI64ArrayAttr(pad.attributes["static_low"])[d]
            high[d] += ir.DenseI64ArrayAttr(pad.attributes["static_high"])[d]
        zero, value = _padding_value(pad), pad.operands[0]
    return value, low, high, zero


def _patches_read_channels_last(patches: ir.Operation, copies: dict) -> None:
    """Patches (conv-as-matmul's im2col, all loops parallel) that read a
    channels-first tensor (through zero padding) read a channels-last copy
    of it, so a window's channels are consecutive in memory: the matmul
    kernel then reads the windows itself (an implicit im2col,
    gpu-matmul-kernels) and no patch matrix is written. The spatial padding
    is left for fold-patch-padding to read through; zero channels (an
    image's 3 channels made 8) are written into the copy, since a 16-byte
    read of a window must find 8 channels there. `copies`: the copies made
    so far, for the tensor's other readers."""
    from mlir.dialects import linalg, tensor
    maps = indexing_maps(patches)
    if WINDOWS_ATTR not in patches.attributes or len(patches.operands) != 2 or len(maps) != 2 \
            or any("parallel" not in str(t) for t in patches.attributes["iterator_types"]):
        return
    innermost = ir.AffineDimExpr.get(maps[0].n_dims - 1)
    reading, value = maps[0], patches.operands[0]
    rank = len(value.type.shape)
    if reading.results[-1] == innermost or rank < 3 or reading.results[1] != innermost:
        return  # already reads channels innermost, or not an (n, c, spatial…) input
    source, low, high, zero = _zero_pads(value)
    to_last = [0, *range(2, rank), 1]
    element = source.type.element_type
    channels = (low[1], high[1])
    with ir.InsertionPoint(patches), patches.location:
        if (source, channels) not in copies:
            moved = linalg.transpose(source, outs=[tensor.empty([source.type.shape[d] for d in to_last], element)],
                                     permutation=to_last).results[0]
            edges = [0] * (rank - 1)
            copies[source, channels] = _padded(moved, edges + [channels[0]], edges + [channels[1]], zero)
        spatial_low, spatial_high = ([0, 0, *sizes[2:]] for sizes in (low, high))
        read = _padded(copies[source, channels], *([s[d] for d in to_last] for s in (spatial_low, spatial_high)), zero)
    patches.operands[0] = read
    _set_maps(patches, [ir.AffineMap.get(reading.n_dims, 0, [reading.results[d] for d in to_last]), maps[1]])
    while value != source and (pad := defining_op(value)) is not None:
        value = pad.operands[0]
        erase_if_unused(pad)


def _erase_dead_transposes(module: ir.Operation) -> None:
    for transpose in reversed(nested_ops(module, lambda op: op.name == "linalg.transpose")):
        init = defining_op(transpose.operands[1])
        if not list(transpose.results[0].uses):
            transpose.erase()
            erase_if_unused(init)


def _stored_permuted(module: ir.Operation) -> set:
    """The function arguments a transpose reads: tensors the caller stores
    with their dims in another order (channels-last images and weights),
    taken as stored and permuted to the module's order
    (frontend/fx_passes/storage_order.py). Their layout carries on as a
    convolution's result's does."""
    return {argument for func in nested_ops(module, lambda op: op.name == "func.func")
            for argument in func.regions[0].blocks[0].arguments
            if any(use.owner.name == "linalg.transpose" for use in argument.uses)}


@dataclass(frozen=True)
class ChannelsLast(PythonPass):
    name = "channels-last"

    def _run(self, module: ir.Operation, pass_) -> None:
        channels_last = _stored_permuted(module)  # the tensors laid out channels-last
        copies = {}  # channels-first tensors -> their channels-last copies, for patches
        for op in nested_ops(module, lambda o: o.name in ("linalg.generic", "tensor.pad")):
            if op.name == "tensor.pad":
                _pad_before_transpose(op, channels_last)
                continue
            if CHANNELS_LAST_ATTR in op.attributes:
                del op.attributes[CHANNELS_LAST_ATTR]
                channels_last.add(op.operands[0])  # the matmul's result, (n, o…, f)
            _absorb(op, channels_last)
            _patches_read_channels_last(op, copies)
            _write_in_layout(op, channels_last)
        _erase_dead_transposes(module)
