"""Judging compiled outputs against eager ones.

The compiled callable's return structure is changing (a bare tensor, a
tuple, the module's own structure), so both sides are flattened to their
tensor leaves before they are paired: the check never depends on how the
outputs are nested, only on their order.

The rule for one floating-point output, element by element:
- NaN where eager (in the case's dtype) has NaN, and nowhere else;
- the same infinities where eager has them, except where eager overflowed
  an intermediate and the exact result fits the dtype: there the exact
  result (within the dtype's tolerance) passes too;
- elsewhere |y - ref| <= atol + rtol * |ref| + 2 * |eager - ref|, with ref
  the float64 reference when there is one: a compiler may be as far from
  the exact answer as eager itself is (twice, for slack), plus the dtype's
  tolerance. Without a float64 reference, ref is eager and the last term is 0.
Integer and bool outputs must be equal to eager's, exactly.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.utils._pytree as pytree

# (rtol, atol) per output dtype: loose enough for a different (but sound)
# order of accumulation, tight enough to catch a wrong formula.
TOLERANCES = {
    torch.float64: (1e-7, 1e-7),
    torch.float32: (1e-4, 1e-5),
    torch.float16: (1e-2, 1e-3),
    torch.bfloat16: (3e-2, 1e-2),
}


@dataclass(frozen=True)
class Verdict:
    ok: bool
    reason: str = ""          # one line, empty when ok
    max_abs_error: float = 0.0


def tensor_leaves(value) -> list[torch.Tensor]:
    """The tensors in `value`, in order, whatever holds them: tuples, lists,
    dicts, torch.return_types, None. Python numbers become 0-d tensors, so
    an op returning a scalar is still checked."""
    leaves = []
    for leaf in pytree.tree_leaves(value):
        if isinstance(leaf, torch.Tensor):
            leaves.append(leaf)
        elif isinstance(leaf, (tuple, list)):  # a structseq pytree does not know
            leaves.extend(tensor_leaves(list(leaf)))
        elif isinstance(leaf, (bool, int, float)):
            leaves.append(torch.tensor(leaf))
    return leaves


def compare_outputs(actual, eager, reference=None) -> Verdict:
    """Flatten all three and check each compiled leaf; `reference` is the
    float64 eager run's outputs, or None where there is none."""
    ys, es = tensor_leaves(actual), tensor_leaves(eager)
    rs = tensor_leaves(reference) if reference is not None else es
    if len(ys) != len(es):
        return Verdict(False, f"{len(ys)} outputs, eager has {len(es)}")
    if len(rs) != len(es):
        rs = es
    worst = Verdict(True)
    for index, (y, e, r) in enumerate(zip(ys, es, rs)):
        verdict = compare_tensor(y, e, r)
        if not verdict.ok:
            prefix = f"output {index}: " if len(ys) > 1 else ""
            return Verdict(False, prefix + verdict.reason, verdict.max_abs_error)
        if verdict.max_abs_error > worst.max_abs_error:
            worst = verdict
    return worst


def compare_tensor(y: torch.Tensor, eager: torch.Tensor, reference: torch.Tensor) -> Verdict:
    """One output: its shape and dtype, then its values (see the module's rule)."""
    if not isinstance(y, torch.Tensor):
        return Verdict(False, f"not a tensor: {type(y).__name__}")
    if tuple(y.shape) != tuple(eager.shape):
        return Verdict(False, f"shape {tuple(y.shape)} != eager {tuple(eager.shape)}")
    if y.dtype != eager.dtype:
        return Verdict(False, f"dtype {_name(y.dtype)} != eager {_name(eager.dtype)}")
    y, eager = y.detach().cpu().resolve_conj(), eager.detach().cpu().resolve_conj()
    reference = reference.resolve_conj()
    if y.is_complex():
        y, eager = torch.view_as_real(y), torch.view_as_real(eager)
        reference = torch.view_as_real(reference) if reference.is_complex() else torch.view_as_real(eager)
    if not y.is_floating_point():
        return _compare_exact(y, eager)
    if reference.shape != eager.shape or not reference.is_floating_point():
        reference = eager
    return _compare_float(y, eager, reference)


def _compare_exact(y: torch.Tensor, eager: torch.Tensor) -> Verdict:
    """Integers and bools: equal, element for element."""
    different = y != eager
    if not different.any():
        return Verdict(True)
    count = int(different.sum())
    where = tuple(int(i) for i in different.nonzero()[0])
    error = float((y.double() - eager.double()).abs().max())
    return Verdict(False, f"mismatch: {count}/{y.numel()} elements differ (exact dtype), "
                          f"first at {where}: {y[where].item()} vs {eager[where].item()}", error)


def _compare_float(y: torch.Tensor, eager: torch.Tensor, reference: torch.Tensor) -> Verdict:
    """Floats: NaN and infinity patterns as eager's, the rest within tolerance."""
    rtol, atol = TOLERANCES.get(y.dtype, TOLERANCES[torch.float32])
    y64, e64, r64 = y.double(), eager.double(), reference.double()
    nan_y, nan_e = torch.isnan(y64), torch.isnan(e64)
    if not torch.equal(nan_y, nan_e):
        extra, missing = int((nan_y & ~nan_e).sum()), int((nan_e & ~nan_y).sum())
        return Verdict(False, f"NaN pattern differs: {extra} unexpected NaN, {missing} missing NaN", float("nan"))
    inf_e = torch.isinf(e64)
    # eager rounds each op to the dtype: an intermediate can overflow where
    # the exact result fits (log1p(exp(x)) in float16); a compile that keeps
    # f32 intermediates may give that result instead of eager's infinity
    overflowed = inf_e & torch.isfinite(r64.to(y.dtype))
    recovered = overflowed & ((y64 - r64).abs() <= atol + rtol * r64.abs())
    wrong_inf = inf_e & ~recovered & (y64 != e64)
    if wrong_inf.any():
        return Verdict(False, f"infinities differ at {int(wrong_inf.sum())} elements", float("inf"))
    finite = ~(nan_e | inf_e)
    r64 = torch.where(torch.isfinite(r64), r64, e64)
    y64, e64, r64 = y64[finite], e64[finite], r64[finite]
    if y64.numel() == 0:
        return Verdict(True)
    error = (y64 - r64).abs()
    allowed = atol + rtol * r64.abs() + 2 * (e64 - r64).abs()
    max_error = float(error.max())
    bad = ~(error <= allowed)  # catches an inf or NaN in y where eager is finite
    if not bad.any():
        return Verdict(True, max_abs_error=max_error)
    scale = float(r64.abs().max()) or 1.0
    return Verdict(False, f"mismatch: max abs error {max_error:.3g} (ref max {scale:.3g}), "
                          f"{int(bad.sum())}/{bad.numel()} elements beyond tolerance", max_error)


def _name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")
