"""Host plans with dynamic shapes (plan version 2): the expression helpers,
a plan resolved at a call's sizes, its validation, and the input checks of
a GpuExecutable; all without a GPU. The last test runs a dynamic plan of a
hand-written kernel on the GPU, plainly and as one CUDA graph per size."""

import json

import pytest
import torch

from twintrack.dynamic_shapes import concrete_shape
from twintrack.errors import ArtifactError, InputMismatchError
from twintrack.runtime import executor as executor_module
from twintrack.runtime.executor import GpuExecutable
from twintrack.runtime.plan import bind_symbols, resolve_plan, validate_plan


def value(expression: str, **sizes) -> int:
    return concrete_shape((expression,), sizes)[0]


# ---------------------------------------------------------------- expressions

def test_host_arithmetic_is_mlir_arith_on_index_values():
    assert value("tdiv(-7, 2)") == -3 and value("tdiv(7, -2)") == -3 and value("tdiv(7, 2)") == 3
    assert value("trem(-7, 2)") == -1 and value("trem(7, -2)") == 1 and value("trem(7, 2)") == 1
    assert value("ceildiv(7, 2)") == 4 and value("ceildiv(-7, 2)") == -3 and value("ceildiv(8, 2)") == 4
    assert value("floordiv(-7, 2)") == -4 and value("max(3, n)", n=5) == 5 and value("min(3, n)", n=5) == 3
    assert [value(f"{name}(1, 2)") for name in ("lt", "le", "gt", "ge", "eq", "ne")] == [1, 1, 0, 0, 0, 1]
    assert [value(f"{name}(-1, 1)") for name in ("lt", "ult", "ule", "ugt", "uge")] == [1, 0, 0, 1, 1]
    assert value("select(lt(n, 4), 10, 20)", n=3) == 10 and value("select(lt(n, 4), 10, 20)", n=4) == 20


# ---------------------------------------------------------------- a version-2 plan

def _view(buffer: str, offset, sizes: list, strides: list) -> dict:
    return {"buffer": buffer, "offset": offset, "sizes": sizes, "strides": strides}


def dynamic_plan() -> dict:
    """x[batch, seq, 16] and mask[batch, seq] in; y[batch, seq // 4] out:
    a temporary of seq rows, a kernel over them, a copy into y."""
    return {
        "version": 2,
        "arguments": [{"name": "x", "kind": "input", "shape": ["batch", "seq", 16], "dtype": "float32"},
                      {"name": "mask", "kind": "input", "shape": ["batch", "seq"], "dtype": "float32"},
                      {"name": "pooled", "kind": "input", "shape": ["batch", "seq // 4"], "dtype": "float32"},
                      {"name": "y", "kind": "output", "shape": ["batch", "seq // 4"], "dtype": "float32"}],
        "symbols": {"batch": [0, 0], "seq": [0, 1]},
        "lets": [["t0", "seq * 16"], ["t1", "ceildiv(t0, 256)"]],
        "steps": [
            {"op": "alloc", "buffer": "b0", "shape": ["seq", 16], "dtype": "float32"},
            {"op": "launch", "module": "m", "kernel": "k", "grid": ["t1", 1, 1], "block": [256, 1, 1],
             "dynamic_shared_bytes": "t0 * 4",
             "args": [{"memref": _view("arg0", 0, ["batch", "seq", 16], ["t0", 16, 1])},
                      {"memref": _view("b0", 0, ["seq", 16], [16, 1])},
                      {"scalar": "seq", "type": "index"}, {"scalar": 0.5, "type": "f32"}]},
            {"op": "copy", "src": _view("b0", 0, ["seq // 4"], [64]),
             "dst": _view("arg3", "seq // 4", ["seq // 4"], [1])},
            {"op": "free", "buffer": "b0"}],
    }


