"""Depthwise convolutions, pooling windows and convolutions summing few
products an output (an image's 3x3 stem) on the GPU track become window
kernels (one launch with their batch norm and activation, vector loads
along the channels) wherever their channels split into lanes; elsewhere
the generic path (or a matmul) keeps them. The numerics run on the GPU (tools/gpu_check.py: the
depthwise entries of bench/gpu_models_at_scale.txt, MobileNetV2,
EfficientNet's and ConvNeXt's blocks); here, the IR each stage leaves and
the kernel report of a full compile."""

import json
import re

import pytest
import torch
from torch import nn

from twintrack.compiler import driver
from twintrack.compiler.options import CompileOptions
from twintrack.frontend import export as frontend
from twintrack.harness import at_scale
from twintrack.tooling import find_libdevice, find_tool

AT_SCALE = "python/twintrack/harness/at_scale.py"


def _row_kernels_stage(model: nn.Module, inputs: tuple, dtype: torch.dtype) -> str:
    model, inputs = model.to(dtype), tuple(x.to(dtype) for x in inputs)
    exported = frontend.export_model(frontend.ModelSource("depthwise", model, inputs))
    return driver.compile_exported(exported, CompileOptions(pipeline="gpu", stop_after="row-kernels")).text()


def _block(channels: int, size: int, kernel: int = 3, stride: int = 1, dilation: int = 1, act: int = 0):
    model, _ = at_scale.depthwise(batch=2, channels=channels, size=size, stride=stride, kernel=kernel, act=act)
    window = model[1]
    window.dilation, window.padding = (dilation, dilation), (dilation * (kernel // 2),) * 2
    return model, (torch.randn(2, channels, size, size),)


@pytest.mark.parametrize("dtype, channels, kernel, stride, dilation, act, lanes", [
    (torch.float16, 32, 3, 1, 1, 0, 8),    # MobileNet: ReLU6
    (torch.bfloat16, 40, 5, 2, 1, 1, 8),   # EfficientNet: 5x5, SiLU, stride 2
    (torch.float32, 16, 7, 1, 1, 2, 8),    # ConvNeXt: 7x7, a bias, no activation; the window loops
    (torch.float16, 36, 3, 1, 2, 0, 4),    # dilated; 36 channels split into lanes of 4
    (torch.float16, 30, 3, 2, 1, 0, 2),
], ids=["mobilenet", "efficientnet", "convnext", "dilated", "pairs"])
def test_depthwise_stage_is_one_window_kernel(dtype, channels, kernel, stride, dilation, act, lanes):
    text = _row_kernels_stage(*_block(channels, 9, kernel, stride, dilation, act), dtype)
    launches = re.findall(r'gpu.launch_func  @(forward_\w+)::', text)
    windows = [name for name in launches if name.startswith("forward_window_kernel")]
    assert len(windows) == 1, launches
    assert re.search(rf'twintrack.kernel_path = "window {kernel}x{kernel} taps, {lanes} lanes( x 2)?"', text), text
    # The batch norm and activation went into it: no linalg op of that stage is left but the pointwise
    # convolutions' operand copies; its loads of the input and the weight are vectors along the channels.
    assert "reduction\"]" not in text
    assert re.search(rf"vector\.load .*vector<{lanes}x", text), text


class _Pooled(nn.Module):
    """A pooling window between two pointwise convolutions (so it reads and writes channels-last)."""

    def __init__(self, pool: nn.Module, channels: int = 32):
        super().__init__()
        self.a, self.pool, self.b = nn.Conv2d(channels, channels, 1), pool, nn.Conv2d(channels, channels, 1)

    def forward(self, x):
        return self.b(self.pool(torch.relu(self.a(x))))


@pytest.mark.parametrize("pool, taps", [
    (nn.MaxPool2d(3, 2, 1), "3x3"),                   # ResNet's: -inf padding read in place
    (nn.MaxPool2d(3, 2, 0, ceil_mode=True), "3x3"),   # a ragged last window
    (nn.AvgPool2d(2), "2x2"),                         # no padding: the window read through its map
    (nn.AvgPool2d(3, 1, 1, count_include_pad=False), "3x3"),  # the division by each window's count, its epilogue
], ids=["max", "max-ceil", "avg", "avg-count"])
def test_pooling_window_is_one_window_kernel(pool, taps):
    text = _row_kernels_stage(_Pooled(pool).eval(), (torch.randn(2, 32, 15, 15),), torch.float16)
    windows = [name for name in re.findall(r'gpu.launch_func  @(forward_\w+)::', text) if "window" in name]
    assert len(windows) == 1 and re.search(f'"window {taps} taps, 8 lanes( x 2)?"', text), text
    assert "linalg.pooling" not in text


class _Direct(nn.Module):
    """A convolution with few products an output, its batch norm and ReLU6 (MobileNet's stem)."""

    def __init__(self, channels: int, filters: int, kernel: int, stride: int, bias: bool):
        super().__init__()
        padding = kernel // 2 if stride < kernel else 0
        self.conv = nn.Conv2d(channels, filters, kernel, stride, padding, bias=bias)
        self.norm = nn.BatchNorm2d(filters)
        with torch.no_grad():
            self.norm.running_mean.uniform_(-1, 1)
            self.norm.running_var.uniform_(0.5, 2)

    def forward(self, x):
        return nn.functional.relu6(self.norm(self.conv(x)))


DIRECT_CASES = {  # channels, filters, kernel, stride, bias, the window's extents (kh, kw, channels)
    "stem": (3, 32, 3, 2, False, "3x3x3"),     # an image's 3x3 stem: 27 products, the input read through its padding
    "2x2-padded": (3, 16, 2, 1, True, "2x2x3"),  # a bias, stride 1, a 2x2 window over its padding
    "patchify": (2, 16, 4, 4, True, "4x4x2"),  # no padding, stride 4, a bias
}


@pytest.mark.parametrize("case", DIRECT_CASES, ids=list(DIRECT_CASES))
def test_convolution_with_few_products_is_one_window_kernel(case):
    """No patches and no matmul: the window kernel reads the input in place,
    the weight staged, with the batch norm and ReLU6 as its epilogue."""
    channels, filters, kernel, stride, bias, taps = DIRECT_CASES[case]
    model = _Direct(channels, filters, kernel, stride, bias).eval()
    text = _row_kernels_stage(model, (torch.randn(2, channels, 16, 16),), torch.float16)
    launches = re.findall(r'gpu.launch_func  @(forward_\w+)::', text)
    assert launches == ["forward_window_kernel_0"], launches
    assert re.search(rf'twintrack.kernel_path = "window {taps} taps, 8 lanes( x 2)?"', text), text
    assert "reduction\"]" not in text and "tensor.pad" not in text and "gpu.barrier" in text


@pytest.mark.parametrize("channels, kernel", [(3, 7), (16, 1)], ids=["resnet-stem", "pointwise"])
def test_convolution_the_tensor_cores_take_stays_a_matmul(channels, kernel):
    """3 channels by a 7x7 window (ResNet's stem) sum 147 products an
    output; a 1x1 window reads its input with no patches copied."""
    model = _Direct(channels, 32, kernel, 2, False).eval()
    text = _row_kernels_stage(model, (torch.randn(2, channels, 16, 16),), torch.float16)
    assert "forward_window_kernel" not in text and re.search(r"@forward_\w*matmul", text), text


def test_channels_that_split_into_no_lanes_stay_generic():
    text = _row_kernels_stage(*_block(15, 9), torch.float16)
    assert "forward_window_kernel" not in text
    assert re.search(r'iterator_types = \["parallel", "parallel", "parallel", "parallel", "reduction", "reduction"\]',
                     text), text


@pytest.mark.skipif(find_tool("ptxas") is None or find_libdevice() is None, reason="needs ptxas and libdevice")
def test_mobilenet_block_report_names_its_window_kernel(run_tool, tmp_path):
    outdir = tmp_path / "block"
    result = run_tool("compile", f"{AT_SCALE}:depthwise?batch=2&channels=32&size=14", "--pipeline", "gpu",
                      "--dtype", "float16", "-o", outdir, "-q")
    assert result.returncode == 0, result.stderr
    kernels = json.loads((outdir / "manifest.json").read_text())["kernels"]
    window = [k for k in kernels if k["path"].startswith("window")]
    assert len(window) == 1 and window[0]["spills"] == 0, kernels
    # the convolution, the batch norm and the clamp of ReLU6, all in one kernel
    sources = " ".join(window[0]["source_ops"])
    assert "convolution" in sources and "batch_norm" in sources and "hardtanh" in sources, sources


# ---------------------------------------------------------------- numerics on the CPU
# The window and transpose kernels need no tensor cores and exchange nothing
# between threads: their blocks and threads run as loops on the CPU
# (gpu_emulation.emulated_kernels), against float64. The recipe drops the
# matmul and attention generators (the pointwise convolutions run as generic
# loops).

@pytest.fixture(scope="module")
def kernels_recipe(tmp_path_factory):
    import shutil
    from twintrack.compiler.target import DEFAULT_LOWERING_DIR
    recipe = tmp_path_factory.mktemp("lowering") / "lowering"
    shutil.copytree(DEFAULT_LOWERING_DIR, recipe)
    gpu = (recipe / "gpu.toml").read_text()
    for generator in ("gpu-matmul-kernels", "gpu-attention-kernels"):
        gpu = re.sub(rf'"{generator}{{[^}}]*}}", ', "", gpu)
    assert "gpu-matmul-kernels{" not in gpu and "gpu-transpose-kernels{" in gpu
    (recipe / "gpu.toml").write_text(gpu)
    return recipe


def _emulated_errors(model: nn.Module, inputs: tuple, dtype: torch.dtype, recipe) -> tuple[list, str]:
    from twintrack.harness import numerics
    from twintrack.harness.gpu_emulation import emulated_kernels
    model, inputs = model.to(dtype), tuple(x.to(dtype) for x in inputs)
    exported = frontend.export_model(frontend.ModelSource("kernels", model, inputs))
    executable, compilation = emulated_kernels(exported, recipe)
    fresh = numerics.random_inputs(exported.inputs, seed=5)
    outputs = executable(*frontend.model_state(model).values(), *fresh)
    return numerics.compare(outputs, numerics.float64_reference(model, fresh), exported.outputs), compilation.text()


@pytest.mark.parametrize("dtype, channels, kernel, stride, act", [
    (torch.float16, 32, 3, 1, 0),   # two output columns a thread, the weight staged through shared memory
    (torch.float16, 40, 5, 2, 1),
    (torch.float32, 16, 7, 1, 2),   # 49 taps: the window loops
    (torch.float16, 36, 3, 1, 0),   # lanes of 4
], ids=["3x3", "5x5-s2-silu", "7x7-f32", "lanes-4"])
def test_depthwise_window_kernels_match_float64(kernels_recipe, dtype, channels, kernel, stride, act):
    checks, text = _emulated_errors(*_block(channels, 10, kernel, stride, 1, act), dtype, kernels_recipe)
    assert "forward_window_kernel_0" in text and all(c.ok for c in checks), checks


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32])
@pytest.mark.parametrize("case", DIRECT_CASES, ids=list(DIRECT_CASES))
def test_direct_convolution_window_kernels_match_float64(kernels_recipe, case, dtype):
    channels, filters, kernel, stride, bias, _ = DIRECT_CASES[case]
    model = _Direct(channels, filters, kernel, stride, bias).eval()
    checks, text = _emulated_errors(model, (torch.randn(2, channels, 11, 11),), dtype, kernels_recipe)
    assert "forward_window_kernel_0" in text and all(c.ok for c in checks), checks


