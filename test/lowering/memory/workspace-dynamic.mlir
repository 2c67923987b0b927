// RUN: %stage-memory %s | FileCheck %s

// Dynamic shapes: an allocation sized at run time takes its largest bytes
// in the workspace, each size bounded through the ops computing it down to
// the arguments' largest sizes (twintrack.arg_size_bounds, from the
// compile's ranges): %rows (a dim of %x, at most 64) times %cols (at most
// 512) plus 1, as an affine map. An allocation whose size has no bound (a
// dim of an unbounded argument) keeps malloc. Bytes: (64 * 512 + 1) * 4 =
// 131076, the next at 131136 (64-byte boundary), 64 * 4 more: 131392.
// CHECK:       memref.global "private" @twintrack_workspace : memref<131392xi8>
// CHECK-LABEL: func.func @bounded(
// CHECK:         %[[W:.*]] = memref.get_global @twintrack_workspace : memref<131392xi8>
// CHECK:         %[[ROWS:.*]] = memref.dim %arg0, %c0
// CHECK:         %[[COLS:.*]] = memref.dim %arg0, %c1
// CHECK:         %[[N:.*]] = affine.apply
// CHECK:         memref.view %[[W]][%{{.*}}][%[[N]]] : memref<131392xi8> to memref<?xf32>
// CHECK:         memref.view %[[W]][%{{.*}}][%[[ROWS]]] : memref<131392xi8> to memref<?xf32>
// CHECK:         memref.alloc(%{{.*}}) {{.*}}: memref<?xf32>
func.func @bounded(%x: memref<?x?xf32>, %y: memref<?xf32>) attributes {twintrack.arg_size_bounds = [array<i64: 64, 512>]} {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %rows = memref.dim %x, %c0 : memref<?x?xf32>
  %cols = memref.dim %x, %c1 : memref<?x?xf32>
  %n = affine.apply affine_map<()[s0, s1] -> (s0 * s1 + 1)>()[%rows, %cols]
  %flat = memref.alloc(%n) : memref<?xf32>
  %per_row = memref.alloc(%rows) : memref<?xf32>
  %unbounded_size = memref.dim %y, %c0 : memref<?xf32>
  %unbounded = memref.alloc(%unbounded_size) : memref<?xf32>
  func.call @use(%flat, %per_row, %unbounded) : (memref<?xf32>, memref<?xf32>, memref<?xf32>) -> ()
  memref.dealloc %flat : memref<?xf32>
  memref.dealloc %per_row : memref<?xf32>
  memref.dealloc %unbounded : memref<?xf32>
  return
}
func.func private @use(memref<?xf32>, memref<?xf32>, memref<?xf32>)
