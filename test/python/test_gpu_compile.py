"""The GPU track without a GPU: every zoo model compiles to cubins through the
real ptxas, the kernel report is complete and the host plan is valid. The
numerics on a GPU are checked by tools/gpu_check.py (and skip here)."""

import json
import re
import subprocess
import sys

import pytest

from twintrack.harness import numerics

from twintrack.harness import zoo
from twintrack.runtime import validate_plan
from twintrack.tooling import find_libdevice, find_tool

pytestmark = pytest.mark.skipif(find_tool("ptxas") is None or find_libdevice() is None,
                                reason="needs ptxas and libdevice (the CUDA toolkit)")

REPORT_FIELDS = {"name", "path", "source_ops", "grid", "block", "registers", "spills", "shared_bytes", "bytes", "flops"}


@pytest.mark.parametrize("name", list(zoo.MODELS))
def test_zoo_model_compiles_to_cubin(name, run_tool, tmp_path):
    outdir = tmp_path / name
    result = run_tool("compile", f"zoo:{name}", "--pipeline", "gpu", "-o", outdir, "-q")
    assert result.returncode == 0, result.stderr
    manifest = json.loads((outdir / "manifest.json").read_text())
    assert manifest["arch"] == "sm_90a" and manifest["kernels"]
    for kernel in manifest["kernels"]:
        assert REPORT_FIELDS <= kernel.keys()
        assert kernel["registers"] > 0 and kernel["bytes"] > 0 and kernel["source_ops"]
        assert 32 <= kernel["block"][0] <= 1024 and kernel["grid"][0] >= 1
        assert (outdir / kernel["cubin"]).read_bytes()[:4] == b"\x7fELF"
        assert ".target sm_90" in (outdir / kernel["ptx"]).read_text()
    plan = json.loads((outdir / "plan.json").read_text())
    assert validate_plan(plan) == []
    assert len([s for s in plan["steps"] if s["op"] == "launch"]) == len(manifest["kernels"])
    assert "kernel" in result.stdout  # the report table is printed


def test_softmax_is_one_row_wise_kernel(artifact):
    kernels = json.loads((artifact("zoo:softmax", "--pipeline", "gpu") / "manifest.json").read_text())["kernels"]
    assert [k["path"] for k in kernels] == ["row-wise 32x64/32"]  # max, sum and division in one launch
    assert kernels[0]["grid"][0] == 32 and kernels[0]["shared_bytes"] > 0  # a block per row, all_reduce via shared memory


def test_generic_softmax_rows_reduce_cooperatively(run_tool, tmp_path):
    assert run_tool("compile", "zoo:softmax", "--pipeline", "gpu", "--no-fast-kernels", "-o", tmp_path / "s",
                    "-q").returncode == 0
    kernels = json.loads((tmp_path / "s" / "manifest.json").read_text())["kernels"]
    reductions = [k for k in kernels if k["shared_bytes"] > 0]  # gpu.all_reduce stages through shared memory
    assert len(reductions) == 2  # the max and the sum
    assert all(k["grid"][0] == 32 and k["block"][0] == 64 for k in reductions)  # one block per row


MLP = "zoo:mlp?batch=256&features=128&hidden=256&out=128"


def _paths(run_tool, tmp_path, *flags) -> list[str]:
    result = run_tool("compile", MLP, "--pipeline", "gpu", "-o", tmp_path / "m", "-q", *flags)
    assert result.returncode == 0, result.stderr
    kernels = json.loads((tmp_path / "m" / "manifest.json").read_text())["kernels"]
    for kernel in kernels:  # generated kernels name the torch op they implement, like the others
        assert kernel["source_ops"] and all(op.startswith("aten.") for op in kernel["source_ops"]), kernel
    return [k["path"] for k in kernels]


@pytest.mark.parametrize("dtype, arch, path", [
    ("float32", "sm_90a", "simt-matmul"),
    ("float16", "sm_90a", "wgmma-matmul"), ("bfloat16", "sm_90a", "wgmma-matmul"),
    ("float16", "sm_90", "mma.sync-matmul"), ("bfloat16", "sm_90", "mma.sync-matmul")])
