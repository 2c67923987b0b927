"""Numerical checks against a float64 eager reference."""

from __future__ import annotations

import contextlib
import copy
import math
from dataclasses import dataclass

import torch
import torch.utils._pytree as pytree

from ..calling import TensorSpec

TOLERANCE = {"float32": 1e-5, "float64": 1e-12, "float16": 1e-2, "bfloat16": 1e-2}
TF32_TOLERANCE = 1e-2  # f32 outputs of tf32 matmuls: 10 mantissa bits, as float16


def tolerance(dtype: str, allow_tf32: bool = False) -> float:
    """The relative error allowed for an output of `dtype`; f32 ones widen
    to tf32's where the compile allowed tf32 matmuls."""
    return TF32_TOLERANCE if allow_tf32 and dtype == "float32" else TOLERANCE.get(dtype, 0.0)


@dataclass(frozen=True)
class OutputCheck:
    name: str
    dtype: str
    rel_error: float
    tolerance: float

    @property
    def ok(self) -> bool:
        return math.isfinite(self.rel_error) and self.rel_error <= self.tolerance


@contextlib.contextmanager
def float32_as_compiled(allow_tf32: bool):
    """torch's f32 matmuls and cuDNN's f32 convolutions as tf32 or exact
    inside the block (the other tracks, timed against a twintrack artifact,
    run as it was compiled: --allow-tf32 covers convolutions too)."""
    saved = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = allow_tf32
    # cuDNN's setter, not its attribute: torch refuses `cudnn.allow_tf32 = ...`
    # once a compile has frozen the global flags (disable_global_flags).
    saved_cudnn = torch.backends.cudnn.set_flags(_allow_tf32=allow_tf32, _fp32_precision=None)
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32 = saved
        torch.backends.cudnn.set_flags(_allow_tf32=saved_cudnn[4], _fp32_precision=None)


def relative_error(actual: torch.Tensor, reference: torch.Tensor) -> float:
    """||y - ref|| / ||ref|| in float64 over the elements where the
    reference is finite. A NaN or infinity must sit exactly where the
    reference has the same one (eager's NaN propagation); anywhere else, or
    a shape that differs, gives NaN (never passes). Complex values count as
    their real pairs."""
    actual, reference = (torch.view_as_real(t.resolve_conj()) if t.is_complex() else t for t in (actual, reference))
    actual, reference = actual.double(), reference.double()
    if actual.shape != reference.shape:
        return math.nan
    special = ~torch.isfinite(reference)
    same_specials = torch.equal(torch.isnan(actual), torch.isnan(reference)) and \
        torch.equal(actual[special & ~torch.isnan(reference)], reference[special & ~torch.isnan(reference)])
    if not same_specials or not torch.isfinite(actual[~special]).all():
        return math.nan
    actual, reference = actual[~special], reference[~special]
    denominator = torch.linalg.vector_norm(reference).item()
    numerator = torch.linalg.vector_norm(actual - reference).item()
    return numerator / denominator if denominator else numerator


def random_inputs(specs: list[TensorSpec], seed: int, sizes: dict[str, int] | None = None) -> list[torch.Tensor]:
    """Fresh random tensors for each spec (normal floats, small ints, random
    bools), a dynamic shape's names at `sizes`, stored as the compile saw
    them (a channels-last input channels-last)."""
    from ..calling import inverse_order
    from ..dynamic_shapes import concrete_shape
    generator = torch.Generator().manual_seed(seed)
    tensors = []
    for spec in specs:
        stored = spec.stored()
        dtype, shape = getattr(torch, spec.dtype), concrete_shape(stored.shape, sizes or {})
        if dtype.is_floating_point:
            tensor = torch.randn(shape, generator=generator).to(dtype)
        elif dtype == torch.bool:
            tensor = torch.randint(0, 2, shape, generator=generator).bool()
        else:
            tensor = torch.randint(0, 8, shape, generator=generator).to(dtype)
        tensors.append(tensor if spec.storage_order is None else tensor.permute(inverse_order(spec.storage_order)))
    return tensors


def float64_reference(module: torch.nn.Module, inputs: list[torch.Tensor]) -> list[torch.Tensor]:
    """Eager outputs of a float64 copy of `module` on float64 copies of
    `inputs`. A graph (a torch.export file's module) names its dtypes and
    holds constants: it runs op by op, every float widened (_Float64Graph)."""
    reference = copy.deepcopy(module).to(torch.float64)
    wide = [_widen(x) for x in inputs]
    with torch.no_grad():
        if isinstance(reference, torch.fx.GraphModule):
            return pytree.tree_leaves(_Float64Graph(reference).run(*wide))
        return pytree.tree_leaves(reference(*wide))


def _widen(value):
    """A float tensor as float64, a float dtype as torch.float64; anything else as it is."""
    if isinstance(value, torch.Tensor) and value.is_floating_point():
        return value.double()
    if isinstance(value, torch.dtype) and value.is_floating_point:
        return torch.float64
    return value


class _Float64Graph(torch.fx.Interpreter):
    """Runs a graph with every float operand and dtype argument widened to float64."""

    def call_function(self, target, args, kwargs):
        args, kwargs = pytree.tree_map(_widen, (args, kwargs))
        return super().call_function(target, args, kwargs)


def compare(outputs: list[torch.Tensor], references: list[torch.Tensor], specs: list[TensorSpec],
            allow_tf32: bool = False) -> list[OutputCheck]:
    return [OutputCheck(spec.name, spec.dtype, relative_error(y, ref), tolerance(spec.dtype, allow_tf32))
            for y, ref, spec in zip(outputs, references, specs)]
