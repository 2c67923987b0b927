// RUN: %stage-memory %s | FileCheck %s

// A linalg op of run-time sizes inside a loop's region (here an scf.while
// carrying the buffer, as an integer pow's square-and-multiply loop does)
// becomes scf.for loops: its sizes are no affine symbols there, and the
// affine stage would fail on it. Ops at the function's top level stay.
// CHECK-LABEL: func.func @carried(
// CHECK:         linalg.generic
// CHECK:         scf.while
// CHECK:         } do {
// CHECK:           %[[N:.*]] = memref.dim %{{.*}}, %{{.*}} : memref<?xf32>
// CHECK:           scf.for %[[I:.*]] = %{{.*}} to %[[N]] step %{{.*}} {
// CHECK:             %[[X:.*]] = memref.load %{{.*}}[%{{.*}}] : memref<?xf32>
// CHECK:             %[[Y:.*]] = arith.mulf %[[X]], %[[X]] : f32
// CHECK:             memref.store %[[Y]], %{{.*}}[%{{.*}}] : memref<?xf32>
// CHECK-NOT:     linalg.generic
#id = affine_map<(d0) -> (d0)>
func.func @carried(%a: memref<?xf32>, %steps: i32) -> memref<?xf32> {
  %c0 = arith.constant 0 : index
  %one = arith.constant 1 : i32
  %zero = arith.constant 0 : i32
  linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel"]} ins(%a : memref<?xf32>) outs(%a : memref<?xf32>) {
  ^bb0(%x: f32, %y: f32):
    %n = arith.negf %x : f32
    linalg.yield %n : f32
  }
  %result:2 = scf.while (%k = %steps, %buffer = %a) : (i32, memref<?xf32>) -> (i32, memref<?xf32>) {
    %more = arith.cmpi sgt, %k, %zero : i32
    scf.condition(%more) %k, %buffer : i32, memref<?xf32>
  } do {
  ^bb0(%k: i32, %buffer: memref<?xf32>):
    linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel"]} ins(%buffer : memref<?xf32>) outs(%buffer : memref<?xf32>) {
    ^bb0(%x: f32, %y: f32):
      %s = arith.mulf %x, %x : f32
      linalg.yield %s : f32
    }
    %next = arith.subi %k, %one : i32
    scf.yield %next, %buffer : i32, memref<?xf32>
  }
  return %result#1 : memref<?xf32>
}

// A fill of run-time size in a branch: a store per element.
// CHECK-LABEL: func.func @filled(
// CHECK:         scf.if
// CHECK:           %[[N:.*]] = memref.dim %{{.*}}, %{{.*}} : memref<?xf32>
// CHECK:           scf.for %{{.*}} = %{{.*}} to %[[N]] step %{{.*}} {
// CHECK:             memref.store %{{.*}}, %{{.*}}[%{{.*}}] : memref<?xf32>
// CHECK-NOT:     linalg.fill
func.func @filled(%a: memref<?xf32>, %when: i1) {
  %zero = arith.constant 0.0 : f32
  scf.if %when {
    linalg.fill ins(%zero : f32) outs(%a : memref<?xf32>)
  }
  return
}
