"""The tracks tools/compare.py and tools/bench.py ask once each: each
checks and times itself on a shared run, and one that cannot compile the
model reports why instead of raising."""

import textwrap

from twintrack.harness.checked_run import CheckedRun, Timing
from twintrack.harness.tracks import EagerTrack, TwintrackCpuTrack, TwintrackGpuTrack, twintrack_on

BRANCHING_MODEL = textwrap.dedent("""
    import torch

    class BranchOnData(torch.nn.Module):
        def forward(self, x):
            if x.sum() > 0:  # a Python branch on a value: torch.export cannot trace it
                return x * 2
            return -x

    def build():
        return BranchOnData(), (torch.randn(4, 2),)
""")


def _run(model: str) -> CheckedRun:
    return CheckedRun.load(model, timing=Timing(repeat=2, warmup=1))


def test_twintrack_cpu_track_compiles_once_and_reports_its_kernels():
    run = _run("zoo:mlp")
    report = TwintrackCpuTrack().report(run, kernel_times=True)
    assert report.failure is None and report.result.ok and report.result.latency_ms > 0
    assert report.compile_seconds > 0 and report.kernel_count == len(report.kernels) > 0
    assert all(k["ms"] is None for k in report.kernels), "kernels are profiled on the GPU only"
    assert report.program is not None, "the program its one export made, for compare's op graph"
    figures = report.figures()
    assert figures["error"] is None and figures["kernel_count"] == report.kernel_count


def test_eager_track_has_no_compile_and_no_kernels():
    report = EagerTrack().report(_run("zoo:softmax"))
    assert report.result.ok and report.compile_seconds is None and report.kernels is None
    assert report.figures()["kernel_count"] is None


def test_a_track_that_cannot_compile_the_model_reports_why(tmp_path):
    model = tmp_path / "branching_model.py"
    model.write_text(BRANCHING_MODEL)
    run = _run(f"{model}:build")
    report = TwintrackCpuTrack().report(run)
    assert report.result is None and "torch.export failed" in report.error
    figures = report.figures()
    assert figures["latency_ms"] is None and figures["rel_error"] is None and figures["error"] == report.error
    assert EagerTrack().report(run).result.ok, "the other tracks still run on the same run"


def test_twintrack_track_follows_the_device():
    assert isinstance(twintrack_on("cpu", freeze=True), TwintrackCpuTrack)
    gpu = twintrack_on("cuda", with_program=False)
    assert isinstance(gpu, TwintrackGpuTrack) and gpu.artifact is None and not gpu.with_program


def test_the_dtype_of_a_model_without_parameters_is_its_inputs():
    """An fp16 artifact of attention alone (no parameters) matches the fp16
    model; a model with parameters is as its parameters."""
    import torch
    from twintrack.harness.tracks import _floating_dtype
    half = torch.randn(2, 3).half()
    assert _floating_dtype(torch.nn.Softmax(-1), (half,)) == "float16"
    assert _floating_dtype(torch.nn.Linear(3, 3), (half,)) == "float32"
    assert _floating_dtype(torch.nn.Identity(), (torch.ones(2, dtype=torch.int64),)) == "float32"
