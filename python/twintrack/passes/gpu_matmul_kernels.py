"""gpu-matmul-kernels: linalg.matmul / linalg.batch_matmul on memrefs become
a shared-memory tiled kernel: tensor cores (mma.sync,
twintrack.kernels.mma_matmul) for f16 operands, CUDA cores
(twintrack.kernels.simt_matmul) otherwise or when no tensor-core tile fits.

The tile shapes come from lowering/tuning/matmul.toml. A zero fill of the
output right before the matmul is folded into the kernel's first write.
Matmuls the kernels cannot take (shapes not a multiple of any tile, dynamic
or unaligned layouts, other element types) stay linalg ops for the generic
pipeline.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path

from mlir import ir

from ..kernels.matmul_common import VECTOR_BYTES, MatmulOperands
from ..kernels.mma_matmul import MmaTileConfig, mma_matmul_module
from ..kernels.simt_matmul import TileConfig, simt_matmul_module

TUNING_FILE = Path(__file__).resolve().parents[3] / "lowering" / "tuning" / "matmul.toml"
ELEMENTS = {"f32": 4, "f16": 2, "bf16": 2}


# The pinned convert-nvgpu-to-nvvm cannot type a bf16 mma.sync ("failed to
# deduce operand PTX types", emitted without failing the pass, which aborts
# the Python bindings), so bf16 takes the CUDA-core kernel for now.
TENSOR_CORE_ELEMENTS = ("f16",)


@dataclass(frozen=True)
class TileTable:
    min_blocks: int
    mma: list[MmaTileConfig]
    simt: list[TileConfig]


def load_tile_table(path: Path = TUNING_FILE) -> TileTable:
    data = tomllib.loads(path.read_text())
    return TileTable(data["min_blocks"], [MmaTileConfig(**e) for e in data.get("mma", ())],
                     [TileConfig(**e) for e in data["simt"]])


def choose_kernel(operands: MatmulOperands, table: TileTable):
    """(generator, tile, kernel stem) for a matmul, or None: the generic pipeline."""
    if operands.in_element in TENSOR_CORE_ELEMENTS:
        tile = choose_tile(operands, table.min_blocks, table.mma)
        if tile is not None:
            return mma_matmul_module, tile, "mma_matmul"
    tile = choose_tile(operands, table.min_blocks, table.simt)
    return (simt_matmul_module, tile, "simt_matmul") if tile is not None else None


def _blocks(operands: MatmulOperands, tile) -> int:
    return (operands.m // tile.bm) * (operands.n // tile.bn) * (operands.batch or 1)


def choose_tile(operands: MatmulOperands, min_blocks: int, tiles: list):
    """The first tile that divides the matmul and gives at least `min_blocks`
    blocks, else the dividing tile with the most blocks, else None."""
    fitting = [t for t in tiles if operands.m % t.bm == 0 and operands.n % t.bn == 0 and operands.k % t.bk == 0]
    for tile in fitting:
        if _blocks(operands, tile) >= min_blocks:
            return tile
    return max(fitting, key=lambda t: _blocks(operands, t), default=None)


def _aligned(memref_type: ir.MemRefType) -> bool:
    """Static layout, unit innermost stride, rows and offset 16-byte aligned."""
    element = str(memref_type.element_type)
    if element not in ELEMENTS or not memref_type.has_static_shape:
        return False
    strides, offset = memref_type.get_strides_and_offset()
    per_vector = VECTOR_BYTES // ELEMENTS[element]
    dynamic = ir.ShapedType.get_dynamic_stride_or_offset()
    if offset == dynamic or dynamic in strides or strides[-1] != 1:
        return False
    return offset % per_vector == 0 and all(s % per_vector == 0 for s in strides[:-1])


def matmul_operands(op: ir.Operation, output: ir.Value) -> MatmulOperands | None:
    """The kernel's view of `op` writing into `output` (its own or a narrower one)."""
    a, b, c = op.operands[0].type, op.operands[1].type, output.type
    if not all(isinstance(t, ir.MemRefType) and _aligned(t) for t in (a, b, c)):
        return None
    if str(a.element_type) != str(b.element_type):
        return None
    batched = op.name == "linalg.batch_matmul"
    *batch, m, k = a.shape
    n = b.shape[-1]
    return MatmulOperands(str(a), str(b), str(c), batch[0] if batched else None, m, n, k,
                          str(a.element_type), str(c.element_type))


def _owner(value: ir.Value):
    owner = value.owner
    return owner.operation if isinstance(owner, ir.OpView) else owner if isinstance(owner, ir.Operation) else None