def test_a_dynamic_plan_resolves_to_numbers_at_a_calls_sizes():
    plan = dynamic_plan()
    sizes = bind_symbols(plan, [(2, 20, 16), (2, 20), (2, 5)])
    assert sizes == {"batch": 2, "seq": 20}
    resolved = resolve_plan(plan, sizes)
    assert resolved["version"] == 1 and "symbols" not in resolved and "lets" not in resolved
    assert [a["shape"] for a in resolved["arguments"]] == [[2, 20, 16], [2, 20], [2, 5], [2, 5]]
    alloc, launch, copy, _ = resolved["steps"]
    assert alloc["shape"] == [20, 16]
    assert launch["grid"] == [2, 1, 1] and launch["block"] == [256, 1, 1]  # ceildiv(320, 256)
    assert launch["dynamic_shared_bytes"] == 1280
    assert launch["args"][0]["memref"] == _view("arg0", 0, [2, 20, 16], [320, 16, 1])
    assert launch["args"][1]["memref"] == _view("b0", 0, [20, 16], [16, 1])
    assert launch["args"][2:] == [{"scalar": 20, "type": "index"}, {"scalar": 0.5, "type": "f32"}]
    assert copy["dst"] == _view("arg3", 5, [5], [1])
    assert validate_plan(resolved) == []
    assert plan == dynamic_plan()  # resolving leaves the plan as it was


def test_a_static_plan_resolves_to_itself():
    plan = {"version": 1, "arguments": [{"name": "x", "kind": "input", "shape": [4], "dtype": "float32"}],
            "steps": [{"op": "launch", "module": "m", "kernel": "k", "grid": [1, 1, 1], "block": [32, 1, 1],
                       "args": [{"memref": _view("arg0", 0, [4], [1])}]}]}
    assert validate_plan(plan) == []
    assert resolve_plan(plan, {}) is plan
    assert bind_symbols(plan, [(4,)]) == {}


def test_an_expression_without_a_value_names_itself_and_its_place():
    plan = dynamic_plan()
    plan["steps"][1]["grid"][0] = "seq // (batch - 2)"
    with pytest.raises(ArtifactError, match=r"step 1 \(launch\) grid\[0\]: 'seq // \(batch - 2\)' has no value "
                                            r"at \{'batch': 2, 'seq': 20\}"):
        resolve_plan(plan, {"batch": 2, "seq": 20})
    plan["steps"][1]["grid"][0] = "nope + 1"
    with pytest.raises(ArtifactError, match=r"step 1 \(launch\) grid\[0\]: 'nope \+ 1' uses nope"):
        resolve_plan(plan, {"batch": 2, "seq": 20})
    plan = dynamic_plan()
    plan["lets"] = [["t0", "t1 + 1"], ["t1", "seq"]]
    with pytest.raises(ArtifactError, match=r"let t0: 't1 \+ 1' uses t1 before its let"):
        resolve_plan(plan, {"batch": 2, "seq": 20})


def test_a_dynamic_plan_validates_its_names_and_leaves_open_bounds_unchecked():
    assert validate_plan(dynamic_plan()) == []


def _problems(change) -> list[str]:
    plan = dynamic_plan()
    change(plan)
    return validate_plan(plan)


def test_a_broken_dynamic_plan_has_named_problems():
    assert _problems(lambda p: p.update(lets=[["t0", "t1 * 16"], ["t1", "seq"]])) \
        == ["let t0: 't1 * 16' uses t1 before its let"]
    assert _problems(lambda p: p["steps"][1]["grid"].__setitem__(0, "blocks")) \
        == ["step 1 (launch) grid[0]: 'blocks' uses blocks, neither a symbol nor an earlier let"]
    assert _problems(lambda p: p["steps"][0]["shape"].__setitem__(0, "seq +")) \
        == ["step 0 (alloc) shape[0]: 'seq +' is not an expression"]
    assert _problems(lambda p: p["symbols"].update(batch=[7, 0])) == ["symbol batch reads argument 7; the plan has 4"]
    assert _problems(lambda p: p["symbols"].update(batch=[3, 0])) == ["symbol batch reads argument 3, an output"]
    assert _problems(lambda p: p["symbols"].update(batch=[0, 2])) \
        == ["symbol batch reads argument 0 dim 2, whose size is 16"]
    assert _problems(lambda p: p["arguments"][3]["shape"].__setitem__(1, "t0")) \
        == ["argument 3 shape[1]: 't0' uses t0, neither a symbol nor an earlier let"]  # lets are not for shapes
    assert _problems(lambda p: p["steps"][1]["args"][3].__setitem__("scalar", "seq")) \
        == ["step 1 (launch) args[3]: a f32 scalar cannot be the expression 'seq'"]
    assert _problems(lambda p: p["steps"][1]["block"].__setitem__(0, 2048)) \
        == ["step 1 (launch): 2048 threads per block"]
    assert _problems(lambda p: p.update(version=3)) == ["plan version 3; this runtime reads versions 1, 2"]


