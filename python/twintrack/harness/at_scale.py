"""Workloads at the sizes people run (issue 17's benchmark set), as model
factories: `bench/gpu_models_at_scale.txt` names them as
`python/twintrack/harness/at_scale.py:NAME?k=v&...`. Each factory's
defaults are small (the tests compile every one on the CPU); the benchmark
file gives the real sizes. Weights and inputs come from a seeded generator.

- `attention`: scaled dot-product attention alone, B×H×S×D, full, causal
  (`causal=1`), with an explicit boolean causal mask (`mask=1`), or with
  grouped key/value heads (`kv_heads` < `heads`); `padded=N` masks the
  last N query rows whole (padding: eager gives them zeros).
- `llama_layer`: a LLaMA-style decoder layer: RMSNorm, rotary embeddings on
  Q and K, causal attention with grouped KV heads, SwiGLU MLP;
  `llama_decode_step`: one decode step of it, with a KV cache (dynamic
  shapes: one compile serves every cache length).
- `rotary`: the rotary embedding alone, on queries stored head-major
  (batch, heads, seq, head_dim), as the LLaMA layer's attention reads them.
- `bert_layer`: a BERT encoder layer (post-norm, GELU MLP).
- `gpt2_mlp`: Hugging Face's GPT-2 MLP on a few tokens (decode): its
  Conv1D layers keep their weights [in, out], so both matmuls read B as
  stored.
- `rows`: one row-wise op over rows × cols (`op=0..4`: layer norm, RMSNorm,
  softmax, GELU, row sum).
- `conv3x3`: one 3×3 convolution with padding 1 (ResNet-50's shapes).
- `vit`, `resnet`, `mobilenet_v2`: Hugging Face's ViT (ViT-Base/16 at
  224×224: 197 tokens), ResNet (ResNet-50's layout) and MobileNetV2 from
  their default configs, random weights, called with `pixel_values`;
  `layers` and `image` shrink them for the tests.

The convolutional ones take `channels_last=1`: the module's weights and
its image input stored channels-last, as PyTorch's guide to running
convolutions on tensor cores has them.
"""

from __future__ import annotations

import math
from contextlib import contextmanager
from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn


def _generator(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _seeded_module(build: Callable[[], nn.Module], seed: int) -> nn.Module:
    """The module `build` makes, with every parameter drawn from a seeded
    generator (scaled like PyTorch's defaults); nn's own initializers are
    skipped while it is built, since every value they would draw is drawn again."""
    with _initializers_skipped():
        module = build()
    g = _generator(seed + 1)
    with torch.no_grad():
        for parameter in module.parameters():
            fan_in = parameter.shape[-1] if parameter.dim() > 1 else parameter.numel()
            parameter.normal_(0.0, 1.0 / math.sqrt(fan_in), generator=g)  # in place: no temporaries (0.2 G parameters in 1 s)
    return module.eval()


@contextmanager
def _initializers_skipped():
    """nn.init's in-place initializers (kaiming_uniform_ and the rest) leave
    their tensor as it is for the duration: a LLaMA layer's 0.2 G
    parameters spent 1.5 s of a 3 s build in nn.Linear's kaiming_uniform_,
    whose values _seeded_module then drew over."""
    names = [name for name in dir(nn.init) if name.endswith("_") and not name.startswith("_")]
    kept = {name: getattr(nn.init, name) for name in names}
    for name in names:
        setattr(nn.init, name, _left_as_is)
    try:
        yield
    finally:
        for name, initializer in kept.items():
            setattr(nn.init, name, initializer)


def _left_as_is(tensor: torch.Tensor, *args, **kwargs) -> torch.Tensor:
    return tensor


class Attention(nn.Module):
    def __init__(self, causal: bool, masked: bool, grouped: bool, padded: int = 0):
        super().__init__()
        self.causal, self.masked, self.grouped, self.padded = causal, masked, grouped, padded

    def forward(self, q, k, v, *mask):
        attn_mask = mask[0] if self.masked else None
        if self.padded:  # the last rows attend to no key
            rows = torch.arange(q.shape[-2], device=q.device)
            attn_mask = attn_mask & (rows < q.shape[-2] - self.padded)[:, None]
        return F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, is_causal=self.causal,
                                              enable_gqa=self.grouped)


