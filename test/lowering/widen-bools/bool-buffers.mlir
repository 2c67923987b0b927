// RUN: %stage-widen-bools %s | FileCheck %s
// RUN: %stage-widen-bools %s | FileCheck %s --check-prefix=GONE

// The widen-bools stage (Python pass widen-bool-buffers) stores booleans as
// bytes: every memref<...xi1> becomes memref<...xi8>, stores of an i1 are
// preceded by arith.extui and loads are followed by arith.trunci.

// GONE-NOT: memref<{{[^>]*}}xi1>

// CHECK-LABEL: func.func @mask(
// CHECK:         %[[MASK:.*]] = memref.alloc() {{.*}}: memref<16xi8>
// CHECK:         affine.for
// CHECK:           %[[GT:.*]] = arith.cmpf ogt
// CHECK-NEXT:      %[[BYTE:.*]] = arith.extui %[[GT]] : i1 to i8
// CHECK-NEXT:      affine.store %[[BYTE]], %[[MASK]][%{{.*}}] : memref<16xi8>
// CHECK:         affine.for
// CHECK:           %[[LOADED:.*]] = affine.load %[[MASK]][%{{.*}}] : memref<16xi8>
// CHECK-NEXT:      %[[BIT:.*]] = arith.trunci %[[LOADED]] : i8 to i1
// CHECK:           arith.select %[[BIT]],
// CHECK:         memref.dealloc %[[MASK]] : memref<16xi8>
func.func @mask(%arg0: memref<16xf32>, %arg1: memref<16xf32>) -> memref<16xf32> {
  %cst = arith.constant 0.000000e+00 : f32
  %alloc = memref.alloc() {alignment = 64 : i64} : memref<16xi1>
  affine.for %i = 0 to 16 {
    %0 = affine.load %arg0[%i] : memref<16xf32>
    %1 = arith.cmpf ogt, %0, %cst : f32
    affine.store %1, %alloc[%i] : memref<16xi1>
  }
  %alloc_0 = memref.alloc() {alignment = 64 : i64} : memref<16xf32>
  affine.for %i = 0 to 16 {
    %0 = affine.load %alloc[%i] : memref<16xi1>
    %1 = affine.load %arg1[%i] : memref<16xf32>
    %2 = arith.select %0, %1, %cst : f32
    affine.store %2, %alloc_0[%i] : memref<16xf32>
  }
  memref.dealloc %alloc : memref<16xi1>
  return %alloc_0 : memref<16xf32>
}

// Bool block arguments (inputs, out-parameters) and memref.load/store too.
// CHECK-LABEL: func.func @bool_args(
// CHECK-SAME:    %[[IN:.*]]: memref<4xi8>, %[[OUT:.*]]: memref<4xi8>)
// CHECK:         affine.for %[[I:.*]] = 0 to 4 {
// CHECK-NEXT:      %[[LOADED:.*]] = memref.load %[[IN]][%[[I]]] : memref<4xi8>
// CHECK-NEXT:      %[[BIT:.*]] = arith.trunci %[[LOADED]] : i8 to i1
// CHECK-NEXT:      %[[NOT:.*]] = arith.xori %[[BIT]], %{{.*}} : i1
// CHECK-NEXT:      %[[BYTE:.*]] = arith.extui %[[NOT]] : i1 to i8
// CHECK-NEXT:      memref.store %[[BYTE]], %[[OUT]][%[[I]]] : memref<4xi8>
func.func @bool_args(%arg0: memref<4xi1>, %arg1: memref<4xi1>) {
  %true = arith.constant true
  affine.for %i = 0 to 4 {
    %0 = memref.load %arg0[%i] : memref<4xi1>
    %1 = arith.xori %0, %true : i1
    memref.store %1, %arg1[%i] : memref<4xi1>
  }
  return
}

// A bool result keeps the function type consistent with the widened body.
// CHECK-LABEL: func.func @bool_result(
// CHECK-SAME:    -> memref<4xi8>
// CHECK:         %[[R:.*]] = memref.alloc() {{.*}}: memref<4xi8>
// CHECK:         return %[[R]] : memref<4xi8>
func.func @bool_result(%arg0: memref<4xf32>) -> memref<4xi1> {
  %cst = arith.constant 0.000000e+00 : f32
  %alloc = memref.alloc() {alignment = 64 : i64} : memref<4xi1>
  affine.for %i = 0 to 4 {
    %0 = affine.load %arg0[%i] : memref<4xf32>
    %1 = arith.cmpf olt, %0, %cst : f32
    affine.store %1, %alloc[%i] : memref<4xi1>
  }
  return %alloc : memref<4xi1>
}

// A vector load of bools (the CPU row kernel reading an attention mask)
// loads bytes and truncates them; a masked load's pass-through is widened.
// CHECK-LABEL: func.func @vector_mask(
// CHECK-SAME:    %[[M:.*]]: memref<4x37xi8>
// CHECK:         %[[WHOLE:.*]] = vector.load %[[M]][%{{.*}}, %{{.*}}] : memref<4x37xi8>, vector<16xi8>
// CHECK-NEXT:    %[[BITS:.*]] = arith.trunci %[[WHOLE]] : vector<16xi8> to vector<16xi1>
// CHECK:         %[[PASS:.*]] = arith.extui %{{.*}} : vector<16xi1> to vector<16xi8>
// CHECK-NEXT:    %[[PART:.*]] = vector.maskedload %[[M]][%{{.*}}, %{{.*}}], %{{.*}}, %[[PASS]] : memref<4x37xi8>, vector<16xi1>, vector<16xi8> into vector<16xi8>
// CHECK-NEXT:    %[[TAIL:.*]] = arith.trunci %[[PART]] : vector<16xi8> to vector<16xi1>
// CHECK:         arith.select %[[BITS]],
// CHECK:         arith.select %[[TAIL]],
func.func @vector_mask(%mask: memref<4x37xi1>, %x: vector<16xf32>, %out: memref<2xvector<16xf32>>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c32 = arith.constant 32 : index
  %false = arith.constant dense<false> : vector<16xi1>
  %keep = vector.constant_mask [5] : vector<16xi1>
  %zero = arith.constant dense<0.0> : vector<16xf32>
  %whole = vector.load %mask[%c0, %c0] : memref<4x37xi1>, vector<16xi1>
  %part = vector.maskedload %mask[%c0, %c32], %keep, %false : memref<4x37xi1>, vector<16xi1>, vector<16xi1> into vector<16xi1>
  %a = arith.select %whole, %zero, %x : vector<16xi1>, vector<16xf32>
  %b = arith.select %part, %zero, %x : vector<16xi1>, vector<16xf32>
  memref.store %a, %out[%c0] : memref<2xvector<16xf32>>
  memref.store %b, %out[%c1] : memref<2xvector<16xf32>>
  return
}
