"""Blocks with separate projections reading one input, as Hugging Face
models write them, without transformers: BERT-style self-attention (Q, K, V
linears with bias, heads split by view + permute, K transposed for QKᵀ) and a
LLaMA-style gated MLP (gate and up projections, SiLU); and a stack of
decoder blocks, whose layers' attentions share buffers once memory planning
reuses them. Factories for `tools/compile.py
test/python/projection_blocks.py:NAME`."""
import torch
import torch.nn.functional as F
from torch import nn

from twintrack.harness.zoo import TransformerBlock


class SeparateQkvAttention(nn.Module):
    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.heads = heads
        self.query, self.key, self.value, self.out = (nn.Linear(dim, dim) for _ in range(4))

    def forward(self, x):
        batch, seq, dim = x.shape

        def split(t):
            return t.view(batch, seq, self.heads, dim // self.heads).permute(0, 2, 1, 3)
        q, k, v = split(self.query(x)), split(self.key(x)), split(self.value(x))
        scores = q @ k.transpose(-1, -2) / (dim // self.heads) ** 0.5
        context = (scores.softmax(-1) @ v).permute(0, 2, 1, 3).reshape(batch, seq, dim)
        return self.out(context)


class GatedMlp(nn.Module):
    def __init__(self, dim: int, hidden: int):
        super().__init__()
        self.gate, self.up = nn.Linear(dim, hidden, bias=False), nn.Linear(dim, hidden, bias=False)
        self.down = nn.Linear(hidden, dim, bias=False)

    def forward(self, x):
        return self.down(F.silu(self.gate(x)) * self.up(x))


def _input(*shape):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(0))


def separate_qkv_attention(batch: int = 2, seq: int = 64, dim: int = 128, heads: int = 4):
    torch.manual_seed(0)
    return SeparateQkvAttention(dim, heads).eval(), (_input(batch, seq, dim),)


def gated_mlp(batch: int = 2, seq: int = 64, dim: int = 128, hidden: int = 256):
    torch.manual_seed(0)
    return GatedMlp(dim, hidden).eval(), (_input(batch, seq, dim),)


def stacked_gpt_blocks(layers: int = 2, batch: int = 2, seq: int = 64, dim: int = 128, heads: int = 4):
    torch.manual_seed(0)
    blocks = nn.Sequential(*(TransformerBlock(dim, heads, causal=True, approximate="tanh") for _ in range(layers)))
    return blocks.eval(), (_input(batch, seq, dim),)
