"""Tensors stored in another order than their shape's (channels-last images
and convolution weights, transposed matrices): the compiled function takes
and returns them as stored (frontend/fx_passes/storage_order.py), the
calling convention passes the caller's tensors as views, and results come
back with eager's strides."""

import copy
import json

import pytest
import torch
from torch import nn

import twintrack
from twintrack.calling import CallingConvention
from twintrack.frontend.fx_passes.storage_order import shape_in_module_order, storage_order
from twintrack.harness import at_scale

AT_SCALE = "python/twintrack/harness/at_scale.py"
CHANNELS_LAST = (0, 2, 3, 1)


@pytest.mark.parametrize("tensor, order", [
    (torch.empty(2, 3, 4, 5).to(memory_format=torch.channels_last), CHANNELS_LAST),
    (torch.empty(2, 3, 4, 5, 6).to(memory_format=torch.channels_last_3d), (0, 2, 3, 4, 1)),
    (torch.empty(4, 6).t(), (1, 0)),
    (torch.empty(2, 3, 4).permute(2, 0, 1), (1, 2, 0)),
    (torch.empty(2, 3, 4, 5), None),                                      # contiguous
    (torch.empty(2, 3, 1, 1).to(memory_format=torch.channels_last), None),  # contiguous as well
    (torch.empty(4, 6)[:, :3], None),                                     # a slice: not dense
    (torch.empty(4, 1).expand(4, 6), None),                               # a broadcast
    (torch.empty(5), None),
])
def test_storage_order_of_a_dense_tensor(tensor, order):
    assert storage_order(tensor) == order
    if order is not None:
        assert tensor.permute(order).is_contiguous()
        assert shape_in_module_order(tensor.permute(order).shape, order) == tuple(tensor.shape)


def _float64_reference(model: nn.Module, inputs: tuple):
    return copy.deepcopy(model).double()(*(x.double() for x in inputs))


def test_a_channels_last_convolution_takes_and_returns_its_storage_on_the_cpu():
    model, (x,) = at_scale.conv3x3(batch=2, channels=8, filters=16, size=6, channels_last=1)
    compiled = twintrack.compile(model, (x,))
    model_side = compiled.exported.exported
    assert model_side.calling.storage_orders == {0: CHANNELS_LAST, 2: CHANNELS_LAST}  # the weight and the image
    assert [spec.shape for spec in model_side.arguments] == [(16, 8, 3, 3), (16,), (2, 8, 6, 6)]
    assert [spec.stored().shape for spec in model_side.arguments] == [(16, 3, 3, 8), (16,), (2, 6, 6, 8)]
    expected = _float64_reference(model, (x,))
    for given in (x, x.contiguous()):  # the layout compiled for, and one the call must copy
        got = compiled(given)
        assert got.stride() == model(x).stride() == (576, 1, 96, 16)  # eager's channels-last strides
        torch.testing.assert_close(got.double(), expected, rtol=1e-4, atol=1e-4)


class _TransposedInputs(nn.Module):
    def forward(self, a, b):
        return a @ b + 1, b


def test_transposed_matrices_are_taken_as_stored_and_an_input_returned_is_the_callers():
    a, b = torch.randn(6, 4).t(), torch.randn(3, 6).t()
    compiled = twintrack.compile(_TransposedInputs(), (a, b))
    assert compiled.exported.exported.calling.storage_orders == {0: (1, 0), 1: (1, 0)}
    product, returned = compiled(a, b)
    assert returned is b  # the caller's own tensor, not a permuted copy
    torch.testing.assert_close(product.double(), a.double() @ b.double() + 1)


class _UpdatesInPlace(nn.Module):
    def forward(self, x):
        x.mul_(2)
        return torch.relu(x) + 1


def test_an_input_updated_in_place_is_updated_in_its_own_layout():
    x = torch.randn(2, 3, 4, 5).to(memory_format=torch.channels_last)
    compiled = twintrack.compile(_UpdatesInPlace(), (x.clone(),))
    mine, theirs = x.clone(), x.clone()
    got, want = compiled(mine), _UpdatesInPlace()(theirs)
    torch.testing.assert_close(mine, theirs)
    assert mine.is_contiguous(memory_format=torch.channels_last)
    torch.testing.assert_close(got, want)
    assert got.stride() == want.stride()