def test_an_expression_in_a_plan_without_symbols_is_a_problem():
    plan = dynamic_plan()
    del plan["symbols"], plan["lets"]
    problems = validate_plan(plan)
    assert "step 0 (alloc) shape[0]: 'seq' is an expression, but the plan has no symbols or lets" in problems


# ---------------------------------------------------------------- an executable's input checks

def write_artifact(directory, plan: dict, dynamic: list[dict] = ()) -> GpuExecutable:
    """A GPU artifact of `plan` (no kernels: nothing launches here)."""
    specs = [{k: a[k] for k in ("name", "shape", "dtype", "kind")} for a in plan["arguments"]]
    manifest = {"pipeline": "gpu", "executable": "plan.json", "arguments": [],
                "inputs": [s for s in specs if s["kind"] == "input"],
                "outputs": [s for s in specs if s["kind"] == "output"], "dynamic": list(dynamic)}
    (directory / "manifest.json").write_text(json.dumps(manifest))
    (directory / "plan.json").write_text(json.dumps(plan))
    return GpuExecutable(directory)


RANGES = [{"input": 0, "dim": 0, "name": "batch", "low": 1, "high": 8},
          {"input": 0, "dim": 1, "name": "seq", "low": 4, "high": 64, "multiple": 4}]


def check(executable: GpuExecutable, *shapes):
    """_check_inputs on CPU tensors: a good call gets as far as asking for CUDA tensors."""
    tensors = [torch.zeros(shape) for shape in shapes]
    with pytest.raises(InputMismatchError, match="expected a CUDA tensor"):
        executable._check_inputs(tensors)


def test_dynamic_inputs_are_checked_against_their_symbols(tmp_path):
    executable = write_artifact(tmp_path, dynamic_plan(), RANGES)
    check(executable, (2, 20, 16), (2, 20), (2, 5))
    check(executable, (8, 64, 16), (8, 64), (8, 16))

    def refused(*shapes):
        with pytest.raises(InputMismatchError) as error:
            executable._check_inputs([torch.zeros(shape) for shape in shapes])
        return str(error.value)

    assert refused((2, 20, 16), (3, 20), (2, 5)) == \
        "mask (input) dim 0 is 3, expected batch = 2 (batch is x dim 0); float32[batch, seq] is [2, 20] here"
    assert refused((2, 20, 16), (2, 20), (2, 6)) == \
        "pooled (input) dim 1 is 6, expected seq // 4 = 5 (seq is x dim 1); float32[batch, seq // 4] is [2, 5] here"
    assert refused((2, 20, 15), (2, 20), (2, 5)) == \
        "x (input) dim 2 is 15, expected 16; float32[batch, seq, 16] is [2, 20, 16] here"
    assert refused((2, 20), (2, 20), (2, 5)) == "x (input): expected float32[batch, seq, 16], got float32[2, 20]"
    assert refused((2, 20, 16), (2, 20), (2, 5, 1)) == \
        "pooled (input): expected float32[batch, seq // 4], got float32[2, 5, 1]"
    assert refused((9, 20, 16), (9, 20), (9, 5)) == "x dim 0 (batch) is 9; compiled for batch in [1, 8]"
    assert refused((2, 18, 16), (2, 18), (2, 4)).endswith("compiled for seq in [4, 64], a multiple of 4")
    assert refused((2, 20, 16), (2, 20)) == "expected 3 tensors (state then inputs), got 2"
    assert sorted(executable._sized_plans) == [(2, 20), (8, 64)]  # refused sizes resolve nothing