def attention(batch: int = 2, heads: int = 4, kv_heads: int = 0, seq: int = 64, head_dim: int = 16,
              causal: int = 0, mask: int = 0, padded: int = 0, seed: int = 0):
    """SDPA on B×H×S×D inputs; kv_heads (0: as heads) groups the key/value heads."""
    kv_heads = kv_heads or heads
    g = _generator(seed)
    q = torch.randn(batch, heads, seq, head_dim, generator=g)
    k, v = (torch.randn(batch, kv_heads, seq, head_dim, generator=g) for _ in range(2))
    inputs = (q, k, v)
    if mask or padded:
        inputs += (torch.ones(seq, seq, dtype=torch.bool).tril(),)
    return Attention(bool(causal), bool(mask or padded), kv_heads != heads, padded), inputs


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.weight, self.eps = nn.Parameter(torch.ones(dim)), eps

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def _register_rotary_tables(module: nn.Module, head_dim: int, seq: int) -> None:
    """The rotary embedding's cos and sin per position (seq x head_dim), as buffers of `module`."""
    frequencies = 1.0 / (10000 ** (torch.arange(0, head_dim, 2).float() / head_dim))
    angles = torch.outer(torch.arange(seq).float(), frequencies)
    module.register_buffer("cos", torch.cat((angles.cos(), angles.cos()), dim=-1))
    module.register_buffer("sin", torch.cat((angles.sin(), angles.sin()), dim=-1))


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos + rotated * sin


class LlamaLayer(nn.Module):
    def __init__(self, dim: int, heads: int, kv_heads: int, ffn: int, seq: int):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, dim // heads
        self.attn_norm, self.mlp_norm = RMSNorm(dim), RMSNorm(dim)
        self.q = nn.Linear(dim, dim, bias=False)
        self.kv = nn.Linear(dim, 2 * kv_heads * self.head_dim, bias=False)
        self.o = nn.Linear(dim, dim, bias=False)
        self.gate, self.up = nn.Linear(dim, ffn, bias=False), nn.Linear(dim, ffn, bias=False)
        self.down = nn.Linear(ffn, dim, bias=False)
        _register_rotary_tables(self, self.head_dim, seq)

    def forward(self, x):
        batch, seq, dim = x.shape
        h = self.attn_norm(x)
        q = self.q(h).view(batch, seq, self.heads, self.head_dim).transpose(1, 2)
        k, v = self.kv(h).view(batch, seq, 2 * self.kv_heads, self.head_dim).transpose(1, 2).chunk(2, dim=1)
        q, k = _rotate(q, self.cos, self.sin), _rotate(k, self.cos, self.sin)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=self.kv_heads != self.heads)
        x = x + self.o(y.transpose(1, 2).reshape(batch, seq, dim))
        h = self.mlp_norm(x)
        return x + self.down(F.silu(self.gate(h)) * self.up(h))


def llama_layer(batch: int = 1, seq: int = 32, dim: int = 64, heads: int = 4, kv_heads: int = 2, ffn: int = 176,
                seed: int = 0):
    model = _seeded_module(lambda: LlamaLayer(dim, heads, kv_heads, ffn, seq), seed)
    return model, (torch.randn(batch, seq, dim, generator=_generator(seed)),)


class Rotary(nn.Module):
    def __init__(self, head_dim: int, seq: int):
        super().__init__()
        _register_rotary_tables(self, head_dim, seq)

    def forward(self, q):
        return _rotate(q, self.cos, self.sin)


def rotary(batch: int = 1, seq: int = 32, heads: int = 4, head_dim: int = 16, seed: int = 0):
    model = _seeded_module(lambda: Rotary(head_dim, seq), seed)
    return model, (torch.randn(batch, heads, seq, head_dim, generator=_generator(seed)),)


