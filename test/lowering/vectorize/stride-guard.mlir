// RUN: %stage-vectorize %s | FileCheck %s

// affine-super-vectorize would read 8 contiguous elements for %x[2 * %j]
// (a wrong result), so a function with a non-unit-stride innermost access
// stays scalar and says why; a unit-stride function next to it is vectorized.

// CHECK-LABEL: func.func @stride_two(
// CHECK-SAME:    twintrack.vectorize = "scalar: non-unit-stride access at
// CHECK:         affine.for %{{.*}} = 0 to 16 {
// CHECK-NEXT:      affine.load
// CHECK-NOT:     vector.transfer_read
// CHECK:         return
func.func @stride_two(%x: memref<32xf32>, %y: memref<16xf32>) {
  affine.for %j = 0 to 16 {
    %0 = affine.load %x[2 * %j] : memref<32xf32>
    affine.store %0, %y[%j] : memref<16xf32>
  }
  return
}

// CHECK-LABEL: func.func @stride_one(
// CHECK-SAME:    twintrack.vectorize = "vectorized"
// CHECK:         vector.transfer_read
func.func @stride_one(%x: memref<32xf32>, %y: memref<32xf32>) {
  affine.for %j = 0 to 32 {
    %0 = affine.load %x[%j] : memref<32xf32>
    affine.store %0, %y[%j] : memref<32xf32>
  }
  return
}
