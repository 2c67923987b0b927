// RUN: %stage-parallelize %s > %t
// RUN: %PYTHON -m twintrack.compiler.passes "serial-small-loops{threads=2}" %t | FileCheck %s
// RUN: %PYTHON -m twintrack.compiler.passes "serial-small-loops{threads=1}" %t | FileCheck %s --check-prefix=ONE

// A nest of 512x1024 elements whose rows are independent: its outer loop
// runs on two threads, and says why.
// CHECK-LABEL: func.func @rows(
// CHECK:         affine.parallel (%{{.*}}) = (0) to (512) {
// CHECK:         twintrack.schedule = "loops: 512 iterations in parallel on 2 threads: no dependence between them (affine-parallelize), and 524288 elements pay
// ONE-LABEL:   func.func @rows(
// ONE-NOT:       affine.parallel
func.func @rows(%x: memref<512x1024xf32>, %y: memref<512x1024xf32>) {
  affine.for %i = 0 to 512 {
    affine.for %j = 0 to 1024 {
      %v = affine.load %x[%i, %j] : memref<512x1024xf32>
      %w = arith.mulf %v, %v : f32
      affine.store %w, %y[%i, %j] : memref<512x1024xf32>
    }
  }
  return
}

// The same nest over 64 elements does not pay for starting threads.
// CHECK-LABEL: func.func @small(
// CHECK-NOT:     affine.parallel
// CHECK:         affine.for %{{.*}} = 0 to 8 {
func.func @small(%x: memref<8x8xf32>, %y: memref<8x8xf32>) {
  affine.for %i = 0 to 8 {
    affine.for %j = 0 to 8 {
      %v = affine.load %x[%i, %j] : memref<8x8xf32>
      affine.store %v, %y[%i, %j] : memref<8x8xf32>
    }
  }
  return
}

// Each row reads the one before (a running sum down the columns): the outer
// loop carries a dependence, the inner one would be parallel, but threads
// started once per row would cost more than they save: it stays a loop.
// CHECK-LABEL: func.func @running(
// CHECK-NOT:     affine.parallel
// CHECK:         affine.for %{{.*}} = 1 to 1024 {
// CHECK:           affine.for %{{.*}} = 0 to 1024 {
func.func @running(%y: memref<1024x1024xf32>) {
  affine.for %i = 1 to 1024 {
    affine.for %j = 0 to 1024 {
      %above = affine.load %y[%i - 1, %j] : memref<1024x1024xf32>
      %here = affine.load %y[%i, %j] : memref<1024x1024xf32>
      %sum = arith.addf %above, %here : f32
      affine.store %sum, %y[%i, %j] : memref<1024x1024xf32>
    }
  }
  return
}
