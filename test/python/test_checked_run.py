"""The checked run every comparison, benchmark, GPU check and tuning run goes
through: fresh inputs from a seed, the float64 reference, and a track's
error against it (a NaN, a wrong or a missing output never passes)."""

import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from twintrack.harness.checked_run import ArtifactTrack, CheckedRun, Timing, eager_track
from twintrack.frontend.export import ModelSource

MLP = "zoo:mlp"


def _run(model=MLP, **kwargs) -> CheckedRun:
    return CheckedRun.load(model, timing=Timing(repeat=2, warmup=1), **kwargs)


def test_eager_float32_passes_against_the_float64_reference():
    run = _run()
    result = run.check_and_time(eager_track(run.source, run.device))
    assert result.ok and result.rel_error < 1e-5
    figures = result.figures()
    assert result.latency_ms > 0 and figures["latency_ms"] == result.latency_ms and figures["rel_error"] == result.rel_error
    assert figures["latency_p10_ms"] <= figures["latency_ms"] <= figures["latency_p90_ms"] and figures["threads"] >= 1


def test_a_wrong_result_fails():
    run = _run()
    eager = eager_track(run.source, run.device)
    result = run.check(lambda *xs: [y * 1.001 for y in eager(*xs)])
    assert not result.ok and 5e-4 < result.rel_error < 2e-3


def test_a_nan_output_never_passes():
    run = _run()
    eager = eager_track(run.source, run.device)

    def one_nan(*xs):
        (y,) = eager(*xs)
        y = y.clone()
        y.view(-1)[0] = math.nan
        return [y]
    result = run.check(one_nan)
    assert not result.ok and math.isnan(result.rel_error)


class _TwoOutputs(torch.nn.Module):
    def forward(self, x):
        return x * 2, x + 1


def _two_output_run() -> CheckedRun:
    return CheckedRun.of(ModelSource("<two>", _TwoOutputs(), (torch.randn(4, 8),)), timing=Timing(repeat=2))


def test_a_nan_in_a_later_output_is_the_track_error():
    """max() over [ok, nan] would return the ok one's error: NaN must win."""
    run = _two_output_run()
    result = run.check(lambda x: [x * 2, torch.full_like(x, math.nan)])
    assert [c.ok for c in result.checks] == [True, False]
    assert not result.ok and math.isnan(result.rel_error)


def test_a_missing_or_extra_output_fails():
    run = _two_output_run()
    missing = run.check(lambda x: [x * 2])
    extra = run.check(lambda x: [x * 2, x + 1, x])
    assert len(missing.checks) == 2 and not missing.ok and math.isnan(missing.rel_error)
    assert not extra.ok and math.isnan(extra.rel_error)


def test_inputs_follow_the_seed():
    first, again = _run(seed=5), _run(seed=5)
    other = first.reseeded(6)
    assert all(torch.equal(a, b) for a, b in zip(first.inputs, again.inputs, strict=True))
    assert not torch.equal(first.inputs[0], other.inputs[0])
    assert [tuple(x.shape) for x in other.inputs] == [tuple(x.shape) for x in first.inputs]
    assert all(ref.dtype == torch.float64 for ref in first.reference)


class _HalfWritingExecutable:
    """A GPU executable stand-in whose kernel writes only the first half of
    its output; the rest holds whatever the memory held (here: the right values)."""

    cuda_graph = False

    def __init__(self, module):
        self.module, self.poison_outputs, self.poisoned_calls = module, False, 0

    def __call__(self, x):
        stale = self.module(x).detach().clone()
        if self.poison_outputs:
            self.poisoned_calls += 1
            stale.fill_(math.nan)
        stale.view(-1)[: stale.numel() // 2] = self.module(x).detach().view(-1)[: stale.numel() // 2]
        return [stale]


def test_an_artifact_track_is_checked_with_poisoned_outputs():
    run = _run()
    executable = _HalfWritingExecutable(run.source.module)
    track = ArtifactTrack(Path("artifact"), {"kernels": []}, executable, state=[])
    assert run.check(lambda *xs: executable(*xs)).ok  # unpoisoned, stale memory hides the bug
    result = run.check(track)
    assert not result.ok and math.isnan(result.rel_error)
    assert executable.poisoned_calls == 1 and executable.poison_outputs is False  # timing runs unpoisoned


def test_the_gpu_tools_import_no_mlir():
    """tools/gpu_check.py and tools/tune.py run where only torch and cuda-bindings are installed."""
    code = ("import sys, twintrack.harness.checked_run, twintrack.cli.gpu_check, twintrack.cli.tune; "
            "bad = [m for m in sys.modules if m.split('.')[0] in ('mlir', 'torch_mlir')]; "
            "assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=Path(__file__).resolve().parents[2] / "python")


@pytest.mark.parametrize("fatal", ["an illegal instruction", "CUDA_ERROR_LAUNCH_FAILED"])
def test_gpu_check_goes_on_in_a_fresh_process_after_an_unusable_context(tmp_path, capfd, fatal):
    """gpu_check's rows come in the artifacts' order, each check in a
    worker process; after a row whose error leaves the CUDA context
    unusable (its message names an illegal instruction, or the driver's
    launch failure as a module load reports it) a fresh worker checks the
    rest. Here every artifact is missing (an error row, no GPU needed); the
    middle one's path carries the fatal words."""
    from twintrack.cli.gpu_check import check_all
    artifacts = [tmp_path / "first", tmp_path / fatal, tmp_path / "last"]
    rows = check_all(artifacts)
    assert [r["artifact"] for r in rows] == ["first", fatal, "last"]
    assert all(not r["ok"] and "no manifest.json" in r["error"] for r in rows)
    assert f"{fatal} left the CUDA context unusable" in capfd.readouterr().err


def test_gpu_check_table_puts_eagers_error_beside_the_artifacts():
    """A tolerance miss reads against eager's own error on the same inputs
    (tf32's truncation in the tensor cores against torch's rounding); a
    model eager cannot run on the GPU shows a dash."""
    from twintrack.cli.gpu_check import markdown
    row = {"artifact": "r50_tf32", "dtype": "float32", "kernels": 56, "compile_seconds": 16.1,
           "rel_error": 1.96e-2, "eager_rel_error": 1.2e-3, "ok": False, "twintrack_ms": 2.5,
           "twintrack_graph_ms": 2.5, "eager_ms": 4.3, "ratio_vs_eager": 0.58, "graph_ratio_vs_eager": 0.58,
           "kernels_total_ms": 2.2, "eager_kernels_ms": 4.0, "kernel_ratio_vs_eager": 0.55,
           "peak_bytes_twintrack": 2**20, "peak_bytes_eager": 2**21}
    no_eager = {**row, "artifact": "exported", "eager_rel_error": None, "ok": True, "rel_error": 1e-3}
    lines = markdown([row, no_eager], "a GPU").splitlines()
    assert "| rel. error (tt / eager) |" in lines[2]
    assert "| 1.96e-02 FAIL / 1.20e-03 |" in lines[4] and "| 1.00e-03 / — |" in lines[5]
