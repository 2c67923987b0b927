"""The Inductor track and the comparison: kernel capture, matching, profile
attribution, the compare table and the benchmark results' schema (CPU)."""

import json
import math
import os
import subprocess
import sys

import pytest
import torch

from twintrack.harness.compare.gpu_profile import RUN_RANGE, kernels_from_trace
from twintrack.harness.compare.matching import kernel_groups
from twintrack.frontend.export import load_model
from twintrack.harness.inductor import compile_with_inductor
from twintrack.harness.numerics import float64_reference, random_inputs, relative_error
from twintrack.calling import TensorSpec

from conftest import REPO


def test_inductor_capture_names_kernels_and_their_torch_ops():
    source = load_model("zoo:transformer_block")
    inputs = random_inputs([TensorSpec.of("x", x, "input") for x in source.example_inputs], seed=7)
    result = compile_with_inductor(source.module, inputs)
    assert result.error is None and result.compile_seconds > 0
    kinds = {k.kind for k in result.kernels}
    assert kinds == {"cpp", "extern"}, kinds
    for kernel in result.kernels:
        assert kernel.source_keys, f"{kernel.name} has no torch op"
        assert all(" @ zoo.py:" in key for key in kernel.source_keys)
        if kernel.kind == "cpp":
            assert "void" in kernel.sources["cpp"] and kernel.bytes > 0
    matmuls = [k for k in result.kernels if k.name == "extern_kernels.addmm"]
    assert len(matmuls) == 4 and all(k.source_keys[0].startswith("aten.addmm @") and k.flops > 0 for k in matmuls)
    output = result.compiled(*inputs)
    assert relative_error(output, float64_reference(source.module, inputs)[0]) < 1e-5


def test_inductor_failure_is_a_result_not_a_crash():
    result = compile_with_inductor(torch.nn.Linear(4, 4), [torch.randn(3, 5)])
    assert result.compiled is None and result.kernels == []
    assert "RuntimeError" in result.error or "Error" in result.error


def _kernel(index, *keys):
    return {"index": index, "name": f"k{index}", "source_keys": list(keys)}


def test_groups_follow_op_keys_decompositions_and_launch_order():
    twintrack = [_kernel(0, "aten.native_layer_norm @ m.py:5"),
                 _kernel(1, "aten.addmm @ m.py:6"),          # two matmuls on one model line ...
                 _kernel(2, "aten.gelu @ m.py:6"),
                 _kernel(3, "aten.addmm @ m.py:6"),
                 _kernel(4, "aten.cumsum @ m.py:9")]        # ... and an op Inductor does not show
    inductor = [_kernel(0, "aten.var_mean @ m.py:5", "aten.rsqrt @ m.py:5"),
                _kernel(1, "aten.addmm @ m.py:6"),
                _kernel(2, "aten.gelu @ m.py:6"),
                _kernel(3, "aten.addmm @ m.py:6"),
                _kernel(4, "aten.sort @ m.py:12")]
    groups = kernel_groups({"twintrack": twintrack, "inductor": inductor})
    pairs = [(g["twintrack"], g["inductor"]) for g in groups]
    assert ([0], [0]) in pairs and ([1], [1]) in pairs and ([2], [2]) in pairs and ([3], [3]) in pairs
    assert ([4], []) in pairs and ([], [4]) in pairs
    assert sorted(i for g in groups for i in g["twintrack"]) == [0, 1, 2, 3, 4]
    assert sorted(i for g in groups for i in g["inductor"]) == [0, 1, 2, 3, 4]


