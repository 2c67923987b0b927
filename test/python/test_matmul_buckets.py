"""The cost model that splits a matmul of run-time M into buckets
(compiler/passes/matmul_buckets.py): its roofline estimate, and the bounds
it adds only where they pay. The kernels it picks are built and checked by
test_gpu_dynamic.py; their times on the device are in bench/NOTES.md."""

from dataclasses import replace

import pytest

from twintrack.compiler.kernels.matmul_common import MatmulOperands
from twintrack.compiler.kernels.skinny_matmul import SkinnySchedule
from twintrack.compiler.kernels.wgmma_matmul import WgmmaTileConfig
from twintrack.compiler.passes.matmul_buckets import estimated_seconds, plan_buckets, sampled_rows
from twintrack.compiler.target import gpu_target

DECODE = MatmulOperands("memref<?x4096xf16>", "memref<4096x4096xf16>", "memref<?x4096xf16>", None,
                        64, 4096, 4096, "f16", "f16", b_transposed=True, open_m=True)
SKINNY = SkinnySchedule(b_transposed=True, warps=8, unroll=2, splits=1)
TILE = WgmmaTileConfig(bm=64, bn=64, bk=64, warpgroups=1, stages=8)
WIDE = WgmmaTileConfig(bm=128, bn=256, bk=64, warpgroups=2, stages=4)


def _choose(operands: MatmulOperands):
    """Skinny up to 8 rows, a 64-row tile to 64, a wide tile above (as the tables would)."""
    tile = SKINNY if operands.m <= 8 else TILE if operands.m <= 64 else WIDE
    return (None, tile, "test", {})


def test_sampled_rows_cover_the_range_evenly_in_doublings():
    rows = sampled_rows(64)
    assert rows[0] == 1 and rows[-1] == 64 and rows == sorted(set(rows))
    assert 20 <= len(rows) <= 26  # four a doubling
    assert sampled_rows(1) == [1]


def test_a_tile_pays_for_its_padded_rows_and_idle_sms():
    """At one row, a 128x256 tile computes 128 and keeps 16 SMs busy; the
    estimate is above the skinny kernel's, which reads B at full rate."""
    target = gpu_target()
    wide, skinny = (estimated_seconds(DECODE, tile, 1, target) for tile in (WIDE, SKINNY))
    assert wide > 2 * skinny
    # B read once at the copy bandwidth, plus the launch: the floor of any kernel at this size
    floor = 4096 * 4096 * 2 / target.copy_bandwidth + target.launch_seconds
    assert skinny == pytest.approx(floor, rel=0.01)
    assert estimated_seconds(DECODE, TILE, 64, target) >= estimated_seconds(DECODE, TILE, 1, target)


def test_a_bound_is_added_only_where_it_pays():
    target = replace(gpu_target(), dynamic_matmul_bucket_bounds=(8, 64, 512), dynamic_bucket_gain=0.1)
    wide_range = replace(DECODE, m=4096)
    plan = plan_buckets(wide_range, target, _choose)
    assert plan.bounds and plan.seconds < plan.single_seconds * 0.9
    assert [b.rows_bucket for b, _ in plan.buckets][-1] == f"M > {plan.bounds[-1]}"
    assert all(b.m == bound for (b, _), bound in zip(plan.buckets, plan.bounds))
    # No bound can cut a quarter of the estimate by 99%: one kernel, and the report says so.
    single = plan_buckets(wide_range, replace(target, dynamic_bucket_gain=0.99), _choose)
    assert single.bounds == () and len(single.buckets) == 1 and single.buckets[0][0].rows_bucket == ""
    assert single.describe().startswith("one kernel for every M")


def test_bounds_past_the_largest_rows_are_not_candidates():
    target = replace(gpu_target(), dynamic_matmul_bucket_bounds=(64, 512), dynamic_bucket_gain=-1.0)
    plan = plan_buckets(DECODE, target, _choose)  # M at most 64
    assert plan.bounds == ()


def test_no_plan_where_a_bucket_has_no_kernel():
    assert plan_buckets(DECODE, gpu_target(), lambda operands: None) is None
