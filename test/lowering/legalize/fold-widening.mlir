// RUN: %stage-legalize %s | FileCheck %s

// A half-precision linear layer, as torch-mlir writes it: both operands
// widened to f32 before the matmul. The matmul reads the f16 tensors directly
// instead (linalg.matmul widens its operands itself), and the widenings go.

// CHECK-LABEL: func.func @half_linear(
// CHECK-SAME:    %[[A16:.*]]: tensor<4x8xf16>, %[[B16:.*]]: tensor<8x2xf16>)
// CHECK-NOT:     arith.extf
// CHECK:         linalg.matmul ins(%[[A16]], %[[B16]] : tensor<4x8xf16>, tensor<8x2xf16>) outs(%{{.*}} : tensor<4x2xf32>)
#id = affine_map<(d0, d1) -> (d0, d1)>
func.func @half_linear(%a: tensor<4x8xf16>, %b: tensor<8x2xf16>) -> tensor<4x2xf32> {
  %zero = arith.constant 0.0 : f32
  %ea = tensor.empty() : tensor<4x8xf32>
  %wa = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%a : tensor<4x8xf16>) outs(%ea : tensor<4x8xf32>) {
  ^bb0(%x: f16, %o: f32):
    %w = arith.extf %x : f16 to f32
    linalg.yield %w : f32
  } -> tensor<4x8xf32>
  %eb = tensor.empty() : tensor<8x2xf32>
  %wb = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%b : tensor<8x2xf16>) outs(%eb : tensor<8x2xf32>) {
  ^bb0(%x: f16, %o: f32):
    %w = arith.extf %x : f16 to f32
    linalg.yield %w : f32
  } -> tensor<8x2xf32>
  %e = tensor.empty() : tensor<4x2xf32>
  %f = linalg.fill ins(%zero : f32) outs(%e : tensor<4x2xf32>) -> tensor<4x2xf32>
  %m = linalg.matmul ins(%wa, %wb : tensor<4x8xf32>, tensor<8x2xf32>) outs(%f : tensor<4x2xf32>) -> tensor<4x2xf32>
  return %m : tensor<4x2xf32>
}

// An f32 matmul is left as it is.
// CHECK-LABEL: func.func @single(
// CHECK:         linalg.matmul ins(%{{.*}}, %{{.*}} : tensor<4x8xf32>, tensor<8x2xf32>)
func.func @single(%a: tensor<4x8xf32>, %b: tensor<8x2xf32>) -> tensor<4x2xf32> {
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<4x2xf32>
  %f = linalg.fill ins(%zero : f32) outs(%e : tensor<4x2xf32>) -> tensor<4x2xf32>
  %m = linalg.matmul ins(%a, %b : tensor<4x8xf32>, tensor<8x2xf32>) outs(%f : tensor<4x2xf32>) -> tensor<4x2xf32>
  return %m : tensor<4x2xf32>
}

