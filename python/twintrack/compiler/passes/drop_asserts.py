"""drop-runtime-asserts: erase cf.assert ops left by torch-mlir's value checks.

With static shapes the remaining asserts check tensor *values* (e.g. a
non-negative variance). Upstream affine-loop-fusion aborts on them, and a
compiled model does not validate its weights, so they are removed here.
"""

from __future__ import annotations

from dataclasses import dataclass

from mlir import ir
from mlir.rewrite import RewritePatternSet, apply_patterns_and_fold_greedily

from .ir_helpers import PythonPass


def _erase(op, rewriter) -> None:
    rewriter.erase_op(op.operation)


@dataclass(frozen=True)
class DropRuntimeAsserts(PythonPass):
    name = "drop-runtime-asserts"

    def _run(self, op: ir.Operation, pass_) -> None:
        patterns = RewritePatternSet()
        patterns.add("cf.assert", _erase)
        apply_patterns_and_fold_greedily(op, patterns.freeze())
