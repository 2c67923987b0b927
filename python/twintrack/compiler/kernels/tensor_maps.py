"""TMA tensor maps (sm_90a): the host side of a map of a memref operand,
what a map can describe, and the layout TMA stores write a matmul's C
through. The kernels that copy through them: tma_matmul (loads and
stores), wgmma_matmul (stores)."""

from __future__ import annotations

import functools
from dataclasses import dataclass

from mlir import ir
from mlir.dialects import arith, builtin, llvm, memref, nvgpu

from .builder import KernelBuilder
from .matmul_common import MatmulOperands, element_bytes
from .window_geometry import Im2colGeometry

TENSOR_MAP_ELEMENTS = ("f16", "bf16", "f32")
SWIZZLE_BYTES = 128  # the swizzle every map here takes: a box row of 128 bytes
STORE_ROWS = 64      # rows of C a TMA store writes: one warpgroup's


@dataclass(frozen=True)
class _MemrefLayout:
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    offset: int
    element: str


@functools.lru_cache(maxsize=4096)
def memref_layout(memref_type: str) -> _MemrefLayout | None:
    """The shape, strides and offset of a memref type's text (None: no memref
    type), parsed once: a repeated layer asks about the same types again."""
    if not memref_type.startswith("memref<"):  # (the parser aborts on what is no type at all)
        return None
    with ir.Context(), ir.Location.unknown():
        parsed = ir.MemRefType(ir.Type.parse(memref_type))
        strides, offset = parsed.get_strides_and_offset()
        return _MemrefLayout(tuple(parsed.shape), tuple(strides), offset, str(parsed.element_type))


def tma_layout_problem(memref_type: str) -> str | None:
    """Why a tensor map cannot describe an operand of this type (None: it
    can): TMA needs the innermost stride 1, the others and the offset
    multiples of 16 bytes, and no broadcast (stride 0) dim."""
    layout = memref_layout(memref_type)
    if layout is None:
        return f"not a memref type: {memref_type!r}"
    return _strides_problem(list(layout.strides), layout.offset, element_bytes(layout.element))


def _strides_problem(strides: list[int], offset: int, size: int) -> str | None:
    """tma_layout_problem of a layout: element strides and offset, `size`-byte elements."""
    dynamic = ir.ShapedType.get_dynamic_stride_or_offset()
    if dynamic in strides or offset == dynamic:
        return "a layout known only at run time"
    if strides[-1] != 1:
        return "its rows are not contiguous"
    if any(s == 0 or s * size % 16 for s in strides[:-1]) or offset * size % 16:
        return "a stride or offset that is no multiple of 16 bytes (or a broadcast dim)"
    if len(strides) > 5:
        return "more than 5 dims"
    return None


@dataclass(frozen=True)
class StoredLayout:
    """The output as a TMA store sees it: C's dims split as the epilogue's
    view splits them (a 3-d linear's rows as (B, S), a projection's columns
    as (heads, dim)), in C's order, each with its stride in the output
    (which may hold them in another order: Q written as (B, H, S, D)).
    `groups[d]`: the split sizes of C's dim d (none for a unit dim the
    output drops); `strides` and `offset` in elements, outermost first."""
    groups: tuple[tuple[int, ...], ...]
    strides: tuple[int, ...]
    offset: int

    @property
    def sizes(self) -> list[int]:
        return [size for group in self.groups for size in group]

    def box(self, rows: int, columns: int) -> list[int]:
        """A `rows` x `columns` tile of C: the innermost split of M's and of N's dims, 1 in the others."""
        box = []
        for d, group in enumerate(self.groups):
            inner = {len(self.groups) - 2: rows, len(self.groups) - 1: columns}.get(d, 1)
            box += [1] * (len(group) - 1) + ([inner] if group else [])
        return box

    def coordinates(self, w: KernelBuilder, c_indices: list[ir.Value]) -> list[ir.Value]:
        """The tensor map's coordinates, innermost first, of C's element at `c_indices`."""
        split = []
        for index, group in zip(c_indices, self.groups):
            if group:
                split += w.delinearize(index, list(group))
        return list(reversed(split))


