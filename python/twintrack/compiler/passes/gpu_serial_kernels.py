"""gpu-serial-kernels: whatever is still host code after distribution runs on
the device, in one-thread kernels.

The host plan (host_plan.py) runs allocations, views, copies and launches,
nothing else: on the GPU track every loop and every scalar load or store
must sit in a kernel. What the earlier passes leave at the top of a function
is each a gap in their mapping: a fill or an update of a 0-d tensor (a
reduction's initial value, the RNG's seed), the scalar arithmetic after a
full reduction (a mean's division, a norm's square root), a reduction
gpu-full-reductions cannot combine across threads (an argmax), a
sequential loop another lowering wrote (a scatter). Each maximal run of
such ops becomes one gpu.launch of one block of one thread, built in place:
slow for big loops, but right, and the kernel report names its path
`serial-fallback` so that a user sees where a real mapping is missing.

Constants, static allocations and views among a run's ops move before it
and stay on the host (the outline stage sinks constants into the kernel).
A scalar a run computes and a later op reads (the dropout's
advanced seed, read by the elementwise kernel) travels through a 0-d buffer
of its own: the run stores it, each later reader loads it.
"""

from __future__ import annotations

from dataclasses import dataclass

from mlir import ir
from mlir.dialects import arith, memref

from ..kernels.builder import KernelBuildError, build_launch
from ..kernels.tensor_maps import makes_tensor_map
from .gpu_distribute import as_operation
from .ir_helpers import VIEW_OPS, PythonPass

SERIAL_PATH = "serial-fallback"

# What the host plan runs (host_plan._PlanBuilder.step) and what becomes a launch.
_HOST_OPS = {"arith.constant", "memref.alloc", "memref.alloca", "memref.get_global", "memref.copy",
             "memref.dealloc", "gpu.launch", "gpu.launch_func", "func.return", *VIEW_OPS}
# Ops of a serial kernel that the kernel report's path is recorded on: they
# write memory or hold the loops, so no folding removes all of them.
_TAGGED = {"memref.store", "scf.for", "scf.while", "scf.if", "scf.parallel", "vector.store"}


# Integer arithmetic on sizes (dynamic shapes): the plan evaluates it per call.
HOST_SCALAR_OPS = {"memref.dim", "arith.addi", "arith.subi", "arith.muli", "arith.divui", "arith.divsi",
                   "arith.remui", "arith.remsi", "arith.ceildivsi", "arith.ceildivui", "arith.floordivsi",
                   "arith.maxui", "arith.maxsi", "arith.minui", "arith.minsi", "arith.cmpi", "arith.select",
                   "arith.index_cast", "arith.index_castui", "affine.apply"}


def host_scalar(op: ir.Operation) -> bool:
    """Is `op` a size computation the host plan evaluates: a buffer's size,
    or integer arithmetic on constants and sizes (no value loaded on the device)?"""
    if op.name not in HOST_SCALAR_OPS:
        return False
    for value in op.operands:
        if isinstance(value.type, ir.MemRefType):
            continue
        if isinstance(value, ir.BlockArgument):
            return False
        owner = as_operation(value.owner)
        if owner.name != "arith.constant" and not host_scalar(owner):
            return False
    return True


def runs_on_host(op: ir.Operation) -> bool:
    """Does the plan run `op` itself, or outlining turn it into a launch
    (an scf.parallel that gpu-distribute mapped onto blocks)?"""
    return op.name in _HOST_OPS or makes_tensor_map(op) or host_scalar(op) or _bucket_switch(op) \
        or (op.name == "scf.parallel" and "mapping" in op.attributes)


def _bucket_switch(op: ir.Operation) -> bool:
    """An scf.if on sizes whose branches only launch kernels (a kernel per
    bucket of sizes): the plan takes one branch's launches per call."""
    if op.name != "scf.if" or len(op.results) or isinstance(op.operands[0], ir.BlockArgument):
        return False
    condition = as_operation(op.operands[0].owner)
    if not host_scalar(condition):
        return False
    return all(child.operation.name in ("gpu.launch", "gpu.launch_func", "scf.yield", *_CONSTANTS) or host_scalar(child.operation)
               or _bucket_switch(child.operation)
               for region in op.regions for block in region.blocks for child in block.operations)


def _ops(block: ir.Block) -> list[ir.Operation]:
    return [op.operation for op in block.operations]


def movable(op: ir.Operation) -> bool:
    """A host op with no effect on memory that may move up to where a run's
    launch goes, so that it does not split the run: a constant, a static
    allocation (its buffer just lives a little longer; a dynamic one's
    sizes are host values), a global, a view, a size computation."""
    return op.name in (*_CONSTANTS, "memref.alloc", "memref.alloca", "memref.get_global", *VIEW_OPS) \
        or host_scalar(op)


# Constants the kernel generators hoist before their launches (the wgmma
# accumulator's zero struct): outlining sinks them into the kernel.
_CONSTANTS = ("arith.constant", "llvm.mlir.zero", "llvm.mlir.undef", "llvm.mlir.constant", "ub.poison")


def first_run(block: ir.Block) -> list[ir.Operation]:
    """The first maximal run of device ops in `block`; movable host ops
    between them do not end it. Empty when none is left."""
    run: list[ir.Operation] = []
    for op in _ops(block):
        if movable(op) and not any(_defined_by(v, run) for v in op.operands):
            continue
        if runs_on_host(op):
            if run:
                return run
            continue
        run.append(op)
    return run