def test_matmuls_take_the_fast_path(run_tool, tmp_path, dtype, arch, path):
    """Half-precision matmuls take wgmma on sm_90a (the default), mma.sync on other chips."""
    paths = _paths(run_tool, tmp_path, "--dtype", dtype, "--arch", arch)
    assert sum(p.startswith(path) for p in paths) == 3  # the three linear layers
    assert all(p.startswith(path) or p == "generic" for p in paths)


@pytest.mark.parametrize("dtype, arch, path", [
    ("float32", "sm_90a", "simt-matmul"), ("float16", "sm_90a", "wgmma-matmul"),
    ("float16", "sm_90", "mma.sync-matmul")])
def test_ragged_linears_take_the_fast_path(run_tool, tmp_path, dtype, arch, path):
    """ViT-like 197 rows and a classifier's 1000 columns: no tile divides
    them, and the kernels take them with ragged edges. The kernel report
    counts the matmul's own flops, not the padded tiles'."""
    rows, sizes = 197, [(256, 512), (512, 512), (512, 1000)]  # (K, N) of each linear
    model = f"zoo:mlp?batch={rows}&features=256&hidden=512&out=1000"
    result = run_tool("compile", model, "--pipeline", "gpu", "--dtype", dtype, "--arch", arch, "--strict-kernels",
                      "-o", tmp_path / "m", "-q")
    assert result.returncode == 0, result.stderr
    kernels = json.loads((tmp_path / "m" / "manifest.json").read_text())["kernels"]
    matmuls = [k for k in kernels if k["path"].startswith(path)]
    assert len(matmuls) == 3, [k["path"] for k in kernels]
    for kernel, (k, n) in zip(matmuls, sizes):
        useful = 2 * rows * k * n
        assert useful <= kernel["flops"] <= useful * 1.01, (kernel["name"], kernel["flops"], useful)
    share = re.search(r"^fast paths: ([\d.]+)% of ", result.stdout, re.MULTILINE)
    assert share and float(share.group(1)) > 99, result.stdout  # the bias and ReLU ride in the kernels' epilogues


@pytest.mark.parametrize("dtype, path", [("float16", "wgmma-matmul"), ("float32", "simt-matmul")])
def test_convolutions_take_the_matmul_kernels(run_tool, tmp_path, dtype, path):
    """A convolution is a matmul over its patches (the `convolutions`
    stage): its batch norm and ReLU ride in the kernel's epilogue, which
    stores channels-first."""
    model = "zoo:conv_block?batch=4&in_channels=16&channels=64&size=28"
    result = run_tool("compile", model, "--pipeline", "gpu", "--dtype", dtype, "-o", tmp_path / "c", "-q")
    assert result.returncode == 0, result.stderr
    kernels = json.loads((tmp_path / "c" / "manifest.json").read_text())["kernels"]
    [conv] = [k for k in kernels if k["path"].startswith(path)]
    assert {op.split(" at ")[0] for op in conv["source_ops"]} >= {
        "aten.convolution", "aten._native_batch_norm_legit_no_training", "aten.relu"}, conv["source_ops"]
    assert conv["flops"] >= 2 * 4 * 28 * 28 * 64 * 16 * 9
    share = re.search(r"^fast paths: ([\d.]+)% of ", result.stdout, re.MULTILINE)
    assert share and float(share.group(1)) > 95, result.stdout