@pytest.mark.parametrize("pool, size", [(nn.MaxPool2d(3, 2, 1), 13), (nn.MaxPool2d(3, 2, 0, ceil_mode=True), 13),
                                        (nn.AvgPool2d(3, 1, 1, count_include_pad=False), 13),
                                        (nn.AdaptiveAvgPool2d(1), 7)],  # a classifier's global pool: a mean of 49
                         ids=["max", "max-ceil", "avg", "global-avg"])
def test_pooling_window_kernels_match_float64(kernels_recipe, pool, size):
    checks, text = _emulated_errors(_Pooled(pool).eval(), (torch.randn(2, 32, size, size),), torch.float16,
                                    kernels_recipe)
    assert "forward_window_kernel_0" in text and all(c.ok for c in checks), checks


class _Permuted(nn.Module):
    def __init__(self, dims):
        super().__init__()
        self.dims = dims

    def forward(self, x):
        return x.permute(*self.dims).contiguous()


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32])
@pytest.mark.parametrize("dims, shape", [((0, 2, 1), (2, 72, 200)), ((0, 2, 3, 1), (2, 16, 12, 10)), ((1, 0), (24, 40))],
                         ids=["batched", "nchw-to-nhwc", "matrix"])
def test_transpose_kernels_match_eager(kernels_recipe, dims, shape, dtype):
    """Ragged tiles (72 x 200: no 64 divides either) included; a copy, so exact."""
    checks, text = _emulated_errors(_Permuted(dims), (torch.randn(*shape),), dtype, kernels_recipe)
    assert "forward_transpose_0" in text and all(c.rel_error == 0.0 for c in checks), checks
