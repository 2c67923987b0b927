"""Hugging Face encoders on the GPU track, without a GPU: a BERT, a T5 encoder
and Whisper's encoder from small configs, called with `input_ids` (Whisper:
`input_features`) alone, compile with
--pipeline gpu and --strict-kernels (a fast-path kernel that fails to build
fails the test), each layer's attention one flash-attention kernel.

T5 is the regression: its scores' epilogue gathers the relative position
bias from the bias table, a buffer the epilogue's body reads from outside
it. The text kernel writer referred to that buffer by a name the kernel
function never declared ("use of undeclared SSA value name" in
attention-kernels); the builders read it as the value it is. Behind that,
gpu-matmul-kernels read a transpose's outputs as a generic's, and the GPU
lowering had no conversion for the bucket's integer abs (math.absi)."""

import json
from pathlib import Path

import pytest

from twintrack.tooling import find_libdevice, find_tool

pytest.importorskip("transformers", reason="needs transformers (Hugging Face models)")
pytestmark = pytest.mark.skipif(find_tool("ptxas") is None or find_libdevice() is None,
                                reason="needs ptxas and libdevice (the CUDA toolkit)")

FACTORIES = Path(__file__).with_name("real_models.py")


@pytest.mark.parametrize("name", ["bert", "t5_encoder", "whisper_encoder"])
def test_encoder_compiles_on_the_gpu_track(name, run_tool, tmp_path):
    outdir = tmp_path / name
    result = run_tool("compile", f"{FACTORIES}:{name}", "--pipeline", "gpu", "--strict-kernels", "-o", outdir, "-q")
    assert result.returncode == 0, result.stderr
    manifest = json.loads((outdir / "manifest.json").read_text())
    assert not manifest["kernel_fallbacks"]
    flash = [k for k in manifest["kernels"] if k["path"].startswith("flash-attention")]
    assert len(flash) == 2, [k["path"] for k in manifest["kernels"]]  # one per layer
    assert all(k["spills"] == 0 for k in flash)
    if name == "t5_encoder":  # the bias table's lookup runs inside the attention kernel
        assert all(any(op.startswith("aten.embedding") for op in k["source_ops"]) for k in flash)


@pytest.mark.parametrize("name", [
    "vit",  # sequence 17: no matmul tile divides it, so its matmuls and attention take the generic path
    "mistral",  # sliding-window attention
    "mixtral?batched_mm=1",  # topk routing, expert weights gathered by index
    pytest.param("mobilenet_v3", marks=pytest.mark.slow),  # H200 numerics: bench/results/…-v34-coverage-models
    pytest.param("efficientnet", marks=pytest.mark.slow),
    "convnext",
])
def test_real_model_compiles_on_the_gpu_track(name, run_tool, tmp_path):
    """Compile-only: every fast-path kernel builds (--strict-kernels)."""
    outdir = tmp_path / name.replace("?", "-").replace("=", "")
    result = run_tool("compile", f"{FACTORIES}:{name}", "--pipeline", "gpu", "--strict-kernels", "-o", outdir, "-q")
    assert result.returncode == 0, result.stderr
    assert not json.loads((outdir / "manifest.json").read_text())["kernel_fallbacks"]
