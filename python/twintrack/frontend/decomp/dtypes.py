"""Dtype facts and value tests the decompositions share."""

from __future__ import annotations

import math

import torch

# float16 and bfloat16: eager computes their reductions, scans and special
# functions in float32 (its acc_type) and rounds the result once.
HALF_DTYPES = (torch.float16, torch.bfloat16)


def is_nan(value):
    """Where `value` is NaN: a boolean mask for a tensor, a bool for a Python
    number. As x != x: torch-mlir folds eq.Tensor(x, x) to true, not ne."""
    if isinstance(value, torch.Tensor):
        return value != value
    return isinstance(value, float) and math.isnan(value)
