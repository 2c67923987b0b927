"""--autotune: tuning variants, the cache and what a second compile takes
from it. (Timing the variants needs a GPU: tools/tune.py; here only its
choice of the fastest tile is checked, on given times.)"""

import json

import pytest

from twintrack.autotune import TuningCache
from twintrack.cli.tune import best_tiles
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
