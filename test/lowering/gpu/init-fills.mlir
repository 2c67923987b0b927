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

// A serial reduction per thread (rows too short for a block each), with an
// allocation between the fill and the reduction: the value read before the
// thread's loop is the fill's constant.
// CHECK-LABEL: func.func @short_rows(
// CHECK-SAME:    %{{.*}}: memref<8192x16xf32>, %[[ACC:.*]]: memref<8192xf32>
// CHECK:         %[[ZERO:.*]] = arith.constant 0.000000e+00 : f32
// CHECK-NOT:     memref.store %[[ZERO]]
// CHECK:         scf.for {{.*}} iter_args(%{{.*}} = %[[ZERO]]) -> (f32)
func.func @short_rows(%in: memref<8192x16xf32>, %acc: memref<8192xf32>) -> memref<4xf32> {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c16 = arith.constant 16 : index
  %c8192 = arith.constant 8192 : index
  %zero = arith.constant 0.0 : f32
  scf.parallel (%i) = (%c0) to (%c8192) step (%c1) {
    memref.store %zero, %acc[%i] : memref<8192xf32>
    scf.reduce
  }
  %other = memref.alloc() : memref<4xf32>
  scf.parallel (%i) = (%c0) to (%c8192) step (%c1) {
    scf.for %k = %c0 to %c16 step %c1 {
      %x = memref.load %in[%i, %k] : memref<8192x16xf32>
      %a = memref.load %acc[%i] : memref<8192xf32>
      %s = arith.addf %x, %a : f32
      memref.store %s, %acc[%i] : memref<8192xf32>
    }
    scf.reduce
  }
  return %other : memref<4xf32>
}
