// RUN: %stage-split-fills %s | FileCheck %s

// CSE leaves one zero-filled tensor initialising two matmuls. Each matmul
// gets a fill (and an empty destination) of its own, so bufferization can
// fill in place instead of copying the shared fill.

// CHECK-LABEL: func.func @two_matmuls(
// CHECK:         %[[E1:.*]] = tensor.empty
// CHECK:         %[[F1:.*]] = linalg.fill ins(%{{.*}} : f32) outs(%[[E1]] :
// CHECK:         %[[M1:.*]] = linalg.matmul ins(%{{.*}}, %{{.*}} : {{.*}}) outs(%[[F1]] :
// CHECK:         %[[E2:.*]] = tensor.empty
// CHECK:         %[[F2:.*]] = linalg.fill ins(%{{.*}} : f32) outs(%[[E2]] :
// CHECK:         linalg.matmul ins(%[[M1]], %{{.*}} : {{.*}}) outs(%[[F2]] :
func.func @two_matmuls(%a: tensor<8x8xf32>, %b: tensor<8x8xf32>) -> tensor<8x8xf32> {
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<8x8xf32>
  %f = linalg.fill ins(%zero : f32) outs(%e : tensor<8x8xf32>) -> tensor<8x8xf32>
  %m1 = linalg.matmul ins(%a, %b : tensor<8x8xf32>, tensor<8x8xf32>) outs(%f : tensor<8x8xf32>) -> tensor<8x8xf32>
  %m2 = linalg.matmul ins(%m1, %b : tensor<8x8xf32>, tensor<8x8xf32>) outs(%f : tensor<8x8xf32>) -> tensor<8x8xf32>
  return %m2 : tensor<8x8xf32>
}

// A fill with one consumer is left alone.
// CHECK-LABEL: func.func @one_matmul(
// CHECK-COUNT-1: linalg.fill
// CHECK-NOT:     linalg.fill
func.func @one_matmul(%a: tensor<8x8xf32>, %b: tensor<8x8xf32>) -> tensor<8x8xf32> {
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<8x8xf32>
  %f = linalg.fill ins(%zero : f32) outs(%e : tensor<8x8xf32>) -> tensor<8x8xf32>
  %m = linalg.matmul ins(%a, %b : tensor<8x8xf32>, tensor<8x8xf32>) outs(%f : tensor<8x8xf32>) -> tensor<8x8xf32>
  return %m : tensor<8x8xf32>
}