class LlamaDecodeStep(LlamaLayer):
    """One decode step of the LLaMA-style layer: the new token's hidden state
    and the key/value cache of the `cached` tokens before it in, the token's
    output and the caches grown by one out. Its rotary angle is that of
    position `cached`; its query attends to every cached key and its own."""

    def forward(self, x, k_cache, v_cache):
        batch, _, dim = x.shape
        cached = k_cache.shape[2]
        cos, sin = self.cos[cached:cached + 1], self.sin[cached:cached + 1]
        h = self.attn_norm(x)
        q = self.q(h).view(batch, 1, self.heads, self.head_dim).transpose(1, 2)
        k, v = self.kv(h).view(batch, 1, 2 * self.kv_heads, self.head_dim).transpose(1, 2).chunk(2, dim=1)
        q, k = _rotate(q, cos, sin), _rotate(k, cos, sin)
        k, v = torch.cat((k_cache, k), dim=2), torch.cat((v_cache, v), dim=2)
        y = F.scaled_dot_product_attention(q, k, v, enable_gqa=self.kv_heads != self.heads)
        x = x + self.o(y.transpose(1, 2).reshape(batch, 1, dim))
        h = self.mlp_norm(x)
        return x + self.down(F.silu(self.gate(h)) * self.up(h)), k, v


def llama_decode_step(batch: int = 1, cached: int = 8, dim: int = 64, heads: int = 4, kv_heads: int = 2,
                      ffn: int = 176, positions: int = 1025, seed: int = 0):
    """The decode step with `cached` tokens in the cache, rotary tables for `positions`."""
    model = _seeded_module(lambda: LlamaDecodeStep(dim, heads, kv_heads, ffn, positions), seed)
    g = _generator(seed)
    head_dim = dim // heads
    caches = [torch.randn(batch, kv_heads, cached, head_dim, generator=g) for _ in range(2)]
    return model, (torch.randn(batch, 1, dim, generator=g), *caches)