def test_identical_kernels_share_one_binary(run_tool, tmp_path):
    """Two linear layers of one shape with the same epilogue are one kernel
    twice: ptxas assembles it once, and the second launch runs the first's
    cubin under its own name."""
    model = "zoo:mlp?batch=256&features=128&hidden=128&out=128"
    result = run_tool("compile", model, "--pipeline", "gpu", "--dtype", "float16", "-o", tmp_path / "m", "-q")
    assert result.returncode == 0, result.stderr
    manifest = json.loads((tmp_path / "m" / "manifest.json").read_text())
    plan = json.loads((tmp_path / "m" / "plan.json").read_text())
    launches = [s for s in plan["steps"] if s["op"] == "launch"]
    shared = [s for s in launches if "binary" in s]
    assert len(shared) == 1 and shared[0]["binary"] == launches[0]["module"]
    assert shared[0]["kernel"] == launches[0]["kernel"] and shared[0]["module"] != launches[0]["module"]
    assert len({k["name"] for k in manifest["kernels"]}) == len(launches)  # the report keeps each launch's name
    assert manifest["kernels"][1]["cubin"] == manifest["kernels"][0]["cubin"]
    assert len(list((tmp_path / "m" / "kernels").glob("*.cubin"))) == len(launches) - 1
    assert validate_plan(plan) == []


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("rows", [1, 8])
def test_decode_linears_take_the_skinny_kernel(run_tool, tmp_path, dtype, rows):
    """An MLP on a few rows (decode): each linear layer takes the skinny
    kernel (and split-K's reducing kernel where it splits K) with its bias
    and ReLU folded in, writing the output buffer itself (the plan copies
    nothing); ptxas keeps every kernel free of spills."""
    model = f"zoo:mlp?batch={rows}&features=1024&hidden=2048&out=512"
    result = run_tool("compile", model, "--pipeline", "gpu", "--dtype", dtype, "-o", tmp_path / "m", "-q")
    assert result.returncode == 0, result.stderr
    manifest = json.loads((tmp_path / "m" / "manifest.json").read_text())
    paths = [k["path"].split()[0] for k in manifest["kernels"]]
    assert set(paths) == {"skinny-matmul"} and len(paths) >= 3, paths
    assert all(k["spills"] == 0 for k in manifest["kernels"]), manifest["kernels"]
    plan = json.loads((tmp_path / "m" / "plan.json").read_text())
    assert not [step for step in plan["steps"] if step["op"] == "copy"]


@pytest.mark.parametrize("dtype, rows, width", [("float16", 4, 768), ("bfloat16", 16, 1600)])
def test_decode_with_weights_as_stored_takes_tensor_cores(run_tool, tmp_path, dtype, rows, width):
    """GPT-2's MLP (Conv1D: x @ W + b with W stored [in, out]) on a few
    rows: both layers take the skinny kernel's tensor-core flavour for B as
    stored, bias and GELU folded in (GPT-2 XL's 1600 is no whole number of
    the block's 256 of K: its last warps sit the last trip out)."""
    model = f"python/twintrack/harness/at_scale.py:gpt2_mlp?batch={rows}&dim={width}"
    result = run_tool("compile", model, "--pipeline", "gpu", "--dtype", dtype, "-o", tmp_path / "m", "-q")
    assert result.returncode == 0, result.stderr
    manifest = json.loads((tmp_path / "m" / "manifest.json").read_text())
    matmuls = [k for k in manifest["kernels"] if not k["name"].endswith("_reduce")]
    assert [k["path"].split(" splits")[0].rsplit(",", 1)[0] for k in matmuls] == \
        ["skinny-matmul B mma 8 warps x2 vectors"] * 2, matmuls
    assert all(k["spills"] == 0 for k in manifest["kernels"]), manifest["kernels"]
    assert "movmatrix.sync.aligned.m8n8.trans.b16" in (tmp_path / "m" / "kernels" / f"{matmuls[0]['name']}.ptx").read_text()


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_a_one_element_half_matmul_compiles(run_tool, tmp_path, dtype):
    """(1x2)(2x1) in half precision: the narrowing after it reads the 1x1
    result collapsed to 0-d, which the epilogue search took for a view
    keeping C's last dim (an internal error)."""
    result = run_tool("compile", "zoo:gemm?m=1&k=2&n=1", "--pipeline", "gpu", "--dtype", dtype, "-o", tmp_path / "m", "-q")
    assert result.returncode == 0, result.stderr
    assert json.loads((tmp_path / "m" / "manifest.json").read_text())["kernels"]


