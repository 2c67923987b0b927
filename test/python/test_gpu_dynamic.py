"""Dynamic shapes on the GPU track without a GPU (issue 19): one compile's
host plan names its sizes, resolves in bounds at every size of the range,
and the kernels that take run-time sizes say so in the kernel report. The
generic kernels' numerics at several sizes are checked by
test_gpu_emulation.py; the fast paths' on the GPU (tools/bench_dynamic.py
--target gpu)."""

import json
import re
import shutil

import pytest
import torch

import twintrack
from twintrack.runtime.plan import resolve_plan, validate_plan
from twintrack.tooling import find_libdevice, find_tool

pytestmark = pytest.mark.skipif(find_tool("ptxas") is None or find_libdevice() is None,
                                reason="needs ptxas and libdevice (the CUDA toolkit)")

BERT_LAYER = "python/twintrack/harness/at_scale.py:bert_layer?dim=128&heads=4&ffn=512"
SIZES = [{"batch": 1, "seq": 1}, {"batch": 64, "seq": 512}, {"batch": 4, "seq": 509}, {"batch": 3, "seq": 7}]


@pytest.fixture(scope="module")
def bert_layer(tmp_path_factory):
    from twintrack.cli.compile import entry
    outdir = tmp_path_factory.mktemp("dynamic") / "bert_layer"
    assert entry([BERT_LAYER, "--pipeline", "gpu", "--dynamic", "x:0=batch[1,64],x:1=seq[1,512]",
                  "-o", str(outdir), "-q"]) == 0
    return json.loads((outdir / "manifest.json").read_text()), json.loads((outdir / "plan.json").read_text())


def test_the_plan_reads_its_sizes_off_the_input(bert_layer):
    _, plan = bert_layer
    x = next(i for i, a in enumerate(plan["arguments"]) if a["kind"] == "input")
    assert plan["version"] == 2 and plan["symbols"] == {"batch": [x, 0], "seq": [x, 1]}
    assert plan["arguments"][-1]["shape"] == ["batch", "seq", 128]
    assert any(isinstance(size, str) for step in plan["steps"] if step["op"] == "alloc" for size in step["shape"])
    assert validate_plan(plan) == []


@pytest.mark.parametrize("sizes", SIZES, ids=lambda s: f"{s['batch']}x{s['seq']}")
def test_the_plan_resolves_in_bounds_at_every_size(bert_layer, sizes):
    """Every view inside its buffer, every grid at least one block, the output of the input's sizes."""
    _, plan = bert_layer
    resolved = resolve_plan(plan, sizes)
    assert validate_plan(resolved) == []
    assert resolved["arguments"][-1]["shape"] == [sizes["batch"], sizes["seq"], 128]
    grids = [step["grid"] for step in resolved["steps"] if step["op"] == "launch"]
    assert all(isinstance(g, int) and g >= 1 for grid in grids for g in grid)


def test_matmuls_of_run_time_rows_take_masked_tiles(bert_layer):
    """The linear layers' M (batch x seq, 1 to 32,768) is known at run time:
    a kernel per bucket of M the cost model chose, each masking its last
    rows, the row tiles counted on the host; the layer norms run a block
    per row, however many rows come."""
    manifest, plan = bert_layer
    paths = [kernel["path"] for kernel in manifest["kernels"]]
    masked = [k for k in manifest["kernels"] if "masked rows" in k["path"]]
    last_buckets = [k for k in masked if re.search(r"\(M( > \d+)? at run time\)$", k["path"])]
    assert len(last_buckets) == 4, paths  # QKV, the output projection, the MLP's two
    for kernel in masked:  # each kernel names its bucket, and the decision's bounds are those buckets
        bounds = kernel["tuning"]["buckets"]["bounds"]
        assert any(f"M <= {b} at" in kernel["path"] or f"< M <= {b} at" in kernel["path"]
                   or f"M > {b} at" in kernel["path"] for b in bounds) or not bounds, kernel["path"]
    assert len(masked) == sum(len(k["tuning"]["buckets"]["bounds"]) + 1 for k in last_buckets)
    assert any(p.startswith("row-wise ?x128/") for p in paths), paths
    launches = {step["module"]: step for step in plan["steps"] if step["op"] == "launch"}
    for tiled in last_buckets:
        grid = launches[tiled["name"]]["grid"]
        assert isinstance(grid[0], int) and isinstance(grid[1], str), grid  # columns fixed, rows from the sizes