def stored_layout(ops: MatmulOperands, box_rows: int, box_columns: int) -> StoredLayout | str:
    """The layout TMA stores of `box_rows` x `box_columns` tiles write C
    through, or why there is none: each box must stay inside one index of
    the outer splits, the innermost dim be contiguous, the rest a tensor map
    can describe (16-byte strides and offset, at most 5 dims)."""
    output = memref_layout(ops.c_type)
    if output is None:
        return f"C is no memref: {ops.c_type!r}"
    strides, offset = output.strides, output.offset
    view = ops.view
    groups = view.splits if view is not None else tuple((size,) for size in output.shape)
    if any(ir.ShapedType.is_dynamic_size(size) for group in groups for size in group):
        return "C's split sizes are known only at run time"
    # Split dim r (C's order) is loop dim loop_dims[r], stored at the output dim that holds that loop.
    output_dims = [view.store_dims.index(view.loop_dims[r]) for r in range(len(view.loop_dims))] if view \
        else list(range(len(output.shape)))
    layout = _merged(StoredLayout(tuple(tuple(group) for group in groups),
                                  tuple(strides[d] for d in output_dims), offset))
    groups = layout.groups
    for group, inner in ((groups[-2], box_rows), (groups[-1], box_columns)):
        if len(group) > 1 and group[-1] % inner:
            return f"a {inner}-wide box would straddle the split {group}"
    if not groups[-1]:
        return "C's columns are a dropped dim"
    problem = _strides_problem(list(layout.strides), offset, element_bytes(ops.out_element))
    return f"C: {problem}" if problem else layout


def _merged(layout: StoredLayout) -> StoredLayout:
    """The layout with the split dims of each of C's dims merged where the
    output holds them evenly strided (a channels-last convolution's rows
    (N, H, W), a linear's (B, S) stored whole): a box then never straddles
    them, whatever their sizes."""
    groups, strides, d = [], [], 0
    for group in layout.groups:
        sizes, kept = [], []
        for size, stride in zip(group, layout.strides[d:d + len(group)]):
            if sizes and kept[-1] == stride * size:
                sizes[-1], kept[-1] = sizes[-1] * size, stride
            else:
                sizes.append(size)
                kept.append(stride)
        groups.append(tuple(sizes))
        strides += kept
        d += len(group)
    return StoredLayout(tuple(groups), tuple(strides), layout.offset)


def store_columns(ops: MatmulOperands) -> int:
    """C's columns a TMA store writes: one swizzled 128-byte row."""
    return SWIZZLE_BYTES // element_bytes(ops.out_element)


def tma_store_problem(ops: MatmulOperands) -> str | None:
    """Why the results cannot leave through TMA stores (None: they can):
    sizes known when compiled, an element a tensor map holds, 16-byte rows,
    and a `stored_layout`."""
    if ops.open_m:
        return "M is known only at run time"
    if ops.out_element not in TENSOR_MAP_ELEMENTS:
        return f"no tensor map for {ops.out_element} results"
    if not ops.c_vectors:
        return "C's rows are not 16-byte aligned"
    layout = stored_layout(ops, STORE_ROWS, store_columns(ops))
    return layout if isinstance(layout, str) else None


def tensor_map(operand: ir.Value, box: list[int], attributes: dict[str, ir.Attribute] | None = None) -> ir.Value:
    """The host side of a tensor map (built at the
    current insertion point, outside the launch) of memref `operand`: nvgpu's descriptor of
    `box` (outermost first) with the 128-byte swizzle and zeros out of
    bounds, as the kernel's pointer parameter. The host plan passes it as
    a tensor map the runtime encodes (`tensor_map` of the memref argument)."""
    source = ir.MemRefType(operand.type)
    unranked = memref.cast(ir.UnrankedMemRefType.get(source.element_type, source.memory_space), operand)
    tile = ir.MemRefType.get(box, source.element_type,
                             memory_space=ir.Attribute.parse("#gpu.address_space<workgroup>"))
    descriptor_type = ir.Type.parse(
        f"!nvgpu.tensormap.descriptor<tensor = {tile}, swizzle = swizzle_128b, l2promo = none, "
        "oob = zero, interleave = none>")
    index = ir.IndexType.get()
    sizes = [arith.constant(index, size) for size in box]
    descriptor = nvgpu.TmaCreateDescriptorOp(descriptor_type, unranked, sizes)
    for name, value in (attributes or {}).items():
        descriptor.attributes[name] = value
    return builtin.unrealized_conversion_cast([llvm.PointerType.get()], [descriptor.result])


