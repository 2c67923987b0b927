"""The staged driver: stop-after, dumps, IR after all, reproducers."""

import json
import shlex
import subprocess

import pytest

from twintrack.compiler.recipes import load_recipe


def test_stop_after_prints_that_stage(run_tool, tmp_path):
    result = run_tool("compile", "zoo:gemm", "-o", tmp_path / "g", "--stop-after", "linalg", "-q")
    assert result.returncode == 0, result.stderr
    assert "linalg.matmul" in result.stdout and "torch.aten" not in result.stdout
    manifest = json.loads((tmp_path / "g" / "manifest.json").read_text())
    assert [s["name"] for s in manifest["stages"]] == ["fx", "torch", "unsigned-literals", "linalg"]
    assert manifest["executable"] is None


def test_every_stage_is_dumped_and_listed(run_tool, tmp_path):
    result = run_tool("compile", "zoo:elementwise", "-o", tmp_path / "s", "-q", "--time-stages")
    assert result.returncode == 0, result.stderr
    manifest = json.loads((tmp_path / "s" / "manifest.json").read_text())
    names = [s["name"] for s in manifest["stages"]]
    assert names == load_recipe("cpu").stage_names()
    for stage in manifest["stages"]:
        assert (tmp_path / "s" / stage["file"]).stat().st_size > 0
    affine = next(s for s in manifest["stages"] if s["name"] == "affine")
    assert "affine.for" in (tmp_path / "s" / affine["file"]).read_text()
    assert "total" in result.stderr


def test_print_ir_after_all(run_tool, tmp_path):
    result = run_tool("compile", "zoo:gemm", "-o", tmp_path / "g", "--print-ir-after-all", "-q")
    assert result.returncode == 0
    for name in load_recipe("cpu").stage_names():
        assert f"-{name} -----" in result.stdout


def test_unknown_stop_after_stage(run_tool, tmp_path):
    result = run_tool("compile", "zoo:gemm", "-o", tmp_path / "g", "--stop-after", "nope")
    assert result.returncode == 2 and "unknown stage 'nope'" in result.stderr


@pytest.fixture
def failing_recipe(tmp_path):
    """The real recipes, with a fusion stage whose pipeline fails on
    linalg-on-tensors (convert-to-llvm breaks linalg.matmul's body)."""
    import shutil
    recipes = tmp_path / "recipes"
    shutil.copytree(load_recipe.__globals__["DEFAULT_LOWERING_DIR"], recipes)
    shared = recipes / "shared" / "frontend.toml"
    text = shared.read_text()
    fusion = next(line for line in text.split('name = "fusion"', 1)[1].splitlines() if line.startswith("pipeline = "))
    shared.write_text(text.replace(fusion, 'pipeline = "builtin.module(convert-to-llvm, reconcile-unrealized-casts)"', 1))
    return recipes


def test_pass_failure_writes_a_reproducer_that_reproduces(run_tool, tmp_path, failing_recipe):
    outdir = tmp_path / "out"
    result = run_tool("compile", "zoo:mlp", "-o", outdir, "--lowering-dir", failing_recipe)
    assert result.returncode == 2
    assert "stage 'fusion' failed" in result.stderr and "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()[-1]) > 0
    repro = outdir / "repro"
    assert sorted(p.name for p in outdir.iterdir()) == ["repro"]  # nothing half-written
    command = (repro / "command.sh").read_text().strip().splitlines()[-1]
    assert "--pass-pipeline=" in command and "twintrack-opt" in command  # the fusion stage runs in twintrack-opt
    replay = subprocess.run(shlex.split(command), cwd=repro, capture_output=True, text=True)
    assert replay.returncode != 0 and "error" in replay.stderr


def test_the_extension_prints_ir_as_the_bindings_do(run_tool, tmp_path):
    """operation_text (one C++ string) against get_asm (a Python call a
    token), flag for flag, on a GPU compile's kernel stage: modules, ops,
    elided constants, generic form with locations."""
    from mlir import ir

    from twintrack.bindings import new_context
    from twintrack.dialect import operation_text
    result = run_tool("compile", "zoo:transformer_block", "--pipeline", "gpu", "-o", tmp_path / "t", "-q")
    assert result.returncode == 0, result.stderr
    text = next((tmp_path / "t" / "stages").glob("*-matmul-kernels.mlir")).read_text()
    flag_sets = [{}, {"large_elements_limit": 16, "large_resource_limit": 0, "assume_verified": True},
                 {"print_generic_op_form": True, "enable_debug_info": True},
                 {"assume_verified": True, "use_local_scope": True}]
    with new_context("mlir"):
        module = ir.Module.parse(text)
        function = next(op for op in module.body.operations if op.operation.name == "func.func")
        for flags in flag_sets:
            for op in (module, function):
                assert operation_text(op, **flags) == op.operation.get_asm(**flags), flags
    assert "gpu.launch_func" in operation_text(module)
