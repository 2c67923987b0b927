// RUN: %PYTHON -m twintrack.compiler.passes gpu-vector-lanes %s | FileCheck %s

// An elementwise nest over f16 rows: the innermost loop steps by 8 lanes,
// the contiguous reads and the write become 16-byte vectors, a transposed
// read stays one load a lane, and a row broadcast along the innermost dim
// (its load independent of that index) is read once.
// CHECK-LABEL: func.func @half_rows(
// CHECK:         scf.parallel (%[[I:.*]], %[[J:.*]]) = (%{{.*}}, %{{.*}}) to (%{{.*}}, %{{.*}}) step (%{{.*}}, %[[C8:.*]])
// CHECK:           %[[ROW:.*]] = memref.load %arg2[%[[I]]]
// CHECK:           %[[X:.*]] = vector.load %arg0[%[[I]], %[[J]]] {alignment = 16 : i64} : memref<64x128xf16>, vector<8xf16>
// CHECK-COUNT-8:   memref.load %arg1[%{{.*}}, %[[I]]] : memref<128x64xf16>
// CHECK-NOT:       memref.load
// CHECK:           %[[PACKED:.*]] = vector.from_elements
// CHECK:           vector.store %[[PACKED]], %arg3[%[[I]], %[[J]]] {alignment = 16 : i64} : memref<64x128xf16>, vector<8xf16>
func.func @half_rows(%x: memref<64x128xf16>, %t: memref<128x64xf16>, %row: memref<64xf16>, %out: memref<64x128xf16>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c64 = arith.constant 64 : index
  %c128 = arith.constant 128 : index
  scf.parallel (%i, %j) = (%c0, %c0) to (%c64, %c128) step (%c1, %c1) {
    %r = memref.load %row[%i] : memref<64xf16>
    %a = memref.load %x[%i, %j] : memref<64x128xf16>
    %b = memref.load %t[%j, %i] : memref<128x64xf16>
    %s = arith.addf %a, %b : f16
    %m = arith.mulf %s, %r : f16
    memref.store %m, %out[%i, %j] : memref<64x128xf16>
    scf.reduce
  }
  return
}

// f32 rows take 4 lanes; a view whose offset is no multiple of 4 elements
// keeps its per-lane loads.
// CHECK-LABEL: func.func @float_rows_and_an_odd_view(
// CHECK:         step (%{{.*}}, %[[C4:.*]])
// CHECK:         vector.load %arg0[{{.*}}] {alignment = 16 : i64} : memref<8x64xf32>, vector<4xf32>
// CHECK-COUNT-4: memref.load %{{.*}} : memref<8x64xf32, strided<[65, 1], offset: 1>>
// CHECK:         vector.store {{.*}} : memref<8x64xf32>, vector<4xf32>
func.func @float_rows_and_an_odd_view(%x: memref<8x64xf32>, %y: memref<8x65xf32>, %out: memref<8x64xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c8 = arith.constant 8 : index
  %c64 = arith.constant 64 : index
  %shifted = memref.subview %y[0, 1] [8, 64] [1, 1] : memref<8x65xf32> to memref<8x64xf32, strided<[65, 1], offset: 1>>
  scf.parallel (%i, %j) = (%c0, %c0) to (%c8, %c64) step (%c1, %c1) {
    %a = memref.load %x[%i, %j] : memref<8x64xf32>
    %b = memref.load %shifted[%i, %j] : memref<8x64xf32, strided<[65, 1], offset: 1>>
    %s = arith.subf %a, %b : f32
    memref.store %s, %out[%i, %j] : memref<8x64xf32>
    scf.reduce
  }
  return
}

// Left alone: an innermost trip count no lane count divides, and a fill that
// the next nest (a reduction) reads, which forward-init-fills folds away.
// CHECK-LABEL: func.func @left_alone(
// CHECK-NOT:     vector.
// CHECK:         return
func.func @left_alone(%x: memref<4x7xf16>, %out: memref<4x7xf16>, %sums: memref<4xf32>, %y: memref<4x64xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c4 = arith.constant 4 : index
  %c7 = arith.constant 7 : index
  %c64 = arith.constant 64 : index
  %zero = arith.constant 0.0 : f32
  scf.parallel (%i, %j) = (%c0, %c0) to (%c4, %c7) step (%c1, %c1) {
    %a = memref.load %x[%i, %j] : memref<4x7xf16>
    %n = arith.negf %a : f16
    memref.store %n, %out[%i, %j] : memref<4x7xf16>
    scf.reduce
  }
  scf.parallel (%i) = (%c0) to (%c4) step (%c1) {
    memref.store %zero, %sums[%i] : memref<4xf32>
    scf.reduce
  }
  scf.parallel (%i) = (%c0) to (%c4) step (%c1) {
    scf.for %k = %c0 to %c64 step %c1 {
      %v = memref.load %y[%i, %k] : memref<4x64xf32>
      %acc = memref.load %sums[%i] : memref<4xf32>
      %s = arith.addf %v, %acc : f32
      memref.store %s, %sums[%i] : memref<4xf32>
    }
    scf.reduce
  }
  return
}

// A view whose innermost stride is known only at run time keeps per-lane
// accesses, even where its provenance would prove it unit (vector.store
// needs the unit stride in the type).
// CHECK-LABEL: func.func @run_time_stride(
// CHECK:         vector.load %arg0
// CHECK-NOT:     vector.store
// CHECK-COUNT-8: memref.store
func.func @run_time_stride(%x: memref<4x64xf16>, %out: memref<4x64xf16>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c4 = arith.constant 4 : index
  %c64 = arith.constant 64 : index
  %view = memref.cast %out : memref<4x64xf16> to memref<4x64xf16, strided<[?, ?], offset: ?>>
  scf.parallel (%i, %j) = (%c0, %c0) to (%c4, %c64) step (%c1, %c1) {
    %a = memref.load %x[%i, %j] : memref<4x64xf16>
    %n = arith.negf %a : f16
    memref.store %n, %view[%i, %j] : memref<4x64xf16, strided<[?, ?], offset: ?>>
    scf.reduce
  }
  return
}
