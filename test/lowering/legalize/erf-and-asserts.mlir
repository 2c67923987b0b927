// RUN: %stage-legalize %s | FileCheck %s
// RUN: %stage-legalize %s | FileCheck %s --check-prefix=GONE

// The legalize stage (Python passes expand-math, drop-runtime-asserts):
// math.erf is expanded into arith + math.exp/absf/copysign (no libm erff call
// later), and torch-mlir's runtime value asserts are erased.

// GONE-NOT: math.erf
// GONE-NOT: cf.assert

// CHECK-LABEL: func.func @gelu(
// CHECK-DAG:     %[[P:.*]] = arith.constant 0.327591091 : f32
// CHECK-DAG:     %[[ONE:.*]] = arith.constant 1.000000e+00 : f32
// CHECK:         linalg.generic
// CHECK:           %[[X:.*]] = arith.divf
// CHECK:           %[[ABS:.*]] = math.absf %[[X]] : f32
// CHECK:           %[[PX:.*]] = arith.mulf %[[ABS]], %[[P]] : f32
// CHECK:           %[[DEN:.*]] = arith.addf %[[PX]], %[[ONE]] : f32
// CHECK:           %[[T:.*]] = arith.divf %[[ONE]], %[[DEN]] : f32
// CHECK:           %[[SQ:.*]] = arith.mulf %[[X]], %[[X]] : f32
// CHECK:           %[[NEG:.*]] = arith.negf %[[SQ]] : f32
// CHECK:           %[[EXP:.*]] = math.exp %[[NEG]] : f32
// CHECK:           %[[MAG:.*]] = arith.subf %[[ONE]], %{{.*}} : f32
// CHECK:           %[[ERF:.*]] = math.copysign %[[MAG]], %[[X]] : f32
// CHECK:           arith.addf %[[ERF]], %[[ONE]] : f32
// CHECK:           linalg.yield
// CHECK:         return
#map = affine_map<(d0) -> (d0)>
func.func @gelu(%arg0: tensor<8xf32>) -> tensor<8xf32> {
  %cst = arith.constant 1.000000e+00 : f32
  %cst_0 = arith.constant 5.000000e-01 : f32
  %cst_1 = arith.constant 1.41421354 : f32
  %0 = tensor.empty() : tensor<8xf32>
  %1 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel"]} ins(%arg0 : tensor<8xf32>) outs(%0 : tensor<8xf32>) {
  ^bb0(%in: f32, %out: f32):
    %2 = arith.divf %in, %cst_1 : f32
    %3 = math.erf %2 : f32
    %4 = arith.addf %3, %cst : f32
    %5 = arith.mulf %4, %cst_0 : f32
    %6 = arith.mulf %in, %5 : f32
    linalg.yield %6 : f32
  } -> tensor<8xf32>
  return %1 : tensor<8xf32>
}

// Vector erf (e.g. from a later vectorizer) expands with splat constants.
// CHECK-LABEL: func.func @erf_vector(
// CHECK-SAME:    %[[X:.*]]: vector<8xf32>
// CHECK-DAG:     arith.constant dense<0.327591091> : vector<8xf32>
// CHECK:         math.absf %[[X]] : vector<8xf32>
// CHECK:         math.exp %{{.*}} : vector<8xf32>
// CHECK:         %[[ERF:.*]] = math.copysign %{{.*}}, %[[X]] : vector<8xf32>
// CHECK:         return %[[ERF]] : vector<8xf32>
func.func @erf_vector(%arg0: vector<8xf32>) -> vector<8xf32> {
  %0 = math.erf %arg0 : vector<8xf32>
  return %0 : vector<8xf32>
}

// The assert and its now-dead condition are gone; the division stays.
// CHECK-LABEL: func.func @reciprocal(
// CHECK:         linalg.generic
// CHECK-NEXT:    ^bb0(%[[IN:.*]]: f32, %{{.*}}: f32):
// CHECK-NEXT:      %[[R:.*]] = arith.divf %{{.*}}, %[[IN]] : f32
// CHECK-NEXT:      linalg.yield %[[R]] : f32
// CHECK:         return
func.func @reciprocal(%arg0: tensor<8xf32>) -> tensor<8xf32> {
  %cst = arith.constant 0.000000e+00 : f32
  %cst_0 = arith.constant 1.000000e+00 : f32
  %0 = tensor.empty() : tensor<8xf32>
  %1 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel"]} ins(%arg0 : tensor<8xf32>) outs(%0 : tensor<8xf32>) {
  ^bb0(%in: f32, %out: f32):
    %2 = arith.cmpf one, %in, %cst : f32
    cf.assert %2, "unimplemented: tensor with zero element"
    %3 = arith.divf %cst_0, %in : f32
    linalg.yield %3 : f32
  } -> tensor<8xf32>
  return %1 : tensor<8xf32>
}
