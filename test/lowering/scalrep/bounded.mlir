// RUN: %stage-scalrep %s | FileCheck %s
// RUN: %PYTHON -m twintrack.compiler.passes "bounded-scalar-replacement{most=2}" %s | FileCheck %s --check-prefix=BOUND

// The scalrep stage forwards a stored value to the load that reads it back
// (upstream affine-scalrep). A function with more affine loads and stores
// than the bound keeps them: the pass's dependence checks grow with the
// square of the accesses.

// CHECK-LABEL: func.func @store_then_load(
// CHECK:         affine.for
// CHECK:           %[[V:.*]] = arith.mulf
// CHECK-NEXT:      affine.store %[[V]]
// CHECK-NOT:       affine.load %{{.*}}[%{{.*}}] : memref<8xf32>
// CHECK:           arith.addf %[[V]], %[[V]]

// BOUND-LABEL: func.func @store_then_load(
// BOUND:         affine.store
// BOUND-NEXT:    %[[RELOADED:.*]] = affine.load
// BOUND-NEXT:    arith.addf %[[RELOADED]], %[[RELOADED]]
func.func @store_then_load(%x: memref<8xf32>, %t: memref<8xf32>, %y: memref<8xf32>) {
  affine.for %i = 0 to 8 {
    %a = affine.load %x[%i] : memref<8xf32>
    %v = arith.mulf %a, %a : f32
    affine.store %v, %t[%i] : memref<8xf32>
    %b = affine.load %t[%i] : memref<8xf32>
    %s = arith.addf %b, %b : f32
    affine.store %s, %y[%i] : memref<8xf32>
  }
  return
}
