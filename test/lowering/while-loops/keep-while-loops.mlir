// RUN: %PYTHON -m twintrack.compiler.passes keep-while-loops %s | FileCheck %s
// RUN: %PYTHON -m twintrack.compiler.passes keep-while-loops %s | %torch-mlir-opt --pass-pipeline="builtin.module(torch-backend-to-linalg-on-tensors-backend-pipeline)" | FileCheck %s --check-prefix=LINALG

// `while i < 3: i, x = i + 1, x + 1` from i = 0, as torch-mlir imports
// torch's while_loop: the first test (the literal torch folded i < 3 to)
// is a constant true, which torch-mlir's SCF lowering reads as a
// for-loop, dropping the body's test (an scf.for of INT64_MAX trips). The
// pass puts an op no canonicalizer folds in front of it: an scf.while.

// CHECK-LABEL: func.func @counted_from_a_constant(
// CHECK:         %[[TEST:.+]] = torch.vtensor.literal(dense<true> : tensor<i1>)
// CHECK:         %[[KEPT:.+]] = torch.aten.logical_and %[[TEST]], %[[TEST]]
// CHECK:         %[[FIRST:.+]] = torch.aten.Bool.Tensor %[[KEPT]]
// CHECK:         torch.prim.Loop %{{.+}}, %[[FIRST]], init(
// LINALG-LABEL: func.func @counted_from_a_constant(
// LINALG-NOT:     scf.for
// LINALG:         scf.while
// LINALG:           scf.condition
func.func @counted_from_a_constant(%arg0: !torch.vtensor<[7,9],f32>) -> (!torch.vtensor<[],si64>, !torch.vtensor<[7,9],f32>) {
  %int1 = torch.constant.int 1
  %max = torch.constant.int 9223372036854775807
  %0 = torch.vtensor.literal(dense<0> : tensor<si64>) : !torch.vtensor<[],si64>
  %int3 = torch.constant.int 3
  %1 = torch.vtensor.literal(dense<true> : tensor<i1>) : !torch.vtensor<[],i1>
  %2 = torch.aten.Bool.Tensor %1 : !torch.vtensor<[],i1> -> !torch.bool
  %3:2 = torch.prim.Loop %max, %2, init(%0, %arg0) {
  ^bb0(%arg1: !torch.int, %arg2: !torch.vtensor<[],si64>, %arg3: !torch.vtensor<[7,9],f32>):
    %4 = torch.aten.add.Scalar %arg2, %int1, %int1 : !torch.vtensor<[],si64>, !torch.int, !torch.int -> !torch.vtensor<[],si64>
    %5 = torch.aten.add.Scalar %arg3, %int1, %int1 : !torch.vtensor<[7,9],f32>, !torch.int, !torch.int -> !torch.vtensor<[7,9],f32>
    %6 = torch.aten.lt.Scalar %4, %int3 : !torch.vtensor<[],si64>, !torch.int -> !torch.vtensor<[],i1>
    %7 = torch.aten.Bool.Tensor %6 : !torch.vtensor<[],i1> -> !torch.bool
    torch.prim.Loop.condition %7, iter(%4, %5 : !torch.vtensor<[],si64>, !torch.vtensor<[7,9],f32>)
  } : (!torch.int, !torch.bool, !torch.vtensor<[],si64>, !torch.vtensor<[7,9],f32>) -> (!torch.vtensor<[],si64>, !torch.vtensor<[7,9],f32>)
  return %3#0, %3#1 : !torch.vtensor<[],si64>, !torch.vtensor<[7,9],f32>
}

// A for-loop (its body yields a constant true) is left as it is.
// CHECK-LABEL: func.func @for_loop(
// CHECK-NOT:     torch.aten.logical_and
// LINALG-LABEL: func.func @for_loop(
// LINALG:         scf.for
func.func @for_loop(%arg0: !torch.vtensor<[4],f32>) -> !torch.vtensor<[4],f32> {
  %int1 = torch.constant.int 1
  %int5 = torch.constant.int 5
  %true = torch.constant.bool true
  %0 = torch.prim.Loop %int5, %true, init(%arg0) {
  ^bb0(%arg1: !torch.int, %arg2: !torch.vtensor<[4],f32>):
    %1 = torch.aten.add.Scalar %arg2, %int1, %int1 : !torch.vtensor<[4],f32>, !torch.int, !torch.int -> !torch.vtensor<[4],f32>
    torch.prim.Loop.condition %true, iter(%1 : !torch.vtensor<[4],f32>)
  } : (!torch.int, !torch.bool, !torch.vtensor<[4],f32>) -> !torch.vtensor<[4],f32>
  return %0 : !torch.vtensor<[4],f32>
}
