"""conv-as-matmul (the GPU recipe's `convolutions` stage) checked for
numerics without a GPU: the GPU recipe runs up to that stage, the CPU
recipe's later stages lower the rewritten IR (patches, matmul, the
channels-first epilogue) and the JIT runs it against float64 eager."""

import itertools
import random

import pytest
import torch

import twintrack
from twintrack.compiler import driver
from twintrack.compiler.cpu_jit import CpuExecutable
from twintrack.compiler.recipes import PipelineVariables, load_recipe
from twintrack.harness import numerics


class Conv(torch.nn.Module):
    def __init__(self, conv: torch.nn.Module, then_norm: bool = False):
        super().__init__()
        self.conv = conv
        channels = conv.out_channels
        self.norm = torch.nn.BatchNorm2d(channels).eval() if then_norm else None

    def forward(self, x):
        y = self.conv(x)
        return torch.relu(self.norm(y)) if self.norm is not None else y


CASES = {
    # name: (module, input shape)
    "3x3-padded-bias": (torch.nn.Conv2d(8, 16, 3, padding=1), (2, 8, 10, 12)),
    "1x1-no-bias": (torch.nn.Conv2d(16, 24, 1, bias=False), (2, 16, 7, 7)),
    "strided-ragged": (torch.nn.Conv2d(8, 12, 3, stride=2, padding=1), (3, 8, 9, 11)),
    "dilated-rect": (torch.nn.Conv2d(8, 8, (3, 2), dilation=(2, 3), padding=(2, 1)), (1, 8, 12, 13)),
    "patchify": (torch.nn.Conv2d(4, 32, 4, stride=4), (2, 4, 16, 16)),
    "1d": (torch.nn.Conv1d(8, 16, 5, padding=2, stride=2), (2, 8, 33)),
    "3d": (torch.nn.Conv3d(8, 8, 3, padding=1), (1, 8, 5, 6, 7)),
}


def _cpu_stages_after(stage: str):
    stages = load_recipe("cpu", variables=PipelineVariables()).stages
    names = [s.name for s in stages]
    return stages[names.index(stage) + 1:]


def _rewritten_and_run(module: torch.nn.Module, shape: tuple, dtype: torch.dtype):
    module = module.to(dtype).eval()
    x = torch.randn(shape, dtype=dtype)
    exported = twintrack.export(module, (x,))
    lowered = exported.lower(to="convolutions", target="gpu")
    text = lowered.as_text()
    compiled = lowered.compilation.module
    for stage in _cpu_stages_after("loops"):
        compiled = driver.run_stage(stage, compiled)
    specs = exported.exported
    executable = CpuExecutable(str(compiled), specs.arguments, specs.outputs)
    inputs = numerics.random_inputs(specs.inputs, seed=5)
    outputs = executable(*exported.state(), *inputs)
    checks = numerics.compare(outputs, numerics.float64_reference(module, inputs), specs.outputs)
    return text, checks


@pytest.mark.parametrize("name", CASES)
def test_convolution_as_matmul_matches_float64(name):
    conv, shape = CASES[name]
    torch.manual_seed(0)
    text, checks = _rewritten_and_run(Conv(conv), shape, torch.float32)
    assert "linalg.conv_" not in text and "linalg.matmul" in text
    assert all(c.ok for c in checks), checks


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("stride, dilation", [(1, 1), (2, 1), (1, 2)])
def test_depthwise_convolution_runs_channels_last(dtype, stride, dilation):
    """A depthwise convolution (a 3x3 window per channel) between two 1x1
    convolutions, as MobileNet's block: computed channels-last, so no
    transpose is left but the weights' and the channels-first input's copy
    channels-last, read by the first convolution."""
    torch.manual_seed(0)
    block = torch.nn.Sequential(
        torch.nn.Conv2d(8, 32, 1), torch.nn.ReLU6(),
        torch.nn.Conv2d(32, 32, 3, stride=stride, dilation=dilation, padding=dilation, groups=32), torch.nn.ReLU6(),
        torch.nn.Conv2d(32, 16, 1))
    text, checks = _rewritten_and_run(block, (2, 8, 11, 11), dtype)
    assert "depthwise_conv" not in text and text.count("linalg.transpose") == 3, text
    assert all(c.ok for c in checks), checks


