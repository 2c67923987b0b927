"""Half-precision rounding in both modes, each against its own semantics,
on ill-conditioned chains (logit near 1/2 turns one bf16 rounding of the
sigmoid into a 1% error):

- default, as Inductor: every op computes in float32 and a fused kernel
  keeps its intermediates there, casts to float16/bfloat16 included; only
  what is stored is rounded. Reference: the chain in float32, rounded once
  at the end.
- --emulate-precision-casts, as eager (on CUDA; eager's CPU logit rounds
  inside the op too): every op computes in float32 and rounds its result
  to its dtype. Reference: the chain in float32 with each op's result
  rounded.

The two references are far apart on these chains, so each mode is checked
to sit on its own and away from the other. `chains` is also a MODEL factory
(tools/compile.py test/python/test_half_precision.py:chains), and
`check_modes` judges a run of its artifact on a GPU machine."""

import pytest
import torch

import twintrack
from function_module import FunctionModule


def reviewer_chain(x, r):
    """logit(sigmoid(softmax(x.bfloat16()))), with `r` applied to each op's result."""
    return torch.logit(r(torch.sigmoid(r(torch.softmax(r(x), -1)))))


def scaled_chain(x, r):
    """A float16 input scaled by a number float16 rounds (0.02), then logit(sigmoid(.))."""
    return torch.logit(r(torch.sigmoid(r(x * 0.02))))


CHAINS = ((reviewer_chain, torch.bfloat16), (scaled_chain, torch.float16))


def _rounding(dtype, keep_dtype: bool):
    """Each op's result rounded to `dtype`: kept in it (eager's own code) or widened back (a reference)."""
    return (lambda t: t.to(dtype)) if keep_dtype else (lambda t: t.to(dtype).float())


def chains():
    """The model (each chain as eager runs it) and example inputs: x for the bf16 chain, a float16 x."""
    model = FunctionModule(lambda *xs: tuple(chain(x, _rounding(dtype, True)) for (chain, dtype), x in zip(CHAINS, xs)))
    return model, inputs(seed=0)


def inputs(seed: int, device: str = "cpu") -> tuple[torch.Tensor, ...]:
    draw = torch.Generator().manual_seed(seed)
    return torch.randn(16, 64, generator=draw).to(device), torch.randn(16, 64, generator=draw).half().to(device)


def references(xs, emulate_precision_casts: bool) -> list[torch.Tensor]:
    """Each chain's result under one mode's semantics, from float32 copies of the inputs."""
    identity = lambda t: t  # noqa: E731
    return [chain(x.cpu().float(), _rounding(dtype, False) if emulate_precision_casts else identity).to(dtype)
            for (chain, dtype), x in zip(CHAINS, xs)]


def check_modes(outputs, xs, emulate_precision_casts: bool) -> None:
    """Each output is its mode's reference (within a few flipped roundings), far from the other mode's."""
    own, other = references(xs, emulate_precision_casts), references(xs, not emulate_precision_casts)
    assert len(outputs) == len(own) == len(CHAINS)
    for output, mine, theirs in zip(outputs, own, other):
        assert output.dtype == mine.dtype and output.shape == mine.shape
        error, distance = (_relative(output.cpu(), reference) for reference in (mine, theirs))
        assert error < 1e-3 and distance > 4 * error + 1e-3, (error, distance)


def _relative(y: torch.Tensor, reference: torch.Tensor) -> float:
    y, reference = y.double(), reference.double()
    assert not y.isnan().any()
    return float((y - reference).norm() / reference.norm())


@pytest.mark.parametrize("emulate", [False, True], ids=["f32-intermediates", "emulate-precision-casts"])
def test_each_mode_rounds_as_it_says(emulate):
    model, example = chains()
    compiled = twintrack.compile(model, example, emulate_precision_casts=emulate)
    xs = inputs(seed=1)
    check_modes(compiled(*xs), xs, emulate)


def test_emulated_rounding_is_eagers_where_eager_computes_each_op_in_float32():
    """sigmoid(softmax(x * 3.3)) in bfloat16: eager's CPU kernels compute each in float32 and round once."""
    function = lambda x: torch.sigmoid(torch.softmax(x.bfloat16() * 3.3, -1) * 7.1)  # noqa: E731
    x = inputs(seed=2)[0]
    compiled = twintrack.compile(FunctionModule(function), (x,), emulate_precision_casts=True)
    assert torch.equal(compiled(x), function(x))


class _Bfloat16Constants(torch.nn.Module):
    """A bfloat16 weight, buffer and in-graph constant (a lifted tensor)."""

    def __init__(self):
        super().__init__()
        generator = torch.Generator().manual_seed(3)
        self.weight = torch.nn.Parameter(torch.randn(8, 4, generator=generator).bfloat16(), requires_grad=False)
        self.register_buffer("offset", torch.full((4,), 0.5, dtype=torch.bfloat16))

    def forward(self, x):
        return x @ self.weight + self.offset + torch.tensor(1.5, dtype=torch.bfloat16)


@pytest.mark.parametrize("freeze", [False, True], ids=["state-as-inputs", "frozen"])
def test_bfloat16_constants_import(freeze):
    """torch-mlir's importer writes constants through NumPy, which has no
    bfloat16: frozen bfloat16 weights and lifted constants failed to import."""
    model, x = _Bfloat16Constants(), torch.randn(3, 8, generator=torch.Generator().manual_seed(4)).bfloat16()
    got = twintrack.compile(model, (x,), freeze=freeze)(x)
    exact = x.double() @ model.weight.double() + model.offset.double() + 1.5
    assert got.dtype == torch.bfloat16
    assert torch.allclose(got.double(), exact, rtol=2e-2, atol=2e-2)
