// RUN: %PYTHON -m twintrack.compiler.passes unsigned-literals %s | FileCheck %s
// RUN: %PYTHON -m twintrack.compiler.passes unsigned-literals %s | %torch-mlir-opt --pass-pipeline="builtin.module(torch-backend-to-linalg-on-tensors-backend-pipeline)" | FileCheck %s --check-prefix=LINALG

// torch-mlir's linalg pipeline refuses a ui8 tensor literal (it makes the
// value signless, then the literal's type check fails). The pass builds each
// as an si32 literal, masked to a byte and converted, which lowers.

// CHECK-LABEL: func.func @bytes(
// CHECK:         %[[WIDE:.+]] = torch.vtensor.literal(dense<{{\[\[}}0, 250], [7, 255]]> : tensor<2x2xsi32>) : !torch.vtensor<[2,2],si32>
// CHECK:         %[[MASK:.+]] = torch.constant.int 255
// CHECK:         %[[KEPT:.+]] = torch.aten.bitwise_and.Scalar %[[WIDE]], %[[MASK]]
// CHECK:         %[[BYTES:.+]] = torch.aten.to.dtype %[[KEPT]], %int0, {{.*}} -> !torch.vtensor<[2,2],ui8>
// CHECK:         return %[[BYTES]]
// LINALG-LABEL: func.func @bytes(
// LINALG:         arith.trunci {{.*}} : i32 to i8
// LINALG:         return {{.*}} : tensor<2x2xi8>
func.func @bytes() -> !torch.vtensor<[2,2],ui8> {
  %0 = torch.vtensor.literal(dense<[[0, 250], [7, 255]]> : tensor<2x2xui8>) : !torch.vtensor<[2,2],ui8>
  return %0 : !torch.vtensor<[2,2],ui8>
}

// A splat keeps its value; a signed literal is left alone.
// CHECK-LABEL: func.func @splat_and_signed(
// CHECK:         torch.vtensor.literal(dense<250> : tensor<3xsi32>) : !torch.vtensor<[3],si32>
// CHECK:         torch.vtensor.literal(dense<-6> : tensor<3xsi8>) : !torch.vtensor<[3],si8>
// CHECK-NOT:     ui8>)
func.func @splat_and_signed() -> (!torch.vtensor<[3],ui8>, !torch.vtensor<[3],si8>) {
  %0 = torch.vtensor.literal(dense<250> : tensor<3xui8>) : !torch.vtensor<[3],ui8>
  %1 = torch.vtensor.literal(dense<-6> : tensor<3xsi8>) : !torch.vtensor<[3],si8>
  return %0, %1 : !torch.vtensor<[3],ui8>, !torch.vtensor<[3],si8>
}

// A constant the importer stored as a resource blob (a uint8 or bool
// buffer of the model): its bytes are read from the module's resources.
// CHECK-LABEL: func.func @resource(
// CHECK:         torch.vtensor.literal(dense<[3, 250, 7, 0]> : tensor<4xsi32>) : !torch.vtensor<[4],si32>
// CHECK:         torch.aten.to.dtype {{.*}} -> !torch.vtensor<[4],ui8>
func.func @resource() -> !torch.vtensor<[4],ui8> {
  %0 = torch.vtensor.literal(dense_resource<torch_tensor_4_torch.uint8> : tensor<4xui8>) : !torch.vtensor<[4],ui8>
  return %0 : !torch.vtensor<[4],ui8>
}

{-#
  dialect_resources: {
    builtin: {
      torch_tensor_4_torch.uint8: "0x0100000003FA0700"
    }
  }
#-}