def _random_convolutions(count: int, seed: int) -> list[tuple]:
    """(dims, in, out, kernel, stride, padding, dilation, groups, bias), drawn from a fixed grid."""
    grid = [case for case in itertools.product((1, 2, 3), ((3, 8), (16, 24), (8, 3), (12, 12)), (1, 3), (1, 2),
                                               (0, 1), (1, 2), (1, 4), (True, False))
            if case[1][0] % case[6] == 0 and case[1][1] % case[6] == 0]
    return random.Random(seed).sample(grid, count)


@pytest.mark.parametrize("number, case", list(enumerate(_random_convolutions(16, seed=1))), ids=str)
def test_random_convolutions_match_float64(number, case):
    """Convolutions drawn from a grid of dims, channels (3 and 8-multiples),
    windows, strides, paddings, dilations, groups and bias, alternately f32
    and f16, each followed by a ReLU."""
    dims, (in_channels, out_channels), kernel, stride, padding, dilation, groups, bias = case
    conv = {1: torch.nn.Conv1d, 2: torch.nn.Conv2d, 3: torch.nn.Conv3d}[dims](
        in_channels, out_channels, kernel, stride=stride, padding=padding, dilation=dilation, groups=groups, bias=bias)
    dtype = torch.float16 if number % 2 else torch.float32
    torch.manual_seed(0)
    _, checks = _rewritten_and_run(torch.nn.Sequential(conv, torch.nn.ReLU()), (2, in_channels, *[9] * dims), dtype)
    assert all(c.ok for c in checks), checks


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("channels, groups, stride", [(16, 4, 1), (64, 4, 2), (12, 2, 1)])
def test_grouped_convolution_is_a_batched_matmul(dtype, channels, groups, stride):
    """A grouped 3x3 convolution: a batch per group (6 channels a group get
    zero channels up to whole 16-byte rows)."""
    torch.manual_seed(0)
    conv = torch.nn.Conv2d(channels, 2 * channels, 3, stride=stride, padding=1, groups=groups)
    text, checks = _rewritten_and_run(Conv(conv), (2, channels, 9, 9), dtype)
    assert "linalg.conv_" not in text and "linalg.batch_matmul" in text
    assert all(c.ok for c in checks), checks


@pytest.mark.parametrize("conv", [torch.nn.Conv2d(128, 128, 3, padding=1, groups=32),  # 4 filters a group
                                  torch.nn.Conv2d(64, 3, 1)])  # 3 filters: a segmentation head
def test_a_convolution_no_matmul_kernel_takes_stays_one(conv):
    """Too few filters for any kernel's tile: the patches would only add a
    copy, and the generic loops read the input in place."""
    module = conv.half().eval()
    exported = twintrack.export(module, (torch.randn(2, conv.in_channels, 8, 8, dtype=torch.float16),))
    text = exported.lower(to="convolutions", target="gpu").as_text()
    assert "linalg.conv_2d" in text and "matmul" not in text


def test_half_convolution_with_batch_norm_matches_float64():
    torch.manual_seed(0)
    module = Conv(torch.nn.Conv2d(8, 16, 3, padding=1), then_norm=True)
    with torch.no_grad():
        module.norm.running_mean.uniform_(-1, 1)
        module.norm.running_var.uniform_(0.5, 2)
    text, checks = _rewritten_and_run(module, (2, 8, 9, 9), torch.float16)
    assert "linalg.conv_" not in text
    assert all(c.ok for c in checks), checks


