"""Split-K matmul for f16/bf16 operands: C = A @ B when C has too few tiles
to fill the GPU and K is long (M = N = 512 with K = 16384: 64 tiles of
64x64 for 132 SMs; decode-like M = 16 to 64 with K = 4096).

Two kernels. The first is a tensor-core kernel with a third grid
dimension: block z multiplies K slice z (K / splits long) and stores its
f32 partial tile into a workspace of splits x M x N. On sm_90a it is the
wgmma kernel (twintrack.compiler.kernels.wgmma_matmul; generator
`split_k_wgmma_matmul`), elsewhere or for tiles wgmma cannot take (16 rows)
the mma.sync one (twintrack.compiler.kernels.mma_matmul; `split_k_matmul`). The
second kernel sums the partials of each element in f32 (4 columns a
thread: 16-byte loads), applies the matmul's epilogue, narrows and stores
C through its output view, as the one-kernel generators do. The partial
sums never leave f32, so the result is as accurate as one K loop.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from mlir import ir
from mlir.dialects import arith, memref

from ..target import GpuTarget
from .builder import element_type
from .epilogue import Epilogue
from .launch_reuse import LaunchReuse
from .matmul_common import KernelOperands, MatmulOperands, TileCopy, TiledMatmulWriter
from .mma_matmul import WARP, MmaMatmulWriter, MmaTileConfig
from .wgmma_matmul import WARPGROUP, WgmmaMatmulWriter, WgmmaTileConfig

REDUCE_WIDTH = 4        # f32 partials a reducing thread sums per slice (one 16-byte load)
REDUCE_THREADS = 256
MIN_K_PER_SPLIT = 1024  # shorter slices spend more on the workspace round trip than they save


class _KSlices:
    """What makes a tile kernel a split-K partial kernel (mixed into the
    mma.sync and wgmma writers): grid z is the K slice, its K loop runs
    over the slice (a static trip count, for the kernel report's flops),
    operand tiles are read from the slice's start, and results go to the
    slice's rows z*M.. of the f32 workspace."""

    def __init__(self, ops: MatmulOperands, tile, splits: int, path: str):
        super().__init__(replace(ops, out_element="f32", view=None, k=ops.k // splits), tile, False, None)
        self.splits, self.path, self.rows = splits, path, ops.m

    def grid(self) -> tuple[int, int, int]:
        return (self.ops.n // self.bn, self.ops.m // self.bm, self.splits)

    def kernel_body(self) -> None:
        self.slice_start = self.w.mul(self.batch, self.ops.k)
        self.first_row = self.w.mul(self.batch, self.rows)
        super().kernel_body()

    def stage_copies(self, k: ir.Value) -> list[TileCopy]:  # the mma.sync kernel's tiles
        return super().stage_copies(self.w.add(k, self.slice_start))

    def _copy_stage(self, k: ir.Value, stage: ir.Value, inside: ir.Value | None) -> None:  # the wgmma ring's
        super()._copy_stage(self.w.add(k, self.slice_start), stage, inside)

    def store_results(self, accumulators: ir.Value, width: int, row: ir.Value, col: ir.Value) -> None:
        super().store_results(accumulators, width, self.w.add(row, self.first_row), col)

    def _staging_problem(self) -> str | None:  # the wgmma writer's TMA stores
        return "a K slice stores at its own rows of the workspace"


class _MmaSlices(_KSlices, MmaMatmulWriter):
    pass


class _WgmmaSlices(_KSlices, WgmmaMatmulWriter):
    pass


class _Slices:
    """What both split-K schedules share: their label and when they divide a matmul."""

    def label(self) -> str:
        return f"{self.tile.label()}/{self.splits} splits"

    def divides(self, ops: MatmulOperands) -> bool:
        """Does the schedule divide the matmul, in slices of at least MIN_K_PER_SPLIT?"""
        slice_k = ops.k // self.splits
        return ops.k % self.splits == 0 and slice_k % self.bk == 0 and slice_k >= MIN_K_PER_SPLIT \
            and ops.m % self.bm == 0 and ops.n % self.bn == 0 and ops.n % REDUCE_WIDTH == 0


@dataclass(frozen=True)
class SplitKSchedule(_Slices):
    """An mma.sync tile per K slice, and how many slices."""
    bm: int
    bn: int
    bk: int
    warps_m: int
    warps_n: int
    splits: int
    partial = _MmaSlices

    @property
    def tile(self) -> MmaTileConfig:
        return MmaTileConfig(self.bm, self.bn, self.bk, self.warps_m, self.warps_n)

    @property
    def threads(self) -> int:
        return WARP * self.warps_m * self.warps_n


@dataclass(frozen=True)
class SplitKWgmmaSchedule(_Slices):
    """A wgmma tile (and its ring) per K slice, and how many slices."""
    bm: int
    bn: int
    bk: int
    warpgroups: int
    stages: int
    splits: int
    partial = _WgmmaSlices

    @property
    def tile(self) -> WgmmaTileConfig:
        return WgmmaTileConfig(self.bm, self.bn, self.bk, self.warpgroups, self.stages)

    @property
    def threads(self) -> int:
        return WARPGROUP * self.warpgroups


def split_k_applies(operands, target: GpuTarget, arch: str, feature: str = "mma.sync") -> str | None:
    """Where one plain matmul's output is too small to fill the SMs with
    64x64 tiles and K is long enough to split; None where it applies."""
    if len(operands) != 1:
        return "split-K runs one matmul a kernel (no horizontal grid)"
    ops = operands[0]
    if ops.in_element not in ("f16", "bf16"):
        return "split-K takes f16/bf16 operands"
    if not target.has(feature, arch):
        return f"{arch} has no {feature}"
    if ops.batch is not None:
        return "split-K takes a plain matmul (a batched one has blocks enough)"
    if (ops.m * ops.n) // (64 * 64) >= target.sm_count // 2:
        return f"{ops.m}x{ops.n} output tiles fill half the {target.sm_count} SMs already"
    if ops.k < 2 * MIN_K_PER_SPLIT:
        return f"K = {ops.k} is too short to split (at least {2 * MIN_K_PER_SPLIT})"
    return None


def split_k_wgmma_applies(operands, target: GpuTarget, arch: str) -> str | None:
    return split_k_applies(operands, target, arch, "wgmma")


@dataclass(frozen=True)
class _ReduceTile:
    """The reducing kernel's block: REDUCE_THREADS threads, REDUCE_WIDTH columns each."""
    bm: int = 1
    bn: int = REDUCE_THREADS * REDUCE_WIDTH
    threads: int = REDUCE_THREADS

    def label(self) -> str:
        return f"{REDUCE_THREADS} threads x {REDUCE_WIDTH}"


class ReduceWriter(TiledMatmulWriter):
    """Sums the f32 partials of REDUCE_WIDTH columns a thread, then finishes
    them as the matmul's one-kernel generators do (epilogue, narrowing,
    output view)."""

    def __init__(self, ops: MatmulOperands, splits: int, accumulate: bool, epilogue: Epilogue | None, path: str):
        super().__init__(ops, _ReduceTile(), "split-k-reduce", accumulate, epilogue)
        self.splits, self.path = splits, path

    def grid(self) -> tuple[int, int, int]:
        return (-(-self.ops.m * self.ops.n // (REDUCE_THREADS * REDUCE_WIDTH)), 1, 1)

    def workgroup_types(self) -> list[ir.MemRefType]:
        return []

    def bind_workspace(self, workspace: ir.Value) -> None:
        self.workspace = workspace

    def kernel_body(self) -> None:
        w, ops = self.w, self.ops
        first = w.mul(w.add(w.mul(self.block_n, REDUCE_THREADS), self.tid), REDUCE_WIDTH)
        with w.only_if(w.less(first, ops.m * ops.n) if (ops.m * ops.n) % (REDUCE_THREADS * REDUCE_WIDTH) else None):
            row, col = w.div(first, ops.n), w.rem(first, ops.n)
            partials = [w.load(REDUCE_WIDTH, "f32", self.workspace, [w.add(row, z * ops.m), col], 16)
                        for z in range(self.splits)]
            w.tag(partials[0].owner)  # the kernel report's path (this kernel has no loop or barrier)
            total = w.tree(partials, arith.addf)
            if self.accumulate:
                total = arith.addf(total, self.load_results(REDUCE_WIDTH, row, col))
            self.store_results(total, REDUCE_WIDTH, row, col)


class SplitKMatmulWriter:
    """The split-K generator: builds the partial and the reducing kernels,
    and their workspace, in place of one matmul."""

    def __init__(self, ops: MatmulOperands, schedule, accumulate: bool, epilogue: Epilogue | None):
        self.ops, self.schedule = ops, schedule
        self.path = f"split-k-matmul {schedule.label()}"
        self.partial = schedule.partial(ops, schedule.tile, schedule.splits, self.path)
        self.reduce = ReduceWriter(ops, schedule.splits, accumulate, epilogue, self.path)
        self.threads = schedule.threads

    def build(self, before: ir.Operation, kernel: str, operands: KernelOperands,
              reuse: LaunchReuse | None = None) -> ir.Operation:
        """The partial and the reducing kernel around their workspace, built each time (`reuse` unused)."""
        return build_with_workspace(before, kernel, operands, self.partial, self.reduce,
                                    [self.schedule.splits * self.ops.m, self.ops.n])


def build_with_workspace(before: ir.Operation, kernel: str, operands: KernelOperands, partial: TiledMatmulWriter,
                         reduce: ReduceWriter, workspace_shape: list[int]) -> ir.Operation:
    """An f32 workspace, the partial kernel writing it, the reducing kernel
    finishing C from it, and the workspace's release, right before `before`."""
    with before.location, ir.InsertionPoint(before):
        workspace = memref.alloc(ir.MemRefType.get(workspace_shape, element_type("f32")), [], [])
    try:
        partial.build(before, kernel, KernelOperands(operands.a, operands.b, workspace))
        reduce.bind_workspace(workspace)
        launch = reduce.build(before, f"{kernel}_reduce", operands)
    except Exception:
        _erase_users_and(workspace)
        raise
    with before.location, ir.InsertionPoint(before):
        memref.dealloc(workspace)
    return launch


def _erase_users_and(workspace: ir.Value) -> None:
    for use in list(workspace.uses):
        use.owner.erase()
    workspace.owner.erase()

