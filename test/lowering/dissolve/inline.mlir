// RUN: %stage-dissolve %s | FileCheck %s

// Each dispatch's ops go back in its place, its inputs replacing its block
// arguments and its yielded values its results.

// CHECK-LABEL: func.func @two(
// CHECK-SAME:    %[[X:.*]]: tensor<4xf32>
// CHECK-NOT:     twintrack.
// CHECK:         %[[N:.*]] = arith.negf %[[X]] : tensor<4xf32>
// CHECK:         %[[E:.*]] = math.exp %[[N]] : tensor<4xf32>
// CHECK:         return %[[E]]
func.func @two(%x: tensor<4xf32>) -> tensor<4xf32> {
  %n = twintrack.dispatch "neg" (%x : tensor<4xf32>) -> (tensor<4xf32>) {
  ^bb0(%a: tensor<4xf32>):
    %r = arith.negf %a : tensor<4xf32>
    twintrack.yield %r : tensor<4xf32>
  }
  %e = twintrack.dispatch "exp" (%n : tensor<4xf32>) -> (tensor<4xf32>) {
  ^bb0(%a: tensor<4xf32>):
    %r = math.exp %a : tensor<4xf32>
    twintrack.yield %r : tensor<4xf32>
  }
  return %e : tensor<4xf32>
}
