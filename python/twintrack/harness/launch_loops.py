"""A gpu.launch run on the CPU: its blocks and threads as loops, for the
numerics of kernels built whole (window kernels, the tiled transpose,
one-thread kernels) without a GPU (twintrack.harness.gpu_emulation).

    for block (z, y, x) of the grid:
        workgroup buffers: the block's own allocations
        the ops before the first barrier that read no thread index
        for thread (z, y, x): phase 1      # the body up to its first barrier
        for thread (z, y, x): phase 2 …    # every thread finishes a phase
                                           # before any starts the next

Arithmetic a phase reads from an earlier one is computed again in it. A
launch is refused (EmulationError) where this would not be faithful: a
barrier inside a branch or loop, a loaded value a thread reads across a
barrier, threads that exchange values (gpu.all_reduce, shuffles), or
tensor-core and other PTX ops.
"""

from __future__ import annotations

from collections.abc import Callable

from mlir import ir
from mlir.dialects import arith, memref, scf

from ..compiler.passes.ir_helpers import gpu_functions, kernel_launches, nested_ops

_PURE = ("arith.", "index.", "math.", "affine.apply")  # ops a later phase may compute again
_UNEMULATED = ("gpu.all_reduce", "gpu.shuffle", "gpu.subgroup_reduce", "llvm.inline_asm", "nvgpu.", "nvvm.")
WORKGROUP_ALIGNMENT = 16  # the vector loads of a staged copy are 16-byte aligned (on the CPU, aligned moves)


class EmulationError(Exception):
    """A kernel the CPU cannot run as loops faithfully."""


def launches_as_loops(module: ir.Operation) -> None:
    """Every gpu.launch_func of the module's host code as loops running a
    copy of its kernel's body, in place; the gpu.modules then go."""
    kernels = gpu_functions(module)
    for launch in kernel_launches(module):
        symbol = ir.SymbolRefAttr(launch.attributes["kernel"])
        names = str(symbol).lstrip("@").split("::@")
        _as_loops(launch, kernels[(names[0], names[-1])])
    for op in [o.operation for o in module.regions[0].blocks[0].operations]:
        if op.name == "gpu.module":
            op.erase()
    if "gpu.container_module" in module.attributes:
        del module.attributes["gpu.container_module"]


def _check(kernel: ir.Operation) -> None:
    top = {op.operation for op in kernel.regions[0].blocks[0].operations}
    for op in nested_ops(kernel, lambda o: o != kernel):
        if op.name.startswith(_UNEMULATED):
            raise EmulationError(f"{op.name} in a kernel: it does not run as loops")
        if op.name == "gpu.barrier" and op not in top:
            raise EmulationError("a barrier inside a branch or loop: it does not run as loops")


def _owner(use) -> ir.Operation:
    owner = use.owner
    return owner.operation if isinstance(owner, ir.OpView) else owner


def _inside(op: ir.Operation, ops: list[ir.Operation]) -> bool:
    """Is `op` one of `ops` or nested in one?"""
    while op is not None and op.name not in ("gpu.func", "func.func"):
        if op in ops:
            return True
        op = op.parent
    return False


_IDS = {"gpu.block_id": "block", "gpu.thread_id": "thread", "gpu.grid_dim": "grid", "gpu.block_dim": "size"}


def _dimension(op: ir.Operation) -> int:
    return "xyz".index(str(op.attributes["dimension"]).split()[-1].rstrip(">"))


def _phases(body: ir.Block, varying: set) -> tuple[list[ir.Operation], list[list[ir.Operation]]]:
    """(the ops before the first barrier that read no thread index, the
    phases between barriers); the barriers go."""
    shared: list[ir.Operation] = []
    phases: list[list[ir.Operation]] = [[]]
    for op in [o.operation for o in body.operations][:-1]:  # the gpu.return goes with the copy
        if op.name == "gpu.barrier":
            op.erase()
            phases.append([])
            continue
        reads = {v for o in [op, *nested_ops(op, lambda _: True)] for v in o.operands}
        if len(phases) > 1 or op.regions or reads & varying:
            phases[-1].append(op)
            varying.update(op.results)
        else:
            shared.append(op)
    while _recompute_across_barriers(phases):
        pass
    return shared, phases


