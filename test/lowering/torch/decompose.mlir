// RUN: %stage-torch %s | FileCheck %s
// RUN: %stage-torch %s | FileCheck %s --check-prefix=GONE

// The torch stage simplifies an imported torch.export graph to the torch
// backend contract: composite ops are decomposed into the ops the linalg
// conversion knows, duplicated constants are merged, and ops listed in
// backend-legal-ops are kept.

// GONE-NOT: torch.aten.linear
// GONE-NOT: torch.aten.addmm
// GONE-NOT: torch.aten.softmax.int

// CHECK-LABEL: func.func @linear_relu(
// CHECK-SAME:    %[[X:.*]]: !torch.vtensor<[2,4],f32>, %[[W:.*]]: !torch.vtensor<[3,4],f32>, %[[B:.*]]: !torch.vtensor<[3],f32>
// CHECK:         %[[WT:.*]] = torch.aten.transpose.int %[[W]]
// CHECK:         %[[MM:.*]] = torch.aten.mm %[[X]], %[[WT]]
// CHECK:         %[[ADD:.*]] = torch.aten.add.Tensor %[[MM]], %[[B]]
// CHECK:         %[[RELU:.*]] = torch.aten.relu %[[ADD]]
// CHECK:         return %[[RELU]]
func.func @linear_relu(%x: !torch.vtensor<[2,4],f32>, %w: !torch.vtensor<[3,4],f32>, %b: !torch.vtensor<[3],f32>) -> !torch.vtensor<[2,3],f32> {
  %0 = torch.aten.linear %x, %w, %b : !torch.vtensor<[2,4],f32>, !torch.vtensor<[3,4],f32>, !torch.vtensor<[3],f32> -> !torch.vtensor<[2,3],f32>
  %1 = torch.aten.relu %0 : !torch.vtensor<[2,3],f32> -> !torch.vtensor<[2,3],f32>
  return %1 : !torch.vtensor<[2,3],f32>
}

// CHECK-LABEL: func.func @addmm(
// CHECK:         %[[ONE:.*]] = torch.constant.int 1
// CHECK-NOT:     torch.constant.int 1
// CHECK:         %[[MM:.*]] = torch.aten.mm
// CHECK:         torch.aten.add.Tensor {{.*}}, %[[ONE]]
// CHECK:         return
func.func @addmm(%b: !torch.vtensor<[3],f32>, %x: !torch.vtensor<[2,4],f32>, %w: !torch.vtensor<[4,3],f32>) -> !torch.vtensor<[2,3],f32> {
  %int1 = torch.constant.int 1
  %int1_0 = torch.constant.int 1
  %0 = torch.aten.addmm %b, %x, %w, %int1, %int1_0 : !torch.vtensor<[3],f32>, !torch.vtensor<[2,4],f32>, !torch.vtensor<[4,3],f32>, !torch.int, !torch.int -> !torch.vtensor<[2,3],f32>
  return %0 : !torch.vtensor<[2,3],f32>
}

// CHECK-LABEL: func.func @softmax(
// CHECK:         torch.aten.max.dim
// CHECK:         torch.aten.sub.Tensor
// CHECK:         torch.aten.exp
// CHECK:         torch.aten.sum.dim_IntList
// CHECK:         torch.aten.div.Tensor
// CHECK:         return
func.func @softmax(%x: !torch.vtensor<[2,4],f32>) -> !torch.vtensor<[2,4],f32> {
  %int-1 = torch.constant.int -1
  %none = torch.constant.none
  %0 = torch.aten.softmax.int %x, %int-1, %none : !torch.vtensor<[2,4],f32>, !torch.int, !torch.none -> !torch.vtensor<[2,4],f32>
  return %0 : !torch.vtensor<[2,4],f32>
}

// aten.as_strided is in backend-legal-ops: without that option the pipeline
// rejects it as backend-illegal.
// CHECK-LABEL: func.func @as_strided(
// CHECK:         torch.aten.as_strided
// CHECK:         return
func.func @as_strided(%x: !torch.vtensor<[4,4],f32>) -> !torch.vtensor<[2,2],f32> {
  %int0 = torch.constant.int 0
  %int1 = torch.constant.int 1
  %int2 = torch.constant.int 2
  %int4 = torch.constant.int 4
  %size = torch.prim.ListConstruct %int2, %int2 : (!torch.int, !torch.int) -> !torch.list<int>
  %stride = torch.prim.ListConstruct %int4, %int1 : (!torch.int, !torch.int) -> !torch.list<int>
  %0 = torch.aten.as_strided %x, %size, %stride, %int0 : !torch.vtensor<[4,4],f32>, !torch.list<int>, !torch.list<int>, !torch.int -> !torch.vtensor<[2,2],f32>
  return %0 : !torch.vtensor<[2,2],f32>
}
