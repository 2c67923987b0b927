"""Hand-scheduled kernels emitted as MLIR text: the GPU track's fast paths.

Each generator returns a private func.func holding one gpu.launch, written in
upstream dialects (gpu, nvgpu, scf, vector, memref, arith). The pass that
uses it splices that body in place of a linalg op (the inliner cannot inline
nvgpu ops), so the kernel then goes through the same outlining, NVVM and
ptxas stages as every generated kernel."""