def test_groups_see_through_wrapper_frames_dynamo_keeps():
    """Dynamo's stack traces keep decorator frames that torch.export's drop;
    an export trace may also stop at the call into a library function."""
    twintrack = [_kernel(0, "aten.mm @ run.py:3 > model.py:40 > model.py:12"),
                 _kernel(1, "aten.bmm @ run.py:3 > model.py:40 > model.py:20")]
    inductor = [_kernel(0, "aten.mm @ run.py:3 > deprecation.py:173 > model.py:40 > generic.py:9 > model.py:12"),
                _kernel(1, "aten._scaled_dot_product_flash_attention @ run.py:3 > model.py:40 > model.py:20 > sdpa.py:182"),
                _kernel(2, "aten.mm @ run.py:3 > model.py:41 > model.py:12")]   # same inner line, other caller
    groups = kernel_groups({"twintrack": twintrack, "inductor": inductor})
    pairs = [(g["twintrack"], g["inductor"]) for g in groups]
    assert pairs == [([0], [0]), ([1], [1]), ([], [2])]


def _trace(runs):
    """A Kineto-style chrome trace: per run, a run range holding host ranges,
    each launching device kernels (correlated by id); an L2 flush between runs."""
    events, ts, correlation = [], 0.0, 0
    for durations in runs:
        events.append({"ph": "X", "cat": "cpu_op", "name": "aten::zero_", "ts": ts, "dur": 5, "tid": 1})
        correlation += 1
        events += [{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": ts + 1, "dur": 1, "tid": 1,
                    "args": {"correlation": correlation}},
                   {"ph": "X", "cat": "kernel", "name": "flush", "ts": ts + 2, "dur": 300, "args": {"correlation": correlation}}]
        ts += 400
        run = {"ph": "X", "cat": "user_annotation", "name": RUN_RANGE, "ts": ts, "dur": 100, "tid": 1}
        events.append(run)
        for offset, (site, kernel_us) in enumerate(durations):
            start = ts + 1 + offset * 20
            events.append({"ph": "X", "cat": "cpu_op", "name": site, "ts": start, "dur": 15, "tid": 1,
                           "args": {"External id": 1000 + correlation}})
            for part, us in enumerate(kernel_us):
                correlation += 1
                events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": start + 1 + part,
                               "dur": 1, "tid": 1, "args": {"correlation": correlation}})
                events.append({"ph": "X", "cat": "kernel", "name": f"{site}-device{part}", "ts": start + 2 + part * 5,
                               "dur": us, "args": {"correlation": correlation, "grid": [4, 1, 1], "block": [128, 1, 1]}})
        ts += 200
    return events


def test_profile_attribution_sums_library_kernels_and_skips_the_flush():
    runs = [[("triton_poi_fused_add_0", [10]), ("aten::addmm", [20, 2]), ("triton_poi_fused_add_0", [12])],
            [("triton_poi_fused_add_0", [14]), ("aten::addmm", [30, 2]), ("triton_poi_fused_add_0", [10])],
            [("triton_poi_fused_add_0", [12]), ("aten::addmm", [25, 1]), ("triton_poi_fused_add_0", [16])]]
    sites = kernels_from_trace(_trace(runs), {"triton_poi_fused_add_0", "aten::addmm"})
    assert [s.name for s in sites] == ["triton_poi_fused_add_0", "aten::addmm", "triton_poi_fused_add_0"]
    assert [s.median_ms for s in sites] == [pytest.approx(0.012), pytest.approx(0.026), pytest.approx(0.012)]
    assert sites[1].grid == [4, 1, 1] and sites[1].block == [128, 1, 1]


def test_compare_cli_prints_both_tracks_and_writes_json_and_html(run_tool, tmp_path):
    report_path, html_path = tmp_path / "r.json", tmp_path / "r.html"
    result = run_tool("compare", "zoo:mlp", "--repeat", "5", "--json", report_path, "--html", html_path)
    assert result.returncode == 0, result.stderr
    assert "twintrack kernel" in result.stdout and "inductor  kernel" in result.stdout
    report = json.loads(report_path.read_text())
    for name in ("eager", "inductor", "twintrack"):
        track = report["tracks"][name]
        assert track["error"] is None and track["latency_ms"] > 0 and track["rel_error"] < 1e-5, (name, track)
    assert report["tracks"]["twintrack"]["kernel_count"] == len(report["kernels"]["twintrack"])
    for name in ("twintrack", "inductor"):
        grouped = sorted(i for g in report["groups"] for i in g[name])
        assert grouped == [k["index"] for k in report["kernels"][name]], f"{name}: each kernel in one group"
    matmul_rows = [g for g in report["groups"] if g["inductor"] and g["twintrack"]]
    assert len(matmul_rows) >= 3, "each Linear's kernels sit beside Inductor's addmm"
    assert report["graph"]["nodes"] and any(n["twintrack"] and n["inductor"] for n in report["graph"]["nodes"])
    assert 'id="kernels"' in html_path.read_text()


