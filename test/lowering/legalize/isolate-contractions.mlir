// RUN: %stage-legalize %s | FileCheck %s

// Each matmul moves into a private function of its own, so that elementwise
// fusion cannot fold producers (a layernorm, a GELU) into the contraction.
// A half-precision linear layer's matmul reads the f16 tensors directly
// (linalg.matmul widens its operands itself) rather than widened f32 copies.

// CHECK-LABEL: func.func @linear(
// CHECK:         %[[R:.*]] = call @twintrack_contraction_0(%{{.*}}, %{{.*}}, %{{.*}}) : (tensor<4x8xf32>, tensor<8x2xf32>, tensor<4x2xf32>) -> tensor<4x2xf32>
// CHECK:         return %[[R]]

// CHECK-LABEL: func.func @half_linear(
// CHECK-SAME:    %[[A16:.*]]: tensor<4x8xf16>, %[[B16:.*]]: tensor<8x2xf16>)
// CHECK-NOT:     arith.extf
// CHECK:         call @twintrack_contraction_1(%[[A16]], %[[B16]], %{{.*}}) : (tensor<4x8xf16>, tensor<8x2xf16>, tensor<4x2xf32>)

// CHECK-LABEL: func.func private @twintrack_contraction_0(
// CHECK-SAME:    %[[A:.*]]: tensor<4x8xf32>, %[[B:.*]]: tensor<8x2xf32>, %[[C:.*]]: tensor<4x2xf32>) -> tensor<4x2xf32>
// CHECK:         %[[M:.*]] = linalg.matmul ins(%[[A]], %[[B]] : {{.*}}) outs(%[[C]] : tensor<4x2xf32>)
// CHECK:         return %[[M]]

// CHECK-LABEL: func.func private @twintrack_contraction_1(
// CHECK:         linalg.matmul ins(%{{.*}}, %{{.*}} : tensor<4x8xf16>, tensor<8x2xf16>) outs(%{{.*}} : tensor<4x2xf32>)

func.func @linear(%a: tensor<4x8xf32>, %b: tensor<8x2xf32>) -> tensor<4x2xf32> {
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<4x2xf32>
  %f = linalg.fill ins(%zero : f32) outs(%e : tensor<4x2xf32>) -> tensor<4x2xf32>
  %m = linalg.matmul ins(%a, %b : tensor<4x8xf32>, tensor<8x2xf32>) outs(%f : tensor<4x2xf32>) -> tensor<4x2xf32>
  return %m : tensor<4x2xf32>
}

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
