// RUN: %stage-linalg %s | FileCheck %s
// RUN: %stage-linalg %s | FileCheck %s --check-prefix=GONE

// The linalg stage converts backend-contract torch IR to linalg-on-tensors
// with builtin tensor types: no torch op or !torch type is left.

// GONE-NOT: torch.
// GONE-NOT: !torch

// CHECK-LABEL: func.func @linear_relu(
// CHECK-SAME:    %[[X:.*]]: tensor<2x4xf32>, %[[W:.*]]: tensor<3x4xf32>, %[[B:.*]]: tensor<3xf32>) -> tensor<2x3xf32>
// CHECK:         %[[WT:.*]] = linalg.transpose ins(%[[W]] : tensor<3x4xf32>) {{.*}} permutation = [1, 0]
// CHECK:         %[[ZERO:.*]] = linalg.fill
// CHECK:         %[[MM:.*]] = linalg.matmul ins(%[[X]], %[[WT]] : tensor<2x4xf32>, tensor<4x3xf32>) outs(%[[ZERO]] : tensor<2x3xf32>)
// CHECK:         %[[ADD:.*]] = linalg.generic {{.*}} ins(%[[MM]], %[[B]] : tensor<2x3xf32>, tensor<3xf32>)
// CHECK:           arith.addf
// CHECK:         %[[RELU:.*]] = linalg.generic {{.*}} ins(%[[ADD]] : tensor<2x3xf32>)
// CHECK:           arith.cmpf ugt
// CHECK:           arith.select
// CHECK:         return %[[RELU]] : tensor<2x3xf32>
func.func @linear_relu(%x: !torch.vtensor<[2,4],f32>, %wt: !torch.vtensor<[3,4],f32>, %b: !torch.vtensor<[3],f32>) -> !torch.vtensor<[2,3],f32> {
  %int0 = torch.constant.int 0
  %int1 = torch.constant.int 1
  %w = torch.aten.transpose.int %wt, %int0, %int1 : !torch.vtensor<[3,4],f32>, !torch.int, !torch.int -> !torch.vtensor<[4,3],f32>
  %0 = torch.aten.mm %x, %w : !torch.vtensor<[2,4],f32>, !torch.vtensor<[4,3],f32> -> !torch.vtensor<[2,3],f32>
  %1 = torch.aten.add.Tensor %0, %b, %int1 : !torch.vtensor<[2,3],f32>, !torch.vtensor<[3],f32>, !torch.int -> !torch.vtensor<[2,3],f32>
  %2 = torch.aten.relu %1 : !torch.vtensor<[2,3],f32> -> !torch.vtensor<[2,3],f32>
  return %2 : !torch.vtensor<[2,3],f32>
}

// Exact GELU becomes math.erf inside a linalg.generic (expanded later by the
// legalize stage).
// CHECK-LABEL: func.func @gelu(
// CHECK:         linalg.generic
// CHECK:           math.erf
// CHECK:         return
func.func @gelu(%x: !torch.vtensor<[2,4],f32>) -> !torch.vtensor<[2,4],f32> {
  %str = torch.constant.str "none"
  %0 = torch.aten.gelu %x, %str : !torch.vtensor<[2,4],f32>, !torch.str -> !torch.vtensor<[2,4],f32>
  return %0 : !torch.vtensor<[2,4],f32>
}

// torch-mlir guards the reciprocal with a runtime value assert (dropped later
// by the legalize stage).
// CHECK-LABEL: func.func @reciprocal(
// CHECK:         linalg.generic
// CHECK:           cf.assert
// CHECK:           arith.divf
// CHECK:         return
func.func @reciprocal(%x: !torch.vtensor<[8],f32>) -> !torch.vtensor<[8],f32> {
  %0 = torch.aten.reciprocal %x : !torch.vtensor<[8],f32> -> !torch.vtensor<[8],f32>
  return %0 : !torch.vtensor<[8],f32>
}
