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


def structured_keep(batch: int, seq: int, generator: torch.Generator) -> torch.Tensor:
    """A (batch, 1, seq, seq) mask (True: the key is kept) with every kind of
    tile a flash kernel's 64- or 128-row tiles can meet: a causal diagonal,
    keys padded at an end that differs by batch entry, a band of key tiles
    hidden in the middle of some rows, random holes in the first rows, and
    (`hidden_rows`) the last three rows hidden entirely."""
    rows, keys = torch.arange(seq)[:, None], torch.arange(seq)[None, :]
    keep = (keys <= rows) & ~((rows // 64 % 2 == 1) & (keys >= seq // 4) & (keys < seq // 2))
    keep &= ~((rows < seq // 4) & (torch.rand(seq, seq, generator=generator) < 0.2))
    keep[:, 0] = True
    padded_from = [seq - seq // 8 * (1 + b % 2) for b in range(batch)]
    return torch.stack([keep & (keys < end) for end in padded_from])[:, None]


class StructuredMaskAttention(torch.nn.Module):
    """Attention under a fixed mask held as a buffer (so a check on random
    inputs still meets every tile kind): through SDPA's `attn_mask` (True
    keeps a key; the last rows hidden entirely give zeros) or written out
    with `masked_fill` of the hidden keys (True hides one)."""

    def __init__(self, keep: torch.Tensor, through_sdpa: bool):
        super().__init__()
        self.through_sdpa = through_sdpa
        if through_sdpa:
            keep = keep.clone()
            keep[..., -3:, :] = False
            self.register_buffer("mask", keep)
        else:
            self.register_buffer("mask", ~keep)

    def forward(self, q, k, v):
        if self.through_sdpa:
            return F.scaled_dot_product_attention(q, k, v, attn_mask=self.mask)
        scores = q @ k.transpose(-2, -1) * q.shape[-1] ** -0.5
        return torch.softmax(scores.masked_fill(self.mask, float("-inf")), dim=-1) @ v


def structured_attention(batch: int = 2, heads: int = 4, seq: int = 512, dim: int = 64, sdpa: int = 1,
                         shared: int = 0):
    """`StructuredMaskAttention` on B×H×S×D inputs; `shared` keeps one mask for every batch entry (seq, seq)."""
    g = torch.Generator().manual_seed(0)
    keep = structured_keep(batch, seq, g)
    if shared:
        keep = keep[0, 0]
    q, k, v = (torch.randn(batch, heads, seq, dim, generator=g) for _ in range(3))
    return StructuredMaskAttention(keep, bool(sdpa)), (q, k, v)


class KeyPaddingAttention(torch.nn.Module):
    """SDPA under a key padding mask (batch, keys), the same for every query row."""

    def forward(self, q, k, v, keep):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=keep[:, None, None, :])


def key_padding_attention(batch: int = 2, heads: int = 4, seq: int = 512, dim: int = 64):
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(batch, heads, seq, dim, generator=g) for _ in range(3))
    keep = torch.ones(batch, seq, dtype=torch.bool)
    keep[:, seq - seq // 4:] = False  # the last quarter of the keys is padding
    return KeyPaddingAttention(), (q, k, v, keep)
