// RUN: %stage-bufferize %s | FileCheck %s
// RUN: %stage-bufferize %s | FileCheck %s --check-prefix=GONE

// The bufferize stage turns tensors into memrefs across function boundaries
// (identity layouts), reuses buffers in place, frees temporaries, and turns
// memref results into out-parameters (public functions included), writing
// straight into the out-parameter where the result buffer was a static alloc.

// GONE-NOT: tensor<
// GONE-NOT: tensor.empty
// GONE-NOT: bufferization.
// GONE-NOT: strided<
// GONE-NOT: -> memref<

#map = affine_map<(d0, d1) -> (d0, d1)>
#map1 = affine_map<(d0, d1) -> (d1)>

// fill, matmul and the fused bias+ReLU all write the out-parameter in place.
// CHECK-LABEL: func.func @matmul_bias_relu(
// CHECK-SAME:    %[[A:.*]]: memref<2x4xf32>, %[[B:.*]]: memref<4x3xf32>, %[[C:.*]]: memref<3xf32>, %[[OUT:.*]]: memref<2x3xf32>) {
// CHECK-NOT:     memref.alloc
// CHECK:         linalg.fill ins(%{{.*}} : f32) outs(%[[OUT]] : memref<2x3xf32>)
// CHECK:         linalg.matmul ins(%[[A]], %[[B]] : memref<2x4xf32>, memref<4x3xf32>) outs(%[[OUT]] : memref<2x3xf32>)
// CHECK:         linalg.generic {{.*}} ins(%[[OUT]], %[[C]] : memref<2x3xf32>, memref<3xf32>) outs(%[[OUT]] : memref<2x3xf32>)
// CHECK-NOT:     memref.dealloc
// CHECK:         return{{$}}
func.func @matmul_bias_relu(%arg0: tensor<2x4xf32>, %arg1: tensor<4x3xf32>, %arg2: tensor<3xf32>) -> tensor<2x3xf32> {
  %cst = arith.constant 0.000000e+00 : f32
  %0 = tensor.empty() : tensor<2x3xf32>
  %1 = linalg.fill ins(%cst : f32) outs(%0 : tensor<2x3xf32>) -> tensor<2x3xf32>
  %2 = linalg.matmul ins(%arg0, %arg1 : tensor<2x4xf32>, tensor<4x3xf32>) outs(%1 : tensor<2x3xf32>) -> tensor<2x3xf32>
  %3 = linalg.generic {indexing_maps = [#map, #map1, #map], iterator_types = ["parallel", "parallel"]} ins(%2, %arg2 : tensor<2x3xf32>, tensor<3xf32>) outs(%0 : tensor<2x3xf32>) {
  ^bb0(%in: f32, %in_0: f32, %out: f32):
    %4 = arith.addf %in, %in_0 : f32
    %5 = arith.cmpf ugt, %4, %cst : f32
    %6 = arith.select %5, %4, %cst : f32
    linalg.yield %6 : f32
  } -> tensor<2x3xf32>
  return %3 : tensor<2x3xf32>
}

// The transposed weight is a temporary: allocated, then freed before return.
// CHECK-LABEL: func.func @transpose_matmul(
// CHECK-SAME:    %[[A:.*]]: memref<2x4xf32>, %[[W:.*]]: memref<3x4xf32>, %[[OUT:.*]]: memref<2x3xf32>) {
// CHECK:         %[[WT:.*]] = memref.alloc() {{.*}}: memref<4x3xf32>
// CHECK:         linalg.transpose ins(%[[W]] : memref<3x4xf32>) outs(%[[WT]] : memref<4x3xf32>)
// CHECK:         linalg.matmul ins(%[[A]], %[[WT]] : memref<2x4xf32>, memref<4x3xf32>) outs(%[[OUT]] : memref<2x3xf32>)
// CHECK:         memref.dealloc %[[WT]] : memref<4x3xf32>
// CHECK-NOT:     memref.dealloc
// CHECK:         return{{$}}
func.func @transpose_matmul(%arg0: tensor<2x4xf32>, %arg1: tensor<3x4xf32>) -> tensor<2x3xf32> {
  %cst = arith.constant 0.000000e+00 : f32
  %0 = tensor.empty() : tensor<4x3xf32>
  %transposed = linalg.transpose ins(%arg1 : tensor<3x4xf32>) outs(%0 : tensor<4x3xf32>) permutation = [1, 0]
  %1 = tensor.empty() : tensor<2x3xf32>
  %2 = linalg.fill ins(%cst : f32) outs(%1 : tensor<2x3xf32>) -> tensor<2x3xf32>
  %3 = linalg.matmul ins(%arg0, %transposed : tensor<2x4xf32>, tensor<4x3xf32>) outs(%2 : tensor<2x3xf32>) -> tensor<2x3xf32>
  return %3 : tensor<2x3xf32>
}

// CHECK-LABEL: func.func private @helper(
// CHECK-SAME:    %[[IN:.*]]: memref<4xf32>, %[[OUT:.*]]: memref<4xf32>) {
// CHECK-NEXT:    linalg.copy ins(%[[IN]] : memref<4xf32>) outs(%[[OUT]] : memref<4xf32>)
// CHECK-NEXT:    return{{$}}
func.func private @helper(%arg0: tensor<4xf32>) -> tensor<4xf32> {
  %0 = tensor.empty() : tensor<4xf32>
  %1 = linalg.copy ins(%arg0 : tensor<4xf32>) outs(%0 : tensor<4xf32>) -> tensor<4xf32>
  return %1 : tensor<4xf32>
}

// The call's result buffer is allocated by the caller, copied into the
// caller's own out-parameter and freed.
// CHECK-LABEL: func.func @caller(
// CHECK-SAME:    %[[IN:.*]]: memref<4xf32>, %[[OUT:.*]]: memref<4xf32>) {
// CHECK:         %[[BUF:.*]] = memref.alloc() : memref<4xf32>
// CHECK:         call @helper(%[[IN]], %[[BUF]]) : (memref<4xf32>, memref<4xf32>) -> ()
// CHECK:         memref.copy %[[BUF]], %[[OUT]]
// CHECK:         memref.dealloc %[[BUF]]
// CHECK:         return{{$}}
func.func @caller(%arg0: tensor<4xf32>) -> tensor<4xf32> {
  %0 = call @helper(%arg0) : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}
