"""Frontend inputs and the staged Python API."""

import json

import torch

import twintrack
from twintrack import zoo
from twintrack.numerics import relative_error


def test_parameters_are_arguments_unless_frozen(run_tool, tmp_path):
    assert run_tool("compile", "zoo:mlp", "-o", tmp_path / "a", "-q").returncode == 0
    assert run_tool("compile", "zoo:mlp", "-o", tmp_path / "f", "-q", "--freeze").returncode == 0
    free = json.loads((tmp_path / "a" / "manifest.json").read_text())
    frozen = json.loads((tmp_path / "f" / "manifest.json").read_text())
    assert [a["kind"] for a in free["arguments"]].count("parameter") == 6
    assert [a["kind"] for a in frozen["arguments"]] == ["input"]
    assert run_tool("run", tmp_path / "f", "--check").returncode == 0


def test_torch_export_file(run_tool, tmp_path):
    module, inputs = zoo.build("layernorm")
    torch.export.save(torch.export.export(module, inputs), tmp_path / "model.pt")
    assert run_tool("compile", tmp_path / "model.pt", "-o", tmp_path / "o", "-q").returncode == 0
    result = run_tool("run", tmp_path / "o", "--check")
    assert result.returncode == 0, result.stdout + result.stderr


def test_python_factory(run_tool, tmp_path):
    (tmp_path / "m.py").write_text(
        "import torch\n"
        "def make():\n"
        "    torch.manual_seed(0)\n"
        "    return torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.GELU()), (torch.randn(3, 8),)\n")
    assert run_tool("compile", f"{tmp_path / 'm.py'}:make", "-o", tmp_path / "o", "-q").returncode == 0
    assert run_tool("run", tmp_path / "o", "--check").returncode == 0


def test_staged_api_and_state_dict_swap():
    module, (x,) = zoo.build("mlp")
    exported = twintrack.export(module, (x,))
    assert "aten.addmm" in exported.as_text()
    lowered = exported.lower(to="affine")
    assert lowered.stage == "affine" and "affine.for" in lowered.as_text()
    compiled = lowered.compile("cpu")
    fresh = torch.randn_like(x)
    assert relative_error(compiled(fresh), module.double()(fresh.double())) < 1e-5
    module.float()


def test_compile_returns_a_callable():
    module, (x, y) = zoo.build("elementwise")
    compiled = twintrack.compile(module, (x, y))
    with torch.no_grad():
        reference = module.double()(x.double(), y.double())
    assert relative_error(compiled(x, y), reference) < 1e-5