@pytest.mark.parametrize("flags, path, allowed", [
    ((), "simt-matmul", False),                                # torch's default: exact f32
    (("--allow-tf32",), "wgmma-matmul", True),
    (("--allow-tf32", "--arch", "sm_90"), "simt-matmul", True),  # tf32 only through wgmma
])
def test_float32_matmuls_take_tf32_only_when_allowed(run_tool, tmp_path, flags, path, allowed):
    paths = _paths(run_tool, tmp_path, *flags)
    assert sum(p.startswith(path) for p in paths) == 3
    manifest = json.loads((tmp_path / "m" / "manifest.json").read_text())
    assert manifest["allow_tf32"] is allowed
    if path == "wgmma-matmul":
        ptx = "".join(f.read_text() for f in (tmp_path / "m" / "kernels").glob("*.ptx"))
        assert ".f32.tf32.tf32" in ptx and "m64n" in ptx


@pytest.mark.parametrize("model, paths", [
    ("zoo:gemm?m=512&k=512&n=512", ["transpose", "wgmma-matmul"]),
    ("zoo:gemm?m=200&k=196&n=100", ["simt-matmul"]),  # no wgmma tile: B read as it is, exact f32
])
def test_a_plain_tf32_b_is_copied_transposed_for_wgmma(run_tool, tmp_path, model, paths):
    """wgmma reads tf32 operands K-major only: a plain B (K x N) is copied
    transposed by a kernel of its own (64 x 64 tiles through shared memory,
    16-byte loads and stores) and the matmul reads that Bᵀ in 16-byte
    copies, not one element a copy. The copy rounds B to tf32 on its way;
    the matmul rounds A's fragments in registers: no pass of their own."""
    result = run_tool("compile", model, "--pipeline", "gpu", "--allow-tf32", "-o", tmp_path / "m", "-q")
    assert result.returncode == 0, result.stderr
    kernels = json.loads((tmp_path / "m" / "manifest.json").read_text())["kernels"]
    assert [k["path"].split()[0] for k in kernels] == paths
    ptx = {f.stem: f.read_text() for f in (tmp_path / "m" / "kernels").glob("*.ptx")}
    rounds = [bool(re.search(r"and\.b32\s+%r\d+, %r\d+, -8192;", ptx[k["name"]])) for k in kernels]
    assert rounds == [path in ("transpose", "wgmma-matmul") for path in paths]
    if "transpose" not in paths:
        return
    copy, matmul = (ptx[k["name"]] for k in kernels)
    assert copy.count("ld.global.v4.b32") == copy.count("st.global.v4.b32") == 4  # 64 x 64 floats, 256 threads
    copies = re.findall(r"cp\.async\.(\w+)\.shared\.global \[[^]]*\], \[[^]]*\], (\d+)", matmul)
    assert copies and set(copies) == {("cg", "16")}, set(copies)


@pytest.mark.parametrize("model, others", [
    ("zoo:gemm?m=4096&k=4096&n=4096", {"transpose": 2 * 4096 * 4096 * 4}),  # B's copy rounds B
    ("python/twintrack/harness/at_scale.py:conv3x3?batch=64&channels=128&filters=128&size=28&channels_last=1",
     {"row-wise": 2 * 128 * 9 * 128 * 4}),  # the weight's rounding; the input is read through its windows
])
def test_the_tma_kernel_rounds_a_tf32_in_registers(run_tool, tmp_path, model, others):
    """The TMA kernel takes a large tf32 matmul (or a convolution, its
    windows read by TMA's im2col mode): its consumers load A's fragments
    from the ring (ldmatrix), round them to nearest and issue the wgmmas
    with A from registers (k8, four registers): no pass rounds A, an
    input (only B: its transposing copy, or the weight's pass). Two
    register sets alternate over the K steps: ptxas serializes no wgmma."""
    result = run_tool("compile", model, "--pipeline", "gpu", "--allow-tf32", "-o", tmp_path / "m", "-q")
    assert result.returncode == 0, result.stderr
    kernels = json.loads((tmp_path / "m" / "manifest.json").read_text())["kernels"]
    assert {k["path"].split()[0]: k["bytes"] for k in kernels[:-1]} == others
    matmul = kernels[-1]
    assert matmul["path"].startswith("tma-wgmma-matmul")
    assert "A rounded in registers" in matmul["path"] and "ptxas_notes" not in matmul and matmul["spills"] == 0
    ptx = (tmp_path / "m" / matmul["ptx"]).read_text()
    from_registers = re.findall(r"wgmma\.mma_async\.sync\.aligned\.m64n\d+k8\.f32\.tf32\.tf32 \{[^}]*\}, "
                                r"\{%r\d+, %r\d+, %r\d+, %r\d+\}, %rd\d+, p, 1, 1;", ptx)
    assert len(from_registers) == ptx.count("wgmma.mma_async") == ptx.count("ldmatrix.sync.aligned.m8n8.x4") > 0
    assert len(re.findall(r"and\.b32\s+%r\d+, %r\d+, -8192;", ptx)) == 4 * len(from_registers)


