"""drop-runtime-asserts: erase cf.assert ops left by torch-mlir's value checks.

With static shapes the remaining asserts check tensor *values* (e.g. a
non-negative variance). Upstream affine-loop-fusion aborts on them, and a
compiled model does not validate its weights, so they are removed here.
"""

from __future__ import annotations

from dataclasses import dataclass

from mlir import ir
from mlir.rewrite import RewritePatternSet, apply_patterns_and_fold_greedily


def _erase(op, rewriter) -> None:
    rewriter.erase_op(op.operation)


@dataclass(frozen=True)
class DropRuntimeAsserts:
    name = "drop-runtime-asserts"

    def add_to(self, pm) -> None:
        pm.add(self._run, name="DropRuntimeAsserts", argument=self.name)

    def _run(self, op: ir.Operation, pass_) -> None:
        patterns = RewritePatternSet()
        patterns.add("cf.assert", _erase)
        apply_patterns_and_fold_greedily(op, patterns.freeze())
