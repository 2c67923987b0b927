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

// CSE merged the destinations of two matmul epilogues (an MLP's
// activations). Each gets its own tensor.empty, so bufferization does not
// write both into one buffer (the second layer's matmul would read the
// buffer its epilogue overwrites, and could not take it as an epilogue). The
// elementwise op that reads no matmul keeps the shared destination.
// CHECK-LABEL: func.func @epilogue_destinations(
// CHECK:         %[[SHARED:.*]] = tensor.empty
// CHECK:         %[[M1:.*]] = linalg.matmul
// CHECK:         %[[E1:.*]] = tensor.empty
// CHECK:         %[[R1:.*]] = linalg.generic {{.*}} ins(%[[M1]] : tensor<8x8xf32>) outs(%[[E1]] : tensor<8x8xf32>)
// CHECK:         %[[M2:.*]] = linalg.matmul ins(%[[R1]],
// CHECK:         %[[E2:.*]] = tensor.empty
// CHECK:         %[[R2:.*]] = linalg.generic {{.*}} ins(%[[M2]] : tensor<8x8xf32>) outs(%[[E2]] : tensor<8x8xf32>)
// CHECK:         linalg.generic {{.*}} ins(%[[R2]] : tensor<8x8xf32>) outs(%[[SHARED]] : tensor<8x8xf32>)
#id = affine_map<(d0, d1) -> (d0, d1)>
func.func @epilogue_destinations(%a: tensor<8x8xf32>, %w: tensor<8x8xf32>, %acc: tensor<8x8xf32>) -> tensor<8x8xf32> {
  %e = tensor.empty() : tensor<8x8xf32>
  %m1 = linalg.matmul ins(%a, %w : tensor<8x8xf32>, tensor<8x8xf32>) outs(%acc : tensor<8x8xf32>) -> tensor<8x8xf32>
  %r1 = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%m1 : tensor<8x8xf32>) outs(%e : tensor<8x8xf32>) {
  ^bb0(%x: f32, %out: f32):
    %y = arith.addf %x, %x : f32
    linalg.yield %y : f32
  } -> tensor<8x8xf32>
  %m2 = linalg.matmul ins(%r1, %w : tensor<8x8xf32>, tensor<8x8xf32>) outs(%acc : tensor<8x8xf32>) -> tensor<8x8xf32>
  %r2 = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%m2 : tensor<8x8xf32>) outs(%e : tensor<8x8xf32>) {
  ^bb0(%x: f32, %out: f32):
    %y = arith.mulf %x, %x : f32
    linalg.yield %y : f32
  } -> tensor<8x8xf32>
  %r3 = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%r2 : tensor<8x8xf32>) outs(%e : tensor<8x8xf32>) {
  ^bb0(%x: f32, %out: f32):
    %y = arith.subf %x, %x : f32
    linalg.yield %y : f32
  } -> tensor<8x8xf32>
  return %r3 : tensor<8x8xf32>
}

// The same for one-row matmuls (decode) whose unit dim fusion dropped: the
// epilogues read the matmul results through a collapse_shape.
// CHECK-LABEL: func.func @row_epilogue_destinations(
// CHECK:         %[[M1:.*]] = linalg.matmul
// CHECK:         %[[C1:.*]] = tensor.collapse_shape %[[M1]]
// CHECK:         %[[E1:.*]] = tensor.empty
// CHECK:         linalg.generic {{.*}} ins(%[[C1]] : tensor<8xf32>) outs(%[[E1]] : tensor<8xf32>)
// CHECK:         %[[M2:.*]] = linalg.matmul
// CHECK:         %[[C2:.*]] = tensor.collapse_shape %[[M2]]
// CHECK:         %[[E2:.*]] = tensor.empty
// CHECK:         linalg.generic {{.*}} ins(%[[C2]] : tensor<8xf32>) outs(%[[E2]] : tensor<8xf32>)
#id1 = affine_map<(d0) -> (d0)>
func.func @row_epilogue_destinations(%a: tensor<1x8xf32>, %w: tensor<8x8xf32>, %acc: tensor<1x8xf32>) -> tensor<8xf32> {
  %e = tensor.empty() : tensor<8xf32>
  %m1 = linalg.matmul ins(%a, %w : tensor<1x8xf32>, tensor<8x8xf32>) outs(%acc : tensor<1x8xf32>) -> tensor<1x8xf32>
  %c1 = tensor.collapse_shape %m1 [[0, 1]] : tensor<1x8xf32> into tensor<8xf32>
  %r1 = linalg.generic {indexing_maps = [#id1, #id1], iterator_types = ["parallel"]}
      ins(%c1 : tensor<8xf32>) outs(%e : tensor<8xf32>) {
  ^bb0(%x: f32, %out: f32):
    %y = arith.addf %x, %x : f32
    linalg.yield %y : f32
  } -> tensor<8xf32>
  %x2 = tensor.expand_shape %r1 [[0, 1]] output_shape [1, 8] : tensor<8xf32> into tensor<1x8xf32>
  %m2 = linalg.matmul ins(%x2, %w : tensor<1x8xf32>, tensor<8x8xf32>) outs(%acc : tensor<1x8xf32>) -> tensor<1x8xf32>
  %c2 = tensor.collapse_shape %m2 [[0, 1]] : tensor<1x8xf32> into tensor<8xf32>
  %r2 = linalg.generic {indexing_maps = [#id1, #id1], iterator_types = ["parallel"]}
      ins(%c2 : tensor<8xf32>) outs(%e : tensor<8xf32>) {
  ^bb0(%x: f32, %out: f32):
    %y = arith.mulf %x, %x : f32
    linalg.yield %y : f32
  } -> tensor<8xf32>
  return %r2 : tensor<8xf32>
}
