"""Real architectures through the CPU track, checked against float64 eager:
Hugging Face BERT / GPT-2 / LLaMA with rotary embeddings / ViT / Whisper's
encoder / Mistral with sliding-window attention / Mixtral's top-k mixture of
experts, each called as its documentation shows, and torchvision-style CNNs
(ResNet, MobileNetV3-small, EfficientNet, ConvNeXt). NAME?f64=1 builds the
model and its inputs in float64."""

from pathlib import Path

import pytest

pytest.importorskip("transformers")

FACTORIES = Path(__file__).with_name("real_models.py")


@pytest.mark.parametrize("name", [
    "bert",
    "llama",
    "resnet",
    "gpt2",  # its attention's decomposition must keep the traced layout (frontend._attention_layout)
    "vit",  # 16 patches and a [CLS] token: sequence length 17
    pytest.param("vit?f64=1", marks=pytest.mark.slow),
    "whisper_encoder",
    pytest.param("whisper_encoder?f64=1", marks=pytest.mark.slow),
    "mistral",  # sliding window 8 < sequence 16
    "mixtral?batched_mm=1",  # topk routing, expert weights gathered by index, bmm
    # (transformers' default grouped_mm experts are refused: aten.histc, and an opaque custom op, grouped_mm_fallback)
    pytest.param("mobilenet_v3", marks=pytest.mark.slow),  # hardswish, squeeze-excite with a hardsigmoid gate, depthwise 3x3 and 5x5
    "efficientnet",  # MBConv: SiLU, squeeze-excite with a sigmoid gate
    "convnext",  # depthwise 7x7, LayerNorm over channels, GELU, layer scale
])
def test_real_model_matches_float64(name, run_tool, tmp_path):
    outdir = tmp_path / name.replace("?", "-").replace("=", "")
    compiled = run_tool("compile", f"{FACTORIES}:{name}", "-o", outdir, "-q")
    assert compiled.returncode == 0, compiled.stderr
    checked = run_tool("run", outdir, "--check")
    assert checked.returncode == 0, checked.stdout + checked.stderr
