// RUN: %twintrack-opt %s -split-input-file -verify-diagnostics | %twintrack-opt -split-input-file | FileCheck %s
// RUN: %twintrack-opt %s -split-input-file -verify-diagnostics --mlir-print-op-generic | %twintrack-opt -split-input-file | FileCheck %s

// #twintrack.dispatch_kind<...> prints and parses back: every case, on a
// twintrack.dispatch (`kind<...>` in its custom form) and on a linalg op
// (as twintrack-dissolve-dispatches leaves it, beside the label). A name
// that is no kind is a parse error.

// CHECK-LABEL: func.func @every_kind()
// CHECK-SAME:    kinds = [#twintrack.dispatch_kind<elementwise>, #twintrack.dispatch_kind<reduction>, #twintrack.dispatch_kind<reduction_rows>, #twintrack.dispatch_kind<reduction_horizontal>, #twintrack.dispatch_kind<matmul>, #twintrack.dispatch_kind<matmul_horizontal>]
func.func @every_kind() attributes {kinds = [#twintrack.dispatch_kind<elementwise>, #twintrack.dispatch_kind<reduction>,
    #twintrack.dispatch_kind<reduction_rows>, #twintrack.dispatch_kind<reduction_horizontal>,
    #twintrack.dispatch_kind<matmul>, #twintrack.dispatch_kind<matmul_horizontal>]} {
  return
}

// -----

// CHECK-LABEL: func.func @on_a_dispatch(
// CHECK:         twintrack.dispatch "reduction_rows_0" kind<reduction_rows> (%{{.*}} : tensor<4x8xf32>) -> (tensor<4xf32>) {
func.func @on_a_dispatch(%x: tensor<4x8xf32>) -> tensor<4xf32> {
  %y = twintrack.dispatch "reduction_rows_0" kind<reduction_rows> (%x : tensor<4x8xf32>) -> (tensor<4xf32>) {
  ^bb0(%a: tensor<4x8xf32>):
    %zero = arith.constant 0.0 : f32
    %e = tensor.empty() : tensor<4xf32>
    %r = linalg.fill ins(%zero : f32) outs(%e : tensor<4xf32>) -> tensor<4xf32>
    twintrack.yield %r : tensor<4xf32>
  }
  return %y : tensor<4xf32>
}

// -----

// CHECK-LABEL: func.func @on_a_linalg_op(
// CHECK:         linalg.fill {twintrack.dispatch = "matmul_horizontal_3", twintrack.dispatch_kind = #twintrack.dispatch_kind<matmul_horizontal>}
func.func @on_a_linalg_op(%out: memref<4x4xf32>) {
  %zero = arith.constant 0.0 : f32
  linalg.fill {twintrack.dispatch = "matmul_horizontal_3", twintrack.dispatch_kind = #twintrack.dispatch_kind<matmul_horizontal>}
      ins(%zero : f32) outs(%out : memref<4x4xf32>)
  return
}

// -----

func.func @unknown_kind(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+2 {{expected one of [elementwise, reduction, reduction_rows, reduction_horizontal, matmul, matmul_horizontal] for the kind of kernel a dispatch is, got: rows}}
  // expected-error @+1 {{failed to parse Twintrack_DispatchKindAttr parameter 'value'}}
  %y = twintrack.dispatch "d" kind<rows> (%x : tensor<4xf32>) -> (tensor<4xf32>) {
  ^bb0(%a: tensor<4xf32>):
    twintrack.yield %a : tensor<4xf32>
  }
  return %y : tensor<4xf32>
}

// -----

func.func @unknown_kind_on_an_op(%out: memref<4xf32>) {
  %zero = arith.constant 0.0 : f32
  // expected-error @+2 {{expected one of [elementwise, reduction, reduction_rows, reduction_horizontal, matmul, matmul_horizontal] for the kind of kernel a dispatch is, got: matmul_vertical}}
  // expected-error @+1 {{failed to parse Twintrack_DispatchKindAttr parameter 'value'}}
  linalg.fill {twintrack.dispatch_kind = #twintrack.dispatch_kind<matmul_vertical>} ins(%zero : f32) outs(%out : memref<4xf32>)
  return
}
