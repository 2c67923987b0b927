"""Host-plan transforms that need neither MLIR nor a GPU."""

from twintrack.compiler.host_plan import free_after_last_use
from twintrack.runtime import validate_plan


def _view(buffer):
    return {"memref": {"buffer": buffer, "offset": 0, "sizes": [4], "strides": [1]}}


def _launch(*buffers):
    return {"op": "launch", "module": "m", "kernel": "k", "grid": [1, 1, 1], "block": [32, 1, 1],
            "args": [_view(b) for b in buffers]}


def test_frees_move_up_to_the_last_use():
    steps = [{"op": "alloc", "buffer": "b0", "shape": [4], "dtype": "float32"},
             _launch("arg0", "b0"),
             {"op": "alloc", "buffer": "b1", "shape": [4], "dtype": "float32"},
             _launch("b0", "b1"),
             _launch("b1", "arg1"),
             {"op": "free", "buffer": "b0"},
             {"op": "free", "buffer": "b1"}]
    moved = free_after_last_use(steps)
    ops = [(s["op"], s.get("buffer")) for s in moved]
    assert ops == [("alloc", "b0"), ("launch", None), ("alloc", "b1"), ("launch", None), ("free", "b0"),
                   ("launch", None), ("free", "b1")]
    plan = {"arguments": [{"shape": [4], "dtype": "float32"}] * 2, "steps": moved}
    assert validate_plan(plan) == []


def test_an_unused_buffer_is_freed_right_after_its_allocation():
    steps = [{"op": "alloc", "buffer": "b0", "shape": [4], "dtype": "float32"}, _launch("arg0"),
             {"op": "free", "buffer": "b0"}]
    assert [s["op"] for s in free_after_last_use(steps)] == ["alloc", "free", "launch"]


def test_bfloat16_constants_are_saved_as_their_bits(tmp_path):
    """NumPy has no bfloat16: the plan saves a bf16 constant's 16-bit
    patterns (uint16) and the runtime reinterprets them by the step's dtype
    (the plan stage failed with "data type 'bfloat16' not understood")."""
    import json

    import numpy as np
    import torch

    import twintrack
    from twintrack.tooling import find_libdevice, find_tool
    if find_tool("ptxas") is None or find_libdevice() is None:
        import pytest
        pytest.skip("needs ptxas and libdevice (the CUDA toolkit)")

    class WithConstant(torch.nn.Module):
        def forward(self, x):  # the filled output is a bf16 constant of the plan
            return torch.full_like(x, -2.25), x + 1

    compiled = twintrack.compile(WithConstant(), (torch.ones(4, dtype=torch.bfloat16),), target="gpu")
    compiled.save(tmp_path)
    steps = json.loads((tmp_path / "plan.json").read_text())["steps"]
    constants = [s for s in steps if s["op"] == "constant" and s["dtype"] == "bfloat16"]
    assert constants, [s for s in steps if s["op"] == "constant"]
    values = [torch.from_numpy(np.load(tmp_path / s["file"])).view(torch.bfloat16).flatten() for s in constants]
    assert any(torch.equal(v, torch.full((4,), -2.25, dtype=torch.bfloat16)) for v in values), values
