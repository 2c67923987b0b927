"""conv-as-matmul: a convolution (linalg.conv_{1,2,3}d_n{c}…_f{c}…) becomes
a matmul over its patches, so the GPU's matmul kernels (tensor cores,
ragged edges, epilogues) take it.

    patches[n, o…, k…, c] = x[n, c, o·stride + k·dilation …]     (im2col)
    result[(n, o…), f]    = patches[(n, o…), (k…, c)] · weight[f, (k…, c)]ᵀ
    out[n, f, o…]         = init[n, f, o…] + result[(n, o…), f]

The rows of the matmul are output positions and its reduction runs along
(window, channel), so its operands are a linear layer's: the patches
row-major and the weight, its channels moved innermost, read transposed.
The last op puts the result back in torch's channels-first layout and
adds the convolution's
init (its bias); it is elementwise over the output, so the matmul kernel
takes it, with what fuses into it (batch norm, an activation, the rounding
to f16), as its epilogue. A zero init is left out.

A depthwise convolution (a window per channel: no matmul) becomes a
generic computing its result channels-last, followed by the same
channels-first op, so channels-last carries on through MobileNet's blocks;
so does a pooling window (max_pool2d, avg_pool2d's sum: ResNet's max pool
after its stem); and so does a 2-D convolution summing few products into
each output over a window of several positions (`direct_taps`: an image's
3 channels by a 3x3 window, 27), whose matmul would be one K step behind a
copy of its patches. The window kernels (gpu_window_kernels) take
all three, a convolution's weight staged in shared memory.

Where the reduction rows are not whole 16-byte vectors (an image's 3
channels by a 7x7 window: 147 halves), the input and the weight get zero
channels up to the fewest that make them so (8 by 7x7: 392); the zeros add
nothing to the sums. A grouped convolution is a batched matmul, a batch
per group.

A convolution becomes a matmul only where a matmul generator would take
it (`gpu_matmul_kernels.kernel_takes`, from the tile tables): with too few
filters for any tile (a group of 4, a 3-channel head) or an element type
no kernel multiplies, the patches would only add a copy, and the generic
loops read the input in place.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from pathlib import Path

from mlir import ir

from ..target import DEFAULT_ARCH, DEFAULT_LOWERING_DIR
from .ir_helpers import PythonPass, defining_op, nested_ops
from .kernel_fallback import record_refusal
from .patch_padding import WINDOWS_ATTR

CONVOLUTIONS = ("linalg.conv_1d_ncw_fcw", "linalg.conv_2d_nchw_fchw", "linalg.conv_3d_ncdhw_fcdhw")
DEPTHWISE = ("linalg.depthwise_conv_2d_nchw_chw",)
GROUPED = ("linalg.conv_2d_ngchw_gfchw",)
ELEMENT_BYTES = {"f32": 4, "f16": 2, "bf16": 2}  # the element types the matmul kernels multiply
ROW_BYTES = 16  # the kernels read operand rows in 16-byte vectors
CHANNELS_LAST_ATTR = "twintrack.channels_last"  # on the op putting a result channels-first: channels-last starts there


@dataclass(frozen=True)
class ConvShape:
    """A channels-first convolution's sizes: batch, channels, filters, the
    output's spatial sizes, the window's, the strides and dilations, and the
    channels the matmul reduces over (zeros past `channels`)."""
    batch: int
    channels: int
    filters: int
    outputs: tuple[int, ...]
    window: tuple[int, ...]
    strides: tuple[int, ...]
    dilations: tuple[int, ...]
    padded_channels: int

    @property
    def rows(self) -> int:
        return self.batch * math.prod(self.outputs)

    @property
    def reduction(self) -> int:
        return self.padded_channels * math.prod(self.window)


def _aligned_channels(channels: int, window: int, element_bytes: int) -> int:
    """The fewest channels, at least `channels`, whose rows of `window`
    elements each are whole 16-byte vectors."""
    return next(c for c in itertools.count(channels) if c * window * element_bytes % ROW_BYTES == 0)


def _matmul_element(op: ir.Operation) -> str | None:
    """The element type a convolution's matmul would multiply: static
    shapes, input and weight of one type a kernel takes, an output a kernel
    stores; None otherwise."""
    x, weight, init = (value.type for value in op.operands[:3])
    if not all(isinstance(t, ir.RankedTensorType) and t.has_static_shape for t in (x, weight, init)):
        return None
    element = str(x.element_type)
    if element != str(weight.element_type) or element not in ELEMENT_BYTES \
            or str(init.element_type) not in ELEMENT_BYTES:
        return None
    return element


def conv_shape(op: ir.Operation) -> ConvShape | None:
    """The convolution's sizes, or None where the matmul form does not apply
    (dynamic sizes, mixed or unsupported operand types)."""
    element = _matmul_element(op)
    if element is None:
        return None
    x, weight, init = (value.type for value in op.operands[:3])
    spatial = x.rank - 2
    window = tuple(weight.shape[2:])
    return ConvShape(x.shape[0], x.shape[1], weight.shape[0], tuple(init.shape[2:]), window,
                     _pair_attr(op, "strides", spatial), _pair_attr(op, "dilations", spatial),
                     _aligned_channels(x.shape[1], math.prod(window), ELEMENT_BYTES[element]))


def _pair_attr(op: ir.Operation, name: str, spatial: int) -> tuple[int, ...]:
    if name not in op.attributes:
        return (1,) * spatial
    return tuple(ir.DenseIntElementsAttr(op.attributes[name]))


def _is_zero_fill(value: ir.Value) -> bool:
    fill = defining_op(value)
    if fill is None or fill.name != "linalg.fill":
        return False
    constant = defining_op(fill.operands[0])
    if constant is None or constant.name != "arith.constant":
        return False
    attr = constant.attributes["value"]
    return isinstance(attr, ir.FloatAttr) and attr.value == 0.0 and not str(attr).startswith("-")


def _generic(result_type: ir.RankedTensorType, inputs: list[ir.Value], maps: list[ir.AffineMap], body) -> ir.Value:
    """An all-parallel linalg.generic into a fresh tensor; `body(arguments)` gives the yielded value."""
    from mlir.dialects import linalg, tensor
    output = tensor.empty(result_type.shape, result_type.element_type)
    generic = linalg.GenericOp([result_type], inputs, [output], ir.ArrayAttr.get([ir.AffineMapAttr.get(m) for m in maps]),
                               ir.ArrayAttr.get([ir.Attribute.parse("#linalg.iterator_type<parallel>")]
                                                * maps[0].n_dims))
    block = generic.regions[0].blocks.append(*[v.type.element_type for v in inputs], result_type.element_type)
    with ir.InsertionPoint(block):
        linalg.YieldOp([body(list(block.arguments))])
    return generic.results[0]


def _patches(x: ir.Value, shape: ConvShape) -> ir.Value:
    """im2col: (n, o…, k…, c) -> x[n, c, o·stride + k·dilation …], as
    (n·o…) x (k…·c). The channel is the innermost index, so that where the
    input is channels-last (channels-last, after this pass) consecutive
    threads read consecutive channels as they write consecutive patches."""
    from mlir.dialects import tensor
    spatial = len(shape.outputs)
    dims = ir.AffineDimExpr.get
    n, outputs, window, c = 0, range(1, 1 + spatial), range(1 + spatial, 1 + 2 * spatial), 1 + 2 * spatial
    reads = [dims(n), dims(c)] + [
        dims(o) * stride + dims(k) * dilation for o, k, stride, dilation in zip(outputs, window, shape.strides, shape.dilations)]
    loops = 2 + 2 * spatial
    element = x.type.element_type
    patches_type = ir.RankedTensorType.get([shape.batch, *shape.outputs, *shape.window, shape.padded_channels], element)
    patches = _generic(patches_type, [x], [ir.AffineMap.get(loops, 0, reads), ir.AffineMap.get_identity(loops)],
                       lambda args: args[0])
    patches.owner.attributes[WINDOWS_ATTR] = ir.UnitAttr.get()
    rows = list(range(1 + spatial))
    return tensor.collapse_shape(ir.RankedTensorType.get([shape.rows, shape.reduction], element), patches,
                                 [rows, list(range(1 + spatial, loops))])


def _weight_columns(weight: ir.Value, shape: ConvShape) -> ir.Value:
    """The weight (f, c, k…) as (k…·c) x f, the patches' order: a linear
    layer's weight read transposed. Its channels move innermost first
    (a copy of the weight), unless the window is one element (1x1)."""
    from mlir.dialects import linalg, tensor
    element = weight.type.element_type
    rank = weight.type.rank
    if math.prod(shape.window) > 1:
        channels_last = [weight.type.shape[0], *weight.type.shape[2:], weight.type.shape[1]]
        weight = linalg.transpose(weight, outs=[tensor.empty(channels_last, element)],
                                  permutation=[0, *range(2, rank), 1]).results[0]
    flat = tensor.collapse_shape(ir.RankedTensorType.get([shape.filters, shape.reduction], element), weight,
                                 [[0], list(range(1, rank))])
    return linalg.transpose(flat, outs=[tensor.empty([shape.reduction, shape.filters], element)],
                            permutation=[1, 0])


def _matmul(patches: ir.Value, weight_columns: ir.Value, shape: ConvShape, element: ir.Type) -> ir.Value:
    from mlir.dialects import arith, linalg, tensor
    zero = arith.constant(element, 0.0)
    accumulator = linalg.fill(zero, outs=[tensor.empty([shape.rows, shape.filters], element)])
    return linalg.matmul(patches, weight_columns, outs=[accumulator])


def _channels_first(result: ir.Value, init: ir.Value, shape: ConvShape) -> ir.Value:
    """(n·o…) x f back to (n, f, o…), plus the init unless it is a zero fill."""
    from mlir.dialects import tensor
    spatial = len(shape.outputs)
    element = result.type.element_type
    channels_last = [shape.batch, *shape.outputs, shape.filters]
    expanded = tensor.expand_shape(ir.RankedTensorType.get(channels_last, element), result,
                                   [list(range(1 + spatial)), [1 + spatial]], [], channels_last)
    return _from_channels_last(expanded, init)


def _from_channels_last(expanded: ir.Value, init: ir.Value, add_init: bool = True) -> ir.Value:
    """(n, o…, f) as (n, f, o…), plus the init unless it is a zero fill (or
    `add_init` is off: the result started from it); the op that does it is
    marked for channels-last, which starts there."""
    from mlir.dialects import arith
    spatial = expanded.type.rank - 2
    loops = 2 + spatial
    dims = ir.AffineDimExpr.get
    read_channels_last = ir.AffineMap.get(loops, 0, [dims(0), *[dims(2 + d) for d in range(spatial)], dims(1)])
    identity = ir.AffineMap.get_identity(loops)
    out_type = init.type
    if not add_init or _is_zero_fill(init):
        out = _generic(out_type, [expanded], [read_channels_last, identity], lambda args: args[0])
    else:
        bias, read_bias = _broadcast_source(init)
        out = _generic(out_type, [expanded, bias], [read_channels_last, read_bias, identity],
                       lambda args: arith.addf(args[1], args[0]))
    out.owner.attributes[CHANNELS_LAST_ATTR] = ir.UnitAttr.get()
    return out


def _broadcast_source(init: ir.Value) -> tuple[ir.Value, ir.AffineMap]:
    """What the init holds and how the output's loops read it: a bias
    broadcast along the batch and spatial dims is read as the vector it
    is (no broadcast tensor in memory); anything else, element for element."""
    loops = init.type.rank
    broadcast = defining_op(init)
    if broadcast is None or broadcast.name != "linalg.broadcast":
        return init, ir.AffineMap.get_identity(loops)
    added = set(ir.DenseI64ArrayAttr(broadcast.attributes["dimensions"]))
    kept = [ir.AffineDimExpr.get(d) for d in range(loops) if d not in added]
    return broadcast.operands[0], ir.AffineMap.get(loops, 0, kept)


def _zero_channels(value: ir.Value, channels: int, dim: int = 1) -> ir.Value:
    """`value` with zeros appended along its channel dim (`dim`: (n or f, c, …)) up to `channels`."""
    from mlir.dialects import arith, tensor
    shape = list(value.type.shape)
    if shape[dim] == channels:
        return value
    element = value.type.element_type
    high = [0] * len(shape)
    high[dim] = channels - shape[dim]
    padded_type = ir.RankedTensorType.get([*shape[:dim], channels, *shape[dim + 1:]], element)
    zero = arith.constant(element, 0.0)
    pad = tensor.PadOp(padded_type, value, [], [], [0] * len(shape), high)
    block = pad.regions[0].blocks.append(*[ir.IndexType.get()] * len(shape))
    with ir.InsertionPoint(block):
        tensor.YieldOp(zero)
    return pad.result


def rewrite(op: ir.Operation, shape: ConvShape) -> None:
    x, weight, init = op.operands[:3]
    with ir.InsertionPoint(op), op.location:
        x, weight = (_zero_channels(v, shape.padded_channels) for v in (x, weight))
        result = _matmul(_patches(x, shape), _weight_columns(weight, shape), shape, init.type.element_type)
        out = _channels_first(result, init, shape)
    op.results[0].replace_all_uses_with(out)
    op.erase()


def _window_channels_last(op: ir.Operation, extra: list[tuple[ir.Value, ir.AffineMap]], start: ir.Value,
                          body, dense: bool = False) -> ir.Value:
    """A channels-first window op (x (n, c, h, w) read at (n, c, oh·s + kh·d,
    ow·s + kw·d)) as a linalg.generic computing (n, oh, ow, f) over loops
    (n, oh, ow, f, kh, kw), the channel c being f, or, `dense`, over loops
    (n, oh, ow, f, kh, kw, c), every channel summed into each filter f (the
    channel innermost: a window position's padding test serves them all): its
    accumulator filled with `start`, `extra` inputs read through their maps
    (one of them must give the window's extents: a weight (c, kh, kw) or
    (f, c, kh, kw), a pooling window's shape (kh, kw)), `body(x element,
    *extra elements, accumulator)` the yielded value. Marked as windows,
    for channels-last and fold-patch-padding. Built at the current
    insertion point."""
    from mlir.dialects import linalg, tensor
    x, init = op.operands[0], op.operands[2]
    strides, dilations = _pair_attr(op, "strides", 2), _pair_attr(op, "dilations", 2)
    batch, filters, out_h, out_w = init.type.shape
    out_element = init.type.element_type
    loops = 7 if dense else 6
    channel, kh, kw = (6, 4, 5) if dense else (3, 4, 5)
    dims = ir.AffineDimExpr.get
    read_x = ir.AffineMap.get(loops, 0, [dims(0), dims(channel), dims(1) * strides[0] + dims(kh) * dilations[0],
                                         dims(2) * strides[1] + dims(kw) * dilations[1]])
    write = ir.AffineMap.get(loops, 0, [dims(0), dims(1), dims(2), dims(3)])
    iterators = ["parallel"] * 4 + ["reduction"] * (loops - 4)
    accumulator = linalg.fill(start, outs=[tensor.empty([batch, out_h, out_w, filters], out_element)])
    maps = [read_x, *(m for _, m in extra), write]
    generic = linalg.GenericOp([accumulator.type], [x, *(v for v, _ in extra)], [accumulator],
                               ir.ArrayAttr.get([ir.AffineMapAttr.get(m) for m in maps]),
                               ir.ArrayAttr.get([ir.Attribute.parse(f"#linalg.iterator_type<{it}>") for it in iterators]))
    block = generic.regions[0].blocks.append(x.type.element_type, *(v.type.element_type for v, _ in extra), out_element)
    with ir.InsertionPoint(block):
        linalg.YieldOp([body(*block.arguments)])
    generic.attributes[WINDOWS_ATTR] = ir.UnitAttr.get()
    return generic.results[0]


def _static(op: ir.Operation) -> bool:
    return all(isinstance(v.type, ir.RankedTensorType) and v.type.has_static_shape for v in op.operands)


def _static_floats(op: ir.Operation) -> bool:
    return _static(op) and all(str(v.type.element_type) in ELEMENT_BYTES for v in op.operands[:3])


def _widened(value: ir.Value, element: ir.Type) -> ir.Value:
    from mlir.dialects import arith
    return arith.extf(element, value) if value.type != element else value


def _multiply_add(out_element: ir.Type):
    """A convolution's body: the product of an input element and a weight, widened to the output's type, added to the sum."""
    from mlir.dialects import arith

    def body(value, tap, total):
        return arith.addf(total, arith.mulf(_widened(value, out_element), _widened(tap, out_element)))
    return body


def _replace_with_channels_last(op: ir.Operation, weight_map: ir.AffineMap, dense: bool) -> None:
    """The convolution `op` as a channels-last window generic reading its
    weight through `weight_map`, then put back channels-first (its init
    added) as a matmul's result is, so that channels-last carries on through it."""
    from mlir.dialects import arith
    weight, init = op.operands[1], op.operands[2]
    out_element = init.type.element_type
    with ir.InsertionPoint(op), op.location:
        result = _window_channels_last(op, [(weight, weight_map)], arith.constant(out_element, 0.0),
                                       _multiply_add(out_element), dense=dense)
        out = _from_channels_last(result, init)
    op.results[0].replace_all_uses_with(out)
    op.erase()


def depthwise_channels_last(op: ir.Operation) -> bool:
    """A depthwise convolution (linalg.depthwise_conv_2d_nchw_chw: a window
    per channel, no matmul) as a linalg.generic computing its result
    channels-last (MobileNet's blocks). False where it does not apply
    (dynamic sizes, other than float types)."""
    if not _static_floats(op):
        return False
    dims = ir.AffineDimExpr.get
    _replace_with_channels_last(op, ir.AffineMap.get(6, 0, [dims(3), dims(4), dims(5)]), dense=False)
    return True


def direct_taps(op: ir.Operation) -> int | None:
    """The products a 2-D convolution sums into each output element
    (channels x window), or None where no window kernel would compute it
    directly (dynamic sizes, other than float types, not 2-D, filters that
    split into no lanes, a weight too large to stage) or a matmul reads its
    input with no patches copied (a 1x1 window: there the tensor cores beat
    the window kernel's FMAs, 1.3-2x on MobileNetV2's 16- to 32-channel ones)."""
    from .gpu_window_kernels import takes_dense_window
    if op.name != "linalg.conv_2d_nchw_fchw" or not _static_floats(op):
        return None
    weight = op.operands[1].type
    if math.prod(weight.shape[2:]) == 1:
        return None
    if not takes_dense_window(weight.shape[0], math.prod(weight.shape) * ELEMENT_BYTES[str(weight.element_type)]):
        return None
    return math.prod(weight.shape[1:])


def direct_channels_last(op: ir.Operation) -> None:
    """A 2-D convolution with few products an output (an image's 3 channels
    by a 3x3 window: 27) as a channels-last window generic, each output
    summing over (channel, kh, kw) directly: the window kernels compute it
    with the weight staged, reading the input in place, where the matmul
    form would copy the patches (and pad their channels) for a reduction
    shorter than one of its K steps."""
    dims = ir.AffineDimExpr.get
    _replace_with_channels_last(op, ir.AffineMap.get(7, 0, [dims(3), dims(6), dims(4), dims(5)]), dense=True)


POOLING = {"linalg.pooling_nchw_max": "arith.maximumf", "linalg.pooling_nchw_sum": "arith.addf"}


def pooling_channels_last(op: ir.Operation) -> bool:
    """A pooling window (linalg.pooling_nchw_max: max_pool2d, NaN-propagating
    as torch's; linalg.pooling_nchw_sum: avg_pool2d's sum) as a channels-last
    linalg.generic, as a depthwise convolution is, so that ResNet's max pool
    reads the stem's channels-last result through its -inf padding. False
    where it does not apply (dynamic sizes, other than float types, an init
    other than a constant fill)."""
    from mlir.dialects import arith
    fill = defining_op(op.operands[2])
    start = fill.operands[0] if fill is not None and fill.name == "linalg.fill" else None
    if not _static_floats(op) or start is None or defining_op(start) is None \
            or defining_op(start).name != "arith.constant":
        return False
    init = op.operands[2]
    out_element = init.type.element_type
    combine = getattr(arith, POOLING[op.name].split(".")[1])
    dims = ir.AffineDimExpr.get
    window = (op.operands[1], ir.AffineMap.get(6, 0, [dims(4), dims(5)]))  # its shape only: no element is read
    with ir.InsertionPoint(op), op.location:
        result = _window_channels_last(op, [window], start,
                                       lambda value, _shape, total: combine(total, _widened(value, out_element)))
        out = _from_channels_last(result, init, add_init=False)
    op.results[0].replace_all_uses_with(out)
    op.erase()
    return True


def grouped_shape(op: ir.Operation) -> ConvShape | None:
    """A grouped convolution's sizes per group (channels and filters of one
    group), or None where the matmul form does not apply."""
    element = _matmul_element(op)
    if element is None:
        return None
    x, weight, init = (value.type for value in op.operands[:3])
    window = tuple(weight.shape[3:])
    return ConvShape(x.shape[0], x.shape[2], weight.shape[1], tuple(init.shape[3:]), window,
                     _pair_attr(op, "strides", 2), _pair_attr(op, "dilations", 2),
                     _aligned_channels(x.shape[2], math.prod(window), ELEMENT_BYTES[element]))


def grouped_rewrite(op: ir.Operation, shape: ConvShape) -> None:
    """A grouped convolution (linalg.conv_2d_ngchw_gfchw: x (n, g, c, h, w),
    weight (g, f, c, kh, kw)) as a batched matmul, a batch per group: the
    patches (g, n·o…, k…·c) times each group's weight read transposed, and
    one elementwise op back to (n, g, f, o…) adding the init. Channels-first
    on both sides: the torch-mlir reshapes around it read and write that
    layout."""
    from mlir.dialects import arith, linalg, tensor
    x, weight, init = op.operands[:3]
    batch, groups = x.type.shape[:2]
    filters, window, outputs, padded = shape.filters, shape.window, shape.outputs, shape.padded_channels
    out_element = init.type.element_type
    dims = ir.AffineDimExpr.get
    with ir.InsertionPoint(op), op.location:
        x, weight = _zero_channels(x, padded, dim=2), _zero_channels(weight, padded, dim=2)
        # patches: loops (g, n, oh, ow, kh, kw, c) -> x[n, g, c, oh·s + kh·d, ow·s + kw·d]
        reads = [dims(1), dims(0), dims(6)] + [dims(2 + i) * shape.strides[i] + dims(4 + i) * shape.dilations[i]
                                               for i in range(2)]
        patches_type = ir.RankedTensorType.get([groups, batch, *outputs, *window, padded], x.type.element_type)
        patches = _generic(patches_type, [x], [ir.AffineMap.get(7, 0, reads), ir.AffineMap.get_identity(7)],
                           lambda args: args[0])
        patches.owner.attributes[WINDOWS_ATTR] = ir.UnitAttr.get()
        rows = tensor.collapse_shape(ir.RankedTensorType.get([groups, shape.rows, shape.reduction],
                                                             x.type.element_type), patches, [[0], [1, 2, 3], [4, 5, 6]])
        element_type = weight.type.element_type
        moved = linalg.transpose(weight, outs=[tensor.empty([groups, filters, *window, padded], element_type)],
                                 permutation=[0, 1, 3, 4, 2]).results[0]
        flat = tensor.collapse_shape(ir.RankedTensorType.get([groups, filters, shape.reduction], element_type), moved,
                                     [[0], [1], [2, 3, 4]])
        columns = linalg.transpose(flat, outs=[tensor.empty([groups, shape.reduction, filters], element_type)],
                                   permutation=[0, 2, 1]).results[0]
        zero = arith.constant(out_element, 0.0)
        accumulator = linalg.fill(zero, outs=[tensor.empty([groups, shape.rows, filters], out_element)])
        result = linalg.batch_matmul(rows, columns, outs=[accumulator])
        per_group = [groups, batch, *outputs, filters]
        expanded = tensor.expand_shape(ir.RankedTensorType.get(per_group, out_element), result,
                                       [[0], [1, 2, 3], [4]], [], per_group)
        # loops (n, g, f, oh, ow), as the init; the result read at (g, n, oh, ow, f)
        read = ir.AffineMap.get(5, 0, [dims(1), dims(0), dims(3), dims(4), dims(2)])
        identity = ir.AffineMap.get_identity(5)
        if _is_zero_fill(init):
            out = _generic(init.type, [expanded], [read, identity], lambda args: args[0])
        else:
            out = _generic(init.type, [expanded, init], [read, identity, identity],
                           lambda args: arith.addf(args[1], args[0]))
    op.results[0].replace_all_uses_with(out)
    op.erase()


@dataclass(frozen=True)
class ConvAsMatmul(PythonPass):
    name = "conv-as-matmul"
    arch: str = DEFAULT_ARCH  # the matmul kernels' options: a convolution
    tf32: bool = False        # becomes a matmul only where one of them
    lowering_dir: str = str(DEFAULT_LOWERING_DIR)  # takes it
    direct_taps: int = 0      # a 2-D convolution summing at most this many products an output is computed directly

    def _run(self, module: ir.Operation, pass_) -> None:
        for op in nested_ops(module, lambda o: o.name in CONVOLUTIONS + DEPTHWISE + GROUPED + tuple(POOLING)):
            if not _static(op):
                record_refusal(module, op, "sizes known only at run time (a dynamic batch): the patches' matmul "
                                           "and the window kernels take static sizes")
                continue
            if op.name in DEPTHWISE:
                depthwise_channels_last(op)
                continue
            taps = direct_taps(op)
            if taps is not None and taps <= self.direct_taps:
                direct_channels_last(op)
                continue
            if op.name in POOLING:
                pooling_channels_last(op)
                continue
            shape = grouped_shape(op) if op.name in GROUPED else conv_shape(op)
            if shape is None or not self._kernel_takes(op, shape):
                continue  # the generic loops read the input in place, with no patches
            if op.name in GROUPED:
                grouped_rewrite(op, shape)
            else:
                rewrite(op, shape)

    def _kernel_takes(self, op: ir.Operation, shape: ConvShape) -> bool:
        from .gpu_matmul_kernels import kernel_takes
        groups = op.operands[0].type.shape[1] if op.name in GROUPED else None
        return kernel_takes(groups, shape.rows, shape.filters, shape.reduction, str(op.operands[0].type.element_type),
                            str(op.operands[2].type.element_type), self.arch, self.tf32, Path(self.lowering_dir))
