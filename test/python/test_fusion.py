"""Cost-model fusion (twintrack-form-dispatches): numerics do not change with
fusion on or off, kernels and dispatches drop where they should, and the
decisions can be read."""

import json
import re

import pytest
from conftest import copies_read_through, mask_row_tests

from twintrack.harness import zoo
from twintrack.tooling import find_libdevice, find_tool

needs_ptxas = pytest.mark.skipif(find_tool("ptxas") is None or find_libdevice() is None,
                                 reason="needs ptxas and libdevice (the CUDA toolkit)")


@pytest.mark.parametrize("name", list(zoo.MODELS))
def test_numerics_match_float64_without_fusion(name, run_tool, tmp_path):
    """With fusion (test_zoo_cpu) and without it, the same float64 check passes."""
    outdir = tmp_path / name
    compiled = run_tool("compile", f"zoo:{name}", "--no-fusion", "-o", outdir, "-q")
    assert compiled.returncode == 0, compiled.stderr
    checked = run_tool("run", outdir, "--check")
    assert checked.returncode == 0 and "check: passed" in checked.stdout, checked.stdout + checked.stderr


def _dispatches(run_tool, tmp_path, model, *flags) -> list[str]:
    outdir = tmp_path / "d"
    result = run_tool("compile", model, "--stop-after", "fusion", "-o", outdir, "-q", *flags)
    assert result.returncode == 0, result.stderr
    return re.findall(r'twintrack\.dispatch "(\w+)"', result.stdout)


def gpu_kernels(artifact, model: str, *flags: str) -> tuple[list[dict], list[str]]:
    """The kernels of `model` compiled for the GPU and the dispatches of its
    fusion stage (the artifact keeps each stage's IR)."""
    outdir = artifact(model, "--pipeline", "gpu", *flags)
    manifest = json.loads((outdir / "manifest.json").read_text())
    fusion = next(stage["file"] for stage in manifest["stages"] if stage["name"] == "fusion")
    return manifest["kernels"], re.findall(r'twintrack\.dispatch "(\w+)"', (outdir / fusion).read_text())


def test_transformer_block_needs_far_fewer_dispatches(run_tool, tmp_path):
    fused = _dispatches(run_tool, tmp_path, "zoo:transformer_block")
    unfused = _dispatches(run_tool, tmp_path, "zoo:transformer_block", "--no-fusion")
    assert len(fused) <= 0.6 * len(unfused), (len(fused), len(unfused))
    assert any(label.startswith("reduction") for label in fused)


@needs_ptxas
@pytest.mark.parametrize("model, at_most", [("zoo:elementwise", 1), ("zoo:softmax", 1), ("zoo:layernorm", 1),
                                            ("zoo:mlp?batch=256&features=128&hidden=256&out=128", 3)])
def test_gpu_kernel_counts(artifact, model, at_most):
    """elementwise: one kernel for the whole chain; softmax and layernorm:
    one row-wise kernel (its reductions and normalization, a block per row);
    mlp: per layer one matmul kernel that reads the weight transposed and
    applies bias and ReLU in its epilogue."""
    counts = [len(gpu_kernels(artifact, model, *flags)[0])
              for flags in ((), ("--no-fusion",))]
    assert counts[0] <= at_most < counts[1], counts


@needs_ptxas
@pytest.mark.parametrize("model", ["zoo:layernorm", "zoo:softmax", "zoo:mlp?batch=256&features=128&hidden=256&out=128",
                                   "zoo:transformer_block", "zoo:gpt_block",
                                   "zoo:transformer_block?batch=8&seq=256&dim=256&heads=8",
                                   "zoo:gpt_block?batch=8&seq=256&dim=256&heads=8",
                                   "test/python/projection_blocks.py:separate_qkv_attention",
                                   "test/python/real_models.py:bert", "test/python/real_models.py:llama",
                                   "test/python/real_models.py:gpt2"])
def test_one_gpu_kernel_per_dispatch(artifact, model):
    """One kernel per dispatch, except attention: its three dispatches (Q·Kᵀ,
    the row-wise softmax, P·V) run as one flash-attention kernel, which also
    takes over the dispatches that copied Q, K or V into heads; a masked
    one adds the mask's row test (`mask_row_tests`)."""
    kernels, dispatches = gpu_kernels(artifact, model)
    assert len(dispatches) == len(set(dispatches))  # none copied into another
    attentions = [k["path"] for k in kernels if k["path"].startswith("flash-attention")]
    copies = sum(copies_read_through(path) for path in attentions)
    # a mask's row test is a kernel of its own, or part of the one that builds the mask
    extra = len(kernels) - (len(dispatches) - 2 * len(attentions) - copies)
    assert 0 <= extra <= len(mask_row_tests(kernels)), ([k["name"] for k in kernels], dispatches)


@needs_ptxas
@pytest.mark.parametrize("model, layers", [("test/python/projection_blocks.py:stacked_gpt_blocks?layers=3", 3),
                                           ("test/python/real_models.py:gpt2", 2)])
def test_every_layer_gets_its_flash_attention(artifact, model, layers):
    """Memory planning gives the layers' attentions the same score and
    head buffers; each layer's attention is still one kernel."""
    if "real_models" in model:
        pytest.importorskip("transformers")
    kernels, _ = gpu_kernels(artifact, model)
    assert sum(k["path"].startswith("flash-attention") for k in kernels) == layers, [k["path"] for k in kernels]


def test_explain_fusion_names_each_decision(run_tool, tmp_path):
    result = run_tool("compile", "zoo:transformer_block", "--explain-fusion", "-o", tmp_path / "e", "-q")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.split("fusion decisions", 1)[1].splitlines()[1:]
    assert any("recomputed in each of its" in line and "aten.native_layer_norm" in line for line in lines)
    assert any("kept apart" in line and "feeds a matmul" in line for line in lines)
    assert all(re.search(r"(saves -?\d+ bytes|kept apart|reshape|epilogue)", line) for line in lines if line.strip())


@needs_ptxas
def test_separate_projections_share_one_kernel(artifact):
    """BERT-style Q, K, V linears reading one input: one horizontal dispatch,
    one kernel holding the three matmuls' blocks; each stores its heads
    split and permuted (K transposed) through its epilogue, so no permute
    kernel is left."""
    model = "test/python/projection_blocks.py:separate_qkv_attention"
    kernels, dispatches = gpu_kernels(artifact, model)
    assert sum(label.startswith("matmul_horizontal") for label in dispatches) == 1, dispatches
    horizontal = [k for k in kernels if "horizontal x3" in k["path"]]
    assert len(horizontal) == 1 and horizontal[0]["grid"][1:] == [1, 1], [k["path"] for k in kernels]
    assert not any(k["path"] == "generic" for k in kernels), [(k["name"], k["source_ops"]) for k in kernels]
