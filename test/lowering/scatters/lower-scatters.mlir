// RUN: %PYTHON -m twintrack.compiler.passes lower-scatters %s | FileCheck %s
// RUN: %PYTHON -m twintrack.compiler.passes lower-scatters %s | FileCheck %s --check-prefix=GONE
// RUN: %PYTHON -m twintrack.compiler.passes lower-scatters %s | %mlir-opt --pass-pipeline="builtin.module(one-shot-bufferize{bufferize-function-boundaries function-boundary-type-conversion=identity-layout-map})" | FileCheck %s --check-prefix=BUFFERS

// The scatters stage (Python pass lower-scatters, in torch-mlir's bindings)
// turns each tm_tensor.scatter into an scf.for nest over tensors: extract
// the update and the element it lands on, the combiner region inlined,
// insert. (`python -m twintrack.compiler.passes` parses in upstream's bindings, which
// lack tm_tensor, so the pass module runs itself here.)

// GONE-NOT: tm_tensor

// scatter_add along dim 0: one loop over the 12 updates; both index columns
// read, each wrapped if negative; the destination is the argument, so the
// loop updates a copy of it.
// CHECK-LABEL: func.func @scatter_add(
// CHECK-SAME:    %[[X:[[:alnum:]_]+]]: tensor<5x3xf32>, %[[UPD:[[:alnum:]_]+]]: tensor<12xf32>, %[[IDX:[[:alnum:]_]+]]: tensor<12x2xi64>)
// CHECK-DAG:     %[[C0:[[:alnum:]_]+]] = arith.constant 0 : index
// CHECK-DAG:     %[[C1:[[:alnum:]_]+]] = arith.constant 1 : index
// CHECK-DAG:     %[[C5:[[:alnum:]_]+]] = arith.constant 5 : index
// CHECK-DAG:     %[[C12:[[:alnum:]_]+]] = arith.constant 12 : index
// CHECK:         %[[COPY:[[:alnum:]_]+]] = linalg.copy {{.*}} ins(%[[X]] : tensor<5x3xf32>)
// CHECK:         %[[R:[[:alnum:]_]+]] = scf.for %[[N:[[:alnum:]_]+]] = %[[C0]] to %[[C12]] step %[[C1]] iter_args(%[[ACC:[[:alnum:]_]+]] = %[[COPY]]) -> (tensor<5x3xf32>)
// CHECK:           %[[U:[[:alnum:]_]+]] = tensor.extract %[[UPD]][%[[N]]] : tensor<12xf32>
// CHECK:           %[[I0:[[:alnum:]_]+]] = tensor.extract %[[IDX]][%[[N]], %[[C0]]] : tensor<12x2xi64>
// CHECK:           %[[I0C:[[:alnum:]_]+]] = arith.index_cast %[[I0]] : i64 to index
// CHECK:           %[[NEG:[[:alnum:]_]+]] = arith.cmpi slt, %[[I0C]], %[[C0]] : index
// CHECK:           %[[UP:[[:alnum:]_]+]] = arith.addi %[[I0C]], %[[C5]] : index
// CHECK:           %[[ROW:[[:alnum:]_]+]] = arith.select %[[NEG]], %[[UP]], %[[I0C]] : index
// CHECK:           tensor.extract %[[IDX]][%[[N]], %[[C1]]] : tensor<12x2xi64>
// CHECK:           %[[COL:[[:alnum:]_]+]] = arith.select
// CHECK:           %[[OLD:[[:alnum:]_]+]] = tensor.extract %[[ACC]][%[[ROW]], %[[COL]]] : tensor<5x3xf32>
// CHECK:           %[[NEW:[[:alnum:]_]+]] = arith.addf %[[OLD]], %[[U]] : f32
// CHECK:           %[[INS:[[:alnum:]_]+]] = tensor.insert %[[NEW]] into %[[ACC]][%[[ROW]], %[[COL]]] : tensor<5x3xf32>
// CHECK:           scf.yield %[[INS]] : tensor<5x3xf32>
// CHECK:         return %[[R]]
func.func @scatter_add(%x: tensor<5x3xf32>, %updates: tensor<12xf32>, %indices: tensor<12x2xi64>) -> tensor<5x3xf32> {
  %0 = tm_tensor.scatter {dimension_map = array<i64: 0, 1>} unique_indices(false) ins(%updates, %indices : tensor<12xf32>, tensor<12x2xi64>) outs(%x : tensor<5x3xf32>) {
  ^bb0(%update: f32, %old: f32):
    %1 = arith.addf %old, %update : f32
    tm_tensor.yield %1 : f32
  } -> tensor<5x3xf32>
  return %0 : tensor<5x3xf32>
}

