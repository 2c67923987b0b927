"""kernel-occupancy: a kernel whose generator asks for several resident
blocks per SM (`BLOCKS_PER_SM_ATTR` on an op of its body, which outlining
keeps where it drops the launch's own attributes) gets `nvvm.minctasm`:
ptxas then keeps its registers within that many blocks' share of the SM
(the wgmma flash kernel's causal variant would take 138 registers, which
leaves one block of 256 threads an SM; held to 128, two share it). A
kernel built for clusters (`CLUSTER_BLOCKS_ATTR`) gets `nvvm.cluster_dim`
(`.reqnctapercluster`): the driver groups its 1-d grid into clusters of
that many blocks at every launch."""

from __future__ import annotations

from dataclasses import dataclass

from mlir import ir

from ..kernels.builder import BLOCKS_PER_SM_ATTR, CLUSTER_BLOCKS_ATTR
from .ir_helpers import PythonPass, nested_ops


@dataclass(frozen=True)
class KernelOccupancy(PythonPass):
    name = "kernel-occupancy"

    def _run(self, module: ir.Operation, pass_) -> None:
        for kernel in nested_ops(module, lambda op: op.name == "gpu.func" and "gpu.kernel" in op.attributes):
            asked = _asked(kernel, BLOCKS_PER_SM_ATTR)
            if asked:
                kernel.attributes["nvvm.minctasm"] = ir.IntegerAttr.get(ir.IntegerType.get_signless(32), max(asked))
            cluster = _asked(kernel, CLUSTER_BLOCKS_ATTR)
            if cluster:
                kernel.attributes["nvvm.cluster_dim"] = ir.DenseI32ArrayAttr.get([max(cluster), 1, 1])


def _asked(kernel: ir.Operation, attribute: str) -> list[int]:
    """The values of `attribute` on the ops of the kernel's body."""
    return [ir.IntegerAttr(op.attributes[attribute]).value
            for op in nested_ops(kernel, lambda op: attribute in op.attributes)]
