"""The runtime's host cost per kernel: a plan of empty kernels, run plainly
and replayed as a CUDA graph.

Each sample keeps the GPU busy (a sleeping kernel) while the host issues a
few calls, fewer launches than the launch queue holds: the host never
waits on the GPU, so the wall time is the host's alone. Each launch carries
what a typical kernel does: three rank-2 memrefs (21 parameters), one of
them the plan's output. For scale, the same samples time the driver's
cuLaunchKernel alone and one launch of torch's own (an in-place add).
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


BUSY_CYCLES = 100_000_000  # the sleeping kernel: tens of milliseconds, longer than any sample
SAMPLES = 15
QUEUED_LAUNCHES = 500      # launches a sample issues at most (the driver's queue holds about a thousand)


@dataclass(frozen=True)
class HostCost:
    launches: int            # kernels in the plan
    calls: int               # calls per sample
    plain_us_per_call: float
    graph_us_per_call: float

    def figures(self) -> dict:
        return {"launches": self.launches, "calls_per_sample": self.calls,
                "plain_us_per_call": self.plain_us_per_call, "graph_us_per_call": self.graph_us_per_call}


def host_us(call, calls: int) -> float:
    """The median over SAMPLES of the host's microseconds per `call()`, each
    sample `calls` calls issued while the GPU sleeps."""
    import statistics
    import torch
    call()
    torch.cuda.synchronize()
    samples = []
    for _ in range(SAMPLES):
        torch.cuda._sleep(BUSY_CYCLES)
        start = time.perf_counter()
        for _ in range(calls):
            call()
        samples.append((time.perf_counter() - start) / calls * 1e6)
        torch.cuda.synchronize()
    return statistics.median(samples)


def host_cost(outdir: Path, launches: int) -> HostCost:
    """Microseconds of host time per call of the plan, plain and as a graph."""
    import torch
    from ..runtime import GpuExecutable

    tensors = [torch.randn(SHAPE, device="cuda") for _ in range(MEMREFS - 1)]
    calls = max(1, QUEUED_LAUNCHES // launches)
    plain, graph = GpuExecutable(outdir), GpuExecutable(outdir, cuda_graph=True)
    return HostCost(launches, calls, host_us(lambda: plain(*tensors), calls), host_us(lambda: graph(*tensors), calls))


def per_launch_us(small: HostCost, large: HostCost, graph: bool) -> float:
    """The cost of one more kernel: the slope between two plan lengths."""
    attribute = "graph_us_per_call" if graph else "plain_us_per_call"
    return (getattr(large, attribute) - getattr(small, attribute)) / (large.launches - small.launches)


def reference_launches_us(outdir: Path) -> dict:
    """Host microseconds of one cuLaunchKernel of the empty kernel through
    the bindings, and of one torch in-place add: what a launch costs on this
    host before twintrack adds anything."""
    import torch
    from ..runtime import GpuExecutable
    from ..runtime.cuda_driver import _driver, current_stream

    executable = GpuExecutable(outdir)
    tensors = [torch.randn(SHAPE, device="cuda") for _ in range(MEMREFS - 1)]
    executable(*tensors)
    prepared = next(iter(executable._launches.values()))
    stream = current_stream()
    launch = _driver().cuLaunchKernel
    return {
        "driver_launch_us": host_us(lambda: launch(prepared.function, 1, 1, 1, 32, 1, 1, 0, stream,
                                                   prepared.parameters.address, 0), QUEUED_LAUNCHES),
        "torch_add_us": host_us(lambda: tensors[0].add_(1.0), QUEUED_LAUNCHES),
    }
