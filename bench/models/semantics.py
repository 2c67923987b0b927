"""GPU numerics of the coverage work: NaN propagation (NaNs made inside the
model, since the checks draw fresh random inputs), scans, sorts, scatters and
guarded lookups. Factories for `tools/compile.py bench/models/semantics.py:NAME
--pipeline gpu`, checked on the GPU machine with tools/gpu_check.py."""

import torch
import torch.nn.functional as F


class _Fn(torch.nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, *args):
        return self.fn(*args)


def _with_nans(x):
    return torch.where(x > 1.5, torch.full_like(x, float("nan")), x)


def _make(fn, *shapes, dtype=torch.float32):
    torch.manual_seed(0)
    return _Fn(fn), tuple(torch.randn(*s, dtype=dtype) for s in shapes)


def clamp_nan(rows=256, cols=1024):
    return _make(lambda x: torch.clamp(_with_nans(x), -1, 1), (rows, cols))


def maximum_nan(rows=256, cols=1024):
    return _make(lambda x, y: torch.maximum(_with_nans(x), _with_nans(y)), (rows, cols), (rows, cols))


def argmax_nan(rows=256, cols=1024):
    return _make(lambda x: torch.argmax(_with_nans(x), -1), (rows, cols))


def max_dim_nan(rows=256, cols=1024):
    return _make(lambda x: tuple(torch.max(_with_nans(x), -1)), (rows, cols))


def cumsum(rows=64, cols=2048):
    return _make(lambda x: torch.cumsum(x, -1), (rows, cols))


def logcumsumexp(rows=64, cols=1024):
    return _make(lambda x: torch.logcumsumexp(x, -1), (rows, cols))


def sort(rows=64, cols=1024):
    return _make(lambda x: tuple(torch.sort(x, -1)), (rows, cols))


def topk(rows=64, cols=1024):
    return _make(lambda x: tuple(torch.topk(x, 8, -1)), (rows, cols))


def scatter_add(rows=64, cols=256):
    torch.manual_seed(0)
    index = torch.randint(0, rows, (rows * 2, cols))
    return _Fn(lambda x, s: x.scatter_add(0, index, s)), (torch.randn(rows, cols), torch.randn(rows * 2, cols))


def index_put_accumulate(n=4096):
    torch.manual_seed(0)
    index = torch.randint(0, n, (n,))
    return _Fn(lambda x, v: x.index_put((index,), v, accumulate=True)), (torch.randn(n), torch.randn(n))


def embedding(vocab=1000, dim=64):
    torch.manual_seed(0)
    table = torch.nn.Embedding(vocab, dim)
    index = torch.randint(0, vocab, (8, 128))
    return _Fn(lambda x: table(index) * x), (torch.randn(8, 128, dim),)
