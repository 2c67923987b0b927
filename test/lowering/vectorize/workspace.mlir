// RUN: %stage-vectorize %s | FileCheck %s

// A function whose temporaries are views of the workspace global (the
// memory stage's plan) reads that global: the vectorizer's child module
// declares it too, or the child fails to verify and the function stays
// scalar.

// CHECK: memref.global "private" @twintrack_workspace
// CHECK-LABEL: func.func @through_workspace(
// CHECK-SAME:    twintrack.vectorize = "vectorized"
// CHECK:         memref.get_global @twintrack_workspace
// CHECK:         affine.for %{{.*}} = 0 to 64 step 8 {
// CHECK:           vector.transfer_read
memref.global "private" @twintrack_workspace : memref<256xi8> {alignment = 64 : i64}
func.func @through_workspace(%arg0: memref<64xf32>, %arg1: memref<64xf32>) {
  %c0 = arith.constant 0 : index
  %0 = memref.get_global @twintrack_workspace : memref<256xi8>
  %tmp = memref.view %0[%c0][] : memref<256xi8> to memref<64xf32>
  affine.for %i = 0 to 64 {
    %1 = affine.load %arg0[%i] : memref<64xf32>
    %2 = arith.addf %1, %1 : f32
    affine.store %2, %tmp[%i] : memref<64xf32>
  }
  affine.for %i = 0 to 64 {
    %1 = affine.load %tmp[%i] : memref<64xf32>
    affine.store %1, %arg1[%i] : memref<64xf32>
  }
  return
}
