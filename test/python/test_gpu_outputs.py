"""A GPU artifact returns what the model returns, as the CPU target does:
twintrack.runtime.load (and twintrack.load) wrap the plan's flat results
in the manifest's calling convention. A Python number comes back as a
number, not a one-tensor tuple; tensors mixed with numbers, None and dicts
keep their places; a complex result is complex, not its real pair.

Without a GPU, the loaded GPU artifact assembles its outputs from the
results a CPU compile of the same module computes (both follow the same
convention, made before the target's stages); with one, from its own
kernels."""

import pytest
import torch

import twintrack
import twintrack.runtime
from function_module import FunctionModule
from twintrack.tooling import find_libdevice, find_tool

pytestmark = pytest.mark.skipif(find_tool("ptxas") is None or find_libdevice() is None,
                                reason="needs ptxas and libdevice (the CUDA toolkit)")


def _window_spectrum(x):
    return torch.stft(x[:, :64].contiguous(), 16, hop_length=4, window=torch.hann_window(16), return_complex=True)


MODELS = {
    "a_float": lambda x: x.sum().item(),
    "a_bool": lambda x: bool((x > 0).any().item()),
    "nested": lambda x: (x + 1, 3, x.shape[0], None, (x * 2).amax().item(),
                         {"flag": bool((x > 5).all().item()), "spectrum": _window_spectrum(x)}),
}


@pytest.mark.parametrize("name", list(MODELS))
def test_gpu_artifact_returns_the_models_structure(name, tmp_path):
    module, x = FunctionModule(MODELS[name]), torch.randn(2, 80)
    twintrack.export(module, (x,)).lower(to=None, target="gpu").save(tmp_path / "gpu")
    loaded = twintrack.runtime.load(tmp_path / "gpu")
    if torch.cuda.is_available():
        x = x.cuda()
    else:
        twintrack.export(module, (x,)).compile("cpu").save(tmp_path / "cpu")
        loaded.executable = twintrack.load(tmp_path / "cpu").executable
    assert_same_structure(loaded(x), module(x))


def assert_same_structure(got, expected, where="output"):
    """The same nesting and types all the way down; tensors of eager's dtype
    and shape and close to its values, numbers equal to eager's."""
    assert type(got) is type(expected), f"{where}: {type(got).__name__}, eager {type(expected).__name__}"
    if isinstance(expected, (tuple, list)):
        assert len(got) == len(expected), f"{where}: {len(got)} items, eager {len(expected)}"
        for i, (g, e) in enumerate(zip(got, expected)):
            assert_same_structure(g, e, f"{where}[{i}]")
    elif isinstance(expected, dict):
        assert got.keys() == expected.keys(), f"{where}: keys {list(got)}, eager {list(expected)}"
        for key in expected:
            assert_same_structure(got[key], expected[key], f"{where}[{key!r}]")
    elif isinstance(expected, torch.Tensor):
        assert got.dtype == expected.dtype and got.shape == expected.shape, f"{where}: {got.dtype}{list(got.shape)}"
        torch.testing.assert_close(got.cpu(), expected.cpu(), rtol=1e-4, atol=1e-4, msg=where)
    elif isinstance(expected, float):
        assert got == pytest.approx(expected, rel=1e-5), where
    else:
        assert got == expected, where
