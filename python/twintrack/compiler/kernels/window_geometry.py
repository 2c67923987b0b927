"""A convolution's windows as TMA's im2col mode reads them (sm_90a): the
geometry of a channels-last convolution (strides, dilations, padding) read
off its WindowRead, so that one `cp.async.bulk.tensor … .im2col` copy loads
a tile of output pixels' channels for one filter tap, where the cp.async
gather computes an address per 16 bytes.

The WindowRead describes A's element (m, k) by ops (a gather through
padding) or an index map (a strided read). Rather than match their form,
the geometry is fitted from the address they compute, then checked
against it at every tap of every output position (of the edges and a
stride through the interior of a large output: `_grid_axes`) in one numpy
evaluation of the body: any window the model does not reproduce exactly
keeps the gather."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from mlir import ir

from .window_read import WindowRead

# TMA's limits (PTX ISA, tensor im2col mode; cuTensorMapEncodeIm2col, each
# checked on an H100): the pixel box's corners (signed) and a copy's tap
# offsets (unsigned) take 16 bits shared by the spatial dims, 8 each in 2-d;
# traversal strides 1 to 8. Copies here take at most 256 pixels (a tile's rows).
CORNER_BITS = 16
MAX_TRAVERSAL_STRIDE = 8
MAX_BOX = 256

# Output positions the geometry is checked at, per dim (`_grid_axes`).
EVERY_POSITION = 64
EDGE_POSITIONS = 24
INTERIOR_STEP = 7
# The most points checked (a 3-d window's grid can reach tens of millions:
# gigabytes of numpy arrays). A 112x112 2-d output with 7x7 taps is 1.5 million.
MAX_CHECKED_POINTS = 4_000_000


@dataclass(frozen=True)
class Im2colGeometry:
    """X is (N, spatial…, C) channels-last; A's rows are the output pixels
    (N, out…) in order and its columns (taps…, C). Per spatial dim,
    outermost first: the input's size, the output's, the taps, the
    traversal (convolution) stride, the dilation and the low padding. Input
    position of output o and tap t: o * stride + t * dilation - padding."""
    batch: int
    channels: int
    size: tuple[int, ...]
    out: tuple[int, ...]
    taps: tuple[int, ...]
    stride: tuple[int, ...]
    dilation: tuple[int, ...]
    padding: tuple[int, ...]

    @property
    def lower_corner(self) -> list[int]:
        """The pixel box's first window corner, per spatial dim (outermost first)."""
        return [-p for p in self.padding]

    @property
    def upper_corner(self) -> list[int]:
        """The box's last window corner, relative to the input's last place:
        the corners traversed at `stride` from the lower one are exactly the
        output's."""
        return [-p + (o - 1) * s - (n - 1) for p, o, s, n in zip(self.padding, self.out, self.stride, self.size)]

    def problem(self, pixels: int, channels: int) -> str | None:
        """Why TMA cannot copy `pixels` x `channels` boxes of these windows (None: it can)."""
        if len(self.size) != 2:
            return f"{len(self.size)}-d windows (only 2-d ones have run through im2col copies)"
        if self.channels % channels:
            return f"{self.channels} channels are no multiple of a {channels}-channel step"
        if pixels > MAX_BOX:
            return f"{pixels} pixels a copy (at most {MAX_BOX})"
        bits = CORNER_BITS // len(self.size)
        low, high = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
        if not all(low <= c <= high for c in self.lower_corner + self.upper_corner):
            return f"pixel box corners {self.lower_corner}, {self.upper_corner} outside [{low}, {high}]"
        if not all(1 <= s <= MAX_TRAVERSAL_STRIDE for s in self.stride):
            return f"strides {self.stride} (TMA traverses at 1 to {MAX_TRAVERSAL_STRIDE})"
        if any((t - 1) * d >= 1 << bits for t, d in zip(self.taps, self.dilation)):
            return f"tap offsets past {bits} bits"
        return None


def im2col_geometry(read: WindowRead) -> Im2colGeometry | str:
    """The geometry of `read`'s windows, or why TMA's im2col mode cannot
    read them: X (N, spatial…, C) with A's rows (N, out…) and columns
    (taps…, C), each spatial index o * stride + t * dilation - padding, and
    zeros exactly where that falls outside X."""
    layout = ir.MemRefType(ir.Type.parse(read.source_type))  # (1x1 windows may come without their taps)
    shape, spatial = list(layout.shape), len(read.row_sizes) - 1
    if not 1 <= spatial <= 3 or len(shape) != spatial + 2 or len(read.col_sizes) not in (1, spatial + 1):
        return "not a channels-last 1-, 2- or 3-d convolution's windows"
    if read.row_sizes[0] != shape[0] or read.col_sizes[-1] != shape[-1]:
        return "the windows' rows or columns do not follow the input's batch and channels"
    axes = _grid_axes(read.row_sizes + read.col_sizes)
    points = math.prod(len(axis) for axis in axes)
    if points > MAX_CHECKED_POINTS:
        return f"{points} windows' elements to check (at most {MAX_CHECKED_POINTS})"
    grid = np.meshgrid(*axes, indexing="ij")  # every loop's value at each point, loops in order
    try:
        indices, inside = _evaluated(read, grid)
    except _Unsupported as unsupported:
        return f"the windows' address uses {unsupported}"
    geometry = _fitted(read, shape, grid, indices, inside)
    if isinstance(geometry, str):
        return geometry
    return geometry if _reproduces(geometry, grid, indices, inside) else \
        "the windows' address is no strided, dilated, zero-padded convolution's"