def test_compare_training_sets_forward_and_backward_kernels_side_by_side(run_tool, tmp_path):
    """--training: both compilers train the MLP through torch.compile on
    eager's losses; each pass's kernels are matched within that pass."""
    report_path = tmp_path / "t.json"
    result = run_tool("compare", "zoo:mlp", "--training", "--steps", "2", "--json", report_path)
    assert result.returncode == 0, result.stderr
    assert "step ms" in result.stdout and "backward_0/" in result.stdout
    report = json.loads(report_path.read_text())
    for name in ("inductor", "twintrack"):
        track = report["tracks"][name]
        assert track["ok"] and track["vs_eager"]["loss"] < 1e-5 and track["graphs"] == 2, (name, track)
        assert track["kernel_count"]["forward"] > 0 and track["kernel_count"]["backward"] > 0, (name, track)
        grouped = sorted(i for g in report["groups"] for i in g[name])
        assert grouped == [k["index"] for k in report["kernels"][name]], f"{name}: each kernel in one group"
    passes = {name: {k["index"]: k["pass"] for k in report["kernels"][name]} for name in ("inductor", "twintrack")}
    for group in report["groups"]:
        assert len({passes[name][i] for name in passes for i in group[name]}) == 1, group
    backward_matmuls = [g for g in report["groups"] if g["inductor"] and g["twintrack"]
                        and passes["inductor"][g["inductor"][0]] == "backward"]
    assert len(backward_matmuls) >= 3, "each Linear's weight gradient sits beside Inductor's mm"


def test_compare_training_refuses_html(run_tool, tmp_path):
    result = run_tool("compare", "zoo:mlp", "--training", "--html", tmp_path / "r.html")
    assert result.returncode == 2 and "--training" in result.stderr and "Traceback" not in result.stderr


def test_compare_rejects_a_cpu_artifact_run(run_tool, tmp_path):
    result = run_tool("compare", "zoo:mlp", "--artifact", tmp_path)
    assert result.returncode == 2 and "--device cuda" in result.stderr and "Traceback" not in result.stderr


def test_bench_results_follow_the_schema(run_tool, tmp_path):
    jsonschema = pytest.importorskip("jsonschema")
    table = tmp_path / "models.txt"
    table.write_text("# name dtype MODEL\nsoftmax float32 zoo:softmax\nmlp_frozen float32 zoo:mlp --freeze\n")
    result = run_tool("bench", "--device", "cpu", "--models", table, "--modes", "default", "--repeat", "3",
                      "--out", tmp_path / "out")
    assert result.returncode == 0, result.stderr
    written = list((tmp_path / "out").glob("*.json"))  # <date>-<the CPU model and cores>.json
    assert len(written) == 1 and written[0].with_suffix(".md").is_file()
    bench = json.loads(written[0].read_text())
    assert bench["device"] == "cpu" and "cores" in bench["device_name"] and "cores" in written[0].name
    schema = json.loads((REPO / "bench" / "results.schema.json").read_text())
    jsonschema.validate(bench, schema)
    ratios = [m["ratio_vs_inductor"]["default"] for m in bench["models"]]
    assert bench["geomean"]["default"] == pytest.approx(math.exp(sum(map(math.log, ratios)) / len(ratios)))
    assert "**geomean**" in result.stdout


