"""Once steps: the GPU plan's work on the model's state alone (parameter-
prologue marks it, host_plan.mark_once_steps makes it `once`), which the
runtime runs on the first call and again only when that state changes.
What needs no GPU is checked here; tools/gpu_check.py checks each
artifact on the GPU after its parameters change in place and as new tensors."""

import json

import pytest
import torch

import twintrack
from twintrack.compiler.host_plan import mark_once_steps
from twintrack.runtime import validate_plan
from twintrack.runtime.plan import buffers_touched


def _view(buffer, size=4):
    return {"buffer": buffer, "offset": 0, "sizes": [size], "strides": [1]}


def _launch(*buffers):
    return {"op": "launch", "grid": [1, 1, 1], "block": [32, 1, 1], "args": [{"memref": _view(b)} for b in buffers]}


def _alloc(buffer, kept=False):
    return {"op": "alloc", "buffer": buffer, "shape": [4], "dtype": "float32", **({"kept": True} if kept else {})}


def _once(steps):
    return [index for index, step in enumerate(steps) if step.get("once")]


def test_work_on_the_state_runs_once_and_its_buffer_outlives_the_call():
    steps = [_alloc("b0", kept=True), _launch("arg0", "b0"),  # a weight rounded
             _alloc("b1"), _launch("arg1", "b0", "b1"), _launch("b1", "arg2"),  # the input's work
             {"op": "free", "buffer": "b1"}, {"op": "free", "buffer": "b0"}]
    marked = mark_once_steps(steps, {"arg0"})
    assert _once(marked) == [0, 1]
    assert {"op": "free", "buffer": "b0"} not in marked and {"op": "free", "buffer": "b1"} in marked


def test_a_kept_buffer_another_step_touches_first_is_not_kept():
    """A step that is not once touching the buffer before a once step does:
    running the once steps first (or not at all) could change what it sees."""
    steps = [_alloc("b0", kept=True), _launch("arg0", "b0"), _launch("arg1", "b0"), _launch("arg0", "b0"),
             {"op": "free", "buffer": "b0"}]
    assert _once(mark_once_steps(steps, {"arg0"})) == []


def test_dropping_a_kept_buffer_drops_the_once_steps_that_read_it():
    """b1 is made from b0; once b0 is no longer kept, b1's step touches a
    buffer that is not, and nothing stays once."""
    steps = [_alloc("b0", kept=True), _launch("arg1", "b0"), _launch("arg0", "b0"),
             _alloc("b1", kept=True), _launch("b0", "b1"), _launch("b1", "arg2"),
             {"op": "free", "buffer": "b0"}, {"op": "free", "buffer": "b1"}]
    marked = mark_once_steps(steps, {"arg0"})
    assert _once(marked) == []
    assert sum(s["op"] == "free" for s in marked) == 2


def test_a_kept_buffer_only_once_steps_read_is_freed_among_them():
    steps = [_alloc("b0", kept=True), _launch("arg0", "b0"), _alloc("b1", kept=True), _launch("b0", "b1"),
             {"op": "free", "buffer": "b0"}, _launch("b1", "arg1", "arg2"), {"op": "free", "buffer": "b1"}]
    marked = mark_once_steps(steps, {"arg0"})
    assert [s["op"] for s in marked if s.get("once")] == ["alloc", "launch", "alloc", "launch", "free"]
    assert {"op": "free", "buffer": "b0", "once": True} in marked
    assert not any(s["op"] == "free" and s["buffer"] == "b1" for s in marked)


def test_a_kept_buffer_of_run_time_sizes_is_not_kept():
    """In a dynamic plan a once step must be the same at every call's sizes."""
    steps = [{**_alloc("b0", kept=True), "shape": ["batch"]}, _launch("arg0", "b0"), _launch("b0", "arg1"),
             {"op": "free", "buffer": "b0"}]
    assert _once(mark_once_steps(steps, {"arg0"})) == []


def _plan(steps, kinds=("parameter", "input", "output")):
    return {"version": 1, "arguments": [{"name": f"a{i}", "kind": kind, "shape": [4], "dtype": "float32"}
                                        for i, kind in enumerate(kinds)], "steps": steps}


def test_validation_takes_kept_buffers_and_refuses_a_once_step_on_an_input():
    launch = {**_launch("arg0", "b0"), "grid": [1, 1, 1], "block": [32, 1, 1], "dynamic_shared_bytes": 0}
    body = {**_launch("b0", "arg1", "arg2"), "grid": [1, 1, 1], "block": [32, 1, 1], "dynamic_shared_bytes": 0}
    good = _plan([{**_alloc("b0"), "once": True}, {**launch, "once": True}, body])
    assert validate_plan(good) == []
    bad = _plan([{**_alloc("b0"), "once": True}, {**launch, "once": True, "args": launch["args"] + body["args"][1:2]},
                 body])
    assert any("a once step touches arg1" in p for p in validate_plan(bad))


