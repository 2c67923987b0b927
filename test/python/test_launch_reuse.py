"""Which values a cloned launch may keep reading from the first site's
launch (kernels/launch_reuse.py): constants defined earlier in the same
block only. Cloning itself is checked by lowering/gpu/repeated-kernels.mlir."""

from mlir import ir

from twintrack.compiler.kernels.launch_reuse import _defined_before


def test_a_clone_keeps_only_earlier_constants_of_its_block():
    with ir.Context() as context:
        context.allow_unregistered_dialects = True
        module = ir.Module.parse("""
func.func @f(%m: memref<?xf32>) {
  %c0 = arith.constant 0 : index
  %size = memref.dim %m, %c0 : memref<?xf32>
  "test.first_site"() : () -> ()
  %late = arith.constant 1 : index
  "test.second_site"() : () -> ()
  scf.execute_region {
    %inner = arith.constant 2 : index
    scf.yield
  }
  return
}""")
        block = module.body.operations[0].regions[0].blocks[0]
        ops = [op.operation for op in block.operations]
        c0, size, first, late, second, region = ops[:6]
        inner = region.regions[0].blocks[0].operations[0].operation
        assert _defined_before(c0.results[0], second)
        assert not _defined_before(size.results[0], second)  # a size computed for the first site
        assert not _defined_before(late.results[0], first)   # defined after the site
        assert not _defined_before(inner.results[0], second)  # another block's
        assert not _defined_before(block.arguments[0], second)
