"""The at-scale benchmark set (bench/gpu_models_at_scale.txt): every entry's
model loads through the benchmark's model parser, and every factory, at its
small defaults, compiles on the CPU and matches float64 eager."""

from pathlib import Path

import pytest
import torch

import twintrack
from twintrack.harness import at_scale

ROOT = Path(__file__).resolve().parents[2]
AT_SCALE = Path(at_scale.__file__)

SMALL = {
    "attention full": ("attention", {}),
    "attention causal": ("attention", {"causal": 1}),
    "attention boolean mask": ("attention", {"mask": 1}),
    "attention grouped KV heads": ("attention", {"kv_heads": 2}),
    "llama layer": ("llama_layer", {}),
    "rotary": ("rotary", {}),
    "bert layer": ("bert_layer", {}),
    "gpt2 mlp": ("gpt2_mlp", {}),
    **{f"rows: {name}": ("rows", {"op": op}) for op, name in enumerate(at_scale.Rows.OPS)},
    "conv3x3": ("conv3x3", {}),
    "conv3x3 channels-last": ("conv3x3", {"channels_last": 1}),
    "vit": ("vit", {}),
    "resnet": ("resnet", {"depth": 1}),
    "resnet channels-last": ("resnet", {"depth": 1, "channels_last": 1}),
    "mobilenet_v2": ("mobilenet_v2", {}),
}
# mobilenet_v2: 26 s on the CPU (its 52 convolutions); resnet NCHW: 8 s,
# its factory checked by the channels-last case, NCHW ResNet's numerics by
# Hugging Face's ResNet (test_real_models, test_conv_as_matmul).
SLOW = {"mobilenet_v2", "resnet"}


@pytest.mark.parametrize("case", [pytest.param(c, marks=pytest.mark.slow) if c in SLOW else c for c in SMALL])
def test_factory_compiles_and_matches_float64(case):
    factory, parameters = SMALL[case]
    model, inputs = getattr(at_scale, factory)(**parameters)
    compiled = twintrack.compile(model, inputs)
    fresh = tuple(torch.randn_like(x) if x.is_floating_point() else x for x in inputs)
    expected = model.double()(*(x.double() if x.is_floating_point() else x for x in fresh))
    model.float()
    torch.testing.assert_close(compiled(*fresh).double(), expected, rtol=1e-4, atol=1e-4)


def test_every_benchmark_entry_names_a_loadable_model():
    lines = [line.split() for line in (ROOT / "bench" / "gpu_models_at_scale.txt").read_text().splitlines()
             if line.strip() and not line.startswith("#")]
    assert len(lines) >= 20
    for name, dtype, spec, *flags in lines:
        factory_spec = spec.split(":", 1)[1] if spec.startswith("python/") else None
        if factory_spec is None:
            assert spec.startswith("zoo:"), name
            continue
        factory, _, query = factory_spec.partition("?")
        parameters = dict(pair.split("=") for pair in query.split("&"))
        signature = getattr(at_scale, factory).__code__.co_varnames
        assert set(parameters) <= set(signature), (name, parameters)


def test_mobilenet_output_is_of_order_one_at_its_benchmark_size():
    """At 224² Hugging Face's own init shrinks the output to ~1e-21, zeros in float16."""
    model, (pixels,) = at_scale.mobilenet_v2(batch=1, image=224)
    with torch.no_grad():
        hidden = model.double()(pixels.double())
    assert 1e-3 < hidden.abs().mean() < 10
