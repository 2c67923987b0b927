"""A convolution's windows read as TMA's im2col mode reads them
(twintrack.compiler.kernels.window_geometry): the geometry is fitted from
the address the windows op computes and checked at every output pixel and
tap; what it does not reproduce exactly stays with the cp.async gather."""

import pytest
from mlir import ir

from twintrack.bindings import new_context
from twintrack.compiler.kernels.window_geometry import Im2colGeometry, im2col_geometry
from twintrack.compiler.kernels.window_read import WindowRead
from twintrack.compiler.passes.window_operands import window_operand


def _windows(size: int, channels: int, taps: int, stride: int, dilation: int, padding: int,
             repeat_columns: bool = False) -> str:
    """A function whose matmul reads the patches of a channels-last
    (2, size, size, channels) input, written by fold-patch-padding's gather;
    `repeat_columns`: the padding left and right repeats the edge column
    (zeros only above and below)."""
    out = (size + 2 * padding - dilation * (taps - 1) - 1) // stride + 1
    rows, cols, last = 2 * out * out, taps * taps * channels, size - 1
    guard = f"%s = arith.select {'%hin' if repeat_columns else '%in'}, %e, %zero : f16"
    place = f"affine_map<()[s0, s1] -> (s0 * {stride} + s1 * {dilation} - {padding})>"
    return f"""
func.func @f(%x: memref<2x{size}x{size}x{channels}xf16>, %w: memref<64x{cols}xf16>, %c: memref<{rows}x64xf32>) {{
  %zero = arith.constant 0.0 : f16
  %zf = arith.constant 0.0 : f32
  %c0 = arith.constant 0 : index
  %cl = arith.constant {last} : index
  %patches = memref.alloc() : memref<2x{out}x{out}x{taps}x{taps}x{channels}xf16>
  linalg.generic {{indexing_maps = [affine_map<(d0, d1, d2, d3, d4, d5) -> (d0, d1, d2, d3, d4, d5)>],
                  iterator_types = ["parallel", "parallel", "parallel", "parallel", "parallel", "parallel"]}}
      outs(%patches : memref<2x{out}x{out}x{taps}x{taps}x{channels}xf16>) {{
  ^bb0(%o: f16):
    %n = linalg.index 0 : index
    %oh = linalg.index 1 : index
    %ow = linalg.index 2 : index
    %kh = linalg.index 3 : index
    %kw = linalg.index 4 : index
    %ch = linalg.index 5 : index
    %h = affine.apply {place}()[%oh, %kh]
    %h0 = arith.cmpi sge, %h, %c0 : index
    %h1 = arith.cmpi sle, %h, %cl : index
    %hin = arith.andi %h0, %h1 : i1
    %hlo = arith.maxsi %h, %c0 : index
    %hc = arith.minsi %hlo, %cl : index
    %v = affine.apply {place}()[%ow, %kw]
    %v0 = arith.cmpi sge, %v, %c0 : index
    %v1 = arith.cmpi sle, %v, %cl : index
    %vin = arith.andi %v0, %v1 : i1
    %in = arith.andi %hin, %vin : i1
    %vlo = arith.maxsi %v, %c0 : index
    %vc = arith.minsi %vlo, %cl : index
    %e = memref.load %x[%n, %hc, %vc, %ch] : memref<2x{size}x{size}x{channels}xf16>
    {guard}
    linalg.yield %s : f16
  }}
  %a = memref.collapse_shape %patches [[0, 1, 2], [3, 4, 5]]
      : memref<2x{out}x{out}x{taps}x{taps}x{channels}xf16> into memref<{rows}x{cols}xf16>
  linalg.fill ins(%zf : f32) outs(%c : memref<{rows}x64xf32>)
  linalg.matmul indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d2)>, affine_map<(d0, d1, d2) -> (d1, d2)>,
                                 affine_map<(d0, d1, d2) -> (d0, d1)>]
      ins(%a, %w : memref<{rows}x{cols}xf16>, memref<64x{cols}xf16>) outs(%c : memref<{rows}x64xf32>)
  memref.dealloc %patches : memref<2x{out}x{out}x{taps}x{taps}x{channels}xf16>
  return
}}"""


def _geometry(text: str):
    with new_context("mlir"), ir.Location.unknown():
        module = ir.Module.parse(text)
        [function] = module.body.operations
        matmul = next(op.operation for op in function.regions[0].blocks[0].operations
                      if op.operation.name == "linalg.matmul")
        found = window_operand(matmul)
        assert found is not None
        return found.read.geometry


@pytest.mark.parametrize("size, taps, stride, dilation, padding", [
    (14, 3, 1, 1, 1),   # ResNet's 3x3
    (15, 3, 2, 1, 1),   # strided, an odd input
    (12, 3, 1, 2, 2),   # dilated
    (9, 5, 1, 1, 2),    # 5x5
    (10, 3, 1, 1, 0),   # no padding
    (224, 7, 2, 1, 3),  # a stem's 7x7 at 112x112 outputs: checked at the edges and a stride through the rest
])
def test_the_geometry_is_read_off_the_windows_gather(size, taps, stride, dilation, padding):
    geometry = _geometry(_windows(size, 64, taps, stride, dilation, padding))
    out = (size + 2 * padding - dilation * (taps - 1) - 1) // stride + 1
    assert geometry == Im2colGeometry(2, 64, (size, size), (out, out), (taps, taps), (stride, stride),
                                      (dilation, dilation), (padding, padding))
    # The pixel box: the corners the windows' first taps take, from -padding to the last output's.
    assert geometry.lower_corner == [-padding] * 2
    assert geometry.upper_corner == [-padding + (out - 1) * stride - (size - 1)] * 2
    assert geometry.problem(128, 64) is None


def test_windows_that_repeat_an_edge_are_no_zero_padded_convolution():
    """Clamped addresses where TMA would read zeros: no im2col copy reads them."""
    assert "no strided, dilated, zero-padded convolution" in _geometry(_windows(8, 64, 3, 1, 1, 1, repeat_columns=True))


def test_what_tma_cannot_copy_is_named():
    geometry = _geometry(_windows(14, 64, 3, 1, 1, 1))
    assert "no multiple of a 128-channel step" in geometry.problem(128, 128)
    assert "at most 256" in geometry.problem(512, 64)
    wide = Im2colGeometry(1, 64, (400, 400), (400, 400), (3, 3), (1, 1), (1, 1), (200, 200))
    assert "outside [-128, 127]" in wide.problem(128, 64)
    strided = Im2colGeometry(1, 64, (64, 64), (4, 4), (1, 1), (16, 16), (1, 1), (0, 0))
    assert "strides (16, 16)" in strided.problem(128, 64)
    volume = Im2colGeometry(1, 64, (8, 8, 8), (8, 8, 8), (3, 3, 3), (1, 1, 1), (1, 1, 1), (1, 1, 1))
    assert "3-d windows" in volume.problem(128, 64)


def test_windows_too_many_to_check_are_refused_before_they_are_evaluated():
    """A 3-d window's grid (64^3 outputs, 3x3x3 taps) would hold tens of
    millions of points: it is refused by its count, not evaluated."""
    read = WindowRead("memref<4x64x64x64x64xf16>", (4, 64, 64, 64), (3, 3, 3, 64))
    with new_context("mlir"):
        assert "windows' elements to check" in im2col_geometry(read)
