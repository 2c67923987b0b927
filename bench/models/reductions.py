"""Reductions at the sizes people run, for tools/compile.py and the GPU
check: `bench/models/reductions.py:rows?op=0` (op 0 sum, 1 mean, 2 amax over
the last dim of rows x cols) and `...:middle?op=0` (a keepdim reduction over
the middle dim of outer x middle x inner). Compile with --dtype float16 or
bfloat16: the reductions then accumulate in float32, as eager's do."""
import torch

OPS = (torch.sum, torch.mean, torch.amax)


class Reduce(torch.nn.Module):
    def __init__(self, op: int, dim: int, keepdim: bool):
        super().__init__()
        self.op, self.dim, self.keepdim = OPS[op], dim, keepdim

    def forward(self, x):
        return self.op(x, dim=self.dim, keepdim=self.keepdim)


def rows(op=0, rows=8192, cols=16384):
    return Reduce(op, -1, False), (torch.randn(rows, cols),)


def middle(op=0, outer=64, middle=512, inner=256):
    return Reduce(op, 1, True), (torch.randn(outer, middle, inner),)
