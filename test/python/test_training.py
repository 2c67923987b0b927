"""Training through torch.compile(backend="twintrack") on the CPU, against
eager (issue 18's training runs, a few steps; `tools/train.py` runs the 50
and commits them under bench/training/): Hugging Face BERT (masked-LM),
a LLaMA decoder (causal-LM) and a ResNet with batch norm in train mode.
Each step's loss and the final parameters and buffers match eager's, and
every graph was compiled (none fell back to eager)."""

import json

import pytest

from twintrack.harness.training import CASES, run_case


@pytest.mark.parametrize("name", list(CASES))
def test_training_steps_match_eager(name):
    row = run_case(CASES[name], steps=2, lr=1e-3, backends=("twintrack",))
    track = row["twintrack"]
    assert track["ok"], {k: v for k, v in track.items() if k != "losses"}
    assert track["graphs_compiled"] >= 2  # a forward and a backward graph at least


def test_train_tool_writes_its_report(run_tool, tmp_path):
    result = run_tool("train", "--models", "bert", "--steps", "2", "--out", tmp_path)
    assert result.returncode == 0, result.stderr
    report = json.loads((tmp_path / "training.json").read_text())
    (row,) = report["models"]
    assert row["name"] == "bert" and len(row["twintrack"]["losses"]) == 2 and row["twintrack"]["ok"]
    assert "| bert | 2 |" in (tmp_path / "training.md").read_text()


def test_train_tool_names_an_unknown_model(run_tool, tmp_path):
    result = run_tool("train", "--models", "gpt5", "--out", tmp_path)
    assert result.returncode == 2 and "unknown model(s) gpt5 (known: bert, llama, resnet)" in result.stderr
