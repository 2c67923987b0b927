"""Row-wise fusion through gathers: Hugging Face BERT's embedding sums and
their layernorm, LLaMA's embedding lookup and its RMSNorm, each become one
row-wise dispatch (reduction_rows_N) and one row-wise GPU kernel, whose
steps load the looked-up table rows element by element."""

import importlib.util
import json
import re
from pathlib import Path

import pytest
import torch

from twintrack.tooling import find_libdevice, find_tool

pytest.importorskip("transformers")

needs_ptxas = pytest.mark.skipif(find_tool("ptxas") is None or find_libdevice() is None,
                                 reason="needs ptxas and libdevice (the CUDA toolkit)")
FACTORIES = Path(__file__).with_name("real_models.py")
THIS_FILE = Path(__file__)


def _real_model(name: str):
    """A factory of real_models.py, loaded by path (tools/compile.py loads
    this file on its own, without the test directory on sys.path)."""
    spec = importlib.util.spec_from_file_location("real_models", FACTORIES)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return getattr(module, name)()


def bert_embeddings():
    """BERT's embeddings alone: word, position and token-type lookups, summed, then the layernorm."""
    model, inputs = _real_model("bert")
    return model.model.embeddings, inputs


class EmbeddingNorm(torch.nn.Module):
    def __init__(self, decoder):
        super().__init__()
        self.embed, self.norm = decoder.embed_tokens, decoder.layers[0].input_layernorm

    def forward(self, ids):
        return self.norm(self.embed(ids))


def llama_embedding_norm():
    """LLaMA's embedding lookup and the first layer's RMSNorm."""
    model, inputs = _real_model("llama")
    return EmbeddingNorm(model.model.model).eval(), inputs


def _dispatches(run_tool, tmp_path, model: str) -> tuple[list[tuple[str, str]], str]:
    """(label, body) of each dispatch after the GPU recipe's fusion stage, and the fusion decisions."""
    result = run_tool("compile", model, "--pipeline", "gpu", "--stop-after", "fusion", "--explain-fusion",
                      "-o", tmp_path / "fusion", "-q")
    assert result.returncode == 0, result.stderr
    parts = re.split(r'twintrack\.dispatch "(\w+)"', result.stdout)
    return list(zip(parts[1::2], parts[2::2])), result.stdout


def _looking_up_words(dispatches: list[tuple[str, str]]) -> list[str]:
    """The kinds (reduction_rows, elementwise, ...) of the dispatches that
    gather from the word embeddings (real_models.py: 128 words of 32)."""
    lookup = re.compile(r"tensor\.extract %\w+\[[^]]*\] : tensor<128x32xf32>")
    return [label.rsplit("_", 1)[0] for label, body in dispatches if lookup.search(body)]


@pytest.mark.parametrize("model, decided_at", [
    ("bert", "aten.native_layer_norm"),  # the lookups' sum: its mean, variance and normalization
    ("llama", "aten.mean"),              # the RMSNorm of the lookup
])
def test_embedding_and_norm_share_one_row_dispatch(run_tool, tmp_path, model, decided_at):
    """The reductions reading the looked-up rows are one row-wise dispatch
    (LLaMA's residual add after the first attention block looks them up
    again: a matmul epilogue, not a reduction)."""
    dispatches, decisions = _dispatches(run_tool, tmp_path, f"{FACTORIES}:{model}")
    reductions = [kind for kind in _looking_up_words(dispatches) if kind.startswith("reduction")]
    assert reductions == ["reduction_rows"], [label for label, _ in dispatches]
    assert re.search(rf"{decided_at}\S* +fused row-wise with the reduction it reads .*\(gathered elements", decisions)


@needs_ptxas
@pytest.mark.parametrize("factory", ["bert_embeddings", "llama_embedding_norm"])
def test_embedding_group_is_one_row_kernel(run_tool, tmp_path, factory):
    """One dispatch, one kernel: the row-wise one (the generic pipeline would
    run each reduction and the normalization as kernels of their own)."""
    dispatches, _ = _dispatches(run_tool, tmp_path, f"{THIS_FILE}:{factory}")
    assert [label.rsplit("_", 1)[0] for label, _ in dispatches] == ["reduction_rows"]
    result = run_tool("compile", f"{THIS_FILE}:{factory}", "--pipeline", "gpu", "-o", tmp_path / "k", "-q")
    assert result.returncode == 0, result.stderr
    kernels = json.loads((tmp_path / "k" / "manifest.json").read_text())["kernels"]
    assert len(kernels) == len(dispatches), [k["name"] for k in kernels]
    assert kernels[0]["path"].startswith("row-wise"), kernels[0]
    # It stores its output once: not the dead results elementwise fusion
    # leaves beside the sums, nor a lookup that the next step reads.
    kernel = next((tmp_path / "k" / "stages").glob("*-row-kernels.mlir")).read_text()
    assert len(re.findall(r"\b(?:vector|memref)\.store\b", kernel)) == 1