def test_tf32_widens_only_float32_tolerances():
    assert numerics.tolerance("float32") == 1e-5
    assert numerics.tolerance("float32", allow_tf32=True) == numerics.TF32_TOLERANCE
    assert numerics.tolerance("float16", allow_tf32=True) == numerics.TOLERANCE["float16"]


def test_no_fast_kernels_keeps_the_generic_pipeline(run_tool, tmp_path):
    assert set(_paths(run_tool, tmp_path, "--no-fast-kernels")) == {"generic"}


@pytest.mark.parametrize("arch, instructions", [
    ("sm_90a", ["wgmma.mma_async.sync.aligned.m64n", ".f32.f16.f16", "cp.async.cg.shared.global", "fence.proxy.async"]),
    ("sm_90", ["mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32", "ldmatrix.sync"])])
def test_half_precision_matmul_stores_half_directly(run_tool, tmp_path, arch, instructions):
    """torch-mlir's f32 accumulator and truncation fold into the kernel: one launch, no temporary."""
    result = run_tool("compile", "zoo:gemm?m=256&k=128&n=256", "--pipeline", "gpu", "--dtype", "float16",
                      "--arch", arch, "-o", tmp_path / "g", "-q")
    assert result.returncode == 0, result.stderr
    plan = json.loads((tmp_path / "g" / "plan.json").read_text())
    assert [s["op"] for s in plan["steps"]] == ["launch"]
    ptx = (tmp_path / "g" / "kernels" / f"{plan['steps'][0]['module']}.ptx").read_text()
    assert all(instruction in ptx for instruction in instructions)
    manifest = json.loads((tmp_path / "g" / "manifest.json").read_text())
    assert manifest["kernels"][0]["spills"] == 0


@pytest.mark.parametrize("arch", ["sm_90a", "sm_90"])
def test_epilogue_inputs_are_loaded_before_their_stores(run_tool, tmp_path, arch):
    """A residual add in a matmul's epilogue: each thread loads a batch of
    the residual's elements before it stores any result (the loads in
    flight together, not one memory round trip a store), ragged edges too."""
    model = "python/twintrack/harness/at_scale.py:bert_layer?batch=3&seq=100&dim=200&heads=4&ffn=328"
    result = run_tool("compile", model, "--pipeline", "gpu", "--dtype", "float16", "--arch", arch,
                      "-o", tmp_path / "b", "-q")
    assert result.returncode == 0, result.stderr
    kernels = json.loads((tmp_path / "b" / "manifest.json").read_text())["kernels"]
    residual = [k for k in kernels if "matmul" in k["path"] and any(op.split()[0] == "aten.add" for op in k["source_ops"])]
    assert len(residual) == 2, [(k["path"], k["source_ops"]) for k in kernels]  # the attention output's and the MLP's
    for kernel in residual:
        ptx = (tmp_path / "b" / kernel["ptx"]).read_text()
        epilogue = ptx[ptx.rindex("mma"):]  # after the K loop's last multiply
        accesses = re.findall(r"\b(ld|st)\.global", epilogue)
        loads_before_a_store = [len(run) for run in "".join(a[0] for a in accesses).split("s") if run]
        assert max(loads_before_a_store) >= 8, (kernel["name"], loads_before_a_store)


