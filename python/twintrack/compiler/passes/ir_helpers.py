"""What the Python passes share: a base that registers a pass with a pass
manager, and small helpers over the `mlir` Python bindings."""

from __future__ import annotations

import math
from collections.abc import Callable

from mlir import ir
from mlir.dialects import arith


class PythonPass:
    """Base of the Python passes: a subclass sets `name` (its kebab-case name
    in recipes) and defines `_run(self, module, pass_)`."""

    name: str

    def add_to(self, pm) -> None:
        pm.add(self._run, name=type(self).__name__, argument=self.name)


DISPATCH_ATTR = "twintrack.dispatch"  # left on each linalg op by twintrack-dissolve-dispatches


def dispatch_label(op: ir.Operation) -> str | None:
    """The name of the dispatch `op` came from (e.g. matmul_horizontal_3), if any."""
    return ir.StringAttr(op.attributes[DISPATCH_ATTR]).value if DISPATCH_ATTR in op.attributes else None


def defining_op(value: ir.Value) -> ir.Operation | None:
    """The operation that defines `value` (None for a block argument)."""
    owner = value.owner
    if isinstance(owner, ir.OpView):
        return owner.operation
    return owner if isinstance(owner, ir.Operation) else None


VIEW_OPS = ("memref.subview", "memref.expand_shape", "memref.collapse_shape", "memref.cast",
            "memref.reinterpret_cast")


def vectors_fit(memref_type: ir.MemRefType, width: int, inner: int = -1) -> bool:
    """Can `width`-element vectors run along dim `inner` (unit stride), each
    aligned to a whole vector: a static layout whose offset and other strides
    are multiples of `width`? Not along a 0-d memref's: it has no dim."""
    strides, offset = memref_type.get_strides_and_offset()
    if not strides:
        return False
    dynamic = ir.ShapedType.get_dynamic_stride_or_offset()
    inner %= len(strides)
    if inner == len(strides) - 1 and identity_layout(memref_type) and _static_multiple(memref_type.shape[-1], width):
        return True  # row-major: every outer stride a multiple of the row, whatever sizes come at run time
    if offset == dynamic or dynamic in strides or strides[inner] != 1:
        return False
    return offset % width == 0 and all(s % width == 0 for d, s in enumerate(strides) if d != inner)


def view_vectors_fit(value: ir.Value, width: int, inner: int = -1) -> bool:
    """`vectors_fit` for a view whose layout holds strides known only at run
    time, proved from how it was made: unit-step subviews, casts and
    reshapes of a row-major buffer keep each stride a product of sizes
    times an earlier stride, so one a multiple of `width` stays one."""
    layout = _stride_kinds(value, width)
    if layout is None:
        return False
    kinds, offset_aligned = layout
    inner %= len(kinds) if kinds else 1
    return bool(kinds) and offset_aligned and kinds[inner] == "unit" and \
        all(kind == "multiple" for d, kind in enumerate(kinds) if d != inner)


def _stride_kinds(value: ir.Value, width: int) -> tuple[list[str | None], bool] | None:
    """(per dim: "unit", "multiple" (of `width`) or None (not known), whether
    the offset is a multiple of `width`) of a view chain down to a
    row-major buffer; None for any other chain."""
    memref_type = ir.MemRefType(value.type)
    owner = defining_op(value)
    if owner is None or owner.name == "memref.alloc":
        return _row_major_kinds(memref_type, width) if row_major(memref_type) else None
    if owner.name not in ("memref.subview", "memref.expand_shape", "memref.collapse_shape", "memref.cast"):
        return None
    source = _stride_kinds(owner.operands[0], width)
    if source is None:
        return None
    kinds, offset_aligned = source
    if owner.name == "memref.cast":
        return source
    if owner.name == "memref.collapse_shape":
        return [kinds[group[-1]] for group in reassociation(owner)], offset_aligned
    if owner.name == "memref.expand_shape":
        expanded = []
        for d, group in enumerate(reassociation(owner)):
            sizes = [memref_type.shape[r] for r in group]
            expanded += [_split_kind(kinds[d], sizes[k + 1:], width) for k in range(len(group))]
        return expanded, offset_aligned
    return _subview_kinds(owner, kinds, offset_aligned, width)


