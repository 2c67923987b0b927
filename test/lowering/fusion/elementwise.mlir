// RUN: %stage-fusion %s | FileCheck %s

// The fusion stage groups ops into twintrack.dispatch regions by the cost
// model (its rules are tested one by one in test/dialect/form-dispatches.mlir)
// and fuses the ops inside each: each chain below becomes one dispatch
// holding a single linalg.generic.

#map = affine_map<(d0, d1) -> (d0, d1)>
#map1 = affine_map<(d0, d1) -> (d1)>
#map2 = affine_map<(d0, d1) -> (d0)>

// Bias add followed by ReLU: one generic with both bodies, reading the
// broadcast bias directly.
// CHECK-LABEL: func.func @add_relu(
// CHECK-SAME:    %[[X0:.*]]: tensor<4x8xf32>, %[[B0:.*]]: tensor<8xf32>
// CHECK:         %[[D:.*]] = twintrack.dispatch "elementwise_0" kind<elementwise> (%[[X0]], %[[B0]] : tensor<4x8xf32>, tensor<8xf32>)
// CHECK-NEXT:    ^bb0(%[[X:.*]]: tensor<4x8xf32>, %[[B:.*]]: tensor<8xf32>):
// CHECK:         %[[R:.*]] = linalg.generic {{.*}} ins(%[[X]], %[[B]] : tensor<4x8xf32>, tensor<8xf32>)
// CHECK:           %[[SUM:.*]] = arith.addf
// CHECK-NEXT:      %[[GT:.*]] = arith.cmpf ugt, %[[SUM]]
// CHECK-NEXT:      %[[MAX:.*]] = arith.select %[[GT]], %[[SUM]]
// CHECK-NEXT:      linalg.yield %[[MAX]] : f32
// CHECK-NOT:     linalg.generic
// CHECK:         twintrack.yield %[[R]] : tensor<4x8xf32>
// CHECK:         return %[[D]] : tensor<4x8xf32>
func.func @add_relu(%arg0: tensor<4x8xf32>, %arg1: tensor<8xf32>) -> tensor<4x8xf32> {
  %cst = arith.constant 0.000000e+00 : f32
  %0 = tensor.empty() : tensor<4x8xf32>
  %1 = linalg.generic {indexing_maps = [#map, #map1, #map], iterator_types = ["parallel", "parallel"]} ins(%arg0, %arg1 : tensor<4x8xf32>, tensor<8xf32>) outs(%0 : tensor<4x8xf32>) {
  ^bb0(%in: f32, %in_0: f32, %out: f32):
    %3 = arith.addf %in, %in_0 : f32
    linalg.yield %3 : f32
  } -> tensor<4x8xf32>
  %2 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel"]} ins(%1 : tensor<4x8xf32>) outs(%0 : tensor<4x8xf32>) {
  ^bb0(%in: f32, %out: f32):
    %3 = arith.cmpf ugt, %in, %cst : f32
    %4 = arith.select %3, %in, %cst : f32
    linalg.yield %4 : f32
  } -> tensor<4x8xf32>
  return %2 : tensor<4x8xf32>
}

// An elementwise producer fuses into a reduction consumer (softmax's
// exp + row sum): the exp moves into the reduction body.
// CHECK-LABEL: func.func @exp_sum(
// CHECK:         %[[D:.*]] = twintrack.dispatch "reduction_0" kind<reduction>
// CHECK-NEXT:    ^bb0(%[[X:.*]]: tensor<4x8xf32>):
// CHECK:         %[[INIT:.*]] = linalg.fill
// CHECK:         %[[R:.*]] = linalg.generic {{.*}} iterator_types = ["parallel", "reduction"]} ins(%[[X]] : tensor<4x8xf32>) outs(%[[INIT]] : tensor<4xf32>)
// CHECK-NEXT:    ^bb0(%[[IN:.*]]: f32, %[[ACC:.*]]: f32):
// CHECK-NEXT:      %[[E:.*]] = math.exp %[[IN]] : f32
// CHECK-NEXT:      %[[S:.*]] = arith.addf %[[E]], %[[ACC]] : f32
// CHECK-NEXT:      linalg.yield %[[S]] : f32
// CHECK-NOT:     linalg.generic
// CHECK:         twintrack.yield %[[R]] : tensor<4xf32>
// CHECK:         return %[[D]] : tensor<4xf32>
func.func @exp_sum(%arg0: tensor<4x8xf32>) -> tensor<4xf32> {
  %cst = arith.constant 0.000000e+00 : f32
  %0 = tensor.empty() : tensor<4x8xf32>
  %1 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel"]} ins(%arg0 : tensor<4x8xf32>) outs(%0 : tensor<4x8xf32>) {
  ^bb0(%in: f32, %out: f32):
    %5 = math.exp %in : f32
    linalg.yield %5 : f32
  } -> tensor<4x8xf32>
  %2 = tensor.empty() : tensor<4xf32>
  %3 = linalg.fill ins(%cst : f32) outs(%2 : tensor<4xf32>) -> tensor<4xf32>
  %4 = linalg.generic {indexing_maps = [#map, #map2], iterator_types = ["parallel", "reduction"]} ins(%1 : tensor<4x8xf32>) outs(%3 : tensor<4xf32>) {
  ^bb0(%in: f32, %out: f32):
    %5 = arith.addf %in, %out : f32
    linalg.yield %5 : f32
  } -> tensor<4xf32>
  return %4 : tensor<4xf32>
}

// A head-split permute followed by the attention scale (q * d^-0.5): the
// transpose is generalized inside the dispatch, so the two merge into one
// generic that reads the input through the permutation. A transpose alone
// stays a named linalg.transpose.
// CHECK-LABEL: func.func @permute_scale(
// CHECK:         twintrack.dispatch
// CHECK-NOT:       linalg.transpose
// CHECK:           linalg.generic {indexing_maps = [#{{.*}}, #{{.*}}], iterator_types = ["parallel", "parallel", "parallel"]}
// CHECK:             arith.mulf
// CHECK-NOT:       linalg.generic
// CHECK:           twintrack.yield
// CHECK-LABEL: func.func @permute_alone(
// CHECK:           linalg.transpose
func.func @permute_scale(%q: tensor<16x4x8xf32>) -> tensor<4x16x8xf32> {
  %scale = arith.constant 0.35 : f32
  %e = tensor.empty() : tensor<4x16x8xf32>
  %t = linalg.transpose ins(%q : tensor<16x4x8xf32>) outs(%e : tensor<4x16x8xf32>) permutation = [1, 0, 2]
  %s = linalg.generic {indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d1, d2)>, affine_map<(d0, d1, d2) -> (d0, d1, d2)>],
                       iterator_types = ["parallel", "parallel", "parallel"]} ins(%t : tensor<4x16x8xf32>) outs(%e : tensor<4x16x8xf32>) {
  ^bb0(%in: f32, %out: f32):
    %m = arith.mulf %in, %scale : f32
    linalg.yield %m : f32
  } -> tensor<4x16x8xf32>
  return %s : tensor<4x16x8xf32>
}

func.func @permute_alone(%q: tensor<16x4x8xf32>) -> tensor<4x16x8xf32> {
  %e = tensor.empty() : tensor<4x16x8xf32>
  %t = linalg.transpose ins(%q : tensor<16x4x8xf32>) outs(%e : tensor<4x16x8xf32>) permutation = [1, 0, 2]
  return %t : tensor<4x16x8xf32>
}
