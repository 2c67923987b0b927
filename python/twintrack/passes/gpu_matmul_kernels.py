"""gpu-matmul-kernels: linalg.matmul / linalg.batch_matmul on memrefs become
a shared-memory tiled kernel: tensor cores (mma.sync,
twintrack.kernels.mma_matmul) for f16 and bf16 operands, CUDA cores
(twintrack.kernels.simt_matmul) otherwise or when no tensor-core tile fits.

The tile shapes come from lowering/tuning/matmul.toml. A zero fill of the
output right before the matmul is folded into the kernel's first write, and
the elementwise op right after it that reads its result (bias, activation,
residual, narrowing) into its stores, as an epilogue (twintrack.kernels.
epilogue), unless that op writes over A or B. Matmuls the kernels cannot take (shapes not a multiple of any tile, dynamic
or unaligned layouts, other element types) stay linalg ops for the generic
pipeline.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field, replace
from pathlib import Path

from mlir import ir

from ..kernels.epilogue import Epilogue, EpilogueInput
from ..kernels.matmul_common import VECTOR_BYTES, MatmulOperands, element_bytes
from ..kernels.mma_matmul import MmaTileConfig, mma_matmul_module
from ..kernels.simt_matmul import TileConfig, simt_matmul_module
from .generic_body import describe_body, indexing_maps, map_dims
from .ir_helpers import PythonPass, defining_op, nested_ops, splice_generated_launch

TUNING_FILE = Path(__file__).resolve().parents[3] / "lowering" / "tuning" / "matmul.toml"
ELEMENTS = ("f32", "f16", "bf16")  # element types the kernels take


TENSOR_CORE_ELEMENTS = ("f16", "bf16")


@dataclass(frozen=True)
class TileTable:
    """Tile shapes, largest first, each with the fewest blocks it must give
    (its own `min_blocks` in the table, else the table's)."""
    mma: list[tuple[MmaTileConfig, int]]
    simt: list[tuple[TileConfig, int]]


def load_tile_table(path: Path = TUNING_FILE) -> TileTable:
    data = tomllib.loads(path.read_text())

    def entries(key, config):
        return [(config(**{k: v for k, v in e.items() if k != "min_blocks"}), e.get("min_blocks", data["min_blocks"]))
                for e in data.get(key, ())]
    return TileTable(entries("mma", MmaTileConfig), entries("simt", TileConfig))


def choose_kernel(operands: MatmulOperands, table: TileTable):
    """(generator, tile, kernel stem) for a matmul, or None: the generic pipeline."""
    if operands.in_element in TENSOR_CORE_ELEMENTS:
        tile = choose_tile(operands, table.mma)
        if tile is not None:
            return mma_matmul_module, tile, "mma_matmul"
    tile = choose_tile(operands, table.simt)
    return (simt_matmul_module, tile, "simt_matmul") if tile is not None else None


def _blocks(operands: MatmulOperands, tile) -> int:
    return (operands.m // tile.bm) * (operands.n // tile.bn) * (operands.batch or 1)


def choose_tile(operands: MatmulOperands, tiles: list[tuple]):
    """The first tile that divides the matmul and gives at least its
    `min_blocks` blocks, else the dividing tile with the most blocks, else None."""
    fitting = [(t, least) for t, least in tiles
               if operands.m % t.bm == 0 and operands.n % t.bn == 0 and operands.k % t.bk == 0]
    for tile, least in fitting:
        if _blocks(operands, tile) >= least:
            return tile
    return max((t for t, _ in fitting), key=lambda t: _blocks(operands, t), default=None)


def _aligned(memref_type: ir.MemRefType) -> bool:
    """Static layout, unit innermost stride, rows and offset 16-byte aligned."""
    element = str(memref_type.element_type)
    if element not in ELEMENTS or not memref_type.has_static_shape:
        return False
    strides, offset = memref_type.get_strides_and_offset()
    per_vector = VECTOR_BYTES // element_bytes(element)
    dynamic = ir.ShapedType.get_dynamic_stride_or_offset()
    if offset == dynamic or dynamic in strides or strides[-1] != 1:
        return False
    return offset % per_vector == 0 and all(s % per_vector == 0 for s in strides[:-1])


def b_is_transposed(op: ir.Operation) -> bool | None:
    """Does the matmul read B transposed (its indexing maps swap B's last two
    dims)? None for any other maps than these two: the generic pipeline."""
    maps = [ir.AffineMapAttr(m).value for m in op.attributes["indexing_maps"]] \
        if "indexing_maps" in op.attributes else None
    if maps is None:
        return False
    dims = [map_dims(m) for m in maps]
    batch = (0,) if op.name == "linalg.batch_matmul" else ()
    m, n, k = (d + len(batch) for d in range(3))
    if dims[0] != (*batch, m, k) or dims[2] != (*batch, m, n):
        return None
    return {(*batch, k, n): False, (*batch, n, k): True}.get(dims[1])


def matmul_operands(op: ir.Operation, output: ir.Value) -> MatmulOperands | None:
    """The kernel's view of `op` writing into `output` (its own or a narrower one)."""
    a, b, c = op.operands[0].type, op.operands[1].type, output.type
    transposed = b_is_transposed(op)
    if transposed is None or not all(isinstance(t, ir.MemRefType) and _aligned(t) for t in (a, b, c)):
        return None
    if str(a.element_type) != str(b.element_type):
        return None
    batched = op.name == "linalg.batch_matmul"
    *batch, m, k = a.shape
    n = b.shape[-2] if transposed else b.shape[-1]
    return MatmulOperands(str(a), str(b), str(c), batch[0] if batched else None, m, n, k,
                          str(a.element_type), str(c.element_type), transposed)


def _neighbour(op: ir.Operation, offset: int) -> tuple[ir.Operation | None, list[ir.Operation]]:
    """The op `offset` (1 or -1) away, passing over allocations (they touch
    no data), and the allocations passed."""
    block_ops = [o.operation for o in op.block.operations]
    index, passed = block_ops.index(op) + offset, []
    while 0 <= index < len(block_ops) and block_ops[index].name == "memref.alloc":
        passed.append(block_ops[index])
        index += offset
    return (block_ops[index] if 0 <= index < len(block_ops) else None), passed


def _zero_fill_before(op: ir.Operation) -> ir.Operation | None:
    """The linalg.fill of 0 into this matmul's output, if it directly precedes it."""
    previous, _ = _neighbour(op, -1)
    if previous is None or previous.name != "linalg.fill" or previous.operands[1] != op.operands[2]:
        return None
    value = defining_op(previous.operands[0])
    if value is None or value.name != "arith.constant":
        return None
    attr = value.attributes["value"]
    return previous if isinstance(attr, ir.FloatAttr) and attr.value == 0.0 else None


def describe_epilogue(generic: ir.Operation, accumulator: ir.Value) -> Epilogue | None:
    """The epilogue of an elementwise linalg.generic reading `accumulator`
    element for element and writing one output element for element, or None."""
    if any("reduction" in str(it) for it in generic.attributes["iterator_types"]):
        return None
    view = generic.opview
    inputs, outputs = list(view.inputs), list(view.outputs)
    maps = indexing_maps(generic)
    identity = ir.AffineMap.get_identity(maps[0].n_dims)
    if len(outputs) != 1 or maps[-1] != identity or sum(v == accumulator for v in inputs) != 1:
        return None
    if list(generic.regions[0].blocks[0].arguments[len(inputs)].uses):
        return None  # reads the output's old value
    described = []
    for value, affine_map in zip(inputs, maps):
        if value == accumulator:
            if affine_map != identity:
                return None
            described.append(EpilogueInput(None))
        elif isinstance(value.type, ir.MemRefType) and (dims := map_dims(affine_map)) is not None:
            described.append(EpilogueInput(str(value.type), dims))
        else:
            return None
    body = describe_body(generic)
    return Epilogue(tuple(described), *body) if body else None


@dataclass(frozen=True)
class _FoundEpilogue:
    consumer: ir.Operation
    epilogue: Epilogue
    allocations: list[ir.Operation]     # between matmul and epilogue: the kernel writes into them
    rows: _RowSplit | None = None       # the epilogue works on the result split into (batch.., row, col)
    batch_split: ir.Operation | None = None  # or on a batched result split into (batch / heads, heads, row, col)

    @property
    def view(self) -> ir.Operation | None:
        """The memref.expand_shape the epilogue reads the result through, if any."""
        return self.rows.expand if self.rows is not None else self.batch_split

    @property
    def heads(self) -> int | None:
        return ir.MemRefType(self.batch_split.results[0].type).shape[1] if self.batch_split is not None else None


def _batch_split(op: ir.Operation, view: ir.Operation) -> ir.Operation | None:
    """`view` if it splits a batched matmul's batch in two ((B*H, M, N) as (B, H, M, N))."""
    if op.name != "linalg.batch_matmul" or view.name != "memref.expand_shape" or view.operands[0] != op.operands[2]:
        return None
    return view if _reassociation(view) == [[0, 1], [2], [3]] else None


def _reassociation(view: ir.Operation) -> list[list[int]]:
    """The dim groups of a memref.expand_shape."""
    return [[ir.IntegerAttr(d).value for d in g] for g in ir.ArrayAttr(view.attributes["reassociation"])]


@dataclass(frozen=True)
class _RowSplit:
    """A 2-D matmul result read through memref.expand_shape that splits its
    rows ((8·256)×N viewed as 8×256×N, as torch-mlir writes a 3-D linear).
    The epilogue then runs on the 2-D result: its 3-D identity-indexed
    operands are read through collapsed views, and its column-indexed ones
    (a bias) by column."""
    expand: ir.Operation
    leading: int                        # dims that fold into the matmul's rows

    def flatten(self, epilogue: Epilogue) -> Epilogue | None:
        if any(op.name == "linalg.index" for op in epilogue.ops):
            return None  # its loop indices are the split ones
        identity, column = tuple(range(self.leading + 1)), (self.leading,)
        inputs = []
        for inp in epilogue.inputs:
            if inp.memref_type is None:
                inputs.append(inp)
            elif inp.dims == identity:
                inputs.append(EpilogueInput(str(self.collapsed_type(inp.memref_type)), (0, 1)))
            elif inp.dims == column:
                inputs.append(EpilogueInput(inp.memref_type, (1,)))
            else:
                return None
        return Epilogue(tuple(inputs), epilogue.ops, epilogue.result)

    def collapsed_type(self, memref_type: str) -> ir.MemRefType:
        shaped = ir.MemRefType(ir.Type.parse(memref_type))
        rows = 1
        for size in shaped.shape[:self.leading]:
            rows *= size
        with ir.Location.unknown(shaped.context):
            return ir.MemRefType.get([rows, shaped.shape[-1]], shaped.element_type)

    def collapse(self, value: ir.Value, before: ir.Operation) -> ir.Value:
        """`value` (identity layout, rank leading+1) as rows × columns."""
        from mlir.dialects import memref
        if value == self.expand.results[0]:
            return self.expand.operands[0]
        i64 = ir.IntegerType.get_signless(64)
        groups = ir.ArrayAttr.get([ir.ArrayAttr.get([ir.IntegerAttr.get(i64, d) for d in range(self.leading)]),
                                   ir.ArrayAttr.get([ir.IntegerAttr.get(i64, self.leading)])])
        with ir.InsertionPoint(before), before.location:
            return memref.CollapseShapeOp(self.collapsed_type(str(value.type)), value, groups).result

    @staticmethod
    def of(op: ir.Operation, view: ir.Operation) -> _RowSplit | None:
        """The split, if `view` is an expand_shape of the 2-D `op` result that splits only its rows."""
        if op.name != "linalg.matmul" or view.name != "memref.expand_shape" or view.operands[0] != op.operands[2]:
            return None
        groups = _reassociation(view)
        if len(groups) != 2 or len(groups[1]) != 1:
            return None
        return _RowSplit(view, len(groups[0]))


def _epilogue_after(op: ir.Operation) -> _FoundEpilogue | None:
    """The elementwise op right after the matmul that is the only reader of its
    (temporary) result: bias, activation, residual, or just a narrowing to
    f16 as torch-mlir writes a half-precision matmul. The kernel applies it
    to each result before storing, so the temporary never exists."""
    after, allocations = _neighbour(op, 1)  # allocations: the epilogue's output buffer, say
    result = op.operands[2]
    rows = _RowSplit.of(op, after) if after is not None else None
    batch_split = _batch_split(op, after) if after is not None and rows is None else None
    view = rows.expand if rows is not None else batch_split
    if view is not None:
        after, more = _neighbour(view, 1)
        allocations += more
    read = view.results[0] if view is not None else result
    if after is None or after.name != "linalg.generic":
        return None
    in_place = list(after.opview.outputs)[0] == read  # reuse-buffers made it overwrite its input
    owner = defining_op(result)
    users = [use.owner for use in result.uses] + ([use.owner for use in read.uses] if view is not None else [])
    expected = (op, after) + ((view,) if view is not None else ())
    if not in_place and (owner is None or owner.name != "memref.alloc" or any(
            u.name not in ("linalg.fill", "memref.dealloc") and u not in expected for u in users)):
        return None
    if batch_split is not None and not all(_identity_layout(v) for v in after.operands):
        return None
    epilogue = describe_epilogue(after, read)
    if epilogue is not None and rows is not None:
        epilogue = rows.flatten(epilogue)
        if not all(_identity_layout(v) for v in list(after.opview.inputs) + list(after.opview.outputs)
                   if isinstance(v.type, ir.MemRefType) and ir.MemRefType(v.type).rank == rows.leading + 1):
            return None
    if epilogue is None:
        return None
    # The kernel stores results while other blocks still read A and B: the
    # output must not be (a view of) either. (Separate kernels were ordered.)
    output = _root(list(after.opview.outputs)[0])
    if output in (_root(op.operands[0]), _root(op.operands[1])):
        return None
    for value, described in zip(after.opview.inputs, epilogue.inputs):
        if described.memref_type is not None and _root(value) == output \
                and described.dims != tuple(range(len(described.dims))):
            return None  # read at other elements than the one being written
    return _FoundEpilogue(after, epilogue, allocations, rows, batch_split)


def _identity_layout(value: ir.Value) -> bool:
    layout = ir.AffineMapAttr(ir.MemRefType(value.type).layout).value
    return layout == ir.AffineMap.get_identity(layout.n_dims)


_VIEWS = ("memref.subview", "memref.expand_shape", "memref.collapse_shape", "memref.cast",
          "memref.reinterpret_cast")


def _root(value: ir.Value) -> ir.Value:
    """The buffer a memref value is a view of (an allocation or an argument)."""
    while (owner := defining_op(value)) is not None and owner.name in _VIEWS:
        value = owner.operands[0]
    return value


@dataclass(frozen=True)
class _PermutedStore:
    """A batched matmul's result split along its batch (memref.expand_shape
    [[0, 1], [2], [3]]) and permuted by a linalg.transpose that keeps the
    innermost dim, as attention's (B*H, S, D) output becomes (B, S, H, D).
    The kernel stores each result where the transpose puts it."""
    expand: ir.Operation
    transpose: ir.Operation
    allocations: list[ir.Operation]     # between them: the transpose's output, say
    heads: int
    permutation: tuple[int, ...]

    @staticmethod
    def after(op: ir.Operation) -> _PermutedStore | None:
        view, _ = _neighbour(op, 1)
        if view is None or _batch_split(op, view) is None:
            return None
        transpose, allocations = _neighbour(view, 1)
        if transpose is None or transpose.name != "linalg.transpose" or transpose.operands[0] != view.results[0]:
            return None
        permutation = tuple(ir.DenseI64ArrayAttr(transpose.attributes["permutation"]))
        temporary = op.operands[2]
        readers = [use.owner for use in temporary.uses] + [use.owner for use in view.results[0].uses]
        if permutation[-1] != 3 or _root(transpose.operands[1]) == temporary or any(
                r.name not in ("linalg.fill", "memref.dealloc") and r not in (op, view, transpose) for r in readers):
            return None
        return _PermutedStore(view, transpose, allocations, ir.MemRefType(view.results[0].type).shape[1], permutation)


@dataclass
class _MatmulSite:
    """A matmul and the ops around it that its kernel absorbs."""
    op: ir.Operation
    fill: ir.Operation | None = None       # zero fill of the output: the kernel overwrites instead
    found: _FoundEpilogue | None = None    # the elementwise op applied as the kernel's epilogue
    permuted: _PermutedStore | None = None  # or the permutation its result is stored through

    @classmethod
    def of(cls, op: ir.Operation) -> _MatmulSite:
        fill = _zero_fill_before(op)
        found = _epilogue_after(op) if fill is not None else None
        permuted = _PermutedStore.after(op) if fill is not None and found is None else None
        moved = (found.allocations if found else []) + (permuted.allocations if permuted else [])
        if found is not None and found.batch_split is not None:
            moved.append(found.batch_split)  # an epilogue in place writes through this view
        for allocation in moved:  # the kernel, in the matmul's place, writes into them
            allocation.move_before(op)  # (harmless if the matmul stays: they touch no data)
        return cls(op, fill, found, permuted)

    def operands(self) -> MatmulOperands | None:
        operands = matmul_operands(self.op, self.output)
        if operands is not None and self.permuted is not None:
            return replace(operands, heads=self.permuted.heads, permutation=self.permuted.permutation)
        if operands is not None and self.found is not None and self.found.heads is not None:
            return replace(operands, heads=self.found.heads, permutation=(0, 1, 2, 3))
        return operands

    @property
    def consumer(self) -> ir.Operation | None:
        return self.found.consumer if self.found else None

    @property
    def epilogue(self) -> Epilogue | None:
        return self.found.epilogue if self.found else None

    views: list = field(default_factory=list)  # (value, collapsed view) made for a row-split epilogue

    def _as_rows(self, value: ir.Value) -> ir.Value:
        """`value` as rows × columns where the epilogue works on split rows (made once, before the matmul)."""
        if self.found is None or self.found.rows is None or ir.MemRefType(value.type).rank < 2:
            return value
        for original, view in self.views:
            if original == value:
                return view
        view = self.found.rows.collapse(value, self.op)
        self.views.append((value, view))
        return view

    def discard_views(self) -> None:
        """Undo the views when the matmul keeps its linalg op after all."""
        for _, view in self.views:
            if (owner := defining_op(view)) is not None and owner.name == "memref.collapse_shape" \
                    and not list(view.uses):
                owner.erase()
        self.views.clear()

    @property
    def output(self) -> ir.Value:
        """Where the kernel stores: the epilogue's or the transpose's output, else the matmul's."""
        if self.permuted is not None:
            return self.permuted.transpose.operands[1]
        if self.consumer is None:
            return self.op.operands[2]
        return self._as_rows(list(self.consumer.opview.outputs)[0])

    def kernel_arguments(self) -> list[ir.Value]:
        """What the kernel function takes: A, B, the output, then the epilogue's tensors."""
        extra = []
        if self.epilogue is not None:
            inputs = list(self.consumer.opview.inputs)
            extra = [self._as_rows(inputs[k]) for k, _ in self.epilogue.tensor_inputs()]
        return [self.op.operands[0], self.op.operands[1], self.output] + extra

    def absorbed(self) -> list[ir.Operation]:
        """Ops that go away with the matmul (the temporary too, with an epilogue)."""
        ops = [o for o in (self.fill, self.consumer) if o is not None]
        temporary = self.op.operands[2]
        if self.permuted is not None:
            ops += [self.permuted.transpose, self.permuted.expand]
        if (self.consumer is not None or self.permuted is not None) and _root(self.output) != temporary:
            if self.found is not None and self.found.view is not None:
                ops.append(self.found.view)  # read only by the epilogue
            ops += [use.owner for use in temporary.uses if use.owner.name == "memref.dealloc"] + [defining_op(temporary)]
        return ops


@dataclass(frozen=True)
class GpuMatmulKernels(PythonPass):
    name = "gpu-matmul-kernels"

    def _run(self, module: ir.Operation, pass_) -> None:
        matmuls = nested_ops(module, lambda op: op.name in ("linalg.matmul", "linalg.batch_matmul"))
        table = load_tile_table()
        replaced = 0
        for op in matmuls:
            site = _MatmulSite.of(op)
            operands = site.operands()
            chosen = choose_kernel(operands, table) if operands else None
            if chosen is None:
                site.discard_views()
            else:
                generator, tile, stem = chosen
                _replace(module, site, operands, generator, tile, f"forward_{stem}_{replaced}")
                replaced += 1


def _replace(module, site: _MatmulSite, operands, generator, tile, kernel) -> None:
    op = site.op
    arguments = site.kernel_arguments()  # any views they need go before the kernel
    text = generator(f"launch_{kernel}", kernel, operands, tile, accumulate=site.fill is None,
                     location=str(op.location), epilogue=site.epilogue)
    splice_generated_launch(module, text, op, arguments)
    absorbed = site.absorbed()
    op.erase()
    for other in absorbed:
        other.erase()
