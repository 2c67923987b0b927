"""plan-workspace: the temporaries of a CPU call live in one workspace made
once per executable, at offsets planned at compile time, instead of being
malloc'd and freed on every call.

A freed block of a megabyte or more goes back to the kernel (glibc trims
its heap or unmaps it), so the next call's malloc faults every page in
again, zeroed: on a transformer block of 512 tokens that was a third of the
call. Here each `memref.alloc` the call always runs (in the function's
body, or in an scf.execute_region in it: a kernel's packed panels) with a
static shape, an identity layout and its `memref.dealloc` beside it becomes
a `memref.view` of one private global, `@twintrack_workspace`. Two
temporaries share bytes only when one is freed before the other is
allocated (their lifetimes in program order: the region ops here run once,
in order), placed first-fit at 64-byte boundaries. Allocations in loops or
parallel bodies (a thread's own patches) keep malloc; so does anything past
MAX_WORKSPACE_BYTES, which stays checked against the memory available.

An allocation of a dynamic shape (dynamic shapes: its sizes known at run
time) takes the bytes of its largest size: each dynamic size is bounded
from above through the ops computing it, down to the entry point's
arguments' largest sizes (`twintrack.arg_size_bounds`, recorded from the
compile's ranges); one whose size has no bound keeps malloc.

The CPU runtime serializes the calls of one executable (a lock), and each
executable has its own JIT module, so its workspace is never shared.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from mlir import ir
from mlir.dialects import arith, memref

from ...dialect import SIZE_BOUNDS_ATTR
from .ir_helpers import PythonPass, defining_op

WORKSPACE = "twintrack_workspace"
WORKSPACE_BYTES_ATTR = "twintrack.workspace_bytes"
ALIGNMENT = 64
MAX_WORKSPACE_BYTES = 1 << 28   # cpu_jit.CHECKED_BUFFER_BYTES: larger needs the memory check of a malloc'd buffer


@dataclass
class _Temporary:
    alloc: ir.Operation
    dealloc: ir.Operation
    size: int
    start: int          # program-order positions of the alloc and the dealloc
    end: int
    offset: int = -1


def _bytes(shape: list[int], element: ir.Type) -> int | None:
    if not isinstance(element, (ir.IntegerType, ir.FloatType)) or isinstance(element, ir.IndexType):
        return None
    return math.prod(shape) * max(1, -(-element.width // 8))


def _plannable(op: ir.Operation, bounds: "UpperBounds") -> int | None:
    """The bytes of an allocation the workspace can hold (at its largest), or None."""
    if op.name != "memref.alloc":
        return None
    memref_type = ir.MemRefType(op.results[0].type)
    identity = ir.AffineMap.get_identity(memref_type.rank)
    if ir.AffineMapAttr(memref_type.layout).value != identity:
        return None
    sizes = iter(op.operands)  # the dynamic sizes, in dim order (no symbol operands: identity layout)
    shape = [bounds.of(next(sizes)) if ir.ShapedType.is_dynamic_size(size) else size for size in memref_type.shape]
    if None in shape:
        return None
    if str(memref_type.element_type) == "i1":
        return None  # widen-bools makes bool buffers bytes later, by their allocations
    if str(memref_type.element_type) == "bf16":
        return None  # at constant addresses LLVM's x86 backend forms bf16 vectors it cannot legalize (an abort)
    if memref_type.memory_space is not None:
        return None
    return _bytes(shape, memref_type.element_type)


class UpperBounds:
    """Largest values of index computations (a dynamic allocation's sizes):
    constants; a dim of an argument (its recorded largest size), of a
    static dim, or of a collapse or an expansion of a bounded value; sums,
    products, quotients by constants, maxima and minima of bounded values,
    casts and affine maps of them (sizes never go below zero). None where
    a value has no bound."""

    def __init__(self, function: ir.Operation):
        attrs = function.attributes
        self.arguments = [list(ir.DenseI64ArrayAttr(bound)) for bound in ir.ArrayAttr(attrs[SIZE_BOUNDS_ATTR])] \
            if SIZE_BOUNDS_ATTR in attrs else []
        self.body = function.regions[0].blocks[0]

    def of(self, value: ir.Value) -> int | None:
        owner = defining_op(value)
        if owner is None:
            return None
        name = owner.name
        if name == "arith.constant":
            return ir.IntegerAttr(owner.attributes["value"]).value
        if name in ("arith.index_cast", "arith.index_castui", "arith.extui", "arith.extsi"):
            return self.of(owner.operands[0])
        if name == "memref.dim":
            index = self.of(owner.operands[1])
            return None if index is None else self.dim(owner.operands[0], index)
        if name == "affine.apply":
            return self._affine(owner)
        operands = [self.of(operand) for operand in owner.operands]
        if name in ("arith.minui", "arith.minsi"):
            known = [bound for bound in operands if bound is not None]
            return min(known) if known else None
        if None in operands:
            return None
        combine = {"arith.addi": lambda a, b: a + b, "arith.muli": lambda a, b: a * b,
                   "arith.maxui": max, "arith.maxsi": max, "arith.select": lambda _, a, b: max(a, b)}
        if name in combine:
            return combine[name](*operands)
        divisor = _constant(owner.operands[1]) if len(owner.operands) == 2 else None
        if name in ("arith.divui", "arith.divsi", "arith.floordivsi") and divisor and divisor > 0:
            return operands[0] // divisor
        if name in ("arith.ceildivui", "arith.ceildivsi") and divisor and divisor > 0:
            return -(-operands[0] // divisor)
        return None

    def dim(self, memref_value: ir.Value, index: int) -> int | None:
        """The largest size of dim `index` of a memref value."""
        size = ir.MemRefType(memref_value.type).shape[index]
        if not ir.ShapedType.is_dynamic_size(size):
            return size
        if isinstance(memref_value, ir.BlockArgument) and memref_value.owner == self.body:
            bounds = self.arguments[memref_value.arg_number] if memref_value.arg_number < len(self.arguments) else []
            return bounds[index] if index < len(bounds) else None
        owner = defining_op(memref_value)
        if owner is None or owner.name not in ("memref.collapse_shape", "memref.expand_shape", "memref.cast",
                                               "memref.alloc"):
            return None
        if owner.name == "memref.cast":
            return self.dim(owner.operands[0], index)
        if owner.name == "memref.alloc":  # its open sizes are its operands, in order
            shape = ir.MemRefType(memref_value.type).shape
            return self.of(owner.operands[sum(ir.ShapedType.is_dynamic_size(s) for s in shape[:index])])
        groups = [[ir.IntegerAttr(d).value for d in group] for group in ir.ArrayAttr(owner.attributes["reassociation"])]
        if owner.name == "memref.collapse_shape":
            sizes = [self.dim(owner.operands[0], d) for d in groups[index]]
            return None if None in sizes else math.prod(sizes)
        group = next(g for g in groups if index in g)  # expand: its size is an operand, or the source dim's
        static = ir.DenseI64ArrayAttr(owner.attributes["static_output_shape"])
        dynamic_before = sum(ir.ShapedType.is_dynamic_size(static[d]) for d in range(index))
        if len(owner.operands) > 1:
            return self.of(owner.operands[1 + dynamic_before])
        return self.dim(owner.operands[0], groups.index(group)) if len(group) == 1 else None

    def _affine(self, apply: ir.Operation) -> int | None:
        """An affine map's result at its operands' largest values: sums and
        products by non-negative constants, quotients and remainders by
        positive ones (each grows with its operands)."""
        values = [self.of(operand) for operand in apply.operands]
        affine_map = ir.AffineMapAttr(apply.attributes["map"]).value
        if None in values or len(affine_map.results) != 1:
            return None
        dims = values[:affine_map.n_dims]
        symbols = values[affine_map.n_dims:]
        return _largest(affine_map.results[0], dims, symbols)


def _largest(expr: ir.AffineExpr, dims: list[int], symbols: list[int]) -> int | None:
    if isinstance(expr, ir.AffineConstantExpr):
        return expr.value
    if isinstance(expr, ir.AffineDimExpr):
        return dims[expr.position]
    if isinstance(expr, ir.AffineSymbolExpr):
        return symbols[expr.position]
    for kind, combine in ((ir.AffineAddExpr, lambda a, b: a + b), (ir.AffineMulExpr, lambda a, b: a * b)):
        if isinstance(expr, kind):
            binary = expr
            low = [_constant_expr(side) for side in (binary.lhs, binary.rhs)]
            if any(value is not None and value < 0 for value in low):
                return None  # a negative term or factor: the largest operands need not give the largest result
            a, b = _largest(binary.lhs, dims, symbols), _largest(binary.rhs, dims, symbols)
            return None if a is None or b is None else combine(a, b)
    for kind, combine in ((ir.AffineFloorDivExpr, lambda a, b: a // b), (ir.AffineCeilDivExpr, lambda a, b: -(-a // b)),
                          (ir.AffineModExpr, lambda a, b: min(a, b - 1))):
        if isinstance(expr, kind):
            binary = expr
            divisor = _constant_expr(binary.rhs)
            a = _largest(binary.lhs, dims, symbols)
            return None if a is None or not divisor or divisor <= 0 else combine(a, divisor)
    return None


def _constant_expr(expr: ir.AffineExpr) -> int | None:
    return expr.value if isinstance(expr, ir.AffineConstantExpr) else None


def _constant(value: ir.Value) -> int | None:
    owner = defining_op(value)
    return ir.IntegerAttr(owner.attributes["value"]).value if owner is not None and owner.name == "arith.constant" \
        else None


def _once_per_call(block: ir.Block, function_block: ir.Block) -> bool:
    """Does `block` run exactly once per call: the function's, or an
    scf.execute_region's inside such a block?"""
    while block != function_block:
        owner = block.owner.operation
        if owner.name != "scf.execute_region":
            return False
        block = owner.block
    return True


class _Planner:
    def __init__(self, function: ir.Operation):
        self.function = function
        self.body = function.regions[0].blocks[0]
        self.position: dict = {}

    def temporaries(self) -> list[_Temporary]:
        """The plannable allocations, each with its dealloc, in program order."""
        found, order = [], []

        def visit(op):
            self.position[op] = len(order)
            order.append(op)
            return ir.WalkResult.ADVANCE

        self.function.walk(visit, ir.WalkOrder.PRE_ORDER)
        bounds = UpperBounds(self.function)
        for op in order:
            size = _plannable(op, bounds)
            if size is None or not _once_per_call(op.block, self.body):
                continue
            deallocs = [use.owner.operation for use in op.results[0].uses if use.owner.name == "memref.dealloc"]
            if len(deallocs) != 1 or deallocs[0].block != op.block:
                continue
            found.append(_Temporary(op, deallocs[0], size, self.position[op], self.position[deallocs[0]]))
        return found


def _place(temporaries: list[_Temporary]) -> int:
    """Offsets, first fit among the temporaries live at the same time; the bytes in all."""
    placed: list[_Temporary] = []
    total = 0
    for temporary in temporaries:
        live = sorted((t for t in placed if t.end > temporary.start), key=lambda t: t.offset)
        offset = 0
        for other in live:
            if offset + temporary.size <= other.offset:
                break
            offset = max(offset, -(-(other.offset + other.size) // ALIGNMENT) * ALIGNMENT)
        if offset + temporary.size > MAX_WORKSPACE_BYTES:
            continue
        temporary.offset = offset
        placed.append(temporary)
        total = max(total, offset + temporary.size)
    return total


@dataclass(frozen=True)
class PlanWorkspace(PythonPass):
    name = "plan-workspace"

    def _run(self, module: ir.Operation, pass_) -> None:
        functions = [op.operation for op in module.regions[0].blocks[0].operations
                     if op.operation.name == "func.func" and op.operation.regions[0].blocks]
        if len(functions) != 1:
            return  # the CPU module has one entry point; anything else is left alone
        planner = _Planner(functions[0])
        temporaries = planner.temporaries()
        total = _place(temporaries)
        placed = [t for t in temporaries if t.offset >= 0]
        if not placed:
            return
        with ir.InsertionPoint.at_block_begin(module.regions[0].blocks[0]), module.location:
            workspace_type = ir.MemRefType.get([total], ir.IntegerType.get_signless(8))
            memref.GlobalOp(WORKSPACE, workspace_type, sym_visibility="private",
                            alignment=ir.IntegerAttr.get(ir.IntegerType.get_signless(64), ALIGNMENT))
        with ir.InsertionPoint.at_block_begin(planner.body), functions[0].location:
            workspace = memref.get_global(workspace_type, WORKSPACE)
        for temporary in placed:
            alloc = temporary.alloc
            with ir.InsertionPoint(alloc), alloc.location:
                offset = arith.constant(ir.IndexType.get(), temporary.offset)
                view = memref.view(alloc.results[0].type, workspace, offset, list(alloc.operands))
            alloc.results[0].replace_all_uses_with(view)
            temporary.dealloc.erase()
            alloc.erase()
        functions[0].attributes[WORKSPACE_BYTES_ATTR] = ir.IntegerAttr.get(ir.IntegerType.get_signless(64), total)
