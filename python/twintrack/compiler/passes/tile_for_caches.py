"""tile-for-caches: upstream affine-loop-tile, tiles sized for a cache of
`cache_size` KiB, on each function whose memory accesses all have static
shapes, then canonicalize.

affine-loop-tile sizes its tiles from each nest's memory footprint; on a
memref with a dynamic size it reports an error and carries on, and the
Python bindings abort the process on an error left behind by a pass that
succeeded. A function of dynamic shapes keeps its loops untiled.
"""

from __future__ import annotations

from dataclasses import dataclass

from mlir import ir
from mlir.passmanager import PassManager

from .ir_helpers import PythonPass, defined_functions, nested_ops

ACCESSES = ("affine.load", "affine.store", "affine.vector_load", "affine.vector_store")


@dataclass(frozen=True)
class TileForCaches(PythonPass):
    name = "tile-for-caches"
    cache_size: int = 256

    def _run(self, module: ir.Operation, pass_) -> None:
        tile = PassManager.parse(f"func.func(affine-loop-tile{{cache-size={self.cache_size}}})", module.context)
        for func in defined_functions(module):
            if all(_static(access) for access in nested_ops(func, lambda op: op.name in ACCESSES)):
                tile.run(func)
        PassManager.parse("builtin.module(canonicalize)", module.context).run(module)


def _static(access: ir.Operation) -> bool:
    memref = access.operands[1] if access.name.endswith("store") else access.operands[0]
    return ir.MemRefType(memref.type).has_static_shape
