"""cpu-conv-kernels: 2-D convolutions (linalg.conv_2d_nchw_fchw) on f32
memrefs become the im2col CPU kernel (twintrack.compiler.kernels.cpu_conv):
one matmul per image on the matmul kernel, sized from the host description
(lowering/targets/cpu.toml). Convolutions it does not take (other element
types or layouts, strided views) stay linalg ops for the generic loops, and
the reason is recorded for --explain-fusion's remarks; so does one whose
kernel fails to build (with `strict`, an error).
"""

from __future__ import annotations

from dataclasses import dataclass

from mlir import ir

from ..kernels.cpu_conv import CpuConvOperands, CpuConvShape, CpuConvWriter, choose_conv_schedule
from .cpu_matmul_kernels import CpuKernelPass, f32_row_major_refusal
from .kernel_fallback import kernel_site, record_schedule

CONVOLUTIONS = ("linalg.conv_2d_nchw_fchw",)


def cpu_conv_shape(op: ir.Operation) -> CpuConvShape | str:
    """The kernel's view of a convolution, or why the kernel does not take it."""
    types = [value.type for value in op.operands[:3]]
    refusal = f32_row_major_refusal(types)
    if refusal is not None:
        return refusal
    (batch, channels, height, width), (filters, _, kernel_h, kernel_w), (_, _, out_h, out_w) = \
        (t.shape for t in types)
    strides = tuple(ir.DenseIntElementsAttr(op.attributes["strides"]))
    dilations = tuple(ir.DenseIntElementsAttr(op.attributes["dilations"]))
    return CpuConvShape(batch, channels, height, width, filters, kernel_h, kernel_w, out_h, out_w,
                        strides, dilations)


@dataclass(frozen=True)
class CpuConvKernels(CpuKernelPass):
    name = "cpu-conv-kernels"

    def _run(self, module: ir.Operation, pass_) -> None:
        target = self._target()
        for number, op, shape in self._sites(module, CONVOLUTIONS, cpu_conv_shape, "cpu-conv"):
            schedule = choose_conv_schedule(target, shape, self.threads)
            with kernel_site(module, self.strict):
                CpuConvWriter(shape, schedule).build(op, CpuConvOperands(*op.operands[:3]), f"cpu_conv_{number}")
                record_schedule(module, op.location, f"cpu_conv_{number}", f"cpu-conv {schedule.describe()}",
                                schedule.reasons)
                op.erase()
