"""The model zoo: small, deterministic models for tests and demos.

`zoo:NAME` builds a model with its defaults; `zoo:NAME?key=value&...`
overrides shape parameters, e.g. `zoo:mlp?batch=64&hidden=512`. Weights and
example inputs come from a seeded generator (`seed=`), so a model is the same
on every machine.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace
from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn

from ..errors import ModelLoadError, user_code


class MLP(nn.Module):
    def __init__(self, features: int, hidden: int, out: int):
        super().__init__()
        self.fc1 = nn.Linear(features, hidden)
        self.fc2 = nn.Linear(hidden, hidden)
        self.fc3 = nn.Linear(hidden, out)

    def forward(self, x):
        return self.fc3(F.relu(self.fc2(F.relu(self.fc1(x)))))


class Gemm(nn.Module):
    """y = x @ W: a bare matmul with the weight as a parameter."""

    def __init__(self, k: int, n: int):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(k, n) / math.sqrt(k))

    def forward(self, x):
        return x @ self.weight


class Elementwise(nn.Module):
    """A chain of pointwise ops with broadcasting against row and column vectors."""

    def __init__(self, cols: int):
        super().__init__()
        self.scale = nn.Parameter(torch.rand(cols) + 0.5)
        self.shift = nn.Parameter(torch.randn(cols))

    def forward(self, x, y):
        z = x * self.scale + self.shift          # [R, C] with [C]
        z = torch.sigmoid(z) * torch.tanh(y)     # y is [R, 1]
        return torch.exp(-z * z) + torch.clamp(z, min=-0.5, max=0.5) - z / (1.0 + z.abs())


class Softmax(nn.Module):
    def forward(self, x):
        return torch.softmax(x, dim=-1)


class LayerNorm(nn.Module):
    def __init__(self, cols: int):
        super().__init__()
        self.norm = nn.LayerNorm(cols)
        with torch.no_grad():  # non-trivial affine parameters
            self.norm.weight.uniform_(0.5, 1.5)
            self.norm.bias.normal_()

    def forward(self, x):
        return self.norm(x)


class ConvBlock(nn.Module):
    def __init__(self, in_channels: int, channels: int):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, channels, 3, padding=1)
        self.bn = nn.BatchNorm2d(channels)
        with torch.no_grad():  # non-trivial running statistics
            self.bn.running_mean.normal_(0, 0.1)
            self.bn.running_var.uniform_(0.5, 1.5)
            self.bn.weight.uniform_(0.5, 1.5)
            self.bn.bias.normal_(0, 0.1)

    def forward(self, x):
        return F.max_pool2d(F.relu(self.bn(self.conv(x))), 2)


class Attention(nn.Module):
    def __init__(self, dim: int, heads: int, causal: bool):
        super().__init__()
        self.heads, self.causal = heads, causal
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        batch, seq, dim = x.shape
        q, k, v = self.qkv(x).split(dim, dim=-1)
        q, k, v = (t.reshape(batch, seq, self.heads, dim // self.heads).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=self.causal)
        return self.proj(y.transpose(1, 2).reshape(batch, seq, dim))


class TransformerBlock(nn.Module):
    """Pre-norm encoder block: x + MHA(LN(x)); x + MLP(LN(x)) with GELU."""

    def __init__(self, dim: int, heads: int, causal: bool = False, approximate: str = "none"):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.attn = Attention(dim, heads, causal)
        self.fc1, self.fc2 = nn.Linear(dim, 4 * dim), nn.Linear(4 * dim, dim)
        self.approximate = approximate

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x)), approximate=self.approximate))


@dataclass(frozen=True)
class Config:
    seed: int = 0
    batch: int = 4


@dataclass(frozen=True)
class MatrixConfig(Config):
    rows: int = 32
    cols: int = 64


@dataclass(frozen=True)
class MLPConfig(Config):
    features: int = 32
    hidden: int = 64
    out: int = 16


@dataclass(frozen=True)
class GemmConfig(Config):
    m: int = 64
    k: int = 48
    n: int = 32


@dataclass(frozen=True)
class ConvConfig(Config):
    batch: int = 2
    in_channels: int = 3
    channels: int = 8
    size: int = 16


@dataclass(frozen=True)
class TransformerConfig(Config):
    batch: int = 2
    seq: int = 16
    dim: int = 32
    heads: int = 4


def _randn(generator: torch.Generator, *shape: int) -> torch.Tensor:
    return torch.randn(*shape, generator=generator)


def _mlp(c: MLPConfig, g):
    return MLP(c.features, c.hidden, c.out), (_randn(g, c.batch, c.features),)


def _gemm(c: GemmConfig, g):
    return Gemm(c.k, c.n), (_randn(g, c.m, c.k),)


def _elementwise(c: MatrixConfig, g):
    return Elementwise(c.cols), (_randn(g, c.rows, c.cols), _randn(g, c.rows, 1))


def _softmax(c: MatrixConfig, g):
    return Softmax(), (3 * _randn(g, c.rows, c.cols),)


def _layernorm(c: MatrixConfig, g):
    return LayerNorm(c.cols), (_randn(g, c.rows, c.cols) * 2 + 1,)


def _conv_block(c: ConvConfig, g):
    return ConvBlock(c.in_channels, c.channels), (_randn(g, c.batch, c.in_channels, c.size, c.size),)


def _transformer_block(c: TransformerConfig, g):
    return TransformerBlock(c.dim, c.heads), (_randn(g, c.batch, c.seq, c.dim),)


def _gpt_block(c: TransformerConfig, g):
    return TransformerBlock(c.dim, c.heads, causal=True, approximate="tanh"), (_randn(g, c.batch, c.seq, c.dim),)


@dataclass(frozen=True)
class ZooEntry:
    build: Callable
    config: Config
    description: str


MODELS: dict[str, ZooEntry] = {
    "mlp": ZooEntry(_mlp, MLPConfig(), "3-layer MLP with ReLU"),
    "gemm": ZooEntry(_gemm, GemmConfig(), "one matmul, x[m,k] @ W[k,n]"),
    "elementwise": ZooEntry(_elementwise, MatrixConfig(), "pointwise chain with row/column broadcasting"),
    "softmax": ZooEntry(_softmax, MatrixConfig(), "softmax over the last dimension"),
    "layernorm": ZooEntry(_layernorm, MatrixConfig(), "LayerNorm over the last dimension"),
    "conv_block": ZooEntry(_conv_block, ConvConfig(), "conv2d 3x3 + batchnorm + relu + maxpool 2x2"),
    "transformer_block": ZooEntry(_transformer_block, TransformerConfig(), "pre-norm encoder block: SDPA attention + GELU MLP + LayerNorm"),
    "gpt_block": ZooEntry(_gpt_block, TransformerConfig(), "GPT block: causal SDPA attention + tanh-GELU MLP"),
}


# Shape parameters are positive and at most this; a seed is at least 0.
LARGEST_PARAMETER = 2**31 - 1


def parse(spec: str) -> tuple[str, Config]:
    """'mlp?batch=8' -> ('mlp', MLPConfig(batch=8))."""
    name, _, query = spec.partition("?")
    if name not in MODELS:
        raise ModelLoadError(f"unknown zoo model '{name}' (available: {', '.join(MODELS)})")
    config = MODELS[name].config
    parameters = integer_parameters(query, {f.name for f in fields(config)}, f"zoo:{name}")
    for key, value in parameters.items():
        least = 0 if key == "seed" else 1
        if not least <= value <= LARGEST_PARAMETER:
            raise ModelLoadError(f"zoo:{name}: bad parameter '{key}={value}' (from {least} to {LARGEST_PARAMETER})")
    return name, replace(config, **parameters)


def integer_parameters(query: str, known: set[str], where: str) -> dict[str, int]:
    """'batch=8&dim=64' -> {'batch': 8, 'dim': 64}, each a known name with an integer value."""
    parameters = {}
    for item in filter(None, query.split("&")):
        key, _, value = item.partition("=")
        if key not in known or not value.lstrip("-").isdigit():
            raise ModelLoadError(f"{where}: bad parameter '{item}' (integers only; parameters: {', '.join(sorted(known))})")
        if key in parameters:
            raise ModelLoadError(f"{where}: parameter '{key}' given twice")
        parameters[key] = int(value)
    return parameters


def build(spec: str):
    """Build (module, example_inputs) for a zoo spec, deterministically from its seed."""
    name, config = parse(spec)
    _check_size(spec, name, config)
    generator = torch.Generator().manual_seed(config.seed + 1)
    with torch.random.fork_rng(devices=[]), user_code(f"zoo:{spec}: cannot build the model"):
        torch.manual_seed(config.seed)  # seed module init without touching the caller's RNG
        module, inputs = MODELS[name].build(config, generator)
    return module.eval(), inputs


def _check_size(spec: str, name: str, config: Config) -> None:
    """Build the model on the meta device first (no memory, no time): a size
    that cannot be built, or that needs more memory than the machine has, is
    a one-line error instead of an allocator's traceback (or the OOM killer)."""
    where = f"zoo:{spec}"
    with torch.device("meta"), user_code(f"{where}: cannot build the model"):
        module, inputs = MODELS[name].build(config, torch.Generator())
        tensors = [*module.state_dict().values(), *inputs]
        needed = sum(t.numel() * t.element_size() for t in tensors)
    available = _memory_available()
    if available is not None and needed > available:
        raise ModelLoadError(f"{where}: its parameters and inputs need {needed / 2**30:.1f} GiB, more than the "
                             f"{available / 2**30:.1f} GiB of memory available; choose smaller sizes")


def _memory_available() -> int | None:
    """Bytes of memory the machine can still give (Linux's MemAvailable), else None."""
    try:
        with open("/proc/meminfo") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None
