"""Attention with a padding mask, without transformers: PyTorch decomposes a
masked scaled_dot_product_attention into a "safe" softmax (an i1 any() over
each row, then a select), as BERT and LLaMA do. Factory for
`tools/compile.py test/python/masked_attention.py:padded_attention`."""
import torch
import torch.nn.functional as F


class PaddedAttention(torch.nn.Module):
    def forward(self, q, k, v, keep):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=keep)


def padded_attention(batch: int = 4, heads: int = 8, seq: int = 128, dim: int = 64):
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(batch, heads, seq, dim, generator=g) for _ in range(3))
    keep = torch.ones(batch, 1, seq, seq, dtype=torch.bool)
    keep[:, :, :, seq - seq // 4:] = False  # the last quarter of the keys is padding
    return PaddedAttention(), (q, k, v, keep)