def _defined_by(value: ir.Value, ops: list[ir.Operation]) -> bool:
    return not isinstance(value, ir.BlockArgument) and as_operation(value.owner) in ops


def _top_level(op: ir.Operation, block: ir.Block) -> ir.Operation:
    """The ancestor of `op` (or `op`) directly in `block`."""
    owner = as_operation(block.owner)
    while as_operation(op.parent) != owner:
        op = as_operation(op.parent)
    return op


def escaping(run: list[ir.Operation], block: ir.Block) -> list[ir.Value]:
    """The results of `run` that ops after it read."""
    inside = set(run)
    found = []
    for op in run:
        for result in op.results:
            if any(_top_level(as_operation(use.owner), block) not in inside for use in result.uses):
                found.append(result)
    return found


def spill_type(t: ir.Type) -> ir.Type:
    """How a scalar is kept in memory: booleans as bytes (the memref-to-LLVM
    lowering aborts on i1 stores), indices as i64 (the plan's int64)."""
    if isinstance(t, ir.IntegerType) and t.width == 1:
        return ir.IntegerType.get_signless(8)
    if isinstance(t, ir.IndexType):
        return ir.IntegerType.get_signless(64)
    return t


def to_memory(value: ir.Value) -> ir.Value:
    """`value` as spill_type keeps it."""
    t = spill_type(value.type)
    if t == value.type:
        return value
    return arith.index_cast(t, value) if isinstance(value.type, ir.IndexType) else arith.extui(t, value)


def from_memory(loaded: ir.Value, original: ir.Type) -> ir.Value:
    """A value to_memory stored, loaded, back as `original`."""
    if loaded.type == original:
        return loaded
    return arith.index_cast(original, loaded) if isinstance(original, ir.IndexType) else arith.trunci(original, loaded)


@dataclass
class _Spill:
    value: ir.Value
    buffer: ir.Value


class _SerialWriter:
    """Moves a run's ops into the launch's one thread, then stores each spilled scalar."""

    def __init__(self, run: list[ir.Operation], spills: list[_Spill]):
        self.run, self.spills = run, spills

    def __call__(self, w, ids) -> None:
        here = ir.InsertionPoint.current
        for op in self.run:
            op.detach_from_parent()
            here.insert(op)
            if op.name in _TAGGED:
                w.tag(op)
        for spill in self.spills:
            w.tag(memref.StoreOp(to_memory(spill.value), spill.buffer, []))


def _readers_load(spill: _Spill, run: set, block: ir.Block) -> None:
    """Each read of the spilled value after the run loads it, right before the reader."""
    for use in list(spill.value.uses):
        reader = as_operation(use.owner)
        if _top_level(reader, block) in run:
            continue
        with ir.InsertionPoint(reader), reader.location:
            loaded = memref.load(spill.buffer, [])
            use.owner.operands[use.operand_number] = from_memory(loaded, spill.value.type)


def _hoist_movable(run: list[ir.Operation], block: ir.Block) -> None:
    """The movable host ops among the run's ops move, in order, before its
    first op, where the launch goes."""
    ops = _ops(block)
    start, end = ops.index(run[0]), ops.index(run[-1])
    members = set(run)
    for op in ops[start:end]:
        if op not in members:
            op.move_before(run[0])


def _host_reader(spill: _Spill, run: set, block: ir.Block) -> ir.Operation | None:
    """A host op (one not inside a kernel) that needs the value itself: a size or an offset."""
    for use in spill.value.uses:
        reader = as_operation(use.owner)
        top = _top_level(reader, block)
        if top not in run and reader == top and runs_on_host(top):
            return reader
    return None


@dataclass(frozen=True)
class GpuSerialKernels(PythonPass):
    name = "gpu-serial-kernels"

    def _run(self, module: ir.Operation, pass_) -> None:
        with module.context:
            for func in _ops(module.regions[0].blocks[0]):
                if func.name == "func.func" and func.regions[0].blocks:
                    if not self._function(func, pass_):
                        return

    def _function(self, func: ir.Operation, pass_) -> bool:
        block = func.regions[0].blocks[0]
        name = ir.StringAttr(func.attributes["sym_name"]).value
        count = 0
        while run := first_run(block):
            if not self._serial_kernel(f"{name}_serial_{count}", run, block, pass_):
                return False
            count += 1
        return True

    def _serial_kernel(self, kernel: str, run: list[ir.Operation], block: ir.Block, pass_) -> bool:
        _hoist_movable(run, block)
        members = set(run)
        spills = []
        with run[0].location, ir.InsertionPoint(run[0]):
            for value in escaping(run, block):
                spills.append(_Spill(value, memref.alloc(ir.MemRefType.get([], spill_type(value.type)), [], [])))
        for spill in spills:
            reader = _host_reader(spill, members, block)
            if reader is not None:
                reader.location.emit_error(f"gpu-serial-kernels: host op '{reader.name}' reads a value "
                                           "computed on the device")
                pass_.signal_pass_failure()
                return False
        for spill in spills:
            _readers_load(spill, members, block)
        terminator = _ops(block)[-1]
        with terminator.location, ir.InsertionPoint(terminator):
            for spill in spills:
                memref.dealloc(spill.buffer)
        try:
            build_launch(run[0], kernel, "1x1", (1, 1, 1), 1, _SerialWriter(run, spills), path=SERIAL_PATH)
        except KernelBuildError as error:
            run[0].location.emit_error(str(error))
            pass_.signal_pass_failure()
            return False
        return True
