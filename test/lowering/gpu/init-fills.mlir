// RUN: %stage-distribute %s | FileCheck %s

// A reduction's output is filled with its initial value just before it (as
// bufferization leaves a linalg reduction). After distribution each output
// element is read once, by the row's leader thread, right before it is
// written: that read becomes the fill's constant, and the fill nest (a kernel
// of its own) goes.

// CHECK-LABEL: func.func @row_max(
// CHECK-SAME:    %{{.*}}: memref<32x1024xf32>, %[[ACC:.*]]: memref<32xf32>)
// CHECK:         %[[NINF:.*]] = arith.constant 0xFF800000 : f32
// CHECK-NOT:     memref.store %[[NINF]]
// CHECK:         gpu.all_reduce maximumf
// CHECK:         scf.if
// CHECK-NOT:       memref.load %[[ACC]]
// CHECK:           %[[M:.*]] = arith.maximumf %{{.*}}, %[[NINF]] : f32
// CHECK:           memref.store %[[M]], %[[ACC]]
func.func @row_max(%in: memref<32x1024xf32>, %acc: memref<32xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c32 = arith.constant 32 : index
  %c1024 = arith.constant 1024 : index
  %ninf = arith.constant 0xFF800000 : f32
  scf.parallel (%i) = (%c0) to (%c32) step (%c1) {
    memref.store %ninf, %acc[%i] : memref<32xf32>
    scf.reduce
  }
  scf.parallel (%i) = (%c0) to (%c32) step (%c1) {
    scf.for %k = %c0 to %c1024 step %c1 {
      %x = memref.load %in[%i, %k] : memref<32x1024xf32>
      %a = memref.load %acc[%i] : memref<32xf32>
      %m = arith.maximumf %x, %a : f32
      memref.store %m, %acc[%i] : memref<32xf32>
    }
    scf.reduce
  }
  return
}

// Negative: the nest after the fill reads the buffer without writing it back
// (not a reduction into it): the fill stays.
// CHECK-LABEL: func.func @fill_then_read(
// CHECK:         memref.store %{{.*}}, %{{.*}} : memref<32xf32>
func.func @fill_then_read(%acc: memref<32xf32>, %out: memref<32xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c32 = arith.constant 32 : index
  %zero = arith.constant 0.0 : f32
  scf.parallel (%i) = (%c0) to (%c32) step (%c1) {
    memref.store %zero, %acc[%i] : memref<32xf32>
    scf.reduce
  }
  scf.parallel (%i) = (%c0) to (%c32) step (%c1) {
    %a = memref.load %acc[%i] : memref<32xf32>
    %n = arith.negf %a : f32
    memref.store %n, %out[%i] : memref<32xf32>
    scf.reduce
  }
  return
}