def test_resolutions_are_kept_per_size_and_the_least_recent_dropped(tmp_path, monkeypatch):
    monkeypatch.setattr(executor_module, "MAX_SIZED_PLANS", 2)
    executable = write_artifact(tmp_path, dynamic_plan())
    check(executable, (1, 8, 16), (1, 8), (1, 2))
    first = executable._sized_plans[(1, 8)]
    assert first.outputs[0]["shape"] == [1, 2] and first.plan["steps"][1]["grid"] == [1, 1, 1]
    first_launch = first.plan["steps"][1]
    executable._launches[id(first_launch)] = "prepared"  # as a call would have
    check(executable, (2, 8, 16), (2, 8), (2, 2))
    check(executable, (1, 8, 16), (1, 8), (1, 2))  # used again: now the most recent
    assert executable._sized_plans[(1, 8)] is first
    check(executable, (3, 8, 16), (3, 8), (3, 2))
    assert list(executable._sized_plans) == [(1, 8), (3, 8)]
    check(executable, (4, 8, 16), (4, 8), (4, 2))
    assert list(executable._sized_plans) == [(3, 8), (4, 8)]
    assert id(first_launch) not in executable._launches  # dropped with its resolution


def test_every_resolution_shares_the_once_steps_and_their_buffers(tmp_path):
    """Once steps have the same sizes at every call (validate_plan): the
    resolutions share one Kept, so the work on the state runs once for all
    sizes and its buffers are held once."""
    plan = dynamic_plan()
    plan["arguments"].insert(3, {"name": "w", "kind": "parameter", "shape": [16], "dtype": "float32"})
    plan["arguments"][4]["shape"] = ["batch", "seq // 4"]
    for step in plan["steps"]:  # the output is argument 4 now
        if step["op"] == "copy":
            step["dst"]["buffer"] = "arg4"
    rounding = {"op": "launch", "module": "m", "kernel": "round", "grid": [1, 1, 1], "block": [16, 1, 1],
                "dynamic_shared_bytes": 0, "once": True,
                "args": [{"memref": _view("arg3", 0, [16], [1])}, {"memref": _view("b9", 0, [16], [1])}]}
    plan["steps"][:0] = [{"op": "alloc", "buffer": "b9", "shape": [16], "dtype": "float32", "once": True}, rounding]
    assert validate_plan(plan) == []
    executable = write_artifact(tmp_path, plan)
    check(executable, (1, 8, 16), (1, 8), (1, 2), (16,))
    check(executable, (2, 12, 16), (2, 12), (2, 3), (16,))
    first, second = executable._sized_plans.values()
    assert first.once is second.once and first.once is not None
    assert [step["kernel"] for _, step in first.once.steps if step["op"] == "launch"] == ["round"]
    assert all(not step.get("once") for sized in (first, second) for _, step in sized.steps)


def test_a_static_plan_is_checked_as_before(tmp_path):
    plan = {"version": 1, "arguments": [{"name": "x", "kind": "input", "shape": [4, 2], "dtype": "float32"},
                                        {"name": "y", "kind": "output", "shape": [4, 2], "dtype": "float32"}],
            "steps": [{"op": "copy", "src": _view("arg0", 0, [4, 2], [2, 1]), "dst": _view("arg1", 0, [4, 2], [2, 1])}]}
    executable = write_artifact(tmp_path, plan)
    check(executable, (4, 2))
    with pytest.raises(InputMismatchError, match=r"^x \(input\): expected float32\[4, 2\], got float32\[4, 3\]$"):
        executable._check_inputs([torch.zeros(4, 3)])
    assert executable._static.plan is executable.plan and not executable._sized_plans


# ---------------------------------------------------------------- on the GPU

