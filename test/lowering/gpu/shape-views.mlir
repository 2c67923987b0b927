// RUN: %stage-shape-views %s | FileCheck %s

// The shape-views stage (Python pass shape-buffers): torch-mlir's view that
// splits an open dim reshapes through a buffer of sizes; it becomes a
// reinterpret_cast of the sizes themselves (row-major strides computed on
// the host), each read of the buffer the size stored there, and the buffer
// goes.
// CHECK-LABEL: func.func @split_heads(
// CHECK-SAME:    %[[SRC:[a-z0-9_]+]]: memref<?x32xf32>
// CHECK-NOT:     memref.alloc
// CHECK-NOT:     memref.store
// CHECK:         %[[B:.*]] = arith.index_cast %{{.*}} : i64 to index
// CHECK:         %[[S:.*]] = arith.index_cast %{{.*}} : i64 to index
// CHECK:         %[[S32:.*]] = arith.muli %{{.*}}, %[[S]] : index
// CHECK:         %[[VIEW:.*]] = memref.reinterpret_cast %[[SRC]] to offset: [0], sizes: [%[[B]], %[[S]], 4, 8], strides: [%[[S32]], 32, 8, 1]
// CHECK-NOT:     memref.load
// CHECK:         return %[[VIEW]], %{{.*}} : memref<?x?x4x8xf32>, i64
func.func @split_heads(%src: memref<?x32xf32>, %b: i64, %s: i64) -> (memref<?x?x4x8xf32>, i64) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %c3 = arith.constant 3 : index
  %c4 = arith.constant 4 : i64
  %c8 = arith.constant 8 : i64
  %shape = memref.alloc() : memref<4xi64>
  memref.store %b, %shape[%c0] : memref<4xi64>
  memref.store %s, %shape[%c1] : memref<4xi64>
  memref.store %c4, %shape[%c2] : memref<4xi64>
  memref.store %c8, %shape[%c3] : memref<4xi64>
  %view = memref.reshape %src(%shape) : (memref<?x32xf32>, memref<4xi64>) -> memref<?x?x4x8xf32>
  %first = memref.load %shape[%c1] : memref<4xi64>
  memref.dealloc %shape : memref<4xi64>
  return %view, %first : memref<?x?x4x8xf32>, i64
}

// A buffer written where a size is not stored at a constant position stays.
// CHECK-LABEL: func.func @not_sizes(
// CHECK:         memref.alloc
// CHECK:         memref.reshape
func.func @not_sizes(%src: memref<?xf32>, %n: i64, %at: index) -> memref<?xf32> {
  %shape = memref.alloc() : memref<1xi64>
  memref.store %n, %shape[%at] : memref<1xi64>
  %view = memref.reshape %src(%shape) : (memref<?xf32>, memref<1xi64>) -> memref<?xf32>
  return %view : memref<?xf32>
}
