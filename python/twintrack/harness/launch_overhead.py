"""The runtime's host cost per kernel: a plan of empty kernels, run plainly
and replayed as a CUDA graph.

The kernel does nothing, so the GPU drains launches faster than the host
issues them and the wall time is the host's. Each launch carries what a
typical kernel does: three rank-2 memrefs (21 parameters), one of them
the plan's output.
"""

from __future__ import annotations

import json
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

EMPTY_KERNEL = "twintrack_empty"
MEMREFS = 3
RANK = 2
SHAPE = [64, 64]


def empty_kernel_ptx() -> str:
    words = MEMREFS * (3 + 2 * RANK)
    parameters = ",\n".join(f"    .param .u64 p{i}" for i in range(words))
    return (".version 8.0\n.target sm_90\n.address_size 64\n\n"
            f".visible .entry {EMPTY_KERNEL}(\n{parameters}\n)\n{{\n    ret;\n}}\n")


def write_empty_plan(outdir: Path, launches: int, ptxas: str) -> Path:
    """An artifact directory whose plan launches the empty kernel `launches` times."""
    kernels = outdir / "kernels"
    kernels.mkdir(parents=True, exist_ok=True)
    (kernels / "empty.ptx").write_text(empty_kernel_ptx())
    subprocess.run([ptxas, "-arch=sm_90", str(kernels / "empty.ptx"), "-o", str(kernels / "empty.cubin")],
                   check=True, capture_output=True)
    kinds = ["input"] * (MEMREFS - 1) + ["output"]
    arguments = [{"name": f"x{i}", "kind": kind, "shape": SHAPE, "dtype": "float32"} for i, kind in enumerate(kinds)]
    view = {"offset": 0, "sizes": SHAPE, "strides": [SHAPE[1], 1]}
    launch = {"op": "launch", "module": "empty", "kernel": EMPTY_KERNEL, "grid": [1, 1, 1], "block": [32, 1, 1],
              "dynamic_shared_bytes": 0, "args": [{"memref": {"buffer": f"arg{i}", **view}} for i in range(MEMREFS)]}
    (outdir / "plan.json").write_text(json.dumps({"arguments": arguments, "steps": [launch] * launches}))
    (outdir / "manifest.json").write_text(json.dumps({"pipeline": "gpu", "executable": "plan.json"}))
    return outdir


@dataclass(frozen=True)
class HostCost:
    launches: int            # kernels in the plan
    calls: int
    plain_us_per_call: float
    graph_us_per_call: float

    def figures(self) -> dict:
        return {"launches": self.launches, "calls": self.calls,
                "plain_us_per_call": self.plain_us_per_call, "graph_us_per_call": self.graph_us_per_call}


def host_cost(outdir: Path, launches: int, calls: int) -> HostCost:
    """Microseconds of wall time per call of the plan, plain and as a graph
    (each after warm-up calls, with the GPU drained at the end)."""
    import torch
    from ..runtime import GpuExecutable

    tensors = [torch.randn(SHAPE, device="cuda") for _ in range(MEMREFS - 1)]
    figures = []
    for graph in (False, True):
        executable = GpuExecutable(outdir, cuda_graph=graph)
        for _ in range(10):
            executable(*tensors)
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(calls):
            executable(*tensors)
        torch.cuda.synchronize()
        figures.append((time.perf_counter() - start) / calls * 1e6)
    return HostCost(launches, calls, *figures)


def per_launch_us(small: HostCost, large: HostCost, graph: bool) -> float:
    """The cost of one more kernel: the slope between two plan lengths."""
    attribute = "graph_us_per_call" if graph else "plain_us_per_call"
    return (getattr(large, attribute) - getattr(small, attribute)) / (large.launches - small.launches)