def _row_major_kinds(memref_type: ir.MemRefType, width: int) -> tuple[list[str | None], bool]:
    shape = memref_type.shape
    return [_split_kind("unit", shape[d + 1:], width) for d in range(len(shape))], True


def _split_kind(kind: str | None, inner_sizes: list[int], width: int) -> str | None:
    """The stride kind of a dim whose stride is `kind`'s times the sizes inside it (`inner_sizes`)."""
    if kind in ("multiple", None) or not inner_sizes:
        return kind
    static = math.prod(size for size in inner_sizes if not ir.ShapedType.is_dynamic_size(size))
    return "multiple" if static % width == 0 else None


def _subview_kinds(subview: ir.Operation, kinds: list, offset_aligned: bool,
                   width: int) -> tuple[list[str | None], bool] | None:
    """A subview of unit steps and its source's rank: the strides stay; an
    offset along a unit dim must be a multiple of `width`, and is known."""
    steps = list(ir.DenseI64ArrayAttr(subview.attributes["static_strides"]))
    offsets = list(ir.DenseI64ArrayAttr(subview.attributes["static_offsets"]))
    if len(steps) != len(kinds) or any(step != 1 for step in steps) or \
            ir.MemRefType(subview.results[0].type).rank != len(kinds):
        return None
    dynamic = ir.ShapedType.get_dynamic_stride_or_offset()
    for kind, offset in zip(kinds, offsets):
        if offset != 0 and kind != "multiple" and (offset == dynamic or kind is None or offset % width):
            offset_aligned = False
    return kinds, offset_aligned


def as_index(value: ir.Value) -> ir.Value:
    """An integer value as an index (cast where it is not one)."""
    return value if isinstance(value.type, ir.IndexType) else arith.index_cast(ir.IndexType.get(), value)


def reassociation(reshape: ir.Operation) -> list[list[int]]:
    """The dim groups of an expand_shape or collapse_shape (memref or tensor)."""
    return [[ir.IntegerAttr(d).value for d in group] for group in ir.ArrayAttr(reshape.attributes["reassociation"])]


def identity_layout(memref_type: ir.MemRefType) -> bool:
    """Whether a memref type has the default (row-major, offset 0) layout."""
    layout = memref_type.layout
    return isinstance(layout, ir.AffineMapAttr) and layout.value == ir.AffineMap.get_identity(memref_type.rank)


def _static_multiple(size: int, width: int) -> bool:
    return not ir.ShapedType.is_dynamic_size(size) and size % width == 0


def row_major(memref_type: ir.MemRefType) -> bool:
    """Contiguous and row-major, offset 0: a static layout with those
    strides, or (any sizes, dynamic ones too) the identity layout."""
    if not memref_type.has_static_shape:
        layout = memref_type.layout
        return isinstance(layout, ir.AffineMapAttr) and \
            ir.AffineMapAttr(layout).value == ir.AffineMap.get_identity(memref_type.rank)
    strides, offset = memref_type.get_strides_and_offset()
    shape = memref_type.shape
    return offset == 0 and strides == [math.prod(shape[d + 1:]) for d in range(len(shape))]


def buffer_root(value: ir.Value) -> ir.Value:
    """The buffer a memref value is a view of (an allocation or an argument)."""
    while (owner := defining_op(value)) is not None and owner.name in VIEW_OPS:
        value = owner.operands[0]
    return value


def constant(value: int | float, t: ir.Type) -> ir.Value:
    """An arith.constant of `value`: a scalar of type `t`, or its splat where `t` is a vector."""
    element = ir.VectorType(t).element_type if isinstance(t, ir.VectorType) else t
    scalar = ir.IntegerAttr.get(element, int(value)) if isinstance(element, ir.IntegerType) \
        else ir.FloatAttr.get(element, float(value))
    attribute = ir.DenseElementsAttr.get_splat(t, scalar) if isinstance(t, ir.VectorType) else scalar
    return arith.ConstantOp(t, attribute).result


def is_zero_constant(op: ir.Operation | None) -> bool:
    """Is `op` an arith.constant of float zero?"""
    if op is None or op.name != "arith.constant":
        return False
    attribute = op.attributes["value"]
    return isinstance(attribute, ir.FloatAttr) and attribute.value == 0.0


def erase_if_unused(op: ir.Operation | None) -> None:
    """Erase `op` if none of its results is used (a producer left dead by a rewrite)."""
    if op is not None and not any(list(result.uses) for result in op.results):
        op.erase()


