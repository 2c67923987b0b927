"""Concatenations read by elementwise ops (elementwise-through-concat,
concat-in-place): the rotary embedding's `cat((-x2, x1))` and other
concatenations give eager's results on the CPU, against float64, whether
they are split (up to four pieces, read by elementwise ops) or kept; on the
GPU the rotary embedding leaves no copy and no negation kernel."""

import json
from pathlib import Path

import pytest
import torch
from function_module import FunctionModule

import twintrack
from twintrack.harness import at_scale


def _rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class Rotary(torch.nn.Module):
    """Hugging Face LLaMA's apply_rotary_pos_emb on (batch, heads, seq, head_dim)."""

    def __init__(self, seq=8, head_dim=16):
        super().__init__()
        angles = torch.outer(torch.arange(seq).float(), 1.0 / 10000 ** (torch.arange(0, head_dim, 2) / head_dim))
        self.register_buffer("cos", torch.cat((angles.cos(), angles.cos()), -1))
        self.register_buffer("sin", torch.cat((angles.sin(), angles.sin()), -1))

    def forward(self, q, k):
        return q * self.cos + _rotate_half(q) * self.sin, k * self.cos + _rotate_half(k) * self.sin



CASES = {
    "rotary": (Rotary(), (torch.randn(2, 4, 8, 16), torch.randn(2, 4, 8, 16))),
    "broadcast along the concatenated dim": (
        FunctionModule(lambda a, b, bias: torch.cat((a.relu(), b * 2), 0) + bias),
        (torch.randn(3, 5), torch.randn(4, 5), torch.randn(1, 5))),
    "three pieces, one a plain input": (
        FunctionModule(lambda a, b: torch.sigmoid(torch.cat((a.exp(), b, a[:, :2] - 1), 1))),
        (torch.randn(6, 3), torch.randn(6, 4))),
    "transposed reader": (
        FunctionModule(lambda a, b: (torch.cat((a.neg(), b), -1).transpose(0, 1) * 3).contiguous()),
        (torch.randn(5, 2), torch.randn(5, 3))),
    "one-element pieces (fuzzing found: a 0-d view of a slice)": (
        FunctionModule(lambda x: torch.cat((x.neg(), x.neg().neg()), 0)), (torch.randn(1),)),
    "six pieces (kept)": (
        FunctionModule(lambda *xs: torch.cat([x * i for i, x in enumerate(xs)], 1).tanh()),
        tuple(torch.randn(3, 2) for _ in range(6))),
    "read by a reduction (kept)": (
        FunctionModule(lambda a, b: torch.cat((a.abs(), b), 1).sum(1)), (torch.randn(4, 3), torch.randn(4, 5))),
    "returned too (kept)": (
        FunctionModule(lambda a, b: (torch.cat((a, b.exp()), 0), torch.cat((a, b.exp()), 0) * 2)),
        (torch.randn(2, 3), torch.randn(3, 3))),
}


@pytest.mark.parametrize("case", list(CASES))
def test_matches_float64(case):
    model, inputs = CASES[case]
    compiled = twintrack.compile(model, inputs)
    fresh = tuple(torch.randn_like(x) for x in inputs)
    expected = model.double()(*(x.double() for x in fresh))
    model.float()
    got = compiled(*fresh)
    for g, e in zip(got if isinstance(got, tuple) else (got,), expected if isinstance(expected, tuple) else (expected,)):
        torch.testing.assert_close(g.double(), e, rtol=1e-5, atol=1e-5)


def _line_of(text: str) -> int:
    lines = Path(at_scale.__file__).read_text().splitlines()
    return next(n for n, line in enumerate(lines, 1) if text in line)


def test_gpu_rotary_writes_its_halves_in_place(run_tool, tmp_path):
    """A LLaMA layer's rotary embeddings on the GPU: no copy steps in the
    plan and no kernel of a negation alone: each half of q and of k is one
    kernel, the negation fused into the half that reads it."""
    model = "python/twintrack/harness/at_scale.py:llama_layer?batch=1&seq=64&dim=256&heads=4&kv_heads=4&ffn=512"
    result = run_tool("compile", model, "--pipeline", "gpu", "--dtype", "float16", "-o", tmp_path / "m", "-q")
    assert result.returncode == 0, result.stderr
    plan = json.loads((tmp_path / "m" / "plan.json").read_text())
    assert not [step for step in plan["steps"] if step["op"] == "copy"]
    manifest = json.loads((tmp_path / "m" / "manifest.json").read_text())
    rotary = [set(key.split(" @")[0] for key in k["source_keys"]) for k in manifest["kernels"]
              if any(f"at_scale.py:{_line_of('q, k = _rotate(q')}" in key for key in k["source_keys"])]
    assert len(rotary) == 4 and all({"aten.mul", "aten.add"} <= ops for ops in rotary), rotary
    assert sum("aten.neg" in ops for ops in rotary) == 2
