"""bounded-scalar-replacement: upstream affine-scalrep (store-to-load
forwarding, redundant loads) on each function with at most `most` affine
loads and stores, then canonicalize.

affine-scalrep checks every pair of accesses to a memref for a dependence,
each an affine constraint problem: its time grows with the square of the
accesses. A function of 2,191 of them (ldl_factor of a 5x5 matrix, its
column steps written out) took 7 s of a 10 s compile. Loops that large are
rare and gain little from the forwarding, so they keep their loads.
"""

from __future__ import annotations

from dataclasses import dataclass

from mlir import ir
from mlir.passmanager import PassManager

from .ir_helpers import PythonPass, defined_functions, nested_ops

ACCESSES = ("affine.load", "affine.store")


@dataclass(frozen=True)
class BoundedScalarReplacement(PythonPass):
    name = "bounded-scalar-replacement"
    most: int = 1000

    def _run(self, module: ir.Operation, pass_) -> None:
        for func in defined_functions(module):
            if len(nested_ops(func, lambda op: op.name in ACCESSES)) <= self.most:
                PassManager.parse("func.func(affine-scalrep)", func.context).run(func)
        PassManager.parse("builtin.module(canonicalize)", module.context).run(module)
