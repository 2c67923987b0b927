"""The MLIR compiler: the torch-mlir module through a recipe's stages
(driver.py, recipes.py, lowering/*.toml) to an executable: the Python
passes (passes/), the GPU kernel generators (kernels/), GPU packaging
(gpu_codegen.py, host_plan.py), the CPU JIT (cpu_jit.py), the artifact
writer, the compile cache. It may import the frontend, the runtime and
the core; DESIGN.md has the whole order."""
