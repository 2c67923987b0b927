// RUN: %stage-legalize %s | FileCheck %s
// RUN: %stage-legalize %s | FileCheck %s --check-prefix=GONE

// The legalize stage (Python pass drop-runtime-asserts) erases torch-mlir's
// runtime value asserts.

// GONE-NOT: cf.assert

#map = affine_map<(d0) -> (d0)>
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