ADD_SIZE_PTX = """.version 8.0
.target sm_90
.address_size 64

.visible .entry add_size(
    .param .u64 x_allocated, .param .u64 x_aligned, .param .u64 x_offset, .param .u64 x_size, .param .u64 x_stride,
    .param .u64 y_allocated, .param .u64 y_aligned, .param .u64 y_offset, .param .u64 y_size, .param .u64 y_stride,
    .param .u64 n
)
{
    .reg .pred %outside;
    .reg .b32 %r<4>;
    .reg .b64 %rd<8>;
    .reg .f32 %f<3>;
    mov.u32 %r1, %ctaid.x;
    mov.u32 %r2, %ntid.x;
    mov.u32 %r3, %tid.x;
    mul.wide.u32 %rd1, %r1, %r2;
    cvt.u64.u32 %rd2, %r3;
    add.u64 %rd1, %rd1, %rd2;
    ld.param.u64 %rd3, [n];
    setp.ge.u64 %outside, %rd1, %rd3;
    @%outside bra END;
    ld.param.u64 %rd4, [x_aligned];
    ld.param.u64 %rd5, [y_aligned];
    cvta.to.global.u64 %rd4, %rd4;
    cvta.to.global.u64 %rd5, %rd5;
    shl.b64 %rd6, %rd1, 2;
    add.u64 %rd4, %rd4, %rd6;
    add.u64 %rd5, %rd5, %rd6;
    ld.global.f32 %f1, [%rd4];
    cvt.rn.f32.u64 %f2, %rd3;
    add.f32 %f1, %f1, %f2;
    st.global.f32 [%rd5], %f1;
END:
    ret;
}
"""


def add_size_plan() -> dict:
    """y = x + n for x of n elements: a kernel into a temporary, copied into y."""
    vector = lambda buffer: {"memref": _view(buffer, 0, ["n"], [1])}  # noqa: E731
    return {"version": 2,
            "arguments": [{"name": "x", "kind": "input", "shape": ["n"], "dtype": "float32"},
                          {"name": "y", "kind": "output", "shape": ["n"], "dtype": "float32"}],
            "symbols": {"n": [0, 0]}, "lets": [["blocks", "ceildiv(n, 128)"]],
            "steps": [{"op": "alloc", "buffer": "b0", "shape": ["n"], "dtype": "float32"},
                      {"op": "launch", "module": "add_size", "kernel": "add_size", "grid": ["blocks", 1, 1],
                       "block": [128, 1, 1], "dynamic_shared_bytes": 0,
                       "args": [vector("arg0"), vector("b0"), {"scalar": "n", "type": "index"}]},
                      {"op": "copy", "src": vector("b0")["memref"], "dst": vector("arg1")["memref"]},
                      {"op": "free", "buffer": "b0"}]}


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("cuda_graph", [False, True])
def test_a_dynamic_plan_runs_at_each_size_with_a_graph_per_size(tmp_path, cuda_graph):
    kernels = tmp_path / "kernels"
    kernels.mkdir()
    (kernels / "add_size.ptx").write_text(ADD_SIZE_PTX)
    (kernels / "add_size.cubin").write_bytes(b"\0")  # no cubin: the driver compiles the PTX
    write_artifact(tmp_path, add_size_plan())
    executable = GpuExecutable(tmp_path, cuda_graph=cuda_graph)
    graphs = {}
    for n in (100, 300, 100, 1000, 300):
        x = torch.randn(n, device="cuda")
        (y,) = executable(x)
        torch.testing.assert_close(y, x + n)
        if cuda_graph:
            graphs.setdefault(n, executable._graph)
            assert executable._graph is graphs[n]  # the graph of this size, replayed
    assert list(executable._sized_plans) == [(100,), (1000,), (300,)]
    if cuda_graph:
        assert len(set(map(id, graphs.values()))) == 3
        assert executable.replay_summary()["copied_or_bound"] == ["y"]
    profile = executable.profile(torch.randn(7, device="cuda"), repeat=2)
    assert [entry["kernel"] for entry in profile] == ["add_size"]
