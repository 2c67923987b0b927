// RUN: not %twintrack-opt %s 2>&1 | FileCheck %s

// Malformed input: a one-line diagnostic with the file and location, a
// failing exit status, and no crash (`not` fails on a signal).

// CHECK: malformed.mlir:[[@LINE+2]]:50: error: expected ')'
func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
  %y = twintrack.dispatch "d" (%x : tensor<4xf32> -> (tensor<4xf32>) {
  ^bb0(%a: tensor<4xf32>):
    twintrack.yield %a : tensor<4xf32>
  }
  return %y : tensor<4xf32>
}
