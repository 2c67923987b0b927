// RUN: %twintrack-opt %s | %twintrack-opt | FileCheck %s
// RUN: %twintrack-opt %s --mlir-print-op-generic | %twintrack-opt | FileCheck %s

// twintrack.dispatch and twintrack.yield print and parse back, in the custom
// form and from the generic form.

// CHECK-LABEL: func.func @bias_relu(
// CHECK-SAME:    %[[X:.*]]: tensor<4x8xf32>, %[[B:.*]]: tensor<8xf32>)
// CHECK:         %[[Y:.*]] = twintrack.dispatch "bias_relu" (%[[X]], %[[B]] : tensor<4x8xf32>, tensor<8xf32>) -> (tensor<4x8xf32>) {
// CHECK-NEXT:    ^bb0(%[[XA:.*]]: tensor<4x8xf32>, %[[BA:.*]]: tensor<8xf32>):
// CHECK:           %[[R:.*]] = linalg.generic
// CHECK:           twintrack.yield %[[R]] : tensor<4x8xf32>
// CHECK-NEXT:    }
// CHECK-NEXT:    return %[[Y]]
#id = affine_map<(d0, d1) -> (d0, d1)>
#row = affine_map<(d0, d1) -> (d1)>
func.func @bias_relu(%x: tensor<4x8xf32>, %b: tensor<8xf32>) -> tensor<4x8xf32> {
  %y = twintrack.dispatch "bias_relu" (%x, %b : tensor<4x8xf32>, tensor<8xf32>) -> (tensor<4x8xf32>) {
  ^bb0(%xa: tensor<4x8xf32>, %ba: tensor<8xf32>):
    %zero = arith.constant 0.0 : f32
    %e = tensor.empty() : tensor<4x8xf32>
    %r = linalg.generic {indexing_maps = [#id, #row, #id], iterator_types = ["parallel", "parallel"]}
        ins(%xa, %ba : tensor<4x8xf32>, tensor<8xf32>) outs(%e : tensor<4x8xf32>) {
    ^bb1(%v: f32, %c: f32, %o: f32):
      %s = arith.addf %v, %c : f32
      %m = arith.maximumf %s, %zero : f32
      linalg.yield %m : f32
    } -> tensor<4x8xf32>
    twintrack.yield %r : tensor<4x8xf32>
  }
  return %y : tensor<4x8xf32>
}

// Several results (horizontal fusion: two projections of one input), and
// attributes beside the label.
// CHECK-LABEL: func.func @two_results(
// CHECK:         %{{.*}}:2 = twintrack.dispatch "qk" (%{{.*}} : tensor<2x4xf32>) -> (tensor<2x4xf32>, tensor<2x4xf32>) {
// CHECK:           twintrack.yield %{{.*}}, %{{.*}} : tensor<2x4xf32>, tensor<2x4xf32>
// CHECK:         } {twintrack.cost = 12 : i64}
func.func @two_results(%x: tensor<2x4xf32>) -> (tensor<2x4xf32>, tensor<2x4xf32>) {
  %q, %k = twintrack.dispatch "qk" (%x : tensor<2x4xf32>) -> (tensor<2x4xf32>, tensor<2x4xf32>) {
  ^bb0(%xa: tensor<2x4xf32>):
    twintrack.yield %xa, %xa : tensor<2x4xf32>, tensor<2x4xf32>
  } {twintrack.cost = 12 : i64}
  return %q, %k : tensor<2x4xf32>, tensor<2x4xf32>
}

// No inputs (a dispatch that only materialises a constant).
// CHECK-LABEL: func.func @no_inputs(
// CHECK:         twintrack.dispatch "zeros" () -> (tensor<4xf32>) {
func.func @no_inputs() -> tensor<4xf32> {
  %z = twintrack.dispatch "zeros" () -> (tensor<4xf32>) {
    %c = arith.constant dense<0.0> : tensor<4xf32>
    twintrack.yield %c : tensor<4xf32>
  }
  return %z : tensor<4xf32>
}