def _neighbour(op: ir.Operation, offset: int) -> ir.Operation | None:
    block_ops = [o.operation for o in op.block.operations]
    index = block_ops.index(op) + offset
    return block_ops[index] if 0 <= index < len(block_ops) else None


def _zero_fill_before(op: ir.Operation) -> ir.Operation | None:
    """The linalg.fill of 0 into this matmul's output, if it directly precedes it."""
    previous = _neighbour(op, -1)
    if previous is None or previous.name != "linalg.fill" or previous.operands[1] != op.operands[2]:
        return None
    value = _owner(previous.operands[0])
    if value is None or value.name != "arith.constant":
        return None
    attr = value.attributes["value"]
    return previous if isinstance(attr, ir.FloatAttr) and attr.value == 0.0 else None


def _narrowing_after(op: ir.Operation) -> ir.Operation | None:
    """The elementwise truncf right after the matmul that only narrows its
    (temporary, f32) result into the final buffer, as torch-mlir writes a
    half-precision matmul. The kernel can store the narrow values itself."""
    after = _neighbour(op, 1)
    result = op.operands[2]
    if after is None or after.name != "linalg.generic" or len(after.operands) != 2 or after.operands[0] != result:
        return None
    body = [o.operation.name for o in after.regions[0].blocks[0].operations]
    maps = [ir.AffineMapAttr(m).value for m in after.attributes["indexing_maps"]]
    if body != ["arith.truncf", "linalg.yield"] or any(m != ir.AffineMap.get_identity(m.n_dims) for m in maps):
        return None
    owner = _owner(result)
    users = [use.owner for use in result.uses]
    if owner is None or owner.name != "memref.alloc" or \
            any(u.name not in ("linalg.fill", "memref.dealloc") and u != op and u != after for u in users):
        return None
    return after


@dataclass
class _MatmulSite:
    """A matmul and the ops around it that its kernel absorbs."""
    op: ir.Operation
    fill: ir.Operation | None = None       # zero fill of the output: the kernel overwrites instead
    narrowing: ir.Operation | None = None  # truncf of the result: the kernel stores narrow values

    @classmethod
    def of(cls, op: ir.Operation) -> _MatmulSite:
        fill = _zero_fill_before(op)
        return cls(op, fill, _narrowing_after(op) if fill is not None else None)

    @property
    def output(self) -> ir.Value:
        return self.narrowing.operands[1] if self.narrowing is not None else self.op.operands[2]

    def absorbed(self) -> list[ir.Operation]:
        """Ops that go away with the matmul (the f32 temporary too, when narrowing)."""
        ops = [o for o in (self.fill, self.narrowing) if o is not None]
        if self.narrowing is not None:
            temporary = self.op.operands[2]
            ops += [use.owner for use in temporary.uses if use.owner.name == "memref.dealloc"] + [_owner(temporary)]
        return ops


@dataclass(frozen=True)
class GpuMatmulKernels:
    name = "gpu-matmul-kernels"

    def add_to(self, pm) -> None:
        pm.add(self._run, name="GpuMatmulKernels", argument=self.name)

    def _run(self, module: ir.Operation, pass_) -> None:
        matmuls = []

        def collect(op: ir.Operation):
            if op.name in ("linalg.matmul", "linalg.batch_matmul"):
                matmuls.append(op)
            return ir.WalkResult.ADVANCE

        module.walk(collect)
        table = load_tile_table()
        replaced = 0
        for op in matmuls:
            site = _MatmulSite.of(op)
            operands = matmul_operands(op, site.output)
            chosen = choose_kernel(operands, table) if operands else None
            if chosen is not None:
                generator, tile, stem = chosen
                _replace(module, site, operands, generator, tile, f"forward_{stem}_{replaced}")
                replaced += 1


def _replace(module, site: _MatmulSite, operands, generator, tile, kernel) -> None:
    """The generated function's body (constants and the gpu.launch) moves to
    where the matmul was, its arguments replaced by the matmul's operands.
    (Done here rather than by the inliner: nvgpu ops are not inlinable.)"""
    op = site.op
    text = generator(f"launch_{kernel}", kernel, operands, tile, accumulate=site.fill is None,
                     location=str(op.location))
    parsed = ir.Module.parse(text, context=module.context)
    function = parsed.body.operations[0].operation
    entry = function.regions[0].blocks[0]
    for generated in [o.operation for o in entry.operations][:-1]:  # all but func.return
        generated.move_before(op)
    for argument, operand in zip(entry.arguments, (op.operands[0], op.operands[1], site.output)):
        argument.replace_all_uses_with(operand)
    absorbed = site.absorbed()
    op.erase()
    for other in absorbed:
        other.erase()