def _recompute_across_barriers(phases: list[list[ir.Operation]]) -> bool:
    """Copy into a later phase the arithmetic it reads from an earlier one
    (CSE shares `thread + 256` between a copy loop and the computation after
    the barrier); anything else read across a barrier is refused. Whether
    something was copied."""
    for k, phase in enumerate(phases):
        for later in phases[k + 1:]:
            for op in phase:
                for result in op.results:
                    uses = [use for use in result.uses if _inside(_owner(use), later)]
                    if not uses:
                        continue
                    if op.regions or not op.name.startswith(_PURE):
                        raise EmulationError("a thread's value read across a barrier: it does not run as loops")
                    copy = op.clone(ip=ir.InsertionPoint(later[0]))
                    later.insert(0, copy)
                    for use in uses:
                        _owner(use).operands[use.operand_number] = copy.results[result.result_number]
                    return True
    return False


def _loop_nest(sizes: list[ir.Value], at: ir.InsertionPoint,
               body: Callable[[list[ir.Value], ir.Operation], None]) -> None:
    """scf.for nests over `sizes` (x, y, z; x innermost) built at `at`;
    `body(indices (x, y, z), the innermost scf.yield)` fills the innermost loop."""
    with at:
        zero, one = arith.constant(ir.IndexType.get(), 0), arith.constant(ir.IndexType.get(), 1)
    indices: list[ir.Value | None] = [None] * 3
    point = at
    for level in (2, 1, 0):
        with point:
            loop = scf.ForOp(zero, sizes[level], one)
        with ir.InsertionPoint(loop.body):
            terminator = scf.YieldOp([]).operation
        indices[level] = loop.induction_variable
        point = ir.InsertionPoint(terminator)
    body(indices, terminator)


def _as_loops(launch: ir.Operation, kernel: ir.Operation) -> None:
    _check(kernel)
    view = launch.opview
    grid = [view.gridSizeX, view.gridSizeY, view.gridSizeZ]
    sizes = [view.blockSizeX, view.blockSizeY, view.blockSizeZ]
    copy = kernel.clone(ip=ir.InsertionPoint(launch))  # its body moves out; the copy then goes
    body = copy.regions[0].blocks[0]
    arguments = list(body.arguments)
    operands = list(view.kernelOperands)
    for argument, value in zip(arguments, operands):
        argument.replace_all_uses_with(value)
    ids: dict[str, list[list[ir.Value]]] = {role: [[], [], []] for role in _IDS.values()}
    for op in nested_ops(copy, lambda o: o.name in _IDS):
        ids[_IDS[op.name]][_dimension(op)].append(op.results[0])
    threads = {value for values in ids["thread"] for value in values}
    shared, phases = _phases(body, set(threads))

    def per_block(block: list[ir.Value], end: ir.Operation) -> None:
        for role, values in (("block", block), ("grid", grid), ("size", sizes)):
            for dim, value in enumerate(values):
                for result in ids[role][dim]:
                    result.replace_all_uses_with(value)
        for buffer in arguments[len(operands):]:  # workgroup attributions
            buffer_type = ir.MemRefType(buffer.type)
            with ir.InsertionPoint(end):
                local = memref.AllocaOp(ir.MemRefType.get(buffer_type.shape, buffer_type.element_type), [], [],
                                        alignment=WORKGROUP_ALIGNMENT).result
            for use in list(buffer.uses):
                _owner(use).operands[use.operand_number] = local
        for op in shared:
            op.move_before(end)
        for phase in phases:
            def per_thread(thread: list[ir.Value], last: ir.Operation, phase=phase) -> None:
                for op in phase:
                    op.move_before(last)
                for dim, value in enumerate(thread):
                    for result in ids["thread"][dim]:
                        for use in list(result.uses):
                            if _inside(_owner(use), phase):
                                _owner(use).operands[use.operand_number] = value
            _loop_nest(sizes, ir.InsertionPoint(end), per_thread)

    with launch.location:
        _loop_nest(grid, ir.InsertionPoint(launch), per_block)
    copy.erase()  # its index ops, their uses all replaced
    launch.erase()