// index_put of whole rows into a temporary: a loop per update dim, the row
// index (wrapped) plus the unit dim's iv, the row's column from the update's
// last iv; no copy of a temporary; the combiner (a plain store) yields the update.
// CHECK-LABEL: func.func @index_put_rows(
// CHECK-SAME:    %[[UPD:[[:alnum:]_]+]]: tensor<7x1x3xi32>, %[[IDX:[[:alnum:]_]+]]: tensor<7x1xi32>)
// CHECK-NOT:     linalg.copy
// CHECK:         %[[FILL:[[:alnum:]_]+]] = linalg.fill
// CHECK:         scf.for %[[N:[[:alnum:]_]+]] = {{.*}} iter_args(%{{.*}} = %[[FILL]]) -> (tensor<5x3xi32>)
// CHECK:           scf.for %[[J:[[:alnum:]_]+]] = {{.*}} -> (tensor<5x3xi32>)
// CHECK:             scf.for %[[K:[[:alnum:]_]+]] = {{.*}} iter_args(%[[ACC:[[:alnum:]_]+]] = %{{.*}}) -> (tensor<5x3xi32>)
// CHECK:               %[[U:[[:alnum:]_]+]] = tensor.extract %[[UPD]][%[[N]], %[[J]], %[[K]]] : tensor<7x1x3xi32>
// CHECK:               %[[I:[[:alnum:]_]+]] = tensor.extract %[[IDX]][%[[N]], %{{.*}}] : tensor<7x1xi32>
// CHECK:               arith.index_cast %[[I]] : i32 to index
// CHECK:               %[[W:[[:alnum:]_]+]] = arith.select
// CHECK:               %[[ROW:[[:alnum:]_]+]] = arith.addi %[[W]], %[[J]] : index
// CHECK-NOT:           tensor.extract %[[ACC]]
// CHECK:               tensor.insert %[[U]] into %[[ACC]][%[[ROW]], %[[K]]] : tensor<5x3xi32>
func.func @index_put_rows(%updates: tensor<7x1x3xi32>, %indices: tensor<7x1xi32>) -> tensor<5x3xi32> {
  %c0 = arith.constant 0 : i32
  %empty = tensor.empty() : tensor<5x3xi32>
  %zeros = linalg.fill ins(%c0 : i32) outs(%empty : tensor<5x3xi32>) -> tensor<5x3xi32>
  %0 = tm_tensor.scatter {dimension_map = array<i64: 0>} unique_indices(false) ins(%updates, %indices : tensor<7x1x3xi32>, tensor<7x1xi32>) outs(%zeros : tensor<5x3xi32>) {
  ^bb0(%update: i32, %old: i32):
    tm_tensor.yield %update : i32
  } -> tensor<5x3xi32>
  return %0 : tensor<5x3xi32>
}

// Upstream one-shot-bufferize takes the loops: one buffer, loaded and
// stored in place, no tensors left.
// BUFFERS-LABEL: func.func @scatter_add(
// BUFFERS:         %[[BUF:[[:alnum:]_]+]] = memref.alloc()
// BUFFERS:         linalg.copy {{.*}} outs(%[[BUF]] : memref<5x3xf32>)
// BUFFERS:         scf.for {{.*}} iter_args(%[[ACC:[[:alnum:]_]+]] = %[[BUF]])
// BUFFERS:           memref.load %[[ACC]]
// BUFFERS:           arith.addf
// BUFFERS:           memref.store %{{.*}}, %[[ACC]]
// BUFFERS-NOT:     tensor.
// BUFFERS-LABEL: func.func @index_put_rows(
// BUFFERS-NOT:     tensor.
// BUFFERS:         memref.store
