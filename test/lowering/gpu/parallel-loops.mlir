// RUN: %stage-parallel-loops %s | FileCheck %s
// RUN: %stage-parallel-loops %s | FileCheck %s --check-prefix=GONE

// The parallel-loops stage (convert-linalg-to-parallel-loops) turns linalg ops
// on memrefs into loops: the parallel dimensions become one scf.parallel, the
// reduction dimensions an scf.for inside it.

// GONE-NOT: linalg.

#id = affine_map<(d0, d1) -> (d0, d1)>
#row = affine_map<(d0, d1) -> (d0)>

// An elementwise op: one 2-D scf.parallel, loads, the body, a store.
// CHECK-LABEL: func.func @elementwise(
// CHECK-SAME:    %[[A:[^:]*]]: memref<32x64xf32>, %[[B:[^:]*]]: memref<32x64xf32>, %[[OUT:[^:]*]]: memref<32x64xf32>)
// CHECK-DAG:     %[[C0:.*]] = arith.constant 0 : index
// CHECK-DAG:     %[[C1:.*]] = arith.constant 1 : index
// CHECK-DAG:     %[[C32:.*]] = arith.constant 32 : index
// CHECK-DAG:     %[[C64:.*]] = arith.constant 64 : index
// CHECK:         scf.parallel (%[[I:.*]], %[[J:.*]]) = (%[[C0]], %[[C0]]) to (%[[C32]], %[[C64]]) step (%[[C1]], %[[C1]]) {
// CHECK-NOT:       scf.for
// CHECK:           %[[X:.*]] = memref.load %[[A]][%[[I]], %[[J]]] : memref<32x64xf32>
// CHECK:           %[[Y:.*]] = memref.load %[[B]][%[[I]], %[[J]]] : memref<32x64xf32>
// CHECK:           %[[SUM:.*]] = arith.addf %[[X]], %[[Y]] : f32
// CHECK:           memref.store %[[SUM]], %[[OUT]][%[[I]], %[[J]]] : memref<32x64xf32>
// CHECK:           scf.reduce
// CHECK:         return
func.func @elementwise(%a: memref<32x64xf32>, %b: memref<32x64xf32>, %out: memref<32x64xf32>) {
  linalg.generic {indexing_maps = [#id, #id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%a, %b : memref<32x64xf32>, memref<32x64xf32>) outs(%out : memref<32x64xf32>) {
  ^bb0(%x: f32, %y: f32, %o: f32):
    %0 = arith.addf %x, %y : f32
    linalg.yield %0 : f32
  }
  return
}

// A row reduction (like softmax's sum): scf.parallel over the rows, an scf.for
// over the reduced columns that accumulates into OUT[i] through memory.
// CHECK-LABEL: func.func @row_sum(
// CHECK-SAME:    %[[IN:[^:]*]]: memref<32x64xf32>, %[[ACC:[^:]*]]: memref<32xf32>)
// CHECK-DAG:     %[[C0:.*]] = arith.constant 0 : index
// CHECK-DAG:     %[[C1:.*]] = arith.constant 1 : index
// CHECK-DAG:     %[[C32:.*]] = arith.constant 32 : index
// CHECK-DAG:     %[[C64:.*]] = arith.constant 64 : index
// CHECK:         scf.parallel (%[[I:.*]]) = (%[[C0]]) to (%[[C32]]) step (%[[C1]]) {
// CHECK-NEXT:      scf.for %[[K:.*]] = %[[C0]] to %[[C64]] step %[[C1]] {
// CHECK-NEXT:        %[[X:.*]] = memref.load %[[IN]][%[[I]], %[[K]]] : memref<32x64xf32>
// CHECK-NEXT:        %[[OLD:.*]] = memref.load %[[ACC]][%[[I]]] : memref<32xf32>
// CHECK-NEXT:        %[[NEW:.*]] = arith.addf %[[X]], %[[OLD]] : f32
// CHECK-NEXT:        memref.store %[[NEW]], %[[ACC]][%[[I]]] : memref<32xf32>
// CHECK-NEXT:      }
// CHECK-NEXT:      scf.reduce
// CHECK:         return
func.func @row_sum(%in: memref<32x64xf32>, %acc: memref<32xf32>) {
  linalg.generic {indexing_maps = [#id, #row], iterator_types = ["parallel", "reduction"]}
      ins(%in : memref<32x64xf32>) outs(%acc : memref<32xf32>) {
  ^bb0(%x: f32, %o: f32):
    %0 = arith.addf %x, %o : f32
    linalg.yield %0 : f32
  }
  return
}

// linalg.fill too becomes a (1-D) scf.parallel storing the constant.
// CHECK-LABEL: func.func @fill(
// CHECK-SAME:    %[[BUF:[^:]*]]: memref<32xf32>)
// CHECK:         %[[ZERO:.*]] = arith.constant 0.000000e+00 : f32
// CHECK:         scf.parallel (%[[I:.*]]) =
// CHECK-NEXT:      memref.store %[[ZERO]], %[[BUF]][%[[I]]] : memref<32xf32>
func.func @fill(%buf: memref<32xf32>) {
  %zero = arith.constant 0.0 : f32
  linalg.fill ins(%zero : f32) outs(%buf : memref<32xf32>)
  return
}