def _grid_axes(sizes: tuple[int, ...]) -> list[np.ndarray]:
    """The values of each loop the windows are checked at: batch and
    channel at their ends and middle (they only index X's outer and inner
    dims), every tap, and every output position of a dim up to
    EVERY_POSITION of them, else its first and last EDGE_POSITIONS (where
    windows cross the padding) and a stride through the rest."""
    def positions(size: int) -> np.ndarray:
        if size <= EVERY_POSITION:
            return np.arange(size)
        middle = np.arange(EDGE_POSITIONS, size - EDGE_POSITIONS, INTERIOR_STEP)
        return np.unique(np.concatenate([np.arange(EDGE_POSITIONS), middle, np.arange(size - EDGE_POSITIONS, size)]))
    ends = [np.array(sorted({0, s // 2, s - 1})) for s in (sizes[0], sizes[-1])]
    return [ends[0], *(positions(s) for s in sizes[1:-1]), ends[1]]


def _fitted(read: WindowRead, shape: list[int], grid, indices, inside) -> Im2colGeometry | str:
    """The geometry the address takes inside X: each spatial index's step
    between neighbouring output pixels (the stride) and taps (the
    dilation), where both neighbours are inside, and the padding at the
    first element inside."""
    if not inside.any():
        return "no window lies inside the input"
    spatial = len(shape) - 2
    first = tuple(int(i) for i in np.unravel_index(np.argmax(inside), inside.shape))
    stride, dilation, padding = [], [], []
    for s in range(spatial):
        index, tap = indices[1 + s], _tap(grid, spatial, s)
        stride.append(_step(index, grid[1 + s], inside, 1 + s, first))
        dilation.append(1 if tap is None else _step(index, tap, inside, 1 + spatial + s, first))
        at_tap = 0 if tap is None else int(tap[first])
        padding.append(int(grid[1 + s][first]) * stride[-1] + at_tap * dilation[-1] - int(index[first]))
    taps = tuple(read.col_sizes[:-1]) or (1,) * spatial
    return Im2colGeometry(shape[0], shape[-1], tuple(shape[1:-1]), tuple(read.row_sizes[1:]), taps,
                          tuple(stride), tuple(dilation), tuple(padding))


def _tap(grid, spatial: int, s: int) -> np.ndarray | None:
    """The grid's tap loop of spatial dim `s` (None: 1x1 windows written without their taps)."""
    return grid[1 + spatial + s] if len(grid) == 2 * spatial + 2 else None


def _step(index: np.ndarray, loop: np.ndarray, inside: np.ndarray, axis: int, first: tuple) -> int:
    """How far `index` moves a step of `loop` between neighbours along grid
    `axis`, both inside: `first` and its next neighbour where that is inside,
    else the first such pair (1 where none is: a loop of one, or checked afterwards)."""
    if first[axis] + 1 < inside.shape[axis]:
        neighbour = first[:axis] + (first[axis] + 1,) + first[axis + 1:]
        if inside[neighbour]:
            return int((index[neighbour] - index[first]) // (loop[neighbour] - loop[first]))
    lower = tuple(slice(None, -1) if a == axis else slice(None) for a in range(inside.ndim))
    upper = tuple(slice(1, None) if a == axis else slice(None) for a in range(inside.ndim))
    both = inside[lower] & inside[upper]
    moved, apart = (index[upper] - index[lower])[both], (loop[upper] - loop[lower])[both]
    return int(moved[0] // apart[0]) if moved.size else 1


def _reproduces(g: Im2colGeometry, loops, indices, inside) -> bool:
    """Does the geometry give the address's inside condition everywhere, and its indices wherever inside?"""
    spatial = len(g.size)
    modelled = [loops[0]]
    model_inside = np.ones_like(loops[0], dtype=bool)
    for s in range(spatial):
        tap = _tap(loops, spatial, s)
        place = loops[1 + s] * g.stride[s] + (0 if tap is None else tap * g.dilation[s]) - g.padding[s]
        modelled.append(place)
        model_inside &= (place >= 0) & (place < g.size[s])
    modelled.append(loops[-1])
    if not np.array_equal(np.broadcast_to(inside, model_inside.shape), model_inside):
        return False
    return all(np.array_equal(np.asarray(i)[model_inside], m[model_inside]) for i, m in zip(indices, modelled))


# ------------------------------------------------------------ the address, evaluated
class _Unsupported(Exception):
    pass


def _evaluated(read: WindowRead, loops: list[np.ndarray]) -> tuple[list[np.ndarray], np.ndarray]:
    """X's indices and the inside condition of A's element at every point of `loops` (all loop values)."""
    every = np.ones_like(loops[0], dtype=bool)
    if read.index_map is not None:
        return [np.broadcast_to(_affine(e, loops, []), every.shape) for e in read.index_map.results], every
    values: dict = {}
    indices = [np.broadcast_to(_ref_value(read, r, values, loops), every.shape) for r in read.indices]
    inside = every if read.inside is None else \
        np.broadcast_to(_ref_value(read, read.inside, values, loops), every.shape)
    return indices, inside


def _ref_value(read: WindowRead, ref, values: dict, loops: list[np.ndarray]):
    """A body ref's value at every point, evaluating only the ops it depends on (not the load)."""
    if ref[0] == "index":
        return loops[ref[1]]
    if ref[0] == "const":
        return _constant(ref[1])
    if ref[0] != "op":
        raise _Unsupported(f"a value from outside its body ({ref[0]})")
    if ref not in values:
        op = read.ops[ref[1]]
        values[ref] = _op_value(op, [_ref_value(read, r, values, loops) for r in op.operands])
    return values[ref]


def _constant(op: ir.Operation):
    attribute = op.attributes["value"]
    if isinstance(attribute, ir.BoolAttr):
        return np.bool_(attribute.value)
    if isinstance(attribute, ir.IntegerAttr):
        value = attribute.value
        return np.bool_(value) if str(attribute.type) == "i1" else np.int64(value)
    raise _Unsupported(f"the constant {attribute}")


_CMPI = {0: np.equal, 1: np.not_equal, 2: np.less, 3: np.less_equal, 4: np.greater, 5: np.greater_equal}
_UNSIGNED_CMPI = {6: np.less, 7: np.less_equal, 8: np.greater, 9: np.greater_equal}
_BINARY = {"arith.addi": np.add, "arith.subi": np.subtract, "arith.muli": np.multiply,
           "arith.andi": np.bitwise_and, "arith.ori": np.bitwise_or, "arith.xori": np.bitwise_xor,
           "arith.maxsi": np.maximum, "arith.minsi": np.minimum, "arith.floordivsi": np.floor_divide,
           "arith.divsi": lambda a, b: np.trunc(np.divide(a, b)).astype(np.int64),
           "arith.remsi": np.fmod, "arith.ceildivsi": lambda a, b: -np.floor_divide(-a, b)}
_SAME = ("arith.index_cast", "arith.index_castui", "arith.extsi", "arith.extui", "arith.trunci")


def _op_value(op, operands: list):
    name = op.name
    if name in _BINARY:
        return _BINARY[name](*operands)
    if name in _SAME or name == "linalg.index":  # (linalg.index's operand: its loop's value)
        return operands[0]
    if name == "arith.cmpi":
        predicate = ir.IntegerAttr(op.source.attributes["predicate"]).value
        if predicate in _CMPI:
            return _CMPI[predicate](*operands)
        return _UNSIGNED_CMPI[predicate](*(np.asarray(v).astype(np.uint64) for v in operands))
    if name == "arith.select":
        return np.where(*operands)
    if name == "affine.apply":
        affine_map = ir.AffineMapAttr(op.source.attributes["map"]).value
        dims = operands[:affine_map.n_dims]
        return _affine(affine_map.results[0], dims, operands[affine_map.n_dims:])
    raise _Unsupported(name)


def _affine(expr: ir.AffineExpr, dims: list, symbols: list):
    expr = expr.maybe_downcast() if hasattr(expr, "maybe_downcast") else expr
    if isinstance(expr, ir.AffineDimExpr):
        return dims[expr.position]
    if isinstance(expr, ir.AffineSymbolExpr):
        return symbols[expr.position]
    if isinstance(expr, ir.AffineConstantExpr):
        return np.int64(expr.value)
    lhs, rhs = _affine(expr.lhs, dims, symbols), _affine(expr.rhs, dims, symbols)
    for kind, apply in _AFFINE_BINARY.items():
        if isinstance(expr, kind):
            return apply(lhs, rhs)
    raise _Unsupported(f"the affine expression {expr}")


_AFFINE_BINARY = {ir.AffineAddExpr: np.add, ir.AffineMulExpr: np.multiply, ir.AffineModExpr: np.mod,
                  ir.AffineFloorDivExpr: np.floor_divide,
                  ir.AffineCeilDivExpr: lambda a, b: -np.floor_divide(-a, b)}
