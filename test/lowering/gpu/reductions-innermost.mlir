// RUN: %PYTHON -m twintrack.compiler.passes reductions-innermost %s | FileCheck %s

// A keepdim sum over the middle dim of a 3-D tensor: the reduction (d1)
// moves after both parallel dims, so the parallel loops nest outside its
// loop. The input's map reads the same elements (old d2 is new d1), the
// body's linalg.index follows its dim.
// CHECK: #[[IN:.*]] = affine_map<(d0, d1, d2) -> (d0, d2, d1)>
// CHECK: #[[OUT:.*]] = affine_map<(d0, d1, d2) -> (d0, d1)>
// CHECK-LABEL: func.func @middle(
// CHECK:         linalg.generic {indexing_maps = [#[[IN]], #[[OUT]]], iterator_types = ["parallel", "parallel", "reduction"]}
// CHECK:           linalg.index 2 : index
func.func @middle(%x: memref<4x8x16xf32>, %y: memref<4x16xf32>) {
  linalg.generic {indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d1, d2)>, affine_map<(d0, d1, d2) -> (d0, d2)>],
                  iterator_types = ["parallel", "reduction", "parallel"]}
      ins(%x : memref<4x8x16xf32>) outs(%y : memref<4x16xf32>) {
  ^bb0(%in: f32, %acc: f32):
    %i = linalg.index 1 : index
    %s = arith.addf %in, %acc : f32
    linalg.yield %s : f32
  }
  return
}

// Reductions already innermost (a row sum) and reductions over several
// dims keep their relative order; nothing else changes.
// CHECK-LABEL: func.func @rows(
// CHECK:         iterator_types = ["parallel", "reduction"]
func.func @rows(%x: memref<4x8xf32>, %y: memref<4xf32>) {
  linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0)>],
                  iterator_types = ["parallel", "reduction"]}
      ins(%x : memref<4x8xf32>) outs(%y : memref<4xf32>) {
  ^bb0(%in: f32, %acc: f32):
    %s = arith.addf %in, %acc : f32
    linalg.yield %s : f32
  }
  return
}

// CHECK-LABEL: func.func @two_reductions(
// CHECK:         linalg.generic {indexing_maps = [#{{.*}}, #{{.*}}], iterator_types = ["parallel", "reduction", "reduction"]}
func.func @two_reductions(%x: memref<4x8x16xf32>, %y: memref<8xf32>) {
  linalg.generic {indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d1, d2)>, affine_map<(d0, d1, d2) -> (d1)>],
                  iterator_types = ["reduction", "parallel", "reduction"]}
      ins(%x : memref<4x8x16xf32>) outs(%y : memref<8xf32>) {
  ^bb0(%in: f32, %acc: f32):
    %s = arith.addf %in, %acc : f32
    linalg.yield %s : f32
  }
  return
}
