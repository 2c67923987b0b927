"""CPU convolution kernel: a 2-D convolution (NCHW input, FCHW filter) as
one matmul per image (im2col). The image's patches are copied into a
(C*KH*KW) x (OH*OW) matrix; the filter, seen as an F x (C*KH*KW) matrix,
multiplies it into the image's F x (OH*OW) output with the matmul kernel
(twintrack.compiler.kernels.cpu_matmul), accumulating onto what the output
holds (linalg's convolution adds onto its output: the bias broadcast
before it, or a zero fill).

The patches are written straight into the matmul kernel's packed layout
(panels of K x 32 columns, zero past OH*OW), so its B loads are unit-stride.
A patch row is the input row at a kernel offset, so with unit stride along
the width (and rows a whole number of vectors) the copy is vector loads and
stores; otherwise it is element by element. With threads and work enough, the images are split
into one run per thread, each with its own patch matrix; otherwise each
image's matmul splits its rows among the threads, as any matmul's.
"""

from __future__ import annotations

from dataclasses import dataclass

from mlir import ir
from mlir.dialects import arith, memref, vector

from ..target import CpuTarget
from .builder import KernelBuilder, build_cpu_kernel, vector_of
from .cpu_matmul import (SCHEDULE_ATTR, CpuMatmulOperands, CpuMatmulSchedule, CpuMatmulShape, CpuMatmulWriter,
                         choose_schedule)

F32_BYTES = 4


@dataclass(frozen=True)
class CpuConvShape:
    """Input (batch, channels, height, width), already padded; filter
    (filters, channels, kernel_h, kernel_w); output (batch, filters, out_h, out_w)."""
    batch: int
    channels: int
    height: int
    width: int
    filters: int
    kernel_h: int
    kernel_w: int
    out_h: int
    out_w: int
    strides: tuple[int, int]
    dilations: tuple[int, int]

    @property
    def patch(self) -> int:
        """Elements of one patch: the matmul's K."""
        return self.channels * self.kernel_h * self.kernel_w

    @property
    def matmul(self) -> CpuMatmulShape:
        """One image's matmul: filter (F x K) @ patches (K x OH*OW) onto the output (F x OH*OW)."""
        return CpuMatmulShape(None, self.filters, self.out_h * self.out_w, self.patch, False)

    @property
    def flops(self) -> int:
        return 2 * self.batch * self.filters * self.out_h * self.out_w * self.patch


@dataclass(frozen=True)
class CpuConvSchedule:
    matmul: CpuMatmulSchedule
    image_threads: int    # runs of images in parallel (1: one loop; the matmul may still use threads)
    reasons: tuple[str, ...]

    def describe(self) -> str:
        return f"im2col images-threads={self.image_threads}; matmul {self.matmul.describe()}"


def choose_conv_schedule(target: CpuTarget, shape: CpuConvShape, threads: int) -> CpuConvSchedule:
    """Threads over the images when each thread gets one and the work pays
    for them; the matmul's schedule for one image."""
    over_images = threads > 1 and shape.batch >= threads and shape.flops >= target.parallel_min_flops
    panels = ("the patches written straight into the matmul's K x cols panels (unit-stride B loads; "
              "a patch row in place would be 4 B x OH*OW apart)")
    matmul = choose_schedule(target, shape.matmul, 1 if over_images else threads, packed_by_caller=panels)
    patches = shape.patch * shape.out_h * shape.out_w * F32_BYTES
    reasons = [f"im2col: each image's patches copied into a {shape.patch}x{shape.out_h * shape.out_w} matrix "
               f"({patches // 1024} KiB), the filter read as {shape.filters}x{shape.patch}",
               "patch rows copied in vectors (unit stride along the width, rows a whole number of vectors)"
               if _vector_copies(shape, matmul.lanes)
               else "patch rows copied element by element (a stride along the width, or rows not a whole "
                    "number of vectors)"]
    if over_images:
        reasons.append(f"{threads} threads, each a run of {-(-shape.batch // threads)} images with its own patches")
    elif threads > 1:
        reasons.append(f"images one after another ({shape.batch} images, {shape.flops / 1e6:.1f} MFLOP); "
                       "the matmul's threads as its schedule says")
    return CpuConvSchedule(matmul, threads if over_images else 1, tuple(reasons + list(matmul.reasons)))


def _vector_copies(shape: CpuConvShape, lanes: int) -> bool:
    """Can a patch row be copied in whole vectors, each inside one panel?"""
    return shape.strides[1] == 1 and shape.out_w % lanes == 0


@dataclass(frozen=True)
class CpuConvOperands:
    input: ir.Value
    filter: ir.Value
    output: ir.Value


