"""Dtype facts the decompositions share."""

from __future__ import annotations

import torch

# float16 and bfloat16: eager computes their reductions, scans and special
# functions in float32 (its acc_type) and rounds the result once.
HALF_DTYPES = (torch.float16, torch.bfloat16)
