"""Small modules whose loops the GPU track used to leave on the host (a
reduction to a 0-d tensor, a reduction whose one parallel dim folds away,
scalar arithmetic after a reduction, the RNG's seed update, a scatter loop)
and integer abs. Factories for `tools/compile.py
test/python/every_loop_models.py:NAME --pipeline gpu`; test_gpu_every_loop.py
compiles each. `rows` and `cols` size the inputs."""

import torch
import torch.nn.functional as F
from torch import nn

from function_module import FunctionModule


def _x(rows: int, cols: int) -> torch.Tensor:
    return torch.randn(rows, cols)


def argmax_keepdim(rows=8, cols=33):
    return FunctionModule(lambda x: torch.argmax(x, dim=1, keepdim=True)), (_x(rows, cols),)


def argmax_vector_keepdim(rows=8, cols=33):
    """A 1-D argmax: its one parallel dim has a single iteration and folds away."""
    return FunctionModule(lambda x: torch.argmax(x, dim=0, keepdim=True)), (torch.randn(rows * cols),)


def argmax_full(rows=8, cols=33):
    return FunctionModule(lambda x: torch.argmax(x)), (_x(rows, cols),)


def dot(rows=8, cols=33):
    return FunctionModule(torch.dot), (torch.randn(rows * cols), torch.randn(rows * cols))


def nll_loss(rows=8, cols=10):
    targets = torch.randint(0, cols, (rows,))
    return FunctionModule(lambda x, t: F.nll_loss(F.log_softmax(x, 1), t)), (_x(rows, cols), targets)


def cross_entropy(rows=8, cols=10):
    return FunctionModule(F.cross_entropy), (_x(rows, cols), torch.randint(0, cols, (rows,)))


def aminmax(rows=8, cols=33):
    def both(x):
        found = torch.aminmax(x)
        return found.min, found.max
    return FunctionModule(both), (_x(rows, cols),)


def aminmax_rows(rows=8, cols=33):
    def both(x):
        found = torch.aminmax(x, dim=1)
        return found.min, found.max
    return FunctionModule(both), (_x(rows, cols),)


def var(rows=8, cols=33):
    return FunctionModule(lambda x: x.var()), (_x(rows, cols),)


def var_rows(rows=8, cols=33):
    return FunctionModule(lambda x: x.var(dim=1)), (_x(rows, cols),)


def vector_norm(rows=8, cols=33):
    return FunctionModule(torch.linalg.vector_norm), (_x(rows, cols),)


def dropout_train(rows=8, cols=33):
    return FunctionModule(lambda x: F.dropout(x, 0.5, training=True)), (_x(rows, cols),)


def randn_like(rows=8, cols=33):
    return FunctionModule(lambda x: x + torch.randn_like(x)), (_x(rows, cols),)


def int_min(rows=8, cols=33):
    """A signed-int min to a 0-d tensor: minsi, whose neutral is INT_MAX
    (shifted: random integer inputs are 0..7, and the min should be negative)."""
    return FunctionModule(lambda x: (x - 4).min()), (torch.randint(-1000, 1000, (rows, cols), dtype=torch.int32),)


def int_min_rows(rows=8, cols=33):
    return FunctionModule(lambda x: (x - 4).min(dim=1).values), (torch.randint(-1000, 1000, (rows, cols), dtype=torch.int32),)


def full_sum(rows=8, cols=33):
    return FunctionModule(lambda x: x.sum()), (_x(rows, cols),)


def full_sum_large(rows=1024, cols=1024):
    """Large enough that every thread of the one block strides many elements."""
    return FunctionModule(lambda x: x.sum()), (_x(rows, cols),)


def bool_any(rows=8, cols=33):
    return FunctionModule(lambda x: (x > 2.0).any()), (_x(rows, cols),)


def int_abs(rows=8, cols=33):
    """math.absi, as T5's relative position buckets take it (shifted, so
    that the random 0..7 inputs hold negatives)."""
    return FunctionModule(lambda x: torch.abs(x - 4)), (torch.randint(-100, 100, (rows, cols)),)


def reflection_pad(rows=8, cols=8):
    return nn.ReflectionPad2d(2), (torch.randn(1, 2, rows, cols),)


def scatter_add(rows=8, cols=5):
    index = torch.randint(0, rows, (3, cols))
    return FunctionModule(lambda x, i, s: x.scatter_add(0, i, s)), (_x(rows, cols), index, torch.randn(3, cols))


def frexp_nextafter(rows=8, cols=33):
    """Tensor loops of the decompositions (exact powers of two by
    square-and-multiply) whose bodies compute from 0-d constants: each
    becomes one kernel running every element's own loop."""
    x = _x(rows, cols)
    return FunctionModule(lambda x, y: (*torch.frexp(x), torch.nextafter(x, y))), (x, x.flip(0))


# Deterministic ones, whose outputs match eager's (the RNG's do not).
DETERMINISTIC = ["argmax_keepdim", "argmax_vector_keepdim", "argmax_full", "dot", "nll_loss", "cross_entropy",
                 "aminmax", "aminmax_rows", "var", "var_rows", "vector_norm", "int_min", "int_min_rows",
                 "full_sum", "full_sum_large", "bool_any", "int_abs", "reflection_pad", "scatter_add",
                 "frexp_nextafter"]
RANDOM = ["dropout_train", "randn_like"]
