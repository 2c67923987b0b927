"""Which kernels serve a matmul whose M (rows) is known only at run time.

One kernel tiled for the largest M, its last row tile masked, serves every
M; but at a small M its few large tiles leave most SMs idle, and a kernel
tiled for that M (the skinny kernel of decode, smaller tiles) is faster.
Each bucket of M costs a kernel more to compile and ship, so a bound is
taken only where it pays: the cost model estimates each kernel's time at
the sizes of M the range holds (a roofline whose compute and memory rates
shrink with the SMs a grid leaves busy), and adds the candidate bound of
`lowering/targets/gpu.toml`'s `[dynamic] matmul-bucket-bounds` that cuts
the mean estimate most, while it cuts it by at least `matmul-bucket-gain`.
The decision and its estimates go into the kernels' tuning notes, which
the kernel report prints."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace

from ..kernels.matmul_common import MatmulOperands, element_bytes
from ..target import GpuTarget

# The multiply rates of the tensor cores by input element; f32 runs on the CUDA cores (or as tf32).
_TENSOR_RATE = {"f16": "float16", "bf16": "bfloat16"}


def estimated_seconds(operands: MatmulOperands, tile, rows: int, target: GpuTarget) -> float:
    """A roofline estimate of the kernel `tile` (chosen for `operands`)
    at `rows` rows of A: the larger of its multiply and memory times, each
    at the share of the SMs its grid keeps busy. A tile with rows (bm) pads
    M to whole tiles and reads B once per row tile; a schedule without
    (skinny) multiplies the rows as given and reads B once."""
    at = replace(operands, m=rows)
    bm = getattr(tile, "bm", None)
    row_tiles = -(-rows // bm) if bm else 1
    column_tiles = -(-at.n // tile.bn) if bm else 1
    padded_rows, columns = (row_tiles * bm, column_tiles * tile.bn) if bm else (rows, at.n)
    batch = at.batch or 1
    flops = 2 * batch * padded_rows * columns * at.k
    size = element_bytes(at.in_element)
    moved = batch * (rows * at.k * size * column_tiles + at.n * at.k * size * row_tiles
                     + rows * at.n * element_bytes(at.out_element))
    blocks = tile_blocks([at], tile)
    waves = -(-blocks // target.sm_count)
    busy = blocks / (waves * target.sm_count)  # the SMs' share a wave keeps busy, on average
    multiply = flops / (_multiply_rate(at, target) * busy)
    bandwidth = min(target.copy_bandwidth, target.sm_bandwidth * blocks)
    return max(multiply, moved / bandwidth) + target.launch_seconds


def tile_blocks(operands: list[MatmulOperands], tile) -> int:
    """Blocks the tile gives the matmuls (a split-K schedule's K slices
    count too; a schedule that counts its own blocks says so)."""
    if hasattr(tile, "blocks"):
        return sum(tile.blocks(o) for o in operands)
    slices = getattr(tile, "splits", 1)
    return sum(-(-o.m // tile.bm) * -(-o.n // tile.bn) * (o.batch or 1) * slices for o in operands)


def _multiply_rate(operands: MatmulOperands, target: GpuTarget) -> float:
    if operands.in_element in _TENSOR_RATE:
        return target.peak_flop_rate[_TENSOR_RATE[operands.in_element]]
    return target.peak_flop_rate["float16"] / 2 if operands.tf32 else target.flop_rate


def sampled_rows(largest: int) -> list[int]:
    """The sizes of M the estimate averages over: 1 to `largest`, four a
    doubling (small batches are as likely as large ones)."""
    steps = int(4 * math.log2(largest)) if largest > 1 else 0
    return sorted({max(1, round(2 ** (i / 4))) for i in range(steps + 1)} | {largest})


@dataclass(frozen=True)
class BucketPlan:
    """The bounds M is split at (each bucket's kernel tiled for its largest
    M), each bucket's (operands, chosen kernel), and the mean estimated
    time of the plan against that of one kernel for the whole range."""
    bounds: tuple[int, ...]
    buckets: list[tuple[MatmulOperands, tuple]]
    seconds: float
    single_seconds: float

    def note(self) -> dict:
        """What the kernel report says of the decision."""
        return {"bounds": list(self.bounds), "estimate_us": round(self.seconds * 1e6, 2),
                "one_kernel_us": round(self.single_seconds * 1e6, 2)}

    def describe(self) -> str:
        if len(self.buckets) == 1:
            return (f"one kernel for every M: no bound of M cuts its estimated "
                    f"{self.single_seconds * 1e6:.3g} us (mean over M) enough")
        return (f"{len(self.buckets)} buckets split at M = {', '.join(map(str, self.bounds))}: estimated "
                f"{self.seconds * 1e6:.3g} us against {self.single_seconds * 1e6:.3g} us for one kernel "
                "(mean over M)")


def plan_buckets(operands: MatmulOperands, target: GpuTarget,
                 choose: Callable[[MatmulOperands], tuple | None]) -> BucketPlan | None:
    """The bucket bounds for a matmul of run-time M (`operands.m` its
    largest), added greedily from the target's candidates while each cuts
    the mean estimate by `dynamic_bucket_gain`; None where no kernel
    serves the whole range. `choose` gives the kernel for a bucket's operands."""
    largest = operands.m
    rows = sampled_rows(largest)
    candidates = [b for b in target.dynamic_matmul_bucket_bounds if b < largest]
    cost = _BucketCosts(operands, target, choose, rows)
    single = cost.plan(())
    if single is None:
        return None
    bounds, best = (), single
    while len(bounds) < len(candidates):
        trials = [(plan.seconds, plan) for b in candidates if b not in bounds
                  for plan in [cost.plan(tuple(sorted((*bounds, b))))] if plan is not None]
        if not trials:
            break
        seconds, plan = min(trials, key=lambda trial: trial[0])
        if seconds > best.seconds * (1 - target.dynamic_bucket_gain):
            break
        bounds, best = plan.bounds, plan
    return replace(best, single_seconds=single.seconds)


class _BucketCosts:
    """Each bucket's kernel chosen once, and the mean estimate of a set of bounds."""

    def __init__(self, operands: MatmulOperands, target: GpuTarget,
                 choose: Callable[[MatmulOperands], tuple | None], rows: list[int]):
        self.operands, self.target, self.choose, self.rows = operands, target, choose, rows
        self.kernels: dict[tuple[int, int], tuple | None] = {}

    def kernel(self, low: int, high: int) -> tuple[MatmulOperands, tuple] | None:
        """The kernel for low < M <= high, tiled for M = high."""
        if (low, high) not in self.kernels:
            last = high == self.operands.m
            text = "" if low == 0 and last else f"M > {low}" if last else f"M <= {high}" if low == 0 \
                else f"{low} < M <= {high}"
            bucket = replace(self.operands, m=high, rows_bucket=text)
            chosen = self.choose(bucket)
            self.kernels[low, high] = (bucket, chosen) if chosen is not None else None
        return self.kernels[low, high]

    def plan(self, bounds: tuple[int, ...]) -> BucketPlan | None:
        edges = (0, *bounds, self.operands.m)
        buckets = [self.kernel(low, high) for low, high in zip(edges, edges[1:])]
        if any(b is None for b in buckets):
            return None
        total = 0.0
        for m in self.rows:
            index = next(i for i, high in enumerate(edges[1:]) if m <= high)
            bucket, chosen = buckets[index]
            total += estimated_seconds(bucket, chosen[1], m, self.target)
        seconds = total / len(self.rows)
        return BucketPlan(bounds, buckets, seconds, seconds)
