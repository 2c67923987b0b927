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
