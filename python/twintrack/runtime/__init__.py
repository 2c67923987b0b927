"""twintrack.runtime: run a GPU artifact (plan.json + cubins) with torch and
the CUDA driver API.

It imports nothing from torch_mlir, mlir or any compiled extension of this
project, so it runs on a machine with only torch, cuda-bindings and numpy:

    model = twintrack.runtime.load("out/mlp")
    outputs = model(*state, *inputs)       # what the model returns, its tensors on the GPU
"""

from .executor import GpuExecutable, load
from .plan import validate_plan

__all__ = ["GpuExecutable", "load", "validate_plan"]