// Attention's scores: K widened, then transposed and collapsed for a batch
// matmul. The views are rebuilt on the f16 tensor (widening commutes with
// moving elements), and the matmul reads f16 through them.
// CHECK-LABEL: func.func @widened_behind_views(
// CHECK-SAME:    %[[Q:.*]]: tensor<2x3x4x8xf16>, %[[K:.*]]: tensor<2x3x5x8xf16>)
// CHECK-NOT:     arith.extf
// CHECK-DAG:     %[[KT:.*]] = linalg.transpose ins(%[[K]] : tensor<2x3x5x8xf16>) outs(%{{.*}} : tensor<2x3x8x5xf16>) permutation = [0, 1, 3, 2]
// CHECK-DAG:     %[[QC:.*]] = tensor.collapse_shape %[[Q]] {{\[}}[0, 1], [2], [3]] : tensor<2x3x4x8xf16> into tensor<6x4x8xf16>
// CHECK-DAG:     %[[KC:.*]] = tensor.collapse_shape %[[KT]] {{\[}}[0, 1], [2], [3]] : tensor<2x3x8x5xf16> into tensor<6x8x5xf16>
// CHECK:         linalg.batch_matmul ins(%[[QC]], %[[KC]] : tensor<6x4x8xf16>, tensor<6x8x5xf16>) outs(%{{.*}} : tensor<6x4x5xf32>)
#id4 = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>
func.func @widened_behind_views(%q: tensor<2x3x4x8xf16>, %k: tensor<2x3x5x8xf16>) -> tensor<6x4x5xf32> {
  %zero = arith.constant 0.0 : f32
  %eq = tensor.empty() : tensor<2x3x4x8xf32>
  %wq = linalg.generic {indexing_maps = [#id4, #id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]}
      ins(%q : tensor<2x3x4x8xf16>) outs(%eq : tensor<2x3x4x8xf32>) {
  ^bb0(%x: f16, %o: f32):
    %w = arith.extf %x : f16 to f32
    linalg.yield %w : f32
  } -> tensor<2x3x4x8xf32>
  %ek = tensor.empty() : tensor<2x3x5x8xf32>
  %wk = linalg.generic {indexing_maps = [#id4, #id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]}
      ins(%k : tensor<2x3x5x8xf16>) outs(%ek : tensor<2x3x5x8xf32>) {
  ^bb0(%x: f16, %o: f32):
    %w = arith.extf %x : f16 to f32
    linalg.yield %w : f32
  } -> tensor<2x3x5x8xf32>
  %et = tensor.empty() : tensor<2x3x8x5xf32>
  %kt = linalg.transpose ins(%wk : tensor<2x3x5x8xf32>) outs(%et : tensor<2x3x8x5xf32>) permutation = [0, 1, 3, 2]
  %qc = tensor.collapse_shape %wq [[0, 1], [2], [3]] : tensor<2x3x4x8xf32> into tensor<6x4x8xf32>
  %kc = tensor.collapse_shape %kt [[0, 1], [2], [3]] : tensor<2x3x8x5xf32> into tensor<6x8x5xf32>
  %e = tensor.empty() : tensor<6x4x5xf32>
  %f = linalg.fill ins(%zero : f32) outs(%e : tensor<6x4x5xf32>) -> tensor<6x4x5xf32>
  %m = linalg.batch_matmul ins(%qc, %kc : tensor<6x4x8xf32>, tensor<6x8x5xf32>) outs(%f : tensor<6x4x5xf32>) -> tensor<6x4x5xf32>
  return %m : tensor<6x4x5xf32>
}

// A widening another op also reads stays for it; the matmul still reads f16.
// CHECK-LABEL: func.func @widening_also_returned(
// CHECK:         %[[W:.*]] = linalg.generic
// CHECK:         arith.extf
// CHECK:         %[[X:.*]] = tensor.expand_shape %arg0
// CHECK:         linalg.batch_matmul ins(%[[X]], %{{.*}} : tensor<1x4x8xf16>, tensor<1x8x2xf32>)
// CHECK:         return %{{.*}}, %[[W]]
#id2 = affine_map<(d0, d1) -> (d0, d1)>
func.func @widening_also_returned(%a: tensor<4x8xf16>, %b: tensor<1x8x2xf32>) -> (tensor<1x4x2xf32>, tensor<4x8xf32>) {
  %zero = arith.constant 0.0 : f32
  %ea = tensor.empty() : tensor<4x8xf32>
  %wa = linalg.generic {indexing_maps = [#id2, #id2], iterator_types = ["parallel", "parallel"]}
      ins(%a : tensor<4x8xf16>) outs(%ea : tensor<4x8xf32>) {
  ^bb0(%x: f16, %o: f32):
    %w = arith.extf %x : f16 to f32
    linalg.yield %w : f32
  } -> tensor<4x8xf32>
  %xa = tensor.expand_shape %wa [[0, 1], [2]] output_shape [1, 4, 8] : tensor<4x8xf32> into tensor<1x4x8xf32>
  %e = tensor.empty() : tensor<1x4x2xf32>
  %f = linalg.fill ins(%zero : f32) outs(%e : tensor<1x4x2xf32>) -> tensor<1x4x2xf32>
  %m = linalg.batch_matmul ins(%xa, %b : tensor<1x4x8xf32>, tensor<1x8x2xf32>) outs(%f : tensor<1x4x2xf32>) -> tensor<1x4x2xf32>
  return %m, %wa : tensor<1x4x2xf32>, tensor<4x8xf32>
}