class BertLayer(nn.Module):
    def __init__(self, dim: int, heads: int, ffn: int):
        super().__init__()
        self.heads = heads
        self.qkv, self.o = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.fc1, self.fc2 = nn.Linear(dim, ffn), nn.Linear(ffn, dim)
        self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)

    def forward(self, x):
        batch, seq, dim = x.shape
        q, k, v = (t.reshape(batch, seq, self.heads, dim // self.heads).transpose(1, 2)
                   for t in self.qkv(x).split(dim, dim=-1))
        y = F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(batch, seq, dim)
        x = self.ln1(x + self.o(y))
        return self.ln2(x + self.fc2(F.gelu(self.fc1(x))))


def bert_layer(batch: int = 2, seq: int = 32, dim: int = 64, heads: int = 4, ffn: int = 256, seed: int = 0):
    model = _seeded_module(lambda: BertLayer(dim, heads, ffn), seed)
    return model, (torch.randn(batch, seq, dim, generator=_generator(seed)),)


def gpt2_mlp(batch: int = 2, dim: int = 64, seed: int = 0):
    """GPT-2's MLP (Hugging Face's GPT2MLP: Conv1D dim -> 4 dim -> dim, tanh GELU), its own init, on batch x dim."""
    import transformers
    from transformers.models.gpt2.modeling_gpt2 import GPT2MLP

    torch.manual_seed(seed)
    model = GPT2MLP(4 * dim, transformers.GPT2Config(n_embd=dim)).eval()
    return model, (torch.randn(batch, dim, generator=_generator(seed)),)


class Rows(nn.Module):
    OPS = ("layer norm", "RMSNorm", "softmax", "GELU", "row sum")

    def __init__(self, op: int, cols: int):
        super().__init__()
        self.op = op
        self.norm = nn.LayerNorm(cols) if op == 0 else RMSNorm(cols) if op == 1 else None

    def forward(self, x):
        if self.norm is not None:
            return self.norm(x)
        return torch.softmax(x, -1) if self.op == 2 else F.gelu(x) if self.op == 3 else x.sum(-1)


def rows(rows: int = 64, cols: int = 128, op: int = 0, seed: int = 0):
    """One row-wise op (op: 0 layer norm, 1 RMSNorm, 2 softmax, 3 GELU, 4 row sum)."""
    if not 0 <= op < len(Rows.OPS):
        raise ValueError(f"op={op}: one of {', '.join(f'{k} ({name})' for k, name in enumerate(Rows.OPS))}")
    model = _seeded_module(lambda: Rows(op, cols), seed)
    return model, (torch.randn(rows, cols, generator=_generator(seed)),)


def conv3x3(batch: int = 2, channels: int = 8, filters: int = 8, size: int = 14, seed: int = 0,
            channels_last: int = 0):
    model = _seeded_module(lambda: nn.Conv2d(channels, filters, 3, padding=1), seed)
    return _stored(model, (torch.randn(batch, channels, size, size, generator=_generator(seed)),), channels_last)


def _stored(model: nn.Module, inputs: tuple, channels_last: int) -> tuple[nn.Module, tuple]:
    """The module and its inputs, with `channels_last` its 4-D weights and inputs stored channels-last."""
    if not channels_last:
        return model, inputs
    layout = torch.channels_last
    return model.to(memory_format=layout), tuple(x.to(memory_format=layout) if x.dim() == 4 else x for x in inputs)


def depthwise(batch: int = 2, channels: int = 16, size: int = 14, stride: int = 1, kernel: int = 3, act: int = 0,
              seed: int = 0, channels_last: int = 0):
    """A depthwise stage of MobileNet (ReLU6, act 0), EfficientNet (SiLU, act 1) or ConvNeXt (none, act 2)
    between two pointwise convolutions, as an inverted-residual block runs it (so its input and output stay
    channels-last): a kernel x kernel window per channel, batch norm with drawn statistics, the activation."""
    activation = (nn.ReLU6(), nn.SiLU(), nn.Identity())[act]
    block = _seeded_module(lambda: nn.Sequential(
        nn.Conv2d(channels, channels, 1),
        nn.Conv2d(channels, channels, kernel, stride, kernel // 2, groups=channels, bias=act == 2),
        nn.BatchNorm2d(channels), activation, nn.Conv2d(channels, channels, 1)), seed)
    generator = _generator(seed + 1)
    with torch.no_grad():
        norm = block[2]
        for parameter in (norm.running_mean, norm.weight, norm.bias):
            parameter.copy_(torch.randn(channels, generator=generator))
        norm.running_var.copy_(torch.rand(channels, generator=generator) + 0.5)
    return _stored(block, (torch.randn(batch, channels, size, size, generator=_generator(seed)),), channels_last)


class _PixelsToHidden(nn.Module):
    """A Hugging Face vision model called as its documentation shows, returning its last hidden state."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, pixels):
        return self.model(pixel_values=pixels).last_hidden_state


def _vision_model(config, batch: int, image: int, seed: int):
    import transformers

    torch.manual_seed(seed)
    model = getattr(transformers, type(config).__name__.replace("Config", "Model"))(config)
    pixels = torch.randn(batch, config.num_channels, image, image, generator=_generator(seed))
    return _PixelsToHidden(model.eval()), (pixels,)


def vit(batch: int = 2, layers: int = 1, image: int = 32, seed: int = 0):
    """ViT-Base/16's default config (768 wide, 12 heads, 16-pixel patches), `layers` deep, on image² pixels."""
    import transformers

    config = transformers.ViTConfig(num_hidden_layers=layers, image_size=image)
    return _vision_model(config, batch, image, seed)


def resnet(batch: int = 2, image: int = 32, depth: int = 0, seed: int = 0, channels_last: int = 0):
    """ResNet-50's layout (the default config: bottleneck stages of 3, 4, 6, 3); depth > 0 keeps one block per stage."""
    import transformers

    config = transformers.ResNetConfig(**({"depths": [depth] * 4} if depth else {}))
    return _stored(*_vision_model(config, batch, image, seed), channels_last)


def mobilenet_v2(batch: int = 2, image: int = 32, seed: int = 0, channels_last: int = 0):
    """MobileNetV2's default config (depth multiplier 1.0), its convolutions drawn with fan-in scale."""
    import transformers

    config = transformers.MobileNetV2Config(image_size=image)
    model, inputs = _vision_model(config, batch, image, seed)
    _fan_in_convolutions(model)
    return _stored(model, inputs, channels_last)


def _fan_in_convolutions(model: nn.Module):
    """Redraw each convolution's weight with std 1/sqrt(fan-in), keeping activations of order one.

    Hugging Face's MobileNetV2 draws them with std 0.02, which shrinks its last hidden state
    at 224² to about 1e-21: zeros in float16, so no track's numerics could be checked.
    """
    with torch.no_grad():
        for conv in model.modules():
            if isinstance(conv, nn.Conv2d):
                conv.weight.normal_(0.0, conv.weight[0].numel() ** -0.5)
