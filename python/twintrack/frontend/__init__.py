"""Everything that runs before torch-mlir: a model in, an ExportedModel out.

- model_spec.py: what a MODEL argument names (zoo:, file.py:factory, a
  saved export), read before torch is imported where it can be;
- export.py: loading the model, torch.export, the decompositions, then
  the FX passes, giving an ExportedModel; import_to_torch_mlir hands it
  to torch-mlir;
- decomp/: the decomposition table, one family of entries per module,
  in one registry (decomp/__init__.py says the order and why);
- fx_passes/: the rewrites of the exported graph, one interface, in the
  order of fx_passes.PIPELINE;
- composite_ops.py: torch.export's composite-op bookkeeping, once per
  process.

Modules here import from the core (errors, phases, locations, calling,
bindings) and the runtime, not from the compiler or the harness, but for
the two imports test_layering.ALLOWED names with their reasons (the zoo
for zoo: specs, the compile cache's digest). This package's __init__
imports nothing, so that `model_spec` stays cheap.
"""
