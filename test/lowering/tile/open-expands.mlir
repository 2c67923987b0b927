// RUN: %PYTHON -m twintrack.compiler.passes "open-expands" %s | FileCheck %s

// (b·s, 384) split into (b, s, 384), both sizes known at run time: upstream
// expand-strided-metadata takes one run-time size a group, so it becomes a
// reinterpret_cast of the row-major source (strides s·384, 384, 1).
// CHECK-LABEL: func.func @two_open_sizes
// CHECK-NOT: memref.expand_shape
// CHECK: %[[ROW:.*]] = arith.muli %{{.*}}, %arg2 : index
// CHECK: memref.reinterpret_cast %arg0 to offset: [0], sizes: [%arg1, %arg2, 384], strides: [%[[ROW]], 384, 1]
func.func @two_open_sizes(%x: memref<?x384xf32>, %b: index, %s: index) -> memref<?x?x384xf32> {
  %r = memref.expand_shape %x [[0, 1], [2]] output_shape [%b, %s, 384] : memref<?x384xf32> into memref<?x?x384xf32>
  return %r : memref<?x?x384xf32>
}

// One run-time size a group: the upstream lowering takes it; it stays.
// CHECK-LABEL: func.func @one_open_size
// CHECK: memref.expand_shape
func.func @one_open_size(%x: memref<?x384xf32>, %s: index) -> memref<2x?x384xf32> {
  %r = memref.expand_shape %x [[0, 1], [2]] output_shape [2, %s, 384] : memref<?x384xf32> into memref<2x?x384xf32>
  return %r : memref<2x?x384xf32>
}

// A slice (a run-time offset and row stride) split the same way: a
// reinterpret_cast of its base buffer, its offset kept, the group's strides
// the split dim's stride times the sizes inside it.
// CHECK-LABEL: func.func @slice_split
// CHECK-NOT: memref.expand_shape
// CHECK: %[[BASE:[a-z_0-9]+]], %[[OFFSET:[a-z_0-9]+]], %{{[a-z_0-9]+}}:2, %[[STRIDES:[a-z_0-9]+]]:2 = memref.extract_strided_metadata %arg0
// CHECK: %[[ROW:.*]] = arith.muli %[[STRIDES]]#0, %arg2 : index
// CHECK: memref.reinterpret_cast %[[BASE]] to offset: [%[[OFFSET]]], sizes: [%arg1, %arg2, 128], strides: [%[[ROW]], 384, 1]
func.func @slice_split(%x: memref<?x128xf32, strided<[384, 1], offset: ?>>, %b: index, %s: index)
    -> memref<?x?x128xf32, strided<[?, 384, 1], offset: ?>> {
  %r = memref.expand_shape %x [[0, 1], [2]] output_shape [%b, %s, 128]
      : memref<?x128xf32, strided<[384, 1], offset: ?>> into memref<?x?x128xf32, strided<[?, 384, 1], offset: ?>>
  return %r : memref<?x?x128xf32, strided<[?, 384, 1], offset: ?>>
}
