// RUN: %stage-state-destinations %s | FileCheck %s

// The state-destinations stage: two weights copied to the layout their
// kernels read, into one tensor.empty (CSE merged them), each get an empty
// of their own, so bufferization gives each its own buffer; an op on the
// input keeps the shared one.

#id = affine_map<(d0, d1) -> (d0, d1)>
#t = affine_map<(d0, d1) -> (d1, d0)>

// CHECK-LABEL: func.func @weights
// CHECK:         %[[SHARED:.*]] = tensor.empty() : tensor<4x4xf32>
// CHECK:         %[[OWN0:.*]] = tensor.empty() : tensor<4x4xf32>
// CHECK-NEXT:    linalg.generic {{.*}} ins(%arg0 : tensor<4x4xf32>) outs(%[[OWN0]] : tensor<4x4xf32>)
// CHECK:         %[[OWN1:.*]] = tensor.empty() : tensor<4x4xf32>
// CHECK-NEXT:    linalg.generic {{.*}} ins(%arg1 : tensor<4x4xf32>) outs(%[[OWN1]] : tensor<4x4xf32>)
// CHECK:         linalg.generic {{.*}} ins(%arg2 : tensor<4x4xf32>) outs(%[[SHARED]] : tensor<4x4xf32>)
func.func @weights(%w0: tensor<4x4xf32>, %w1: tensor<4x4xf32>, %x: tensor<4x4xf32>)
    -> (tensor<4x4xf32>, tensor<4x4xf32>, tensor<4x4xf32>) attributes {twintrack.state_arguments = array<i64: 0, 1>} {
  %empty = tensor.empty() : tensor<4x4xf32>
  %a = linalg.generic {indexing_maps = [#t, #id], iterator_types = ["parallel", "parallel"]}
      ins(%w0 : tensor<4x4xf32>) outs(%empty : tensor<4x4xf32>) {
  ^bb0(%in: f32, %out: f32):
    linalg.yield %in : f32
  } -> tensor<4x4xf32>
  %b = linalg.generic {indexing_maps = [#t, #id], iterator_types = ["parallel", "parallel"]}
      ins(%w1 : tensor<4x4xf32>) outs(%empty : tensor<4x4xf32>) {
  ^bb0(%in: f32, %out: f32):
    linalg.yield %in : f32
  } -> tensor<4x4xf32>
  %c = linalg.generic {indexing_maps = [#t, #id], iterator_types = ["parallel", "parallel"]}
      ins(%x : tensor<4x4xf32>) outs(%empty : tensor<4x4xf32>) {
  ^bb0(%in: f32, %out: f32):
    linalg.yield %in : f32
  } -> tensor<4x4xf32>
  return %a, %b, %c : tensor<4x4xf32>, tensor<4x4xf32>, tensor<4x4xf32>
}
