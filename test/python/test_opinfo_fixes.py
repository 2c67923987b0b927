"""Regression tests for OpInfo coverage failure classes, each compiled for
the CPU and compared with eager (exactly, or against float64 eager):

* ops DecomposeComplexOps declines at an edge ("marked as backend illegal"):
  argmax/logsumexp over 0-d tensors, integer addbmm, block_diag (a
  zero-size empty_strided);
* ops with no linalg lowering ("failed to legalize torch.constant.int"):
  the *_copy views, the strided scatters, signbit/copysign, fmod.Scalar;
* torch.export's effect tokens (linalg error checks): no longer refused as
  an "unsupported output kind TOKEN";
* constant bool buffers at widen-bools (isfinite of an integer tensor).
"""

import pytest
import torch

import twintrack

from function_module import FunctionModule


def _check(fn, *inputs, exact=True):
    """Compile `fn` over `inputs` and compare with eager: bit-exactly, or
    (exact=False) with float64 eager at float32's tolerance."""
    got = twintrack.compile(FunctionModule(fn), inputs)(*inputs)
    if exact:
        want = fn(*inputs)
    else:
        want = fn(*[x.double() if x.is_floating_point() else x for x in inputs])
    got, want = (got, want) if isinstance(got, (list, tuple)) else ([got], [want])
    for g, w in zip(got, want):
        if exact:
            torch.testing.assert_close(g, w, rtol=0, atol=0, equal_nan=True)
        else:
            torch.testing.assert_close(g.double(), w, rtol=1e-5, atol=1e-5, equal_nan=True)


@pytest.mark.parametrize("fn, inputs, exact", [
    (lambda x: torch.argmax(x), (torch.tensor(3),), True),
    (lambda x: torch.argmin(x, 0), (torch.tensor(-2),), True),
    (lambda x: torch.logsumexp(x, 0, True), (torch.tensor(1.5),), False),
    (lambda a, b, c: torch.addbmm(a, b, c), (torch.randint(-5, 5, (5, 10), dtype=torch.int32),
                                              torch.randint(-5, 5, (5, 5, 5), dtype=torch.int32),
                                              torch.randint(-5, 5, (5, 5, 10), dtype=torch.int32)), True),
    (lambda a, b, c: torch.block_diag(a, b, c), (torch.randn(1, 5), torch.randn(2, 5), torch.randn(3, 5)), True),
], ids=["argmax-0d", "argmin-0d", "logsumexp-0d", "addbmm-int32", "block_diag"])
def test_backend_illegal_edges(fn, inputs, exact):
    _check(fn, *inputs, exact=exact)


@pytest.mark.parametrize("fn, inputs", [
    (lambda x: torch.view_copy(x, (25, 5)), (torch.randn(5, 5, 5),)),
    (lambda x: torch.permute_copy(x, (2, 0, 1)), (torch.randn(3, 4, 5),)),
    (lambda x: torch.unbind_copy(x, 1), (torch.randn(3, 4, 5),)),
    (lambda x: torch.as_strided_copy(x, (2, 3), (1, 4), 2), (torch.randn(5, 5),)),
    (lambda x, y: torch.as_strided_scatter(x, y, (2, 2), (1, 3), 1), (torch.randn(5, 5), torch.randn(2, 2))),
    (lambda x, y: torch.diagonal_scatter(x, y, 1, 0, 1), (torch.randn(4, 5), torch.randn(4))),
    (lambda x, y: torch.diagonal_scatter(x, y, -1, 2, 0), (torch.randn(3, 2, 4), torch.randn(2, 3))),
    (lambda x: torch.signbit(x), (torch.tensor([-1.0, -0.0, 0.0, 2.0, float("-inf"), float("inf")]),)),
    (lambda x, y: torch.copysign(x, y), (torch.randn(6), torch.tensor([-1.0, -0.0, 0.0, 2.0, -3.0, 1.0]))),
    (lambda x: torch.fmod(x, 3), (torch.randn(5, 5) * 10,)),
    (lambda x: torch.fmod(x, -3), (torch.arange(-10, 10),)),
    (lambda x: torch.fft.fftshift(x), (torch.randn(5, 4),)),
], ids=["view_copy", "permute_copy", "unbind_copy", "as_strided_copy", "as_strided_scatter",
        "diagonal_scatter", "diagonal_scatter-3d", "signbit", "copysign", "fmod-scalar", "fmod-int", "fftshift"])
def test_ops_without_linalg_lowering(fn, inputs):
    _check(fn, *inputs)


def test_effect_tokens_dropped():
    """linalg.inv's error check comes as a with_effects token; export drops
    it, leaving no TOKEN input or output and no with_effects node (the
    program then reaches torch-mlir's importer)."""
    x = torch.randn(4, 4) + 4 * torch.eye(4)
    program = twintrack.export(FunctionModule(lambda a: torch.linalg.inv(a)), (x,)).exported.program
    signature = program.graph_signature
    kinds = {spec.kind.name for spec in [*signature.input_specs, *signature.output_specs]}
    assert "TOKEN" not in kinds
    assert all(node.target is not torch.ops.higher_order.with_effects for node in program.graph.nodes)


@pytest.mark.parametrize("fn, inputs", [
    (lambda x: torch.isfinite(x), (torch.arange(20),)),
    (lambda x: (torch.isposinf(x), torch.isreal(x.float())), (torch.arange(-4, 4),)),
    (lambda x: x & torch.tensor([True, False, True, True]), (torch.tensor([True, True, False, True]),)),
], ids=["isfinite-int", "isposinf-isreal", "bool-constant"])
def test_bool_constant_buffers(fn, inputs):
    _check(fn, *inputs)