def written_buffers(op: ir.Operation) -> list[ir.Value]:
    """The buffers a linalg op writes: its inits (`outputs`; a transpose's,
    a copy's `init`), or all its operands where it names none."""
    view = op.opview
    for name in ("outputs", "init"):
        if hasattr(view, name):
            written = getattr(view, name)
            return [written] if isinstance(written, ir.Value) else list(written)
    return list(op.operands)


def users_of(value: ir.Value) -> list[ir.Operation]:
    """The ops using `value`, each once."""
    users = []
    for use in value.uses:
        owner = use.owner.operation if isinstance(use.owner, ir.OpView) else use.owner
        if owner not in users:
            users.append(owner)
    return users


RESHAPE_OPS = ("memref.expand_shape", "memref.collapse_shape")


def reshape_aliases(root: ir.Value) -> list[ir.Value]:
    """`root` and every reshape of it (and of those)."""
    found, pending = [], [root]
    while pending:
        value = pending.pop()
        found.append(value)
        pending += [user.results[0] for user in users_of(value) if user.name in RESHAPE_OPS]
    return found


def block_positions(block: ir.Block) -> tuple[list[ir.Operation], dict]:
    """The block's ops, and each one's index among them."""
    ops = [op.operation for op in block.operations]
    return ops, {op: i for i, op in enumerate(ops)}


def position_in_block(user: ir.Operation, block: ir.Block, position: dict) -> int:
    """The position in `block` (`block_positions`) of `user`, or of the op of the block it is nested in."""
    while user.block != block:
        user = user.parent
    return position[user]


def defined_functions(module: ir.Operation) -> list[ir.Operation]:
    """The module's func.func ops that have a body (declarations aside)."""
    return [op.operation for op in module.regions[0].blocks[0].operations
            if op.operation.name == "func.func" and op.operation.regions[0].blocks]


def ops_between(first: ir.Operation, last: ir.Operation) -> list[ir.Operation]:
    """The ops strictly between `first` and `last` in their block (the
    block read only up to `last`: listing a model's whole function for each
    site made the kernel passes quadratic)."""
    between, inside = [], False
    for op in first.block.operations:
        op = op.operation
        if op == last:
            return between
        if inside:
            between.append(op)
        inside = inside or op == first
    return between


def written_between(first: ir.Operation, last: ir.Operation, root: ir.Value) -> bool:
    """Might an op between `first` and `last` (same block) write the buffer
    `root`? An op with regions (a kernel built before) counts as writing
    every buffer used inside it."""
    if first.block != last.block:
        return True
    return any(buffer_root(v) == root for op in ops_between(first, last) for v in _maybe_written(op))


def _maybe_written(op: ir.Operation) -> list[ir.Value]:
    if not op.regions:
        return [v for v in written_buffers(op) if isinstance(v.type, ir.MemRefType)]
    return [v for nested in nested_ops(op) for v in nested.operands if isinstance(v.type, ir.MemRefType)]


def kernel_ref(launch: ir.Operation) -> tuple[str, str]:
    """(gpu.module name, function name) of the kernel a gpu.launch_func calls (its `@module::@func`)."""
    module_name, kernel_name = (part.strip("@") for part in str(launch.attributes["kernel"]).split("::"))
    return module_name, kernel_name


def kernel_launches(module: ir.Operation) -> list[ir.Operation]:
    """The gpu.launch_func ops of the module's host functions (the kernels'
    own ops not walked: in a large model they are most of the module)."""
    return [op for function in defined_functions(module)
            for op in nested_ops(function, lambda op: op.name == "gpu.launch_func")]


def gpu_functions(module: ir.Operation) -> dict[tuple[str, str], ir.Operation]:
    """The module's gpu.func ops by (gpu.module name, function name)."""
    found = {}
    for op in module.regions[0].blocks[0].operations:
        if op.operation.name == "gpu.module":
            name = ir.StringAttr(op.operation.attributes["sym_name"]).value
            for child in op.regions[0].blocks[0].operations:
                if child.operation.name == "gpu.func":
                    found[(name, ir.StringAttr(child.operation.attributes["sym_name"]).value)] = child.operation
    return found


