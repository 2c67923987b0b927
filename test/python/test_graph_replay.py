"""What a CUDA-graph replay patches and what it copies, and the launch
overhead fixture: the parts that need no GPU. The replay itself runs on the
GPU machine (tools/gpu_check.py checks each artifact's replay on new inputs
and new parameter tensors; tools/launch_overhead.py times it)."""

import json

import pytest
import torch

from twintrack.harness.launch_overhead import EMPTY_KERNEL, write_empty_plan
from twintrack.runtime import validate_plan
from twintrack.runtime.cuda_driver import LaunchParameters
from twintrack.runtime.executor import BufferLayout
from twintrack.runtime.graph_replay import copied_buffers
from twintrack.tooling import find_tool


def _view(buffer):
    return {"buffer": buffer, "offset": 0, "sizes": [4], "strides": [1]}


def test_only_the_arguments_a_copy_step_touches_are_copied():
    plan = {"steps": [{"op": "copy", "src": _view("arg0"), "dst": _view("b0")},
                      {"op": "launch", "args": [{"memref": _view("b0")}, {"memref": _view("arg1")}]},
                      {"op": "copy", "src": _view("b1"), "dst": _view("arg3")},
                      {"op": "copy", "src": _view("b1"), "dst": _view("b2")}]}
    assert copied_buffers(plan) == {"arg0", "arg3"}


def test_launch_parameters_point_only_the_named_buffers():
    parameters = LaunchParameters([{"memref": _view("arg0")}, {"scalar": 3, "type": "i32"},
                                   {"memref": _view("b0")}])
    parameters.point({"arg0": 4096, "b0": 8192})
    parameters.point({"arg0": 12288})
    assert parameters.addresses() == {"arg0": 12288, "b0": 8192}
    assert parameters.buffers == {"arg0", "b0"}


@pytest.mark.parametrize("shape", [[], [7], [4, 3], [2, 0, 5], [3, 1, 8, 2]])
def test_a_buffer_layout_has_torchs_dense_strides(shape):
    layout = BufferLayout(shape, "bfloat16")
    assert layout.shape == tuple(shape) and layout.dtype is torch.bfloat16
    assert layout.strides == torch.empty(shape).stride()


@pytest.mark.skipif(find_tool("ptxas") is None, reason="needs ptxas (the CUDA toolkit)")
def test_the_empty_plan_is_valid_and_its_kernel_assembles(tmp_path):
    outdir = write_empty_plan(tmp_path, 5, find_tool("ptxas"))
    plan = json.loads((outdir / "plan.json").read_text())
    assert validate_plan(plan) == []
    assert [s["kernel"] for s in plan["steps"]] == [EMPTY_KERNEL] * 5
    cubin = (outdir / "kernels/empty.cubin").read_bytes()
    assert cubin.startswith(b"\x7fELF") and EMPTY_KERNEL.encode() in cubin