def test_committed_bench_results_follow_the_schema():
    jsonschema = pytest.importorskip("jsonschema")
    schema = json.loads((REPO / "bench" / "results.schema.json").read_text())
    for path in (REPO / "bench" / "results").glob("*.json"):
        data = json.loads(path.read_text())
        if "schema_version" in data:
            jsonschema.validate(data, schema)


def test_wrapper_parse_reads_cuda_graph_partitions():
    from twintrack.harness.inductor.capture import _kernels_of_wrapper, _Recorder
    wrapper = '''
triton_poi_fused_add_0 = async_compile.triton('triton_poi_fused_add_0', \'\'\'
@triton.jit
def triton_poi_fused_add_0(in_ptr0, out_ptr0, xnumel, XBLOCK: tl.constexpr):
    pass
\'\'\', device_str='cuda')

def partition_0(args):
    arg0_1, = args
    buf0 = empty_strided_cuda((4, ), (1, ), torch.float32)
    triton_poi_fused_add_0.run(arg0_1, buf0, 4, stream=stream0)
    buf1 = empty_strided_cuda((4, 4), (4, 1), torch.float32)
    # Topologically Sorted Source Nodes: [mm], Original ATen: [aten.mm]
    extern_kernels.mm(buf0, buf0, out=buf1)
    return (buf1, )

class Runner:
    def call(self, args):
        (buf1,) = self.partitions[0](args)
        return (buf1, )
'''
    kernels = _kernels_of_wrapper(wrapper, _Recorder())
    assert [(k.name, k.kind) for k in kernels] == [("triton_poi_fused_add_0", "triton"), ("extern_kernels.mm", "extern")]
    assert "tl.constexpr" in kernels[0].sources["triton"]


def test_compare_pairs_the_matmuls_of_a_hugging_face_llama():
    """A real model: Dynamo and torch.export trace transformers' decorators
    differently; every twintrack matmul still sits beside an Inductor matmul."""
    pytest.importorskip("transformers")
    from twintrack.harness.compare.comparison import CompareRequest, run_comparison
    report = run_comparison(CompareRequest(f"{REPO}/test/python/real_models.py:llama", repeat=2))
    assert report["tracks"]["twintrack"]["rel_error"] < 1e-5 and report["tracks"]["inductor"]["rel_error"] < 1e-5
    kinds = {track: {k["index"]: k for k in report["kernels"][track]} for track in ("twintrack", "inductor")}
    matmuls = [k["index"] for k in report["kernels"]["twintrack"] if k["name"].startswith("matmul_")]
    assert len(matmuls) >= 7
    for group in report["groups"]:
        for index in set(group["twintrack"]) & set(matmuls):
            partners = [kinds["inductor"][i]["name"] for i in group["inductor"]]
            assert partners and all(p.startswith("extern_kernels.") or "dot_product" in p for p in partners), \
                (kinds["twintrack"][index]["source_keys"], partners)


def test_the_inductor_cache_a_process_makes_goes_with_it():
    """Each comparing process compiles Inductor from a fresh cache of its
    own (honest compile times); it leaves no directory behind when it exits."""
    code = "from twintrack.harness.inductor.capture import _process_cache_dir; print(_process_cache_dir())"
    made = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert os.path.basename(made).startswith("twintrack-inductor-") and not os.path.exists(made)


@pytest.mark.parametrize("allow_tf32", [False, True])
def test_float32_as_compiled_sets_matmuls_and_convolutions_even_with_frozen_flags(monkeypatch, allow_tf32):
    """A row compiled with --allow-tf32 times every track's f32 matmuls and
    convolutions as tf32 (exact otherwise), also once a compile has frozen
    torch's global backend flags; both are restored after."""
    from twintrack.harness.numerics import float32_as_compiled
    # disable_global_flags(), undone after (the flag lives in the functions' globals, not the module's attributes)
    monkeypatch.setitem(torch.backends.flags_frozen.__globals__, "__allow_nonbracketed_mutation_flag", False)
    assert torch.backends.flags_frozen()
    before = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    with float32_as_compiled(allow_tf32):
        assert (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32) == (allow_tf32, allow_tf32)
    assert (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32) == before
