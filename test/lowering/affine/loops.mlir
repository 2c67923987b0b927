// RUN: %stage-affine %s | FileCheck %s
// RUN: %stage-affine %s | FileCheck %s --check-prefix=GONE

// The affine stage lowers linalg on memrefs to affine loop nests (one nest per
// op, invariants hoisted; no tiling yet: that is the tile stage, after
// vectorization).

// GONE-NOT: linalg.
// GONE-NOT: step

// CHECK-LABEL: func.func @scale_rows(
// CHECK-SAME:    %[[X:[^:]*]]: memref<16x32xf32>, %[[S:[^:]*]]: memref<16xf32>, %[[Y:[^:]*]]: memref<16x32xf32>
// The row scale does not depend on %j: loop-invariant code motion hoists it.
// CHECK:         affine.for %[[I:.*]] = 0 to 16 {
// CHECK-NEXT:      %[[B:.*]] = affine.load %[[S]][%[[I]]]
// CHECK-NEXT:      affine.for %[[J:.*]] = 0 to 32 {
// CHECK-NEXT:        %[[A:.*]] = affine.load %[[X]][%[[I]], %[[J]]]
// CHECK-NEXT:        %[[P:.*]] = arith.mulf %[[A]], %[[B]] : f32
// CHECK-NEXT:        affine.store %[[P]], %[[Y]][%[[I]], %[[J]]]
#row = affine_map<(d0, d1) -> (d0, d1)>
#col = affine_map<(d0, d1) -> (d0)>
func.func @scale_rows(%x: memref<16x32xf32>, %s: memref<16xf32>, %y: memref<16x32xf32>) {
  linalg.generic {indexing_maps = [#row, #col, #row], iterator_types = ["parallel", "parallel"]}
      ins(%x, %s : memref<16x32xf32>, memref<16xf32>) outs(%y : memref<16x32xf32>) {
  ^bb0(%a: f32, %b: f32, %out: f32):
    %p = arith.mulf %a, %b : f32
    linalg.yield %p : f32
  }
  return
}