class _UpperFactors(nn.Module):
    """Cholesky's error check is an effect token among the outputs; its upper
    factor is the transposed lower one, returned stored permuted."""
    def forward(self, a):
        return torch.linalg.cholesky(a, upper=True), torch.linalg.inv(a).mT * 2


def test_a_result_stored_permuted_after_an_effect_token_keeps_its_order():
    x = torch.randn(5, 5, dtype=torch.float64)
    a = (x @ x.mT + 5 * torch.eye(5, dtype=torch.float64)).float()
    compiled = twintrack.compile(_UpperFactors(), (a,))
    assert set(compiled.exported.exported.calling.result_storage_orders().values()) == {(1, 0)}
    got, want = compiled(a), _UpperFactors()(a)
    for mine, theirs in zip(got, want):
        torch.testing.assert_close(mine, theirs, rtol=1e-4, atol=1e-5)
    assert got[0].stride() == want[0].stride()  # the factor as eager stores it (column-major, as LAPACK)


def test_convention_with_storage_orders_survives_json_and_refuses_a_bad_one():
    model, (x,) = at_scale.conv3x3(batch=1, channels=4, filters=4, size=4, channels_last=1)
    calling = twintrack.compile(model, (x,)).exported.exported.calling
    data = json.loads(json.dumps(calling.to_json()))
    again = CallingConvention.from_json(data, "m")
    assert again.storage_orders == calling.storage_orders and again.leaves == calling.leaves
    data["storage_orders"][0][1] = [0, 2, 2, 1]
    with pytest.raises(twintrack.errors.ArtifactError, match="storage order"):
        CallingConvention.from_json(data, "m").check_against(1, 3, "m")


@pytest.mark.parametrize("channels_last, kernels", [(0, ["transpose", "generic", "wgmma-matmul"]),
                                                    (1, ["wgmma-matmul"])])
def test_a_channels_last_convolution_is_one_gpu_kernel(artifact, channels_last, kernels):
    """The image's and the weight's transposes to channels-last cancel with
    the permutes of their storage: one implicit-GEMM kernel reads both in
    place and writes the output as eager stores it."""
    model = f"{AT_SCALE}:conv3x3?batch=4&channels=64&filters=64&size=16&channels_last={channels_last}"
    outdir = artifact(model, "--pipeline", "gpu", "--dtype", "float16")
    manifest = json.loads((outdir / "manifest.json").read_text())
    assert [k["path"].split(" ")[0] for k in manifest["kernels"]] == kernels
    image = manifest["inputs"][0]
    assert image["shape"] == [4, 64, 16, 16] and image.get("storage_order") == ([0, 2, 3, 1] if channels_last else None)
    plan = json.loads((outdir / "plan.json").read_text())
    assert plan["arguments"][2]["shape"] == ([4, 16, 16, 64] if channels_last else [4, 64, 16, 16])


def test_a_saved_channels_last_artifact_runs_on_its_inputs_alone(tmp_path):
    model, (x,) = at_scale.conv3x3(batch=2, channels=8, filters=8, size=5, channels_last=1)
    compiled = twintrack.compile(model, (x,))
    compiled.save(tmp_path / "artifact")
    loaded = twintrack.load(tmp_path / "artifact")
    for _ in range(2):  # the state's views are made at the first call and kept
        got = loaded(x)
        assert got.stride() == model(x).stride()
        torch.testing.assert_close(got.double(), _float64_reference(model, (x,)), rtol=1e-4, atol=1e-4)


def test_a_mismatched_input_is_named_with_the_order_its_shapes_are_shown_in():
    model, (x,) = at_scale.conv3x3(batch=2, channels=8, filters=8, size=6, channels_last=1)
    compiled = twintrack.compile(model, (x,))
    with pytest.raises(twintrack.errors.InputMismatchError,
                       match=r"input0, its dims stored in order \[0, 2, 3, 1\] \(input\): expected float32\[2, 6, 6, 8\], "
                             r"got float32\[2, 7, 7, 8\]"):
        compiled(torch.randn(2, 8, 7, 7))
