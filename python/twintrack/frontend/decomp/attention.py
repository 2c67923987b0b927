"""Attention reading its own dtype, for the programs where that is safe
(`entry_for`): PyTorch's own decomposition of scaled_dot_product_attention
widens half-precision Q, K and V to float32 first."""

from __future__ import annotations

import functools
import math

import torch

from .dtypes import HALF_DTYPES


def entry_for(program: torch.export.ExportedProgram) -> dict:
    """The attention entry for this program: {} where its attention calls
    disagree on their result's layout or one uses dropout."""
    layout = _attention_layout(program)
    if layout is None:
        return {}
    return {torch.ops.aten.scaled_dot_product_attention.default: functools.partial(_attention_in_its_dtype, layout)}


def _attention_layout(program: torch.export.ExportedProgram) -> tuple[int, ...] | None:
    """The memory order (outermost dimension first) that every attention call of
    the program returns, if they agree and none uses dropout; else None. The
    ops after an attention call were traced against that layout (a `view`
    of its transpose), so its decomposition must keep it: PyTorch's own
    returns another, and those views then fail on retrace (GPT-2)."""
    orders = set()
    for node in program.graph.nodes:
        if node.target is not torch.ops.aten.scaled_dot_product_attention.default:
            continue
        options = dict(zip(("attn_mask", "dropout_p", "is_causal", "scale", "enable_gqa"), node.args[3:]), **node.kwargs)
        if options.get("dropout_p", 0.0) != 0.0:
            return None
        strides = node.meta["val"].stride()
        orders.add(tuple(sorted(range(len(strides)), key=lambda d: -strides[d])))
    return orders.pop() if len(orders) == 1 else None


def _attention_in_its_dtype(layout, query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
                            enable_gqa=False):
    """scaled_dot_product_attention (no dropout) as two matmuls and a softmax,
    its result in `layout` (the memory order PyTorch's kernel returned when
    the model was traced). Half precision is computed as PyTorch's kernels
    (flash, and the CPU's) compute it: the scores f32 (Q·Kᵀ of the inputs
    widened, which fold-matmul-widening turns back into an f16 matmul with
    an f32 result), scaled and soft-maxed in f32, the probabilities rounded
    to the inputs' dtype for P·V. PyTorch's own decomposition (its math
    path) widens V too, so P·V could not use fp16 tensor cores; scores
    rounded to fp16 would lose up to 2^-11 of their magnitude before the
    exp. A boolean mask keeps the scores where it is true; another is added
    to them. A row the mask takes every score from
    is zeros, as eager's safe softmax makes it (not the NaN of a softmax of
    -infs). With grouped heads (enable_gqa) each key/value head serves
    query heads / key heads consecutive query heads."""
    scale = 1.0 / math.sqrt(query.shape[-1]) if scale is None else scale
    if enable_gqa and key.shape[-3] != query.shape[-3]:
        key = key.repeat_interleave(query.shape[-3] // key.shape[-3], dim=-3)
        value = value.repeat_interleave(query.shape[-3] // value.shape[-3], dim=-3)
    # before the scores: nothing may sit between the two matmuls of the attention kernel's chain
    attends = _attends(attn_mask) if attn_mask is not None and not is_causal else None
    wide = torch.float32 if query.dtype in HALF_DTYPES else query.dtype
    scores = (query.to(wide) @ key.to(wide).transpose(-2, -1)) * scale
    if is_causal:
        rows, cols = scores.shape[-2], scores.shape[-1]
        attn_mask = torch.ones(rows, cols, dtype=torch.bool, device=scores.device).tril()
    if attn_mask is not None and attn_mask.dtype == torch.bool:
        scores = scores.masked_fill(attn_mask.logical_not(), float("-inf"))
    elif attn_mask is not None:
        scores = scores + attn_mask
    output = torch.softmax(scores, dim=-1).to(value.dtype) @ value
    if attends is not None:
        output = torch.where(attends, output, 0)
    inverse = sorted(range(len(layout)), key=lambda d: layout[d])
    return output.permute(layout).contiguous().permute(inverse)


def _attends(mask: torch.Tensor) -> torch.Tensor:
    """Per query row (last dim kept): does the mask leave it any score?
    Read from the mask alone, so the score matrix need not be kept for it;
    a max, which the GPU runs as one kernel (a bool any() took a fill and a
    reduction there)."""
    if mask.dtype == torch.bool:
        return mask.to(torch.float16).amax(dim=-1, keepdim=True) > 0
    return mask.amax(dim=-1, keepdim=True) != float("-inf")
