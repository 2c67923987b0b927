"""Training through torch.compile(backend="twintrack") on the CPU, against
eager (issue 18's training runs, a few steps; `tools/train.py` runs the 50
and commits them under bench/training/): Hugging Face BERT (masked-LM),
a LLaMA decoder (causal-LM) and a ResNet with batch norm in train mode.
Each step's loss and the final parameters and buffers match eager's, and
every graph was compiled (none fell back to eager)."""

import json

import pytest

from twintrack.harness.training import CASES, HUGGING_FACE, run_case


# The Hugging Face models (whole models, 16-27 s each here) in the full run
# (`make test-all`, and tools/train.py's committed reports); in the quick
# one, layers taking the same ops (BERT's, LLaMA's; a convolution with
# batch norm in train mode for ResNet's).
@pytest.mark.parametrize("name", [pytest.param(name, marks=[pytest.mark.slow] if name in HUGGING_FACE else [])
                                  for name in CASES])
def test_training_steps_match_eager(name):
    row = run_case(CASES[name], steps=2, lr=1e-3, backends=("twintrack",))
    track = row["twintrack"]
    assert track["ok"], {k: v for k, v in track.items() if k != "losses"}
    assert track["graphs_compiled"] >= 2  # a forward and a backward graph at least


def test_train_tool_writes_its_report(run_tool, tmp_path):
    result = run_tool("train", "--models", "llama_layer", "--steps", "2", "--out", tmp_path)
    assert result.returncode == 0, result.stderr
    report = json.loads((tmp_path / "training.json").read_text())
    (row,) = report["models"]
    assert row["name"] == "llama_layer" and len(row["twintrack"]["losses"]) == 2 and row["twintrack"]["ok"]
    assert "| llama_layer | 2 |" in (tmp_path / "training.md").read_text()


def test_train_tool_names_an_unknown_model(run_tool, tmp_path):
    result = run_tool("train", "--models", "gpt5", "--out", tmp_path)
    assert result.returncode == 2
    assert "unknown model(s) gpt5 (known: bert, llama, resnet, bert_layer, llama_layer, conv_block)" in result.stderr


def test_compile_only_fills_the_cache_for_the_gpu(run_tool, tmp_path, monkeypatch):
    """The GPU machine has no MLIR: its training graphs are compiled here,
    for the GPU (one step, run eagerly), into the cache it will carry. (A
    convolution with batch norm in train mode: the LLaMA layer's graphs
    took twice as long and checked the same.)"""
    monkeypatch.setenv("TWINTRACK_CACHE", "1")
    monkeypatch.setenv("TWINTRACK_CACHE_DIR", str(tmp_path / "cache"))
    result = run_tool("train", "--models", "conv_block", "--compile-only")
    assert result.returncode == 0, result.stderr
    assert "conv_block: 2 graph(s) for the GPU" in result.stderr
    manifests = [json.loads(p.read_text()) for p in (tmp_path / "cache" / "graphs").glob("*/manifest.json")]
    assert len(manifests) == 2 and all(m["pipeline"] == "gpu" and m["kernels"] for m in manifests)
    autocast = run_tool("train", "--models", "conv_block", "--compile-only", "--autocast", "bfloat16")
    assert autocast.returncode == 0, autocast.stderr
    assert len(list((tmp_path / "cache" / "graphs").glob("*/manifest.json"))) == 4  # bfloat16 graphs are others


def test_bfloat16_autocast_training_matches_eager_within_its_tolerance():
    """The forward under torch.autocast(bfloat16): eager rounds each op to
    bfloat16 where a fused kernel keeps float32 (tolerances 1e-2 / 2e-2)."""
    import torch
    row = run_case(CASES["llama_layer"], steps=2, lr=1e-3, backends=("twintrack",), autocast=torch.bfloat16)
    assert row["twintrack"]["ok"] and not row["twintrack"]["fallbacks"], row["twintrack"]["vs_eager"]
    assert row["twintrack"]["vs_eager"]["loss"] < 1e-3  # well inside the tolerance at this size
