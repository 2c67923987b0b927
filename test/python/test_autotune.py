"""--autotune: tuning variants, the cache and what a second compile takes
from it. (Timing the variants needs a GPU: tools/tune.py; here only its
choice of the fastest tile is checked, on given times.)"""

import json

import pytest

from twintrack.compiler.autotune import TuningCache
from twintrack.cli.tune import best_tiles
from twintrack.compiler.kernels.matmul_common import MatmulOperands
from twintrack.compiler.passes.gpu_matmul_kernels import _fitting, _generators, choose_kernel, load_tile_tables
from twintrack.tooling import find_libdevice, find_tool

needs_ptxas = pytest.mark.skipif(find_tool("ptxas") is None or find_libdevice() is None,
                                 reason="needs ptxas and libdevice (the CUDA toolkit)")

GEMM = "zoo:gemm?m=256&k=128&n=256"


def _kernels(outdir):
    return json.loads((outdir / "manifest.json").read_text())["kernels"]


@needs_ptxas
def test_untuned_matmul_gets_variants_then_takes_the_cached_tile(run_tool, tmp_path):
    cache = tmp_path / "cache.json"
    first = run_tool("compile", GEMM, "--pipeline", "gpu", "--autotune", "--tuning-cache", cache, "-o", tmp_path / "a")
    assert first.returncode == 0, first.stderr
    assert "1 matmul(s) have no tuning entry" in first.stdout
    variants = sorted(p.name for p in (tmp_path / "a" / "tuning").iterdir())
    assert "heuristic" in variants and "variant-0" in variants
    tiles = {json.dumps(_kernels(tmp_path / "a" / "tuning" / v)[0]["tuning"]["tile"], sort_keys=True) for v in variants}
    assert len(tiles) > 1  # the variants really try different tiles
    heuristic = _kernels(tmp_path / "a")[0]["tuning"]
    other = next(json.loads(t) for t in sorted(tiles) if json.loads(t) != heuristic["tile"])

    # As tools/tune.py would record it: a tile other than the heuristic's won.
    TuningCache(cache, {heuristic["key"]: {"tile": other, "ms": 0.01, "candidates": []}}).save()
    second = run_tool("compile", GEMM, "--pipeline", "gpu", "--autotune", "--tuning-cache", cache, "-o", tmp_path / "b")
    assert second.returncode == 0, second.stderr
    assert "no tuning entry" not in second.stdout and not (tmp_path / "b" / "tuning").exists()
    assert _kernels(tmp_path / "b")[0]["tuning"]["tile"] == other


def test_fastest_tile_wins_per_key():
    measured = [{"key": "k1", "tile": {"generator": "simt_matmul", "bm": 64}, "ms": 0.30, "heuristic": True},
                {"key": "k1", "tile": {"generator": "simt_matmul", "bm": 32}, "ms": 0.20},
                {"key": "k1", "tile": {"generator": "simt_matmul", "bm": 32}, "ms": 0.25},
                {"key": "k2", "tile": {"generator": "mma_matmul", "bm": 128}, "ms": 0.05}]
    results = best_tiles(measured)
    assert results["k1"]["candidates"][0] == {"tile": {"generator": "simt_matmul", "bm": 32}, "ms": 0.20,
                                              "heuristic": False}
    assert len(results["k1"]["candidates"]) == 2 and results["k2"]["candidates"][0]["ms"] == 0.05
    # The heuristic's tile stays marked when another variant timed it faster.
    again = best_tiles(measured + [{"key": "k1", "tile": {"generator": "simt_matmul", "bm": 64}, "ms": 0.10}])
    assert again["k1"]["candidates"][0] == {"tile": {"generator": "simt_matmul", "bm": 64}, "ms": 0.10, "heuristic": True}


def test_autotune_needs_the_gpu_pipeline(run_tool, tmp_path):
    result = run_tool("compile", GEMM, "--autotune", "-o", tmp_path / "c")
    assert result.returncode == 2 and "--pipeline gpu" in result.stderr


def test_a_broken_cache_is_named(run_tool, tmp_path):
    cache = tmp_path / "cache.json"
    cache.write_text("{not json")
    result = run_tool("compile", GEMM, "--pipeline", "gpu", "--autotune", "--tuning-cache", cache, "-o", tmp_path / "d")
    assert result.returncode == 2 and "not a twintrack tuning cache" in result.stderr


def test_tune_without_a_gpu_is_a_clean_error(run_tool, tmp_path):
    result = run_tool("tune", tmp_path)
    assert result.returncode == 2 and "GPU" in result.stderr, result.stderr


