// RUN: %stage-memory %s | FileCheck %s

// memref.copy between static buffers becomes linalg.copy (then affine loops,
// like any linalg op), into a strided view too; a dynamic one stays.
// CHECK-LABEL: func.func @pad_interior(
// CHECK:         %[[VIEW:.*]] = memref.subview
// CHECK-NOT:     memref.copy
// CHECK:         linalg.copy {{.*}}ins(%{{.*}} : memref<2x3xf32>) outs(%[[VIEW]] : memref<2x3xf32, strided<[5, 1], offset: 6>>)
func.func @pad_interior(%x: memref<2x3xf32>, %out: memref<4x5xf32>) {
  %view = memref.subview %out[1, 1] [2, 3] [1, 1] : memref<4x5xf32> to memref<2x3xf32, strided<[5, 1], offset: 6>>
  memref.copy %x, %view : memref<2x3xf32> to memref<2x3xf32, strided<[5, 1], offset: 6>>
  return
}

// CHECK-LABEL: func.func @dynamic(
// CHECK:         memref.copy
func.func @dynamic(%x: memref<?xf32>, %out: memref<?xf32>) {
  memref.copy %x, %out : memref<?xf32> to memref<?xf32>
  return
}
