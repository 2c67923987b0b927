"""Hand-scheduled kernels emitted as MLIR text: the GPU track's fast paths.

Each generator returns a private func.func holding one gpu.launch, written in
upstream dialects only (gpu, scf, vector, memref, arith). The pass that uses
it replaces a linalg op with a call, and the outline stage inlines the call,
so the kernel then goes through the same outlining, NVVM and ptxas stages as
every generated kernel."""
