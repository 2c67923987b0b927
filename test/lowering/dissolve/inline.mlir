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

// Each linalg op keeps its dispatch's label, for the kernel generators that
// find the group again after bufferization, and its kind; a dispatch
// written without a kind leaves its label only.
// CHECK-LABEL: func.func @labelled(
// CHECK:         %[[FILL:.*]] = linalg.fill {twintrack.dispatch = "reduction_0", twintrack.dispatch_kind = #twintrack.dispatch_kind<reduction>}
// CHECK:         %[[SUM:.*]] = linalg.generic {{.*}} outs(%[[FILL]] : tensor<4xf32>) attrs = {twintrack.dispatch = "reduction_0", twintrack.dispatch_kind = #twintrack.dispatch_kind<reduction>}
// CHECK:         linalg.generic {{.*}} ins(%[[SUM]] : tensor<4xf32>) {{.*}} attrs = {twintrack.dispatch = "hand_written"}
#id = affine_map<(d0, d1) -> (d0, d1)>
#row = affine_map<(d0, d1) -> (d0)>
#one = affine_map<(d0) -> (d0)>
func.func @labelled(%x: tensor<4x8xf32>) -> tensor<4xf32> {
  %s = twintrack.dispatch "reduction_0" kind<reduction> (%x : tensor<4x8xf32>) -> (tensor<4xf32>) {
  ^bb0(%a: tensor<4x8xf32>):
    %zero = arith.constant 0.0 : f32
    %e = tensor.empty() : tensor<4xf32>
    %init = linalg.fill ins(%zero : f32) outs(%e : tensor<4xf32>) -> tensor<4xf32>
    %r = linalg.generic {indexing_maps = [#id, #row], iterator_types = ["parallel", "reduction"]} ins(%a : tensor<4x8xf32>) outs(%init : tensor<4xf32>) {
    ^bb0(%in: f32, %acc: f32):
      %t = arith.addf %in, %acc : f32
      linalg.yield %t : f32
    } -> tensor<4xf32>
    twintrack.yield %r : tensor<4xf32>
  }
  %n = twintrack.dispatch "hand_written" (%s : tensor<4xf32>) -> (tensor<4xf32>) {
  ^bb0(%a: tensor<4xf32>):
    %e = tensor.empty() : tensor<4xf32>
    %r = linalg.generic {indexing_maps = [#one, #one], iterator_types = ["parallel"]} ins(%a : tensor<4xf32>) outs(%e : tensor<4xf32>) {
    ^bb0(%in: f32, %out: f32):
      %t = arith.negf %in : f32
      linalg.yield %t : f32
    } -> tensor<4xf32>
    twintrack.yield %r : tensor<4xf32>
  }
  return %n : tensor<4xf32>
}