IM2COL_ATTRIBUTE = "twintrack.im2col"  # on a descriptor: the host encodes an im2col map (host_plan)


def im2col_tensor_map(image: ir.Value, geometry: Im2colGeometry, pixels: int, channels: int) -> ir.Value:
    """The host side of an im2col tensor map of a channels-last `image`
    (window_geometry.Im2colGeometry): a copy through it loads `pixels`
    output pixels' windows at one tap, `channels` channels each, with the
    128-byte swizzle and zeros where a window reads padding. nvgpu's
    descriptor knows only tiled maps: its box is one pixel's channels and
    the im2col part travels as an attribute the host plan reads."""
    rank = ir.MemRefType(image.type).rank
    array, i64 = ir.DenseI64ArrayAttr.get, ir.IntegerType.get_signless(64)
    im2col = ir.DictAttr.get({"lower": array(geometry.lower_corner), "upper": array(geometry.upper_corner),
                              "element_strides": array([1, *geometry.stride, 1]),
                              "channels": ir.IntegerAttr.get(i64, channels), "pixels": ir.IntegerAttr.get(i64, pixels)})
    return tensor_map(image, [1] * (rank - 1) + [channels], {IM2COL_ATTRIBUTE: im2col})


def makes_tensor_map(op: ir.Operation) -> bool:
    """Is `op` a host op of `tensor_map`: the descriptor, or its cast to the kernel's pointer?"""
    if op.name == "nvgpu.tma.create.descriptor":
        return True
    return op.name == "builtin.unrealized_conversion_cast" and len(op.operands) == 1 and \
        op.operands[0].owner.name == "nvgpu.tma.create.descriptor"


def described_buffer(pointer: ir.Value) -> ir.Value | None:
    """The memref a kernel operand made by `tensor_map` describes (None for
    any other operand): a TMA kernel reads and writes it through the map."""
    cast = pointer.owner
    if not isinstance(cast, (ir.Operation, ir.OpView)) or not makes_tensor_map(cast.operation) \
            or cast.operation.name == "nvgpu.tma.create.descriptor":
        return None
    unranked = cast.operation.operands[0].owner.operands[0]
    return unranked.owner.operands[0]


def erase_tensor_map(pointer: ir.Value) -> None:
    """Erase what `tensor_map` built, and the view `as_stored` made for it
    (a launch that failed to build reads them no more)."""
    cast = pointer.owner
    descriptor = cast.operands[0].owner
    unranked = descriptor.operands[0].owner
    sizes = [operand.owner for operand in list(descriptor.operands)[1:]]
    viewed = unranked.operands[0].owner
    reinterpreted = [viewed] if isinstance(viewed, (ir.Operation, ir.OpView)) \
        and viewed.name == "memref.reinterpret_cast" else []
    for op in [cast, descriptor, unranked, *sizes, *reinterpreted]:
        if not list(op.results[0].uses):
            op.erase()


def as_stored(output: ir.Value, layout: StoredLayout) -> ir.Value:
    """The output as its `stored_layout` (host side): reinterpreted with C's
    split dims in C's order, where that is not its own layout."""
    source = ir.MemRefType(output.type)
    strides, _ = source.get_strides_and_offset()
    if layout.sizes == list(source.shape) and list(layout.strides) == list(strides):
        return output
    stored = ir.MemRefType.get(layout.sizes, source.element_type,
                               layout=ir.StridedLayoutAttr.get(layout.offset, list(layout.strides)),
                               memory_space=source.memory_space)
    return memref.reinterpret_cast(stored, output, [], [], [], [layout.offset], layout.sizes, list(layout.strides))


def shared_pointer(w: KernelBuilder, address: ir.Value) -> ir.Value:
    """A shared-memory pointer (address space 3) to a shared address (an index)."""
    return llvm.inttoptr(llvm.PointerType.get(3), arith.index_cast(ir.IntegerType.get_signless(64), address))
