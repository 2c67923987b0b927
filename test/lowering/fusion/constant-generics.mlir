// RUN: %twintrack-opt %s -split-input-file --pass-pipeline="builtin.module(func.func(twintrack-fold-constant-generics))" | FileCheck %s

// A chain of 0-d generics on a constant (an unrolled loop's counter and the
// index arithmetic a decomposition does on it) folds to one constant; the
// generic reading it through a broadcast keeps its non-constant input.

#scalar = affine_map<() -> ()>
#row = affine_map<(d0) -> (d0)>
#broadcast = affine_map<(d0) -> ()>

// CHECK-LABEL: func.func @counter_arithmetic(
// CHECK-DAG:     %[[FOLDED:.*]] = arith.constant dense<7> : tensor<i64>
// CHECK-NOT:     iterator_types = []
// CHECK:         linalg.generic {{.*}} ins(%{{.*}}, %[[FOLDED]] : tensor<8xi64>, tensor<i64>)
func.func @counter_arithmetic(%x: tensor<8xi64>) -> tensor<8xi64> {
  %counter = arith.constant dense<3> : tensor<i64>
  %eight = arith.constant 8 : i64
  %one = arith.constant 1 : i64
  %two = arith.constant 2.0 : f64
  %e = tensor.empty() : tensor<i64>
  %f = tensor.empty() : tensor<f64>
  %scaled = linalg.generic {indexing_maps = [#scalar, #scalar], iterator_types = []} ins(%counter : tensor<i64>) outs(%e : tensor<i64>) {
  ^bb0(%in: i64, %out: i64):
    %m = arith.muli %in, %eight : i64
    %a = arith.addi %m, %one : i64
    linalg.yield %a : i64
  } -> tensor<i64>
  %root = linalg.generic {indexing_maps = [#scalar, #scalar], iterator_types = []} ins(%scaled : tensor<i64>) outs(%f : tensor<f64>) {
  ^bb0(%in: i64, %out: f64):
    %c = arith.sitofp %in : i64 to f64
    %s = math.sqrt %c : f64
    %p = arith.addf %s, %two : f64
    %q = math.floor %p : f64
    linalg.yield %q : f64
  } -> tensor<f64>
  %index = linalg.generic {indexing_maps = [#scalar, #scalar], iterator_types = []} ins(%root : tensor<f64>) outs(%e : tensor<i64>) {
  ^bb0(%in: f64, %out: i64):
    %i = arith.fptosi %in : f64 to i64
    linalg.yield %i : i64
  } -> tensor<i64>
  %o = tensor.empty() : tensor<8xi64>
  %r = linalg.generic {indexing_maps = [#row, #broadcast, #row], iterator_types = ["parallel"]} ins(%x, %index : tensor<8xi64>, tensor<i64>) outs(%o : tensor<8xi64>) {
  ^bb0(%in: i64, %k: i64, %out: i64):
    %s = arith.addi %in, %k : i64
    linalg.yield %s : i64
  } -> tensor<8xi64>
  return %r : tensor<8xi64>
}

// -----

#row = affine_map<(d0) -> (d0)>

// A splat input of any shape folds the same way; a generic reading an
// index, or an input that is no constant, stays.
// CHECK-LABEL: func.func @splat_and_not(
// CHECK-DAG:     arith.constant dense<-2.000000e+00> : tensor<4xf32>
// CHECK:         linalg.index
// CHECK-NOT:     dense<-2.000000e+00> : tensor<4xf32>
func.func @splat_and_not(%x: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xi64>) {
  %c = arith.constant dense<2.0> : tensor<4xf32>
  %e = tensor.empty() : tensor<4xf32>
  %i = tensor.empty() : tensor<4xi64>
  %neg = linalg.generic {indexing_maps = [#row, #row], iterator_types = ["parallel"]} ins(%c : tensor<4xf32>) outs(%e : tensor<4xf32>) {
  ^bb0(%in: f32, %out: f32):
    %n = arith.negf %in : f32
    linalg.yield %n : f32
  } -> tensor<4xf32>
  %iota = linalg.generic {indexing_maps = [#row], iterator_types = ["parallel"]} outs(%i : tensor<4xi64>) {
  ^bb0(%out: i64):
    %k = linalg.index 0 : index
    %v = arith.index_cast %k : index to i64
    linalg.yield %v : i64
  } -> tensor<4xi64>
  return %neg, %iota : tensor<4xf32>, tensor<4xi64>
}