def nested_ops(root: ir.Operation, keep: Callable[[ir.Operation], bool] = lambda op: True,
               order=ir.WalkOrder.PRE_ORDER) -> list[ir.Operation]:
    """`root` and the ops nested in it (in walk `order`) for which `keep` holds."""
    found = []

    def visit(op: ir.Operation):
        if keep(op):
            found.append(op)
        return ir.WalkResult.ADVANCE

    root.walk(visit, order)
    return found


def elementwise_map(value: ir.Value, body: Callable[[ir.Value], ir.Value]) -> ir.Value:
    """A linalg.generic applying `body` to each element of the tensor `value`
    (its open sizes read with tensor.dim), built at the current insertion point."""
    from mlir.dialects import tensor
    shaped = ir.RankedTensorType(value.type)
    sizes = [tensor.dim(value, arith.constant(ir.IndexType.get(), d)) if shaped.is_dynamic_dim(d) else size
             for d, size in enumerate(shaped.shape)]
    empty = tensor.empty(sizes, shaped.element_type)
    return _elementwise_generic([shaped], value, empty, body).results[0]


def elementwise_into(source: ir.Value, target: ir.Value, body: Callable[[ir.Value], ir.Value]) -> None:
    """`elementwise_map` on buffers: `body` of each element of the memref
    `source` written to `target`'s (same shape), at the current insertion point."""
    _elementwise_generic([], source, target, body)


def _elementwise_generic(results: list[ir.Type], value: ir.Value, init: ir.Value,
                         body: Callable[[ir.Value], ir.Value]) -> ir.Operation:
    from mlir.dialects import linalg
    shaped = ir.ShapedType(value.type)
    identity = ir.AffineMapAttr.get(ir.AffineMap.get_identity(shaped.rank))
    parallel = ir.Attribute.parse("#linalg.iterator_type<parallel>")
    generic = linalg.GenericOp(results, [value], [init], ir.ArrayAttr.get([identity, identity]),
                               ir.ArrayAttr.get([parallel] * shaped.rank))
    block = generic.regions[0].blocks.append(shaped.element_type, shaped.element_type)
    with ir.InsertionPoint(block):
        linalg.YieldOp([body(block.arguments[0])])
    return generic


def shaped_bytes(t: ir.ShapedType) -> int:
    """Bytes of a static tensor or memref (i1 counts as a byte)."""
    width = t.element_type.width if hasattr(t.element_type, "width") else 8
    return math.prod(t.shape) * max(1, width // 8)


_NOT_FLOPS = {"arith.constant", "arith.cmpf", "arith.select", "arith.extf", "arith.truncf",
              "arith.sitofp", "arith.uitofp", "arith.fptosi", "arith.fptoui", "arith.bitcast"}


def elementwise_flops(op: ir.Operation) -> int:
    """Floating-point ops one arith/math op (or vector.fma) does: its float
    lanes, twice for a fused multiply-add; 0 for conversions and selects."""
    if op.name == "llvm.inline_asm":  # the row kernels' div.full.f32
        return 1 if str(op.attributes["asm_string"]).strip('"').startswith("div.") else 0
    if not (op.name.split(".")[0] in ("arith", "math") and op.name not in _NOT_FLOPS or op.name == "vector.fma"):
        return 0
    lanes = _float_lanes(op.results[0].type) if op.results else 0
    return lanes * (2 if op.name.endswith(".fma") else 1)


def symbol_name(op: ir.Operation) -> str:
    """The name `op` defines (its `sym_name`)."""
    return ir.StringAttr(op.attributes["sym_name"]).value


def is_half(t: ir.Type) -> bool:
    """Is `t` a 16-bit float (f16 or bf16)?"""
    return isinstance(t, (ir.F16Type, ir.BF16Type))


def is_elementwise_generic(op: ir.Operation) -> bool:
    """Is `op` a linalg.generic whose loops are all parallel?"""
    return op.name == "linalg.generic" and all("parallel" in str(t) for t in op.attributes["iterator_types"])


def _is_float(t: ir.Type) -> bool:
    return isinstance(t, (ir.F16Type, ir.BF16Type, ir.F32Type, ir.F64Type))


def _float_lanes(t: ir.Type) -> int:
    """Floating-point values in a result: 1 for a scalar, the lanes of a vector, else 0."""
    if isinstance(t, ir.VectorType):
        return math.prod(t.shape) if _is_float(t.element_type) else 0
    return 1 if _is_float(t) else 0