class CpuConvWriter:
    """Builds the kernel of one convolution; while it does, `w` is its builder."""

    def __init__(self, shape: CpuConvShape, schedule: CpuConvSchedule):
        self.shape, self.schedule = shape, schedule

    def build(self, anchor: ir.Operation, operands: CpuConvOperands, kernel: str) -> None:
        """The kernel, right before `anchor` (build_cpu_kernel: a failure is a KernelBuildError)."""
        self.operands = operands
        build_cpu_kernel(anchor, kernel, "cpu-conv", self.schedule.describe(), self._body)

    def _body(self, w: KernelBuilder) -> None:
        self.w, s = w, self.shape
        f32 = ir.F32Type.get()
        self.filter_matrix = memref.collapse_shape(ir.MemRefType.get([s.filters, s.patch], f32),
                                                   self.operands.filter, [[0], [1, 2, 3]])
        self.output_matrices = memref.collapse_shape(
            ir.MemRefType.get([s.batch, s.filters, s.out_h * s.out_w], f32), self.operands.output,
            [[0], [1], [2, 3]])
        threads = self.schedule.image_threads
        if threads > 1:
            part = -(-s.batch // threads)
            with w.parallel(0, threads, 1) as (outer, run):
                start = arith.minui(w.mul(run, part), w.index(s.batch))
                self._images(start, arith.minui(w.add(start, part), w.index(s.batch)))
        else:
            outer = self._images(w.index(0), w.index(s.batch))
        outer.attributes[SCHEDULE_ATTR] = ir.StringAttr.get(
            f"cpu-conv {self.schedule.describe()}: " + "; ".join(self.schedule.reasons))

    def _images(self, start: ir.Value, stop: ir.Value) -> ir.Operation:
        """Images start..stop, with one patch matrix (in panels) for all of
        them. Returns the loop."""
        matmul = CpuMatmulWriter(self.shape.matmul, self.schedule.matmul, False, ir.F32Type.get())
        patches = memref.alloc(matmul.packed_b_type(), [], [], alignment=64)
        self._zero_padding(patches)
        with self.w.loop(start, stop, 1) as images:
            self._copy_patches(images.induction, patches)
            operands = CpuMatmulOperands(self.filter_matrix, patches, self.output_matrices, batched="c")
            matmul.build_within(self.w, operands, images.induction)
        memref.dealloc(patches)
        return images.op

    def _zero_padding(self, patches: ir.Value) -> None:
        """The last panel's columns past OH*OW are zeros (the copies never write them)."""
        w, s = self.w, self.shape
        cols, lanes = self.schedule.matmul.cols, self.schedule.matmul.lanes
        positions = s.out_h * s.out_w
        if positions % cols == 0:
            return
        last, zero = w.index(positions // cols), w.constant(0.0, vector_of(lanes, ir.F32Type.get()))
        with w.loop(0, s.patch, 1) as rows:
            for v in range(cols // lanes):
                w.store(zero, patches, [last, rows.induction, w.index(v * lanes)])

    def _copy_patches(self, image: ir.Value, patches: ir.Value) -> None:
        """patches[(c, kh, kw), (oh, ow)] = input[image, c, oh*sh + kh*dh, ow*sw + kw*dw]."""
        w, s = self.w, self.shape
        (stride_h, stride_w), (dilation_h, dilation_w) = s.strides, s.dilations
        with w.loop(0, s.channels, 1) as channels, w.loop(0, s.kernel_h, 1) as kernel_rows, \
                w.loop(0, s.kernel_w, 1) as kernel_cols:
            c, kh, kw = channels.induction, kernel_rows.induction, kernel_cols.induction
            patch_row = w.add(w.mul(w.add(w.mul(c, s.kernel_h), kh), s.kernel_w), kw)
            with w.loop(0, s.out_h, 1) as out_rows:
                oh = out_rows.induction
                input_row = w.add(w.mul(oh, stride_h), w.mul(kh, dilation_h))
                first_col = w.mul(kw, dilation_w)
                if _vector_copies(s, self.schedule.matmul.lanes):
                    self._copy_row_vectors(image, c, input_row, first_col, patches, patch_row, oh)
                else:
                    self._copy_row_elements(image, c, input_row, first_col, patches, patch_row, oh)

    def _panel_position(self, oh: ir.Value, ow: ir.Value) -> tuple[ir.Value, ir.Value]:
        """(panel, column in it) of output position (oh, ow)."""
        w, cols = self.w, self.schedule.matmul.cols
        position = w.add(w.mul(oh, self.shape.out_w), ow)
        return w.div(position, cols), w.rem(position, cols)

    def _copy_row_vectors(self, image, c, input_row, first_col, patches, patch_row, oh) -> None:
        """Whole vectors: OW is a multiple of the lanes, so none straddles a panel."""
        w, s = self.w, self.shape
        lanes = self.schedule.matmul.lanes
        t = vector_of(lanes, ir.F32Type.get())
        with w.loop(0, s.out_w, lanes) as cols:
            ow = cols.induction
            panel, column = self._panel_position(oh, ow)
            loaded = vector.LoadOp(t, self.operands.input, [image, c, input_row, w.add(first_col, ow)]).result
            w.store(loaded, patches, [panel, patch_row, column])

    def _copy_row_elements(self, image, c, input_row, first_col, patches, patch_row, oh) -> None:
        w, s = self.w, self.shape
        with w.loop(0, s.out_w, 1) as cols:
            ow = cols.induction
            panel, column = self._panel_position(oh, ow)
            value = memref.load(self.operands.input,
                                [image, c, input_row, w.add(first_col, w.mul(ow, s.strides[1]))])
            memref.store(value, patches, [panel, patch_row, column])
