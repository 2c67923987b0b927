// RUN: %stage-recompute %s | FileCheck %s

// A cheap elementwise producer (x - m) feeding two consumers is cloned, one
// copy per consumer, so elementwise fusion can fold each copy in.

#id = affine_map<(d0, d1) -> (d0, d1)>
#row = affine_map<(d0, d1) -> (d0)>

// CHECK-LABEL: func.func @centered_twice(
// CHECK:         %[[C1:.*]] = linalg.generic
// CHECK:           arith.subf
// CHECK:         %[[C2:.*]] = linalg.generic
// CHECK:           arith.subf
// CHECK:         %[[SQ:.*]] = linalg.generic {{.*}} ins(%[[C2]] :
// CHECK:         %[[SCALED:.*]] = linalg.generic {{.*}} ins(%[[C1]],
// CHECK:         return %[[SQ]], %[[SCALED]]
func.func @centered_twice(%x: tensor<4x8xf32>, %m: tensor<4xf32>, %s: tensor<4xf32>) -> (tensor<4x8xf32>, tensor<4x8xf32>) {
  %e = tensor.empty() : tensor<4x8xf32>
  %centered = linalg.generic {indexing_maps = [#id, #row, #id], iterator_types = ["parallel", "parallel"]}
      ins(%x, %m : tensor<4x8xf32>, tensor<4xf32>) outs(%e : tensor<4x8xf32>) {
  ^bb0(%a: f32, %b: f32, %o: f32):
    %d = arith.subf %a, %b : f32
    linalg.yield %d : f32
  } -> tensor<4x8xf32>
  %squared = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%centered : tensor<4x8xf32>) outs(%e : tensor<4x8xf32>) {
  ^bb0(%a: f32, %o: f32):
    %q = arith.mulf %a, %a : f32
    linalg.yield %q : f32
  } -> tensor<4x8xf32>
  %scaled = linalg.generic {indexing_maps = [#id, #row, #id], iterator_types = ["parallel", "parallel"]}
      ins(%centered, %s : tensor<4x8xf32>, tensor<4xf32>) outs(%e : tensor<4x8xf32>) {
  ^bb0(%a: f32, %b: f32, %o: f32):
    %p = arith.mulf %a, %b : f32
    linalg.yield %p : f32
  } -> tensor<4x8xf32>
  return %squared, %scaled : tensor<4x8xf32>, tensor<4x8xf32>
}

// A reduction is never recomputed, even with two users.
// CHECK-LABEL: func.func @shared_reduction(
// CHECK-COUNT-1: iterator_types = ["parallel", "reduction"]
// CHECK-NOT:     iterator_types = ["parallel", "reduction"]
// CHECK:         return
func.func @shared_reduction(%x: tensor<4x8xf32>, %init: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>) {
  %sum = linalg.generic {indexing_maps = [#id, #row], iterator_types = ["parallel", "reduction"]}
      ins(%x : tensor<4x8xf32>) outs(%init : tensor<4xf32>) {
  ^bb0(%a: f32, %acc: f32):
    %r = arith.addf %a, %acc : f32
    linalg.yield %r : f32
  } -> tensor<4xf32>
  %e = tensor.empty() : tensor<4xf32>
  %one = linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>], iterator_types = ["parallel"]}
      ins(%sum : tensor<4xf32>) outs(%e : tensor<4xf32>) {
  ^bb0(%a: f32, %o: f32):
    %n = arith.negf %a : f32
    linalg.yield %n : f32
  } -> tensor<4xf32>
  %two = linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>], iterator_types = ["parallel"]}
      ins(%sum : tensor<4xf32>) outs(%e : tensor<4xf32>) {
  ^bb0(%a: f32, %o: f32):
    %n = math.exp %a : f32
    linalg.yield %n : f32
  } -> tensor<4xf32>
  return %one, %two : tensor<4xf32>, tensor<4xf32>
}
