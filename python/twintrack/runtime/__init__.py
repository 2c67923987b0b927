"""twintrack.runtime: the artifact format (artifact.py), and running a GPU
artifact (plan.json + cubins) with torch and the CUDA driver API.

It imports nothing from torch_mlir, mlir or any compiled extension of this
project, so it runs on a machine with only torch, cuda-bindings and numpy:

    model = twintrack.runtime.load("out/mlp")
    outputs = model(*state, *inputs)       # what the model returns, its tensors on the GPU
"""

__all__ = ["GpuExecutable", "load", "validate_plan"]


def __getattr__(name: str):
    """Imported on first use: reading a manifest (artifact.py) needs neither
    torch nor the CUDA bindings, and a cached repeat of a compile reads one."""
    if name in ("GpuExecutable", "load"):
        from . import executor
        return getattr(executor, name)
    if name == "validate_plan":
        from .plan import validate_plan
        return validate_plan
    raise AttributeError(f"module 'twintrack.runtime' has no attribute '{name}'")
