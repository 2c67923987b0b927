"""Real architectures (Hugging Face BERT / GPT-2 / LLaMA with rotary embeddings,
a torchvision-style ResNet) through the CPU track, checked against float64 eager."""

from pathlib import Path

import pytest

pytest.importorskip("transformers")

FACTORIES = Path(__file__).with_name("real_models.py")


@pytest.mark.parametrize("name", [
    "bert",
    "llama",
    "resnet",
    "gpt2",  # its attention's decomposition must keep the traced layout (frontend._attention_layout)
])
def test_real_model_matches_float64(name, run_tool, tmp_path):
    compiled = run_tool("compile", f"{FACTORIES}:{name}", "-o", tmp_path / name, "-q")
    assert compiled.returncode == 0, compiled.stderr
    checked = run_tool("run", tmp_path / name, "--check")
    assert checked.returncode == 0, checked.stdout + checked.stderr
