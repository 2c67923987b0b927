"""Each kind of bad input gets one line naming it, exit code 2, no traceback."""

import pytest
import torch

import twintrack
from twintrack.harness import zoo
from twintrack.errors import InputMismatchError


def assert_clean_error(result, *fragments):
    assert result.returncode == 2, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert lines and "error:" in lines[-1]
    for fragment in fragments:
        assert fragment in lines[-1]


def test_missing_model_file(run_tool, tmp_path):
    assert_clean_error(run_tool("compile", tmp_path / "nope.pt", "-o", tmp_path / "o"), "not found", "nope.pt")


def test_corrupt_model_file(run_tool, tmp_path):
    (tmp_path / "bad.pt").write_bytes(b"definitely not a zip archive")
    assert_clean_error(run_tool("compile", tmp_path / "bad.pt", "-o", tmp_path / "o"), "bad.pt", "torch.export")
    assert not (tmp_path / "o").exists()


def test_unknown_zoo_name(run_tool, tmp_path):
    assert_clean_error(run_tool("compile", "zoo:resnet9000", "-o", tmp_path / "o"), "resnet9000", "available")


def test_unknown_pipeline(run_tool, tmp_path):
    assert_clean_error(run_tool("compile", "zoo:mlp", "--pipeline", "tpu", "-o", tmp_path / "o"), "unknown pipeline 'tpu'")


def test_op_no_stage_can_lower(run_tool, tmp_path):
    (tmp_path / "sample.py").write_text(
        "import torch\n"
        "class M(torch.nn.Module):\n"
        "    def forward(self, x, grid):\n"
        "        return torch.nn.functional.grid_sample(x, grid, align_corners=False) + 1\n"
        "def make():\n"
        "    return M(), (torch.randn(1, 2, 3, 4, 5), torch.rand(1, 2, 3, 4, 3) * 2 - 1)\n")
    result = run_tool("compile", f"{tmp_path / 'sample.py'}:make", "-o", tmp_path / "o")
    assert_clean_error(result, "stage 'torch' failed", "aten.grid_sampler_3d at ", "sample.py:4", "failed to legalize")


def test_unwritable_output_directory(run_tool, tmp_path):
    (tmp_path / "file").write_text("a file, not a directory")
    assert_clean_error(run_tool("compile", "zoo:gemm", "-o", tmp_path / "file" / "out"), "cannot write output directory")


def test_not_an_artifact(run_tool, tmp_path):
    assert_clean_error(run_tool("run", tmp_path, "--check"), "manifest.json")


@pytest.mark.parametrize("bad", ["shape", "dtype"])
def test_wrong_input_at_run_time(bad):
    module, (x,) = zoo.build("gemm")
    compiled = twintrack.compile(module, (x,))
    wrong = x[:, :-1] if bad == "shape" else x.double()
    with pytest.raises(InputMismatchError, match="input0"):
        compiled(wrong)
    assert torch.isfinite(compiled(x)).all()

