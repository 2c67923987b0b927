"""Every zoo model compiles on the CPU track and matches float64 eager."""

import json

import pytest

from twintrack.harness import zoo


@pytest.mark.parametrize("name", list(zoo.MODELS))
def test_zoo_model_compiles_and_matches_float64(name, run_tool, tmp_path):
    outdir = tmp_path / name
    compiled = run_tool("compile", f"zoo:{name}", "-o", outdir, "-q")
    assert compiled.returncode == 0, compiled.stderr
    manifest = json.loads((outdir / "manifest.json").read_text())
    assert [s["name"] for s in manifest["stages"]][:4] == ["fx", "torch", "unsigned-literals", "linalg"]
    assert manifest["executable"] and manifest["outputs"]
    checked = run_tool("run", outdir, "--check")
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "check: passed" in checked.stdout
