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

The CPU runtime serializes the calls of one executable (a lock), and each
executable has its own JIT module, so its workspace is never shared.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from mlir import ir
from mlir.dialects import arith, memref

from .ir_helpers import PythonPass

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


def _bytes(memref_type: ir.MemRefType) -> int | None:
    element = memref_type.element_type
    if not isinstance(element, (ir.IntegerType, ir.FloatType)) or isinstance(element, ir.IndexType):
        return None
    bits = element.width
    return math.prod(memref_type.shape) * max(1, -(-bits // 8))


def _plannable(op: ir.Operation) -> int | None:
    """The bytes of an allocation the workspace can hold, or None."""
    if op.name != "memref.alloc" or len(op.operands):
        return None
    memref_type = ir.MemRefType(op.results[0].type)
    identity = ir.AffineMap.get_identity(memref_type.rank)
    if not memref_type.has_static_shape or ir.AffineMapAttr(memref_type.layout).value != identity:
        return None
    if str(memref_type.element_type) == "i1":
        return None  # widen-bools makes bool buffers bytes later, by their allocations
    if str(memref_type.element_type) == "bf16":
        return None  # at constant addresses LLVM's x86 backend forms bf16 vectors it cannot legalize (an abort)
    if memref_type.memory_space is not None:
        return None
    return _bytes(memref_type)


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
        for op in order:
            size = _plannable(op)
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
                view = memref.view(alloc.results[0].type, workspace, offset, [])
            alloc.results[0].replace_all_uses_with(view)
            temporary.dealloc.erase()
            alloc.erase()
        functions[0].attributes[WORKSPACE_BYTES_ATTR] = ir.IntegerAttr.get(ir.IntegerType.get_signless(64), total)