def test_a_horizontal_kernel_counts_each_matmul_once(run_tool, tmp_path):
    """The Q, K and V projections in one grid: each block takes one matmul's
    branch, so the kernel report counts each matmul's flops once."""
    model = "python/twintrack/harness/at_scale.py:llama_layer?batch=1&seq=512&dim=512&heads=8&kv_heads=8&ffn=1376"
    result = run_tool("compile", model, "--pipeline", "gpu", "--dtype", "float16", "-o", tmp_path / "l", "-q")
    assert result.returncode == 0, result.stderr
    kernels = json.loads((tmp_path / "l" / "manifest.json").read_text())["kernels"]
    (horizontal,) = [k for k in kernels if " horizontal x" in k["path"]]
    assert horizontal["flops"] == 2 * 512 * 512 * (3 * 512), horizontal["flops"]  # M x K x (N of Q, K and V)


def test_validate_plan_finds_problems():
    plan = {"arguments": [{"shape": [4], "dtype": "float32"}],
            "steps": [{"op": "launch", "grid": [1, 1, 1], "block": [2048, 1, 1], "module": "m", "kernel": "k",
                       "args": [{"memref": {"buffer": "b0", "offset": 0, "sizes": [4], "strides": [1]}},
                                {"memref": {"buffer": "arg0", "offset": 2, "sizes": [4], "strides": [1]}}]},
                      {"op": "alloc", "buffer": "b1", "shape": [3], "dtype": "float32"}]}
    problems = validate_plan(plan)
    assert any("2048 threads" in p for p in problems)
    assert any("b0 is not live" in p for p in problems)
    assert any("reaches element 5" in p for p in problems)
    assert any("never freed: b1" in p for p in problems)