def test_validation_refuses_a_once_step_whose_sizes_depend_on_the_call():
    launch = {**_launch("arg0", "b0"), "grid": ["batch", 1, 1], "block": [32, 1, 1], "dynamic_shared_bytes": 0}
    body = {**_launch("b0", "arg1", "arg2"), "grid": [1, 1, 1], "block": [32, 1, 1], "dynamic_shared_bytes": 0}
    plan = {**_plan([{**_alloc("b0"), "once": True}, {**launch, "once": True}, body]), "version": 2,
            "symbols": {"batch": [1, 0]}}
    plan["arguments"][1]["shape"] = ["batch"]
    assert any("once, but its sizes depend on the call" in p for p in validate_plan(plan))
    static_grid = {**plan, "steps": [plan["steps"][0], {**launch, "once": True, "grid": [1, 1, 1]}, body]}
    assert validate_plan(static_grid) == []


def _compiled_plan(module, inputs, tmp_path, **options) -> dict:
    twintrack.export(module, inputs).lower(to=None, target="gpu", **options).save(tmp_path / "gpu")
    plan = json.loads((tmp_path / "gpu" / "plan.json").read_text())
    assert validate_plan(plan) == []
    return plan


def _once_launches(plan) -> list[dict]:
    return [s for s in plan["steps"] if s["op"] == "launch" and s.get("once")]


def test_a_tf32_mlp_rounds_its_weights_once(run_tool, tmp_path):
    """The three weights' roundings are once steps; the matmuls, which read
    the input, run every call; the rounded weights outlive the call."""
    result = run_tool("compile", "zoo:mlp?batch=256&features=128&hidden=128&out=128", "--pipeline", "gpu",
                      "--allow-tf32", "-o", tmp_path / "m", "-q")
    assert result.returncode == 0, result.stderr
    assert "once per state: forward_kernel, forward_kernel_0, forward_kernel_1 (3 of 6 kernels" in result.stdout
    plan = json.loads((tmp_path / "m" / "plan.json").read_text())
    kinds = {f"arg{i}": a["kind"] for i, a in enumerate(plan["arguments"])}
    once = _once_launches(plan)
    assert len(once) == 3 and all(not s["path"].startswith("wgmma") for s in once)
    assert all(kinds[b] == "parameter" for s in once for b in buffers_touched(s) if b in kinds)
    every_call = [s for s in plan["steps"] if s["op"] == "launch" and not s.get("once")]
    assert len(every_call) == 3 and all(s["path"].startswith("wgmma-matmul") for s in every_call)
    kept = {b for s in once for b in buffers_touched(s) if b not in kinds}
    assert len(kept) == 3 and not any(s["op"] == "free" and s["buffer"] in kept for s in plan["steps"])
    manifest = json.loads((tmp_path / "m" / "manifest.json").read_text())
    assert [k["name"] for k in manifest["kernels"] if k.get("once")] == [s["module"] for s in once]


def test_a_dynamic_tf32_mlp_rounds_its_weights_once_for_every_size(run_tool, tmp_path):
    """With M known only at run time, the weights' roundings are the same
    work at every size: once steps of the dynamic plan (one set of rounded
    weights for all the sizes it resolves to), the matmuls every call."""
    result = run_tool("compile", "zoo:mlp?batch=256&features=128&hidden=128&out=128", "--pipeline", "gpu",
                      "--allow-tf32", "--dynamic", "x:0=batch[1,1024]", "-o", tmp_path / "m", "-q")
    assert result.returncode == 0, result.stderr
    plan = json.loads((tmp_path / "m" / "plan.json").read_text())
    assert plan["symbols"] and validate_plan(plan) == []
    once = _once_launches(plan)
    assert len(once) == 3 and all(isinstance(size, int) for s in once for size in s["grid"])
    every_call = [s for s in plan["steps"] if s["op"] == "launch" and not s.get("once")]
    assert len(every_call) == 3 and all(s["path"].startswith("wgmma-matmul") for s in every_call)
    assert all(any(isinstance(size, str) for size in s["grid"]) for s in every_call)


