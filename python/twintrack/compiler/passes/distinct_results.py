"""distinct-results: each result of a public function its own tensor.

A function may return one value twice: a module that returns `y, y`, or two
results that CSE merged (`x * 2, x * 2`, `x.amax(-1), x.max(-1)[0]`).
buffer-results-to-out-params then has two out-parameters for one buffer,
and the pinned upstream pass crashes on it. Each repeated result becomes a
copy (`bufferization.alloc_tensor copy(...)`): the outputs are separate
tensors, as two ops' outputs are in eager. (A module that returns the very
same tensor twice gets it back twice: the calling convention aliases those
outputs before this function is ever called.)
"""

from __future__ import annotations

from dataclasses import dataclass

from mlir import ir
from mlir.dialects import bufferization

from .ir_helpers import PythonPass, nested_ops


@dataclass(frozen=True)
class DistinctResults(PythonPass):
    name = "distinct-results"

    def _run(self, module: ir.Operation, pass_) -> None:
        for ret in nested_ops(module, lambda op: op.name == "func.return"):
            self._copy_repeats(ret)

    @staticmethod
    def _copy_repeats(ret: ir.Operation) -> None:
        seen = set()
        for i, value in enumerate(list(ret.operands)):
            if not isinstance(value.type, ir.RankedTensorType):
                continue
            if value in seen:
                with ret.location:
                    copy = bufferization.AllocTensorOp(value.type, [], copy=value, ip=ir.InsertionPoint(ret))
                ret.operands[i] = copy.result
            seen.add(value)