def test_runtime_imports_no_mlir():
    code = ("import sys, twintrack.runtime; "
            "bad = [m for m in sys.modules if m.split('.')[0] in ('mlir', 'torch_mlir')]; "
            "assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_running_without_a_gpu_is_a_clean_error(run_tool, artifact):
    import torch
    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    result = run_tool("run", artifact("zoo:gemm", "--pipeline", "gpu"), "--check")
    assert result.returncode == 2 and "no CUDA GPU is available" in result.stderr
    assert "Traceback" not in result.stderr


def test_missing_ptxas_says_how_to_get_it(run_tool, tmp_path, monkeypatch):
    import os
    monkeypatch.setenv("PATH", os.pathsep.join([str(p) for p in (tmp_path, "/usr/bin", "/bin")]))
    monkeypatch.setenv("TWINTRACK_CACHE", "0")  # a cached artifact needs no ptxas
    result = run_tool("compile", "zoo:gemm", "--pipeline", "gpu", "-o", tmp_path / "g")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "ptxas not found" in result.stderr and "nvidia-cuda-nvcc" in result.stderr


def test_host_op_the_runtime_cannot_run_is_named(run_tool, tmp_path):
    """With the outline stage removed, loops stay on the host: the plan names the op, where and the stage."""
    from twintrack.compiler.recipes import DEFAULT_LOWERING_DIR
    recipes = tmp_path / "recipes"
    (recipes / "shared").mkdir(parents=True)
    (recipes / "shared" / "frontend.toml").write_text((DEFAULT_LOWERING_DIR / "shared" / "frontend.toml").read_text())
    gpu = (DEFAULT_LOWERING_DIR / "gpu.toml").read_text()
    outline = gpu.index('[[stage]]\nname = "outline"')
    gpu = gpu[:outline] + gpu[gpu.index("[[stage]]", outline + 1):]
    (recipes / "gpu.toml").write_text(gpu)
    result = run_tool("compile", "zoo:softmax", "--pipeline", "gpu", "--no-fast-kernels", "--lowering-dir", recipes,
                      "-o", tmp_path / "o")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "stage 'plan' failed" in result.stderr and "'scf.parallel'" in result.stderr and "zoo.py:60" in result.stderr


@pytest.mark.parametrize("wrong", ["device", "shape", "dtype"])
def test_wrong_input_is_named_before_any_launch(wrong, artifact):
    import torch

    from twintrack.errors import InputMismatchError
    from twintrack.runtime import load
    executable = load(artifact("zoo:gemm", "--pipeline", "gpu"))
    weight, x = torch.randn(48, 32), torch.randn(64, 48)
    if wrong == "shape":
        x = x[:, :40].contiguous()
    elif wrong == "dtype":
        x = x.double()
    # shape and dtype are checked before the device, so CPU tensors test them without a GPU
    with pytest.raises(InputMismatchError, match="input0" if wrong != "device" else "CUDA tensor"):
        executable(weight, x)


def test_ptxas_failure_leaves_the_ptx_and_the_exact_command(tmp_path):
    import shlex

    from twintrack.errors import CompilerError
    from twintrack.compiler.gpu_codegen import assemble
    bad_ptx = ".version 8.0\n.target sm_90\n.address_size 64\n.visible .entry k() { this is not ptx; }\n"
    with pytest.raises(CompilerError) as failure:
        assemble("k", bad_ptx, "sm_90", tmp_path)
    assert failure.value.stage == "cubin" and "k:" in str(failure.value)
    repro = failure.value.reproducer.write(tmp_path / "repro")
    assert (repro / "k.ptx").read_text() == bad_ptx
    command = (repro / "command.sh").read_text().strip().splitlines()[-1]
    assert "-arch=sm_90" in command
    replay = subprocess.run(shlex.split(command), cwd=repro, capture_output=True, text=True)
    assert replay.returncode != 0


def test_compile_api_targets_the_gpu():
    import torch

    import twintrack
    module, (x,) = zoo.build("gemm")
    compiled = twintrack.compile(module, (x,), target="gpu")
    assert "gpu.binary" in compiled.as_text()
    if not torch.cuda.is_available():
        pytest.skip("no GPU to run the compiled model (compiled and packaged fine)")
    from twintrack.harness.numerics import relative_error
    assert relative_error(compiled(x.cuda()).cpu(), module.double()(x.double())) < 1e-5


def test_row_kernel_sites_over_zero_dim_buffers_compile():
    """OpInfo's segment max over bfloat16 offsets: a row-kernel site with a
    0-d buffer. Asking whether vectors fit a 0-d memref divided by its rank
    (0), and the whole compile failed at 'row-kernels'."""
    import twintrack
    from twintrack.harness.coverage import cases

    case = next(c for c in cases.all_cases(dtypes=("bfloat16",)) if c.id == "_segment_reduce.offsets:bfloat16")
    samples = cases.samples(case, 2)
    assert samples
    for sample in samples:
        assert "gpu.binary" in twintrack.compile(sample.module, sample.inputs, target="gpu").as_text()


@pytest.mark.parametrize("name", ["softmax", "layernorm", "transformer_block"])
def test_gpu_numerics(name, run_tool, tmp_path):
    import torch
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU (tools/gpu_check.py covers the whole zoo on the H200)")
    assert run_tool("compile", f"zoo:{name}", "--pipeline", "gpu", "-o", tmp_path / name, "-q").returncode == 0
    result = run_tool("run", tmp_path / name, "--check")
    assert result.returncode == 0, result.stdout + result.stderr


def test_frozen_weights_travel_as_constants(run_tool, tmp_path):
    import numpy as np
    assert run_tool("compile", "zoo:mlp", "--pipeline", "gpu", "--freeze", "-o", tmp_path / "f", "-q").returncode == 0
    plan = json.loads((tmp_path / "f" / "plan.json").read_text())
    assert validate_plan(plan) == []
    assert [a["kind"] for a in plan["arguments"]] == ["input", "output"]
    constants = [np.load(tmp_path / "f" / s["file"]) for s in plan["steps"] if s["op"] == "constant"]
    module, _ = zoo.build("mlp")
    for weight in module.state_dict().values():
        w = weight.numpy()
        assert any(c.shape in (w.shape, w.T.shape) and (np.array_equal(c, w) or np.array_equal(c, w.T))
                   for c in constants)


def test_locations_name_the_torch_op(artifact):
    """Every MLIR location carries its ATen op: errors and kernel reports read 'aten.X at file:line'."""
    kernels = json.loads((artifact("zoo:softmax", "--pipeline", "gpu") / "manifest.json").read_text())["kernels"]
    assert all(op.startswith("aten._softmax at ") and op.endswith("zoo.py:60:0")
               for k in kernels for op in k["source_ops"])


def test_a_result_names_the_model_file_relative_to_the_tree(tmp_path):
    """gpu_check's rows: an artifact compiled on another machine names its
    own absolute path; the row records the path inside this tree instead."""
    from twintrack.frontend.model_spec import portable_model_spec
    (tmp_path / "test" / "python").mkdir(parents=True)
    (tmp_path / "test" / "python" / "models.py").write_text("")
    elsewhere = "/some/other/checkout/test/python/models.py:vit?batch=2"
    assert portable_model_spec(elsewhere, tmp_path) == "test/python/models.py:vit?batch=2"
    assert portable_model_spec("zoo:mlp", tmp_path) == "zoo:mlp"
    assert portable_model_spec("/nowhere/else.py:make", tmp_path) == "/nowhere/else.py:make"


def test_the_kernel_report_keeps_large_counts_apart(capsys):
    """An 8192³ GEMM's 805306368 bytes and 1099511627776 flops: two fields, not one run of digits."""
    from twintrack.cli.compile import print_kernel_report
    print_kernel_report([{"name": "forward_matmul_0", "path": "tma-wgmma-matmul", "source_ops": ["aten.mm"],
                          "grid": [132, 1, 1], "block": [384, 1, 1], "registers": 168, "spills": 0,
                          "shared_bytes": 230465, "bytes": 805306368, "flops": 1099511627776}])
    header, row = capsys.readouterr().out.splitlines()[:2]
    assert row.split()[7:9] == ["805306368", "1099511627776"]
    assert header.index("flops") + len("flops") == row.index("1099511627776") + len("1099511627776")


def test_the_kernel_report_gives_ptxas_notes_once_per_shared_binary(capsys):
    from twintrack.cli.compile import print_kernel_report
    from twintrack.compiler.options import FULL_FOR_SETMAXNREG
    launch = {"path": "flash-attention-wgmma", "source_ops": [], "grid": [16, 128, 1], "block": [384, 1, 1],
              "registers": 168, "spills": 0, "shared_bytes": 99328, "bytes": 1 << 20, "flops": 1 << 30,
              "cubin": "kernels/forward_attention_0.cubin",
              "ptxas_full_optimization": "at --Ofast-compile=mid: C7509: wgmma serialized"}
    kernels = [dict(launch, name=f"forward_attention_{i}") for i in range(3)]
    kernels.append(dict(launch, name="forward_attention_9", cubin="kernels/forward_attention_9.cubin"))
    # A producer/consumer kernel goes to full optimization by design (setmaxnreg): nothing lost, nothing said.
    kernels.append(dict(launch, name="forward_tma_1", cubin="kernels/forward_tma_1.cubin",
                        ptxas_full_optimization=FULL_FOR_SETMAXNREG))
    print_kernel_report(kernels)
    notes = [line for line in capsys.readouterr().out.splitlines() if line.startswith("ptxas on")]
    assert notes == ["ptxas on forward_attention_0 (3 launches): assembled at full optimization "
                     "(at --Ofast-compile=mid: C7509: wgmma serialized)",
                     "ptxas on forward_attention_9: assembled at full optimization "
                     "(at --Ofast-compile=mid: C7509: wgmma serialized)"]


def test_the_report_names_what_keeps_a_matmul_off_the_fast_paths(run_tool, tmp_path):
    """K = 60 halves: A's rows are 120 bytes, no whole number of the
    16-byte vectors every matmul kernel reads; the report says so."""
    result = run_tool("compile", "zoo:gemm?m=64&k=60&n=32", "--pipeline", "gpu", "--dtype", "float16",
                      "-o", tmp_path / "g", "-q")
    assert result.returncode == 0, result.stderr
    assert ("generic path: aten.mm@zoo.py:41 (linalg.matmul): matmul-kernels: A's rows (120 bytes, or its offset) "
            "are not whole 16-byte vectors") in result.stdout
    lines = result.stdout.splitlines()
    assert lines[-1].startswith("fast paths: 0.0%") and lines[-2].startswith("generic path:")
