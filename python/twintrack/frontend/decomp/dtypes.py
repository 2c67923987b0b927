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


def numbers_as_tensors(tensor_op):
    """A decomposition of an overload taking Python numbers (a Scalar,
    Scalar_Tensor, Tensor_Scalar overload, which torch-mlir lowers for few
    ops) as `tensor_op`, the overload of two tensors: each number a 0-d
    tensor and each operand converted to the dtype eager promotes them to."""
    def decomposition(*operands):
        dtype = torch.result_type(*operands)
        device = next(o.device for o in operands if isinstance(o, torch.Tensor))
        return tensor_op(*(o.to(dtype) if isinstance(o, torch.Tensor)
                           else torch.scalar_tensor(o, dtype=dtype, device=device) for o in operands))
    return decomposition
