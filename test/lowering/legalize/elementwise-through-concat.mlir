// RUN: %PYTHON -m twintrack.compiler.passes elementwise-through-concat %s | FileCheck %s

// The rotary embedding, x * cos + cat((-x2, x1)) * sin: the product with
// the concatenation (reached through a collapse that keeps the
// concatenated dim whole) is computed per piece, each part reading its
// piece where it lies; the sum reading the joined products is split too,
// and so is x * cos, whose result the parts read through disjoint slices.
// Only the sums are concatenated.
// CHECK-LABEL: func.func @rotary(
// CHECK:         %[[NEG:.*]] = linalg.generic {{.*}} ins(%{{.*}} : tensor<4x64x32xf16>)
// CHECK:           arith.negf
// CHECK-COUNT-7: } -> tensor<4x64x32xf16>
// CHECK-NOT:     linalg.generic
// CHECK:         %[[JOINED:.*]] = tensor.concat dim(2) %{{.*}}, %{{.*}} : (tensor<4x64x32xf16>, tensor<4x64x32xf16>) -> tensor<4x64x64xf16>
// CHECK-NEXT:    return %[[JOINED]]
#id3 = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
#bc = affine_map<(d0, d1, d2) -> (d1, d2)>
func.func @rotary(%q: tensor<1x4x64x64xf16>, %cos: tensor<64x64xf16>, %sin: tensor<64x64xf16>) -> tensor<4x64x64xf16> {
  %hi = tensor.extract_slice %q[0, 0, 0, 32] [1, 4, 64, 32] [1, 1, 1, 1] : tensor<1x4x64x64xf16> to tensor<4x64x32xf16>
  %e0 = tensor.empty() : tensor<4x64x32xf16>
  %neg = linalg.generic {indexing_maps = [#id3, #id3], iterator_types = ["parallel", "parallel", "parallel"]} ins(%hi : tensor<4x64x32xf16>) outs(%e0 : tensor<4x64x32xf16>) {
  ^bb0(%in: f16, %out: f16):
    %n = arith.negf %in : f16
    linalg.yield %n : f16
  } -> tensor<4x64x32xf16>
  %negx = tensor.expand_shape %neg [[0, 1], [2], [3]] output_shape [1, 4, 64, 32] : tensor<4x64x32xf16> into tensor<1x4x64x32xf16>
  %lo = tensor.extract_slice %q[0, 0, 0, 0] [1, 4, 64, 32] [1, 1, 1, 1] : tensor<1x4x64x64xf16> to tensor<1x4x64x32xf16>
  %cat = tensor.concat dim(3) %negx, %lo : (tensor<1x4x64x32xf16>, tensor<1x4x64x32xf16>) -> tensor<1x4x64x64xf16>
  %qc = tensor.collapse_shape %q [[0, 1], [2], [3]] : tensor<1x4x64x64xf16> into tensor<4x64x64xf16>
  %catc = tensor.collapse_shape %cat [[0, 1], [2], [3]] : tensor<1x4x64x64xf16> into tensor<4x64x64xf16>
  %e1 = tensor.empty() : tensor<4x64x64xf16>
  %xc = linalg.generic {indexing_maps = [#id3, #bc, #id3], iterator_types = ["parallel", "parallel", "parallel"]} ins(%qc, %cos : tensor<4x64x64xf16>, tensor<64x64xf16>) outs(%e1 : tensor<4x64x64xf16>) {
  ^bb0(%a: f16, %c: f16, %out: f16):
    %m = arith.mulf %a, %c : f16
    linalg.yield %m : f16
  } -> tensor<4x64x64xf16>
  %rs = linalg.generic {indexing_maps = [#id3, #bc, #id3], iterator_types = ["parallel", "parallel", "parallel"]} ins(%catc, %sin : tensor<4x64x64xf16>, tensor<64x64xf16>) outs(%e1 : tensor<4x64x64xf16>) {
  ^bb0(%b: f16, %s: f16, %out: f16):
    %m = arith.mulf %b, %s : f16
    linalg.yield %m : f16
  } -> tensor<4x64x64xf16>
  %r = linalg.generic {indexing_maps = [#id3, #id3, #id3], iterator_types = ["parallel", "parallel", "parallel"]} ins(%xc, %rs : tensor<4x64x64xf16>, tensor<4x64x64xf16>) outs(%e1 : tensor<4x64x64xf16>) {
  ^bb0(%a: f16, %b: f16, %out: f16):
    %s = arith.addf %a, %b : f16
    linalg.yield %s : f16
  } -> tensor<4x64x64xf16>
  return %r : tensor<4x64x64xf16>
}

// A concatenation read by a reduction stays as it is.
// CHECK-LABEL: func.func @kept(
// CHECK:         tensor.concat
// CHECK:         linalg.generic {{.*}}iterator_types = ["parallel", "reduction"]
#rows = affine_map<(d0, d1) -> (d0, d1)>
#row = affine_map<(d0, d1) -> (d0)>
func.func @kept(%a: tensor<8x16xf32>, %b: tensor<8x16xf32>, %init: tensor<8xf32>) -> tensor<8xf32> {
  %cat = tensor.concat dim(1) %a, %b : (tensor<8x16xf32>, tensor<8x16xf32>) -> tensor<8x32xf32>
  %sum = linalg.generic {indexing_maps = [#rows, #row], iterator_types = ["parallel", "reduction"]} ins(%cat : tensor<8x32xf32>) outs(%init : tensor<8xf32>) {
  ^bb0(%x: f32, %acc: f32):
    %s = arith.addf %x, %acc : f32
    linalg.yield %s : f32
  } -> tensor<8xf32>
  return %sum : tensor<8xf32>
}