def _wgmma_tiles(m, n, k):
    """The heuristic's wgmma tile and all fitting wgmma candidates for an
    f16 linear layer (M x K @ (N x K)ᵀ) on sm_90a."""
    operands = [MatmulOperands("", "", "", None, m, n, k, "f16", "f16", b_transposed=True)]
    table = load_tile_tables()
    _, tile, _, _ = choose_kernel(operands, table, "sm_90a")
    _, _, tiles = next(_generators(operands, table, "sm_90a"))
    return tile, [t for t, _ in _fitting(operands, tiles, table.max_padding)]


@pytest.mark.parametrize("shape, chosen", [
    ((2048, 256, 256), "64x64x64/1 warpgroups/4 stages"),     # 4 K steps: the whole K in the ring
    ((2048, 256, 1024), "64x64x64/1 warpgroups/8 stages"),    # one block per SM: the table's most
    ((2048, 768, 256), "64x128x64/1 warpgroups/4 stages"),
    ((2048, 768, 1024), "64x128x64/1 warpgroups/4 stages"),   # 192 blocks: 2 per SM, 2 x 8 x 24 KiB do not fit
    ((2048, 1024, 1024), "128x128x64/2 warpgroups/6 stages"),
    ((4096, 4096, 4096), "128x256x64/2 warpgroups/4 stages"),  # 192 KiB: no room for a 5th
    ((197, 768, 768), "64x64x64/1 warpgroups/8 stages"),      # ragged rows: the most blocks (48), 12 K steps
    # 200 blocks, 2 per SM: 7 stages (112 KiB + the ring's alignment) would
    # fill a block's share exactly, and MLIR's static shared byte would then
    # keep the second block off the SM
    ((1568, 512, 4608), "64x64x64/1 warpgroups/6 stages"),
])
def test_wgmma_ring_depth_follows_k_and_shared_memory(shape, chosen):
    tile, candidates = _wgmma_tiles(*shape)
    assert tile.label() == chosen
    assert len(set(candidates)) == len(candidates)  # tiles that end up alike are tuned once
    assert all(t.stages * t.stage_bytes(2) + 1024 <= 227 * 1024 for t in candidates)


def test_shallow_rings_are_tuning_candidates_only_where_they_differ():
    _, short = _wgmma_tiles(2048, 256, 256)
    _, long = _wgmma_tiles(2048, 256, 1024)
    assert [t.stages for t in short if (t.bm, t.bn) == (64, 64)] == [4]
    assert [t.stages for t in long if (t.bm, t.bn) == (64, 64)] == [8, 4]


def test_tuning_is_part_of_the_options_hash_and_the_pass_spec(tmp_path):
    """Tiles chosen by tuning are compile options: the cache's content goes
    into the options hash, and the matmul pass's spec (so its reproducer)
    names the cache or the variant."""
    from dataclasses import replace

    from twintrack.compiler.options import CompileOptions
    from twintrack.compiler.recipes import PipelineVariables, load_recipe

    cache_path = tmp_path / "tuning.json"
    cache = TuningCache(cache_path)
    cache.save()
    tuned = replace(CompileOptions(pipeline="gpu"), tuning_cache=cache_path)
    before = tuned.stable_hash()
    cache.record("some|key", {"generator": "mma_matmul"}, 0.1, [], "test")
    cache.save()
    assert tuned.stable_hash() != before != CompileOptions(pipeline="gpu").stable_hash()

    variables = PipelineVariables(target="gpu", tuning_cache=cache_path, tuning_variant=2)
    spec, *_ = next(s for s in load_recipe("gpu", variables=variables).stages if s.name == "matmul-kernels").python_passes
    assert f"tuning_cache={cache_path.resolve()}" in spec and "tuning_variant=2" in spec


def test_shared_room_counts_the_static_byte_and_allocation_units():
    """Two blocks of 7 x 16 KiB + the 1 KiB alignment fill half an SM less
    the driver's reserve exactly; MLIR's one static shared byte (rounded to
    the 128-byte allocation unit) then leaves room for one."""
    from twintrack.compiler.target import gpu_target
    target = gpu_target()
    seven_stages, six_stages = 7 * 16384 + 1024, 6 * 16384 + 1024
    assert target.blocks_fitting(seven_stages) == 1 and target.blocks_fitting(six_stages) == 2
    assert six_stages <= target.shared_room(2) < seven_stages
    assert target.blocks_fitting(target.shared_room(2)) == 2 and target.blocks_fitting(target.shared_room(3)) == 3
