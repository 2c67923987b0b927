"""annotate-kernels: record on each gpu.launch_func what its kernel does.

Attributes added to the launch (the host function survives the later stages,
so the kernel report and the host plan read them from there):
  twintrack.source_ops  the torch source locations of the kernel's ops
  twintrack.source_keys their model-code frames (locations.source_key), by
                        which tools/compare.py matches kernels across tracks
  twintrack.flops       floating-point ops (per thread, times the enclosing
                        scf.for trip counts, times the threads the bounds
                        guard lets through)
  twintrack.bytes       bytes of the memref arguments: each read or written
                        once, the floor of the traffic
  twintrack.path        how the kernel was generated: a fast path's name (the
                        twintrack.kernel_path a kernel generator left on its
                        main loop) or "generic"
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from mlir import ir

from ..kernels.builder import MEAN_TRIPS_ATTR, THEN_SHARE_ATTR, USEFUL_ATTR, WGMMA_SHAPE_ATTR
from ..kernels.matmul_common import KERNEL_PATH_ATTR
from ..kernels.tensor_maps import described_buffer
from ...locations import location_source_key, short_location
from .ir_helpers import PythonPass, elementwise_flops, gpu_functions, kernel_launches, kernel_ref, shaped_bytes

PATH_ATTR = "twintrack.path"
SOURCE_OPS_ATTR = "twintrack.source_ops"


def _constant(value: ir.Value) -> int | None:
    owner = value.owner
    owner = owner.operation if isinstance(owner, ir.OpView) else owner
    if isinstance(owner, ir.Operation) and owner.name == "arith.constant" \
            and isinstance(owner.attributes["value"], ir.IntegerAttr):
        return owner.attributes["value"].value
    return None


def _trip_count(loop: ir.Operation) -> float:
    """The mean trips its generator recorded, where it did (a causal
    attention's key loop, a persistent kernel's tiles from its block's);
    else the constant trip count, a per-thread start (k = thread; k < K;
    k += T) counted as from 0; else one trip. Times the share of the work
    that is not padding, where the generator recorded one (a matmul's
    ragged edges)."""
    useful = ir.FloatAttr(loop.attributes[USEFUL_ATTR]).value if USEFUL_ATTR in loop.attributes else 1
    if MEAN_TRIPS_ATTR in loop.attributes:
        return ir.FloatAttr(loop.attributes[MEAN_TRIPS_ATTR]).value * useful
    lower, upper, step = (_constant(v) for v in list(loop.operands)[:3])
    if upper is None or step is None:
        return useful
    return max(0, -(-(upper - (lower or 0)) // step)) * useful


def _flops_per_thread(op: ir.Operation, multiplier: float = 1) -> float:
    return sum(_flops_in_region(region, multiplier) for region in op.regions)


def _flops_in_region(region: ir.Region, multiplier: float) -> float:
    total = 0
    for block in region.blocks:
        for child in block.operations:
            total += _flops_of(child.operation, multiplier)
    return total


def _flops_of(child: ir.Operation, multiplier: float) -> float:
    """One op's flops per thread, those of its regions included."""
    if child.name == "scf.for":
        return _flops_per_thread(child, multiplier * _trip_count(child))
    if child.name == "scf.if" and _is_leader_only(child):
        return 0  # one thread per block folds the block's total: negligible
    if child.name == "scf.if" and THEN_SHARE_ATTR in child.attributes:  # each thread takes one side
        share = ir.FloatAttr(child.attributes[THEN_SHARE_ATTR]).value
        then, otherwise = (_flops_in_region(child.regions[k], multiplier) for k in (0, 1))
        return share * then + (1 - share) * otherwise
    scalar_flops = elementwise_flops(child)
    own = multiplier * scalar_flops if scalar_flops else \
        multiplier * _mma_flops_per_lane(child) if _is_mma(child) else 0
    return own + _flops_per_thread(child, multiplier)


# Tensor-core ops and the threads that share one: a warp's mma.sync, a warpgroup's wgmma.
_MMA_THREADS = {"nvgpu.mma.sync": 32, "nvvm.mma.sync": 32, "nvvm.wgmma.mma_async": 128}


def _is_mma(op: ir.Operation) -> bool:
    return op.name in _MMA_THREADS or (op.name == "llvm.inline_asm" and WGMMA_SHAPE_ATTR in op.attributes)


def _mma_flops_per_lane(mma: ir.Operation) -> int:
    """An m x n x k mma.sync or wgmma (an op, or PTX carrying its shape):
    2mnk flops, shared by its warp's or warpgroup's threads."""
    if mma.name == "llvm.inline_asm":
        return 2 * _nvvm_shape(mma.attributes[WGMMA_SHAPE_ATTR]) // _MMA_THREADS["nvvm.wgmma.mma_async"]
    if mma.name.startswith("nvvm."):
        return 2 * _nvvm_shape(mma.attributes["shape"]) // _MMA_THREADS[mma.name]
    m, n, k = (ir.IntegerAttr(d).value for d in mma.attributes["mmaShape"])
    return 2 * m * n * k // _MMA_THREADS[mma.name]


def _nvvm_shape(shape: ir.Attribute) -> int:
    """m·n·k of #nvvm.shape<m = 16, n = 8, k = 16>."""
    m, n, k = (int(part.split("=")[1]) for part in str(shape).split("<")[1].rstrip(">").split(","))
    return m * n * k


def _is_leader_only(branch: ir.Operation) -> bool:
    """scf.if (thread == 0), as gpu-distribute guards a row reduction's final store."""
    condition = branch.operands[0].owner
    condition = condition.operation if isinstance(condition, ir.OpView) else condition
    return (isinstance(condition, ir.Operation) and condition.name == "arith.cmpi"
            and condition.attributes["predicate"].value == 0 and _constant(condition.operands[1]) == 0)


def _active_threads(kernel: ir.Operation, launched: int) -> int:
    """The bound of a generic kernel's gpu-distribute guard (linear index <
    N), else all launched threads (a kernel generator's comparisons bound nothing)."""
    if _kernel_path(kernel) != "generic":
        return launched
    for op in kernel.regions[0].blocks[0].operations:
        op = op.operation
        if op.name == "arith.cmpi" and op.attributes["predicate"] == ir.IntegerAttr.get(ir.IntegerType.get_signless(64), 6):
            bound = _constant(op.operands[1])
            if bound is not None:
                return min(bound, launched)  # a comparison of the kernel's own (a serial kernel's) bounds nothing
    return launched


def _source_ops(kernel: ir.Operation) -> tuple[list[str], list[str]]:
    """The kernel's torch source locations and their source keys, first seen
    first. Each distinct location is read once: a tensor-core kernel's
    thousands of ops share a few."""
    texts: dict[str, None] = {}
    previous: list[ir.Location] = []

    def visit(op: ir.Operation):
        location = op.location
        if not previous or location != previous[0]:  # runs of ops share one: compared, not rendered
            texts.setdefault(str(location))
            previous[:] = [location]
        return ir.WalkResult.ADVANCE

    kernel.walk(visit)
    locations: dict[str, None] = {}
    keys: dict[str, None] = {}
    for text in texts:
        where = short_location(text)
        if ":" in where and where != "unknown":
            locations.setdefault(where)
        key = location_source_key(text)
        if key:
            keys.setdefault(key)
    return list(locations), list(keys)


def _kernel_path(kernel: ir.Operation) -> str:
    found = []

    def visit(op: ir.Operation):
        if KERNEL_PATH_ATTR in op.attributes:
            found.append(ir.StringAttr(op.attributes[KERNEL_PATH_ATTR]).value)
            return ir.WalkResult.INTERRUPT
        return ir.WalkResult.ADVANCE

    kernel.walk(visit)
    return found[0] if found else "generic"


def annotate_sources(launch: ir.Operation, kernel: ir.Operation) -> None:
    """The launch's twintrack.source_ops and source_keys, from its kernel's
    ops; none taken where it has them (a launch whose kernel another's
    replaced keeps its own)."""
    if SOURCE_OPS_ATTR in launch.attributes:
        return
    locations, keys = _source_ops(kernel)
    with launch.context:
        launch.attributes[SOURCE_OPS_ATTR] = ir.ArrayAttr.get([ir.StringAttr.get(s) for s in locations])
        launch.attributes["twintrack.source_keys"] = ir.ArrayAttr.get([ir.StringAttr.get(s) for s in keys])


def _buffers_read_or_written(operands) -> list[ir.Value]:
    """The memrefs a launch passes, and those it passes as TMA tensor maps, each once."""
    buffers: list[ir.Value] = []
    for value in operands:
        buffer = value if isinstance(value.type, ir.MemRefType) else described_buffer(value)
        if buffer is not None and buffer not in buffers:
            buffers.append(buffer)
    return buffers


@dataclass(frozen=True)
class AnnotateKernels(PythonPass):
    name = "annotate-kernels"

    def _run(self, module: ir.Operation, pass_) -> None:
        kernels = gpu_functions(module)
        work = {}  # per kernel: its path and flops per thread, counted once for the launches sharing it
        for launch in kernel_launches(module):
            symbol = kernel_ref(launch)
            kernel = kernels[symbol]
            if symbol not in work:
                work[symbol] = (_kernel_path(kernel), _flops_per_thread(kernel))
            self._annotate(launch, kernel, *work[symbol])

    @staticmethod
    def _annotate(launch: ir.Operation, kernel: ir.Operation, path: str, flops_per_thread: float) -> None:
        view = launch.opview
        dims = (view.gridSizeX, view.gridSizeY, view.gridSizeZ, view.blockSizeX, view.blockSizeY, view.blockSizeZ)
        buffers = [v.type for v in _buffers_read_or_written(view.kernelOperands)]
        annotate_sources(launch, kernel)
        with launch.context:
            launch.attributes[PATH_ATTR] = ir.StringAttr.get(path)
            if any(_constant(v) is None for v in dims) or not all(t.has_static_shape for t in buffers):
                return  # sizes known at run time: the work is not counted
            launched = math.prod(_constant(v) for v in dims)
            flops = round(flops_per_thread * _active_threads(kernel, launched))
            i64 = ir.IntegerType.get_signless(64)
            launch.attributes["twintrack.flops"] = ir.IntegerAttr.get(i64, flops)
            launch.attributes["twintrack.bytes"] = ir.IntegerAttr.get(i64, sum(shaped_bytes(t) for t in buffers))
