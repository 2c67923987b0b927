"""Hand-scheduled kernels, the GPU track's fast paths, built in place
through the `mlir` bindings (`builder.py`).

Each generator builds one gpu.launch (in the gpu, nvgpu, nvvm, scf,
vector, memref and arith dialects) right before the linalg op it replaces,
so the kernel then goes through the same outlining, NVVM and ptxas stages
as every generated kernel. `registry.py` lists the matmul generators and
their schedules; DESIGN.md explains how they fit together."""