class ConvBatchNorm(torch.nn.Module):
    """A channels-last convolution (its weight copied to the layout its
    kernel reads) and batch norm in train mode (its running statistics
    updated every call)."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(16, 32, 3, padding=1)
        self.norm = torch.nn.BatchNorm2d(32)

    def forward(self, x):
        return self.norm(self.conv(x))


def test_state_the_program_writes_is_never_read_by_once_steps(tmp_path):
    module = ConvBatchNorm().train()
    x = torch.randn(4, 16, 12, 12).to(memory_format=torch.channels_last)
    plan = _compiled_plan(module, (x,), tmp_path)
    names = {f"arg{i}": a["name"] for i, a in enumerate(plan["arguments"])}
    read_once = {names[b] for s in _once_launches(plan) for b in buffers_touched(s) if b in names}
    assert "conv.weight" in read_once  # its layout copy
    assert not read_once & {"norm.running_mean", "norm.running_var", "norm.num_batches_tracked"}


def test_nothing_is_once_where_the_state_meets_the_input_in_every_kernel(tmp_path):
    module = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.GELU()).to(torch.float16)
    plan = _compiled_plan(module, (torch.randn(32, 64, dtype=torch.float16),), tmp_path)
    assert _once_launches(plan) == []
    assert not any(s.get("once") for s in plan["steps"])


def test_weights_of_one_shape_keep_a_copy_each(tmp_path):
    """Two 3x3 convolutions of one shape: their weights' channels-last
    copies would share one buffer (one tensor.empty after CSE), written
    again between the convolutions; state-destinations gives each its own,
    and both copies are once steps into buffers of their own."""
    module = torch.nn.Sequential(torch.nn.Conv2d(16, 16, 3, padding=1), torch.nn.ReLU(),
                                 torch.nn.Conv2d(16, 16, 3, padding=1))
    x = torch.randn(4, 16, 12, 12).to(memory_format=torch.channels_last)
    plan = _compiled_plan(module, (x,), tmp_path)
    names = {f"arg{i}": a["name"] for i, a in enumerate(plan["arguments"])}
    copies = [s for s in _once_launches(plan) if any(names.get(b, "").endswith(".weight") for b in buffers_touched(s))]
    assert {names[b] for s in copies for b in buffers_touched(s) if b in names} == {"0.weight", "2.weight"}
    written = [next(b for b in buffers_touched(s) if b not in names) for s in copies]
    assert len(set(written)) == 2


class WeightAsInput(torch.nn.Module):
    """A weight passed in by the caller: an input like any other."""

    def forward(self, x, weight):
        return x @ weight


def _backend_plans(module, inputs, tmp_path) -> list[dict]:
    """The plans torch.compile(backend="twintrack") writes for the GPU (compiled only: no GPU here)."""
    torch._dynamo.reset()
    options = {"target": "gpu", "compile_only": True, "allow_tf32": True, "dump": str(tmp_path / "dump")}
    with torch.no_grad():
        torch.testing.assert_close(torch.compile(module, backend="twintrack", options=options)(*inputs),
                                   module(*inputs))
    plans = [json.loads(path.read_text()) for path in sorted((tmp_path / "dump").glob("*/plan.json"))]
    assert plans and all(validate_plan(plan) == [] for plan in plans)
    return plans


def test_torch_compile_rounds_the_parameters_it_hands_over_once(tmp_path):
    """torch.compile hands a module's parameters to the backend as graph
    inputs (AOTAutograd's static inputs): they are state, and their tf32
    roundings are once steps, as in twintrack.compile's artifact."""
    torch.manual_seed(0)
    module = torch.nn.Sequential(torch.nn.Linear(128, 128), torch.nn.ReLU(), torch.nn.Linear(128, 128))
    (plan,) = _backend_plans(module, (torch.randn(256, 128),), tmp_path)
    state = {f"arg{i}" for i, a in enumerate(plan["arguments"]) if a.get("state")}
    once = _once_launches(plan)
    assert len(state) == 4 and len(once) == 2  # two weights and biases; each weight rounded once
    assert all(b in state for s in once for b in buffers_touched(s) if b.startswith("arg"))
    every_call = [s for s in plan["steps"] if s["op"] == "launch" and not s.get("once")]
    assert len(every_call) == 2 and all(s["path"].startswith("wgmma-matmul") for s in every_call)


def test_torch_compile_rounds_a_buckets_parameters_once(tmp_path):
    """With dynamic=True each bucket of sizes compiles a dynamic plan; the
    parameters AOTAutograd hands over are its state too."""
    torch._dynamo.reset()
    module = torch.nn.Sequential(torch.nn.Linear(128, 128), torch.nn.ReLU(), torch.nn.Linear(128, 128))
    options = {"target": "gpu", "compile_only": True, "allow_tf32": True, "dump": str(tmp_path / "dump")}
    compiled = torch.compile(module, backend="twintrack", options=options, dynamic=True)
    x = torch.randn(100, 128)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), module(x))
    (path,) = (tmp_path / "dump").glob("*bucket*/plan.json")
    plan = json.loads(path.read_text())
    assert plan["symbols"] and validate_plan(plan) == []
    assert sum(bool(a.get("state")) for a in plan["arguments"]) == 4
    assert len(_once_launches(plan)) == 2  # each weight rounded once


def test_torch_compile_leaves_a_weight_the_caller_passes_every_call(tmp_path):
    (plan,) = _backend_plans(WeightAsInput(), (torch.randn(256, 128), torch.randn(128, 128)), tmp_path)
    assert not any(a.get("state") for a in plan["arguments"])
    assert _once_launches(plan) == []
