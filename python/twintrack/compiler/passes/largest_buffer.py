"""largest-buffer: record the largest tensor the program allocates.

Compiled code calls malloc without checking its result, so a buffer larger
than the machine's memory would crash the process where eager raises
"can't allocate memory". This pass records, before bufferization, the bytes
of the largest statically shaped tensor created (`tensor.empty`,
`bufferization.alloc_tensor`) as a module attribute; the CPU runtime
refuses a call that cannot have that much memory (cpu_jit.check_memory).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from mlir import ir

from .ir_helpers import PythonPass, nested_ops

LARGEST_BUFFER_ATTR = "twintrack.largest_buffer_bytes"
_CREATING = ("tensor.empty", "bufferization.alloc_tensor")


def tensor_bytes(tensor_type: ir.RankedTensorType) -> int:
    element = tensor_type.element_type
    width = element.width if isinstance(element, (ir.IntegerType, ir.FloatType)) else 64
    return math.prod(tensor_type.shape) * max(1, width // 8)


@dataclass(frozen=True)
class LargestBuffer(PythonPass):
    name = "largest-buffer"

    def _run(self, module: ir.Operation, pass_) -> None:
        sizes = [tensor_bytes(op.results[0].type) for op in nested_ops(module, lambda op: op.name in _CREATING)
                 if ir.RankedTensorType(op.results[0].type).has_static_shape]
        i64 = ir.IntegerType.get_signless(64)
        module.attributes[LARGEST_BUFFER_ATTR] = ir.IntegerAttr.get(i64, max(sizes, default=0))