def test_attention_over_a_run_time_sequence_is_one_flash_kernel(bert_layer):
    """Q·Kᵀ, the softmax and P·V over batch·heads and a sequence known at
    run time: one flash kernel, its edge tiles masked, its grid (query
    tiles, batch·heads) counted on the host; no attention matmul generic."""
    manifest, plan = bert_layer
    flash = [k for k in manifest["kernels"] if k["path"].startswith("flash-attention")]
    assert len(flash) == 1 and flash[0]["spills"] == 0, flash
    assert flash[0]["path"].endswith("masked edges (sizes at run time)"), flash
    assert not [k for k in manifest["kernels"] if k["path"] == "generic"
                and any("bmm" in op or "_softmax" in op for op in k["source_ops"])]
    # Q, K and V read from the projection's output, the last layer norm written into the output: no copy steps.
    assert not [step for step in plan["steps"] if step["op"] == "copy"]
    launch = next(step for step in plan["steps"] if step["op"] == "launch" and step["module"] == flash[0]["name"])
    assert launch["grid"][0] == 1 and all(isinstance(g, str) for g in launch["grid"][1:]), launch["grid"]
    for sizes in SIZES:
        grid = next(step["grid"] for step in resolve_plan(plan, sizes)["steps"]
                    if step["op"] == "launch" and step["module"] == flash[0]["name"])
        assert grid == [1, -(-sizes["seq"] // 64), sizes["batch"] * 4], (sizes, grid)


def test_attention_over_a_run_time_sequence_alone_is_one_flash_kernel(tmp_path):
    """Batch fixed (2 x 4 heads), the sequence open: the scores' reshape
    (8, s, s) -> (2, 4, s, s) is an expansion (grouped-reshapes), and the
    kernel reads Q, K and V from the projection's output, its row stride
    (s·384) known at run time but proved a multiple of the vectors from
    the views it is made of."""
    from twintrack.cli.compile import entry
    outdir = tmp_path / "bert_layer"
    assert entry([BERT_LAYER + "&batch=2&seq=128", "--pipeline", "gpu", "--dynamic", "x:1=seq[1,512]",
                  "-o", str(outdir), "-q", "--strict-kernels"]) == 0
    kernels = json.loads((outdir / "manifest.json").read_text())["kernels"]
    assert [k["path"] for k in kernels if k["path"].startswith("flash-attention")] == \
        ["flash-attention-simt 64x32x32/4x8 (3 copies read through) masked edges (sizes at run time)"]
    assert not [k for k in kernels if k["path"] == "generic"
                and any("bmm" in op or "_softmax" in op for op in k["source_ops"])]


class DecodeProjection(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(4096, 4096, bias=False).half()

    def forward(self, x):
        return self.linear(x)


def _compile_decode(lowering_dir=None):
    from twintrack.compiler.options import CompileOptions
    options = CompileOptions(pipeline="gpu", **({"lowering_dir": lowering_dir} if lowering_dir else {}))
    return twintrack.export(DecodeProjection(), (torch.randn(4, 4096).half(),),
                            dynamic="x:0=rows[1,64]").compile_with(options)


def test_decode_rows_take_a_kernel_per_bucket(tmp_path):
    """A projection of 1-64 rows (decode) split at M = 8 (a table whose
    every bound pays): the skinny kernel for M <= 8 and a 64-row tile
    above, each masking its rows; the plan launches the call's bucket, and
    the kernel report says which bucket each kernel is for."""
    from twintrack.compiler.target import DEFAULT_LOWERING_DIR
    lowering = tmp_path / "lowering"
    shutil.copytree(DEFAULT_LOWERING_DIR, lowering)
    table = lowering / "targets" / "gpu.toml"
    text = re.sub(r"(?m)^matmul-bucket-bounds = .*$", "matmul-bucket-bounds = [8]", table.read_text())
    table.write_text(re.sub(r"(?m)^matmul-bucket-gain = .*$", "matmul-bucket-gain = -1.0", text))
    _compile_decode(lowering).save(tmp_path / "decode")
    manifest = json.loads((tmp_path / "decode" / "manifest.json").read_text())
    plan = json.loads((tmp_path / "decode" / "plan.json").read_text())
    paths = {kernel["name"]: kernel["path"] for kernel in manifest["kernels"]}
    assert len(paths) == 2, paths
    skinny, = (name for name, path in paths.items() if path.startswith("skinny-matmul"))
    tiled, = (name for name, path in paths.items() if path.startswith("wgmma-matmul"))
    assert paths[skinny].endswith("masked rows (M <= 8 at run time)")
    assert paths[tiled].endswith("masked rows (M > 8 at run time)")
    for rows, taken in ((1, skinny), (8, skinny), (9, tiled), (64, tiled)):
        resolved = resolve_plan(plan, {"rows": rows})
        assert validate_plan(resolved) == []
        assert [step["module"] for step in resolved["steps"] if step["op"] == "launch"] == [taken], rows


def test_the_kernel_report_states_the_bucket_decision(tmp_path, capsys):
    """With the target's own table, the cost model decides; the kernel
    report says what it chose and its estimates against one kernel."""
    from twintrack.cli.compile import print_kernel_report
    compiled = _compile_decode()
    compiled.save(tmp_path / "decode")
    kernels = json.loads((tmp_path / "decode" / "manifest.json").read_text())["kernels"]
    decisions = {k["tuning"]["buckets"]["decision"] for k in kernels}
    assert len(decisions) == 1 and all(k["tuning"]["buckets"]["one_kernel_us"] > 0 for k in kernels)
    print_kernel_report(kernels)
    report = capsys.readouterr().out
    assert f"rows at run time: {', '.join(k['name'] for k in kernels)}: {decisions.pop()}" in report


def test_the_report_says_why_a_convolution_of_run_time_batch_is_generic(run_tool, tmp_path):
    """No fast path takes a convolution or a pooling window whose batch is
    left open yet: the kernel report and the manifest say so, naming each
    op and the pass."""
    model = "zoo:conv_block?batch=8&in_channels=64&channels=64&size=32"
    result = run_tool("compile", model, "--pipeline", "gpu", "--dtype", "float16", "--dynamic", "x:0=batch[1,64]",
                      "-o", tmp_path / "dynamic", "-q")
    assert result.returncode == 0, result.stderr
    assert re.search(r"generic path: aten\.convolution@conv\.py:\d+ \(linalg\.conv_2d_nchw_fchw\): convolutions: "
                     r"sizes known only at run time \(a dynamic batch\)", result.stdout), result.stdout
    sites = json.loads((tmp_path / "dynamic" / "manifest.json").read_text())["generic_sites"]
    assert [site["site"].rpartition(" ")[2] for site in sites] == ["linalg.conv_2d_nchw_fchw", "linalg.pooling_nchw_max"]
    assert all(site["stage"] == "convolutions" for site in sites)
    static = run_tool("compile", model, "--pipeline", "gpu", "--dtype", "float16", "-o", tmp_path / "static", "-q")
    assert static.returncode == 0 and "generic path:" not in static.stdout


def test_the_dynamic_benchmark_compiles_tf32_for_the_gpu(run_tool, tmp_path):
    """bench_dynamic --allow-tf32 --compile-only: the dynamic artifact and
    each static one round the weights of their tf32 matmuls once (a step
    each), and problem.json carries the
    flag to the GPU machine (eager and Inductor then run tf32 too)."""
    result = run_tool("bench_dynamic", "zoo:mlp", "--dynamic", "x:0=rows[1,256]", "--sizes", "rows=200",
                      "--target", "gpu", "--compile-only", "--allow-tf32", "--artifacts", tmp_path / "a")
    assert result.returncode == 0, result.stderr
    assert json.loads((tmp_path / "a" / "problem.json").read_text())["allow_tf32"] is True
    for artifact in ("dynamic", "static-0"):
        plan = json.loads((tmp_path / "a" / artifact / "plan.json").read_text())
        assert validate_plan(plan) == []
        launches = [s for s in plan["steps"] if s["op"] == "launch"]
        tf32 = [s for s in launches if s["path"].startswith("wgmma-matmul")]  # the last layer's N = 8: CUDA cores
        assert len(tf32) == 2 and sum(bool(s.get("once")) for s in launches) == len(tf32), artifact
    refused = run_tool("bench_dynamic", "zoo:mlp", "--dynamic", "x:0=rows[1,256]", "--sizes", "rows=64",
                       "--allow-tf32")
    assert refused.returncode == 2 and "--allow-tf32 is for --target gpu" in refused.stderr
