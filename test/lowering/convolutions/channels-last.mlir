// RUN: %stage-convolutions %s | FileCheck %s

// channels-last: the op putting a convolution's matmul result back
// channels-first (conv-as-matmul marks it) writes channels-last instead, and so does the ReLU reading it; the
// padding for the next convolution pads channels-last; the last op, whose
// result the function returns, writes torch's layout. No transpose is left.

#last = affine_map<(d0, d1, d2, d3) -> (d0, d2, d3, d1)>
#id = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>
#chan = affine_map<(d0, d1, d2, d3) -> (d1)>

// CHECK-DAG: #[[LAST:.*]] = affine_map<(d0, d1, d2, d3) -> (d0, d2, d3, d1)>
// CHECK-DAG: #[[ID:.*]] = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>
// CHECK-LABEL: func.func @chain(
// CHECK:         %[[A:.*]] = linalg.generic {indexing_maps = [#[[LAST]], #{{.*}}, #[[LAST]]]{{.*}} outs(%{{.*}} : tensor<2x4x4x8xf32>)
// CHECK:         %[[R:.*]] = linalg.generic {indexing_maps = [#[[LAST]], #[[LAST]]]{{.*}} ins(%[[A]] : tensor<2x4x4x8xf32>) outs(%{{.*}} : tensor<2x4x4x8xf32>)
// CHECK:         %[[P:.*]] = tensor.pad %[[R]] low[0, 1, 1, 0] high[0, 1, 1, 0]
// CHECK:         } : tensor<2x4x4x8xf32> to tensor<2x6x6x8xf32>
// CHECK:         linalg.generic {indexing_maps = [#[[LAST]], #[[ID]]]{{.*}} ins(%[[P]] : tensor<2x6x6x8xf32>) outs(%{{.*}} : tensor<2x8x6x6xf32>)
// CHECK-NOT:     linalg.transpose
// CHECK-NOT:     twintrack.channels_last
func.func @chain(%y: tensor<2x4x4x8xf32>, %b: tensor<8xf32>) -> tensor<2x8x6x6xf32> {
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<2x8x4x4xf32>
  %a = linalg.generic {indexing_maps = [#last, #chan, #id], iterator_types = ["parallel", "parallel", "parallel", "parallel"],
                       twintrack.channels_last}
      ins(%y, %b : tensor<2x4x4x8xf32>, tensor<8xf32>) outs(%e : tensor<2x8x4x4xf32>) {
  ^bb0(%v: f32, %bias: f32, %o: f32):
    %s = arith.addf %bias, %v : f32
    linalg.yield %s : f32
  } -> tensor<2x8x4x4xf32>
  %r = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel", "parallel", "parallel"]}
      ins(%a : tensor<2x8x4x4xf32>) outs(%e : tensor<2x8x4x4xf32>) {
  ^bb0(%v: f32, %o: f32):
    %m = arith.maximumf %v, %zero : f32
    linalg.yield %m : f32
  } -> tensor<2x8x4x4xf32>
  %p = tensor.pad %r low[0, 0, 1, 1] high[0, 0, 1, 1] {
  ^bb0(%i: index, %j: index, %k: index, %l: index):
    tensor.yield %zero : f32
  } : tensor<2x8x4x4xf32> to tensor<2x8x6x6xf32>
  %e2 = tensor.empty() : tensor<2x8x6x6xf32>
  %n = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel", "parallel", "parallel"]}
      ins(%p : tensor<2x8x6x6xf32>) outs(%e2 : tensor<2x8x6x6xf32>) {
  ^bb0(%v: f32, %o: f32):
    %m = arith.negf %v : f32
    linalg.yield %m : f32
  } -> tensor<2x8x6x6xf32>
  return %n : tensor<2x8x6x6xf32>
}


// Not from a convolution (no mark): an op reading a tensor through a
// permutation (attention's heads) keeps writing its own layout.
// CHECK-LABEL: func.func @unmarked(
// CHECK:         linalg.generic {indexing_maps = [#[[LAST]], #[[ID]]]{{.*}} outs(%{{.*}} : tensor<2x8x4x4xf32>)
func.func @unmarked(%y: tensor<2x4x4x8xf32>) -> tensor<2x8x4x4xf32> {
  %e = tensor.empty() : tensor<2x8x4x4xf32>
  %a = linalg.generic {indexing_maps = [#last, #id], iterator_types = ["parallel", "parallel", "parallel", "parallel"]}
      ins(%y : tensor<2x4x4x8xf32>) outs(%e : tensor<2x8x4x4xf32>) {
  ^bb0(%v: f32, %o: f32):
    linalg.yield %v : f32
  } -> tensor<2x8x4x4xf32>
  %n = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel", "parallel", "parallel"]}
      ins(%a : tensor<2x8x4x4xf32>) outs(%e : tensor<2x8x4x4xf32>) {
  ^bb0(%v: f32, %o: f32):
    %m = arith.negf %v : f32
    linalg.yield %m : f32
  } -> tensor<2x8x4x4xf32>
  return %n : tensor<2x8x4x4xf32>
}


// An argument stored channels-last (the frontend takes it as stored and
// permutes it to torch's order): its padding pads it channels-last and the
// op reading the padding reads through the permutation. No transpose is left.
// CHECK-LABEL: func.func @stored_argument(
// CHECK-SAME:      %[[X:.*]]: tensor<2x4x4x8xf32>
// CHECK:         %[[P:.*]] = tensor.pad %[[X]] low[0, 1, 1, 0] high[0, 1, 1, 0]
// CHECK:         linalg.generic {indexing_maps = [#[[LAST]], #[[ID]]]{{.*}} ins(%[[P]] : tensor<2x6x6x8xf32>) outs(%{{.*}} : tensor<2x8x6x6xf32>)
// CHECK-NOT:     linalg.transpose
func.func @stored_argument(%x: tensor<2x4x4x8xf32>) -> tensor<2x8x6x6xf32> {
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<2x8x4x4xf32>
  %t = linalg.transpose ins(%x : tensor<2x4x4x8xf32>) outs(%e : tensor<2x8x4x4xf32>) permutation = [0, 3, 1, 2]
  %p = tensor.pad %t low[0, 0, 1, 1] high[0, 0, 1, 1] {
  ^bb0(%i: index, %j: index, %k: index, %l: index):
    tensor.yield %zero : f32
  } : tensor<2x8x4x4xf32> to tensor<2x8x6x6xf32>
  %e2 = tensor.empty() : tensor<2x8x6x6xf32>
  %n = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel", "parallel", "parallel"]}
      ins(%p : tensor<2x8x6x6xf32>) outs(%e2 : tensor<2x8x6x6xf32>) {
  ^bb0(%v: f32, %o: f32):
    %m = arith.negf %v : f32
    linalg.yield %m : f32
  } -> tensor<2x8x6x6xf32>
  return %n : tensor<2x8x6x6xf32>
}
