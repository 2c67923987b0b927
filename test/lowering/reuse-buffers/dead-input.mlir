// RUN: %PYTHON -m twintrack.compiler.passes reuse-dead-inputs %s | FileCheck %s

// An elementwise op whose input temporary dies with it writes into that
// input's buffer instead of a fresh allocation.

#id = affine_map<(d0, d1) -> (d0, d1)>

// CHECK-LABEL: func.func @exp_in_place(
// CHECK:         %[[T:.*]] = memref.alloc() : memref<4x8xf32>
// CHECK-NOT:     memref.alloc
// CHECK:         linalg.generic {{.*}} outs(%[[T]] : memref<4x8xf32>)
// CHECK:         linalg.generic {{.*}} ins(%[[T]] : memref<4x8xf32>) outs(%[[T]] : memref<4x8xf32>)
// CHECK:         memref.copy %[[T]], %{{.*}}
// CHECK:         memref.dealloc %[[T]]
// CHECK-NOT:     memref.dealloc
func.func @exp_in_place(%x: memref<4x8xf32>, %out: memref<4x8xf32>) {
  %t = memref.alloc() : memref<4x8xf32>
  linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%x : memref<4x8xf32>) outs(%t : memref<4x8xf32>) {
  ^bb0(%a: f32, %o: f32):
    %n = arith.negf %a : f32
    linalg.yield %n : f32
  }
  %u = memref.alloc() : memref<4x8xf32>
  linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%t : memref<4x8xf32>) outs(%u : memref<4x8xf32>) {
  ^bb0(%a: f32, %o: f32):
    %e = math.exp %a : f32
    linalg.yield %e : f32
  }
  memref.copy %u, %out : memref<4x8xf32> to memref<4x8xf32>
  memref.dealloc %t : memref<4x8xf32>
  memref.dealloc %u : memref<4x8xf32>
  return
}

// The input is read again later: it keeps its buffer, the output gets its own.
// CHECK-LABEL: func.func @input_still_live(
// CHECK-COUNT-2: memref.alloc()
func.func @input_still_live(%x: memref<4x8xf32>, %out: memref<4x8xf32>) {
  %t = memref.alloc() : memref<4x8xf32>
  linalg.copy ins(%x : memref<4x8xf32>) outs(%t : memref<4x8xf32>)
  %u = memref.alloc() : memref<4x8xf32>
  linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%t : memref<4x8xf32>) outs(%u : memref<4x8xf32>) {
  ^bb0(%a: f32, %o: f32):
    %e = math.exp %a : f32
    linalg.yield %e : f32
  }
  linalg.add ins(%t, %u : memref<4x8xf32>, memref<4x8xf32>) outs(%out : memref<4x8xf32>)
  memref.dealloc %t : memref<4x8xf32>
  memref.dealloc %u : memref<4x8xf32>
  return
}

// A transposed read of the input cannot be overwritten element by element.
// CHECK-LABEL: func.func @transposed_input(
// CHECK-COUNT-2: memref.alloc()
func.func @transposed_input(%x: memref<8x8xf32>, %out: memref<8x8xf32>) {
  %t = memref.alloc() : memref<8x8xf32>
  linalg.copy ins(%x : memref<8x8xf32>) outs(%t : memref<8x8xf32>)
  %u = memref.alloc() : memref<8x8xf32>
  linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d1, d0)>, #id], iterator_types = ["parallel", "parallel"]}
      ins(%t : memref<8x8xf32>) outs(%u : memref<8x8xf32>) {
  ^bb0(%a: f32, %o: f32):
    linalg.yield %a : f32
  }
  memref.copy %u, %out : memref<8x8xf32> to memref<8x8xf32>
  memref.dealloc %t : memref<8x8xf32>
  memref.dealloc %u : memref<8x8xf32>
  return
}
