"""The CPU row kernel (cpu-kernels stage: softmax, layer norm and other
row-wise dispatches), against float64 eager on
fresh random inputs: rows shorter than a vector, rows ending in a partial
vector, several row dims, threads, NaN and infinite elements; and the sites
it does not take (a bool it writes) still compute the right values on the
loops; a bool mask it reads as bytes."""

import pytest
import torch
from conftest import compile_on_threads

from twintrack.compiler import driver
from twintrack.compiler.kernels.cpu_row import CpuRowWriter


class Softmax(torch.nn.Module):
    def __init__(self, dim: int = -1):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        return torch.softmax(x, self.dim)


class LogSoftmaxScaled(torch.nn.Module):
    def forward(self, x):
        return torch.log_softmax(x * 0.5, -1) + 1.0


class RmsNorm(torch.nn.Module):
    def __init__(self, width: int):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(width))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * self.weight


class MaskedSoftmax(torch.nn.Module):
    def forward(self, x, mask):
        return torch.softmax(x.masked_fill(mask, float("-inf")), -1)


def _check(model: torch.nn.Module, inputs: tuple, threads: int = 1, row_kernel: bool = True,
           tolerance: float = 2e-6) -> str:
    compiled, kernel_ir = compile_on_threads(model, inputs, threads)
    fresh = tuple(torch.randn_like(x) * 4 if x.is_floating_point() else x for x in inputs)
    expected = model.double()(*(x.double() if x.is_floating_point() else x for x in fresh))
    model.float()
    got = compiled(*fresh)
    assert got.dtype == torch.float32
    torch.testing.assert_close(got.double(), expected, rtol=tolerance, atol=tolerance, equal_nan=True)
    assert ("cpu-row lanes=" in kernel_ir) == row_kernel, kernel_ir
    return kernel_ir


@pytest.mark.parametrize("shape", [(3, 5), (7, 16), (9, 37), (4, 3, 100), (2, 1024)],
                         ids=["shorter than a vector", "one vector", "a partial last vector", "two row dims",
                              "long rows"])
def test_softmax_rows(shape):
    _check(Softmax(), (torch.randn(*shape),))


@pytest.mark.parametrize("model,width", [(LogSoftmaxScaled(), 40), (RmsNorm(48), 48)],
                         ids=["log_softmax", "rms_norm"])
def test_other_row_programs(model, width):
    _check(model, (torch.randn(6, width),))


def test_layer_norm_with_weight_and_bias():
    model = torch.nn.LayerNorm(70)
    with torch.no_grad():
        model.weight.normal_()
        model.bias.normal_()
    _check(model, (torch.randn(5, 70),))


def test_threads_split_the_rows():
    """Enough elements for the host's parallel-min-elements: runs of rows on two threads."""
    kernel_ir = _check(Softmax(), (torch.randn(600, 512),), threads=2)
    assert "scf.parallel" in kernel_ir and "threads=2" in kernel_ir


def test_nan_and_infinity_propagate_as_eager():
    compiled, _ = compile_on_threads(Softmax(), (torch.randn(4, 20),))
    x = torch.randn(4, 20)
    x[0, 3] = float("nan")
    x[1, 17] = float("inf")
    x[2, :] = float("-inf")
    x[3, 5] = 1e30
    torch.testing.assert_close(compiled(x), torch.softmax(x, -1), equal_nan=True)


class LayerNorm(torch.nn.Module):
    def __init__(self, width: int):
        super().__init__()
        self.norm = torch.nn.LayerNorm(width)

    def forward(self, x):
        return self.norm(x)


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("model, spec, width", [
    (Softmax(), "x:0=rows[1,128],x:1=cols[1,4096]", None),
    (LogSoftmaxScaled(), "x:0=rows[1,128],x:1=cols[1,4096]", None),
    (RmsNorm(40), "x:0=rows[1,8192]", 40),
    (LayerNorm(40), "x:0=rows[1,8192]", 40),
], ids=["softmax", "log-softmax", "rms-norm", "layer-norm"])
def test_rows_known_at_run_time(model, spec, width, threads):
    example = torch.randn(4, width or 24)
    compiled, kernel_ir = compile_on_threads(model, (example,), threads, dynamic=spec)
    assert "cpu-row lanes=" in kernel_ir and "known at run time" in kernel_ir
    assert ("scf.parallel" in kernel_ir) == (threads > 1), "threads decided per call"
    shapes = [(1, 1), (3, 5), (9, 37), (64, 4096)] if width is None else [(1, 40), (7, 40), (8192, 40)]
    for shape in shapes:  # the last has elements enough for threads
        x = torch.randn(shape) * 4
        expected = model.double()(x.double())
        model.float()
        torch.testing.assert_close(compiled(x).double(), expected, rtol=2e-6, atol=2e-6)


@pytest.mark.parametrize("dynamic", [None, "x:0=rows[1,64],x:1=cols[1,256],mask:0=rows[1,64],mask:1=cols[1,256]"],
                         ids=["static", "dynamic"])
def test_a_bool_mask_is_read_as_bytes(dynamic):
    """The row kernel reads a bool mask (an attention mask) in vectors: its
    loads become byte loads truncated to bools once widen-bools makes the
    buffer bytes, the last partial vector masked as any."""
    x, mask = torch.randn(6, 24), torch.rand(6, 24) > 0.7
    mask[:, 0] = False
    compiled, kernel_ir = compile_on_threads(MaskedSoftmax(), (x, mask), dynamic=dynamic)
    assert "cpu-row lanes=" in kernel_ir and "vector.maskedload" in kernel_ir
    for shape in [(6, 24)] + ([(1, 1), (9, 37), (64, 256)] if dynamic else []):
        x, mask = torch.randn(shape) * 4, torch.rand(shape) > 0.7
        mask[:, 0] = False
        torch.testing.assert_close(compiled(x, mask), MaskedSoftmax()(x, mask))


class RowMaxima(torch.nn.Module):
    def forward(self, x):
        return x >= x.amax(-1, keepdim=True)


def test_a_bool_the_rows_write_stays_on_the_loops():
    x = torch.randn(6, 24)
    compiled, kernel_ir = compile_on_threads(RowMaxima(), (x,))
    assert "cpu-row lanes=" not in kernel_ir
    torch.testing.assert_close(compiled(x), RowMaxima()(x))


def _broken_body(writer: CpuRowWriter, w) -> None:
    w.store(w.index(0), writer.p.buffers[0], [])  # an index stored into f32 memory: invalid


def test_a_kernel_that_fails_to_build_leaves_the_rows_to_the_loops(monkeypatch):
    monkeypatch.setattr(CpuRowWriter, "_body", _broken_body)
    monkeypatch.setenv("TWINTRACK_STRICT_KERNELS", "0")  # the tests' default is strict
    with pytest.warns(driver.KernelFallbackWarning, match="cpu_row_0"):
        _check(Softmax(), (torch.randn(5, 40),), row_kernel=False)
