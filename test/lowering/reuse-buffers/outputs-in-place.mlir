// RUN: %stage-reuse-buffers %s | FileCheck %s

// A result computed into a temporary, reshaped, and copied into the output
// buffer is computed in the output buffer, seen through the inverse reshapes.

#id1 = affine_map<(d0) -> (d0)>

// CHECK-LABEL: func.func @narrowed_row(
// CHECK-SAME:    %[[OUT:[a-z0-9]+]]: memref<1x64xf16>)
// CHECK-NOT:     memref.alloc() {{.*}}xf16>
// CHECK:         %[[ROW:.*]] = memref.collapse_shape %[[OUT]] {{\[\[}}0, 1]] : memref<1x64xf16> into memref<64xf16>
// CHECK:         linalg.generic {{.*}} outs(%[[ROW]] : memref<64xf16>)
// CHECK-NOT:     memref.copy
func.func @narrowed_row(%x: memref<1x64xf32>, %out: memref<1x64xf16>) {
  %row = memref.collapse_shape %x [[0, 1]] : memref<1x64xf32> into memref<64xf32>
  %t = memref.alloc() : memref<64xf16>
  linalg.generic {indexing_maps = [#id1, #id1], iterator_types = ["parallel"]}
      ins(%row : memref<64xf32>) outs(%t : memref<64xf16>) {
  ^bb0(%a: f32, %o: f16):
    %n = arith.truncf %a : f32 to f16
    linalg.yield %n : f16
  }
  %e = memref.expand_shape %t [[0, 1]] output_shape [1, 64] : memref<64xf16> into memref<1x64xf16>
  memref.copy %e, %out : memref<1x64xf16> to memref<1x64xf16>
  memref.dealloc %t : memref<64xf16>
  return
}

// The temporary is read after the copy: it stays, and so does the copy.
// CHECK-LABEL: func.func @read_after_copy(
// CHECK:         memref.alloc()
// CHECK:         memref.copy
func.func @read_after_copy(%x: memref<64xf32>, %out: memref<64xf32>, %out2: memref<64xf32>) {
  %t = memref.alloc() : memref<64xf32>
  linalg.copy ins(%x : memref<64xf32>) outs(%t : memref<64xf32>)
  memref.copy %t, %out : memref<64xf32> to memref<64xf32>
  linalg.copy ins(%t : memref<64xf32>) outs(%out2 : memref<64xf32>)
  memref.dealloc %t : memref<64xf32>
  return
}

// The output buffer is also read (an argument updated in place): the copy stays.
// CHECK-LABEL: func.func @output_also_read(
// CHECK:         memref.alloc()
// CHECK:         memref.copy
func.func @output_also_read(%x: memref<64xf32>, %state: memref<64xf32>) {
  %t = memref.alloc() : memref<64xf32>
  linalg.add ins(%x, %state : memref<64xf32>, memref<64xf32>) outs(%t : memref<64xf32>)
  memref.copy %t, %state : memref<64xf32> to memref<64xf32>
  memref.dealloc %t : memref<64xf32>
  return
}