@pytest.mark.parametrize("dtype, patches", [(torch.float16, "2x10x10x7x7x8xf16"), (torch.float32, "2x10x10x7x7x4xf32")])
def test_an_image_stem_gets_zero_channels(dtype, patches):
    """3 channels by a 7x7 window: 147 elements a row, no whole 16-byte
    vectors; zero channels (8 for halves, 4 for floats) make them so."""
    torch.manual_seed(0)
    stem = torch.nn.Conv2d(3, 16, 7, stride=2, padding=3, bias=False)
    text, checks = _rewritten_and_run(Conv(stem), (2, 3, 20, 20), dtype)
    assert "linalg.conv_" not in text and f"tensor<{patches}>" in text
    assert all(c.ok for c in checks), checks


class Bottleneck(torch.nn.Module):
    """ResNet's block: 1x1, 3x3 (strided), 1x1 convolutions with batch norm
    and ReLU, a projection on the shortcut, the residual add; then a
    max pool (a named op: read channels-first) and a mean."""

    def __init__(self, channels: int = 16, width: int = 8, stride: int = 2):
        super().__init__()
        def norm(c):
            bn = torch.nn.BatchNorm2d(c).eval()
            with torch.no_grad():
                bn.running_mean.uniform_(-1, 1)
                bn.running_var.uniform_(0.5, 2)
            return bn
        self.reduce = torch.nn.Sequential(torch.nn.Conv2d(channels, width, 1, bias=False), norm(width), torch.nn.ReLU())
        self.spatial = torch.nn.Sequential(torch.nn.Conv2d(width, width, 3, stride=stride, padding=1, bias=False),
                                           norm(width), torch.nn.ReLU())
        self.expand = torch.nn.Sequential(torch.nn.Conv2d(width, 4 * width, 1, bias=False), norm(4 * width))
        self.shortcut = torch.nn.Sequential(torch.nn.Conv2d(channels, 4 * width, 1, stride=stride, bias=False),
                                            norm(4 * width))
        self.pool = torch.nn.MaxPool2d(2)

    def forward(self, x):
        y = torch.relu(self.expand(self.spatial(self.reduce(x))) + self.shortcut(x))
        return self.pool(y), y.mean((2, 3))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_a_bottleneck_runs_channels_last_and_matches_float64(dtype):
    """Between its convolutions the block's activations stay channels-last:
    the transposes left are the input's one copy channels-last (read by the
    first convolutions) and the one before the max pool, a named op."""
    torch.manual_seed(0)
    text, checks = _rewritten_and_run(Bottleneck(), (2, 16, 12, 12), dtype)
    # And each of the 4 weights is read transposed, the 3x3 one's channels moved innermost first.
    assert text.count("linalg.transpose") == 6, text
    assert "tensor<2x6x6x32x" in text  # the residual add, channels-last
    assert all(c.ok for c in checks), checks


@pytest.mark.parametrize("factory", ["resnet", pytest.param("mobilenet_v2", marks=pytest.mark.slow)])
def test_hugging_face_vision_models_match_float64(factory):
    """ResNet (bottlenecks, a 7x7 stem on 3 channels, max pool) and
    MobileNetV2 (depthwise convolutions; ReLU6), default configs at 64x64:
    the convolutions a kernel takes as matmuls (the last stages' 2x2
    images give 8 rows: none does), channels-last between them."""
    pytest.importorskip("transformers")
    from twintrack.harness import at_scale
    module, (pixels,) = getattr(at_scale, factory)(batch=2, image=64, **({"depth": 1} if factory == "resnet" else {}))
    text, checks = _rewritten_and_run(module, tuple(pixels.shape), torch.float32)
    assert text.count("linalg.matmul") > text.count("linalg.conv_2d_nchw_fchw")
    assert all(c.ok for c in checks), checks


def test_the_stage_is_the_gpu_recipes_only():
    cpu = [s.name for s in load_recipe("cpu", variables=PipelineVariables()).stages]
    gpu = [s.name for s in load_recipe("gpu", variables=PipelineVariables(target="gpu")).stages]
    assert "convolutions" in gpu and "convolutions" not in cpu
