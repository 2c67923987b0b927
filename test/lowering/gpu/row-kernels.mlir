// RUN: %stage-row-kernels %s | FileCheck %s

// A row-wise dispatch (its ops tagged "reduction_rows_N" by
// twintrack-dissolve-dispatches) becomes one gpu.launch with a block per row.
// Softmax, 8 rows of 512: 128 threads, each loading one 16-byte vector of its
// row once; the max and the sum are gpu.all_reduce'd and stay in registers
// (their buffers go), and the division stores 16-byte vectors.
#row2 = affine_map<(d0, d1) -> (d0, d1)>
#row1 = affine_map<(d0, d1) -> (d0)>
// CHECK-LABEL: func.func @softmax(
// CHECK-SAME:    %[[X:.*]]: memref<8x512xf32>, %[[Y:.*]]: memref<8x512xf32>)
// CHECK-NOT:     memref.alloc
// CHECK:         gpu.launch blocks(%[[ROW:.*]], %{{.*}}, %{{.*}}) in (%{{.*}} = %c8, %{{.*}} = %c1, %{{.*}} = %c1) threads({{.*}}) in (%{{.*}} = %c128, {{.*}}) module(@forward_row_kernel_0)
// CHECK-COUNT-1:   vector.load %[[X]][%[[ROW]], %{{.*}}] : memref<8x512xf32>, vector<4xf32>
// CHECK-NOT:       vector.load
// CHECK:           gpu.all_reduce maximumf %{{.*}} uniform
// CHECK-NEXT:      } {twintrack.kernel_path = "row-wise 8x512/128"}
// CHECK:           math.exp
// CHECK:           gpu.all_reduce add
// CHECK:           arith.divf
// CHECK:           vector.store %{{.*}}, %[[Y]][%[[ROW]], %{{.*}}] : memref<8x512xf32>, vector<4xf32>
// CHECK:           gpu.terminator
// CHECK-NOT:     linalg.
// CHECK:         return
func.func @softmax(%x: memref<8x512xf32>, %y: memref<8x512xf32>) {
  %ninf = arith.constant 0xFF800000 : f32
  %zero = arith.constant 0.0 : f32
  %max = memref.alloc() : memref<8xf32>
  %sum = memref.alloc() : memref<8xf32>
  linalg.fill {twintrack.dispatch = "reduction_rows_0"} ins(%ninf : f32) outs(%max : memref<8xf32>)
  linalg.generic {indexing_maps = [#row2, #row1], iterator_types = ["parallel", "reduction"]}
      ins(%x : memref<8x512xf32>) outs(%max : memref<8xf32>) attrs = {twintrack.dispatch = "reduction_rows_0"} {
  ^bb0(%v: f32, %m: f32):
    %r = arith.maximumf %v, %m : f32
    linalg.yield %r : f32
  }
  linalg.fill {twintrack.dispatch = "reduction_rows_0"} ins(%zero : f32) outs(%sum : memref<8xf32>)
  linalg.generic {indexing_maps = [#row2, #row1, #row1], iterator_types = ["parallel", "reduction"]}
      ins(%x, %max : memref<8x512xf32>, memref<8xf32>) outs(%sum : memref<8xf32>) attrs = {twintrack.dispatch = "reduction_rows_0"} {
  ^bb0(%v: f32, %m: f32, %s: f32):
    %d = arith.subf %v, %m : f32
    %e = math.exp %d : f32
    %r = arith.addf %e, %s : f32
    linalg.yield %r : f32
  }
  linalg.generic {indexing_maps = [#row2, #row1, #row1, #row2], iterator_types = ["parallel", "parallel"]}
      ins(%x, %max, %sum : memref<8x512xf32>, memref<8xf32>, memref<8xf32>) outs(%y : memref<8x512xf32>) attrs = {twintrack.dispatch = "reduction_rows_0"} {
  ^bb0(%v: f32, %m: f32, %s: f32, %o: f32):
    %d = arith.subf %v, %m : f32
    %e = math.exp %d : f32
    %r = arith.divf %e, %s : f32
    linalg.yield %r : f32
  }
  memref.dealloc %max : memref<8xf32>
  memref.dealloc %sum : memref<8xf32>
  return
}

// A per-row sum read after the kernel is stored by thread 0 of each block.
// A ragged row (100 elements: 25 vectors on 32 threads) clamps its loads into
// the row and masks the lanes past its end out of the sum.
// CHECK-LABEL: func.func @row_sums(
// CHECK-SAME:    %[[IN:.*]]: memref<6x100xf32>, %[[OUT:.*]]: memref<6xf32>)
// CHECK:         gpu.launch {{.*}} threads({{.*}}) in (%{{.*}} = %c32,
// CHECK:           arith.minui
// CHECK:           vector.load %[[IN]]
// CHECK:           arith.select
// CHECK:           gpu.all_reduce add
// CHECK:           scf.if
// CHECK-NEXT:        memref.store %{{.*}}, %[[OUT]]
func.func @row_sums(%x: memref<6x100xf32>, %out: memref<6xf32>) {
  %zero = arith.constant 0.0 : f32
  linalg.fill {twintrack.dispatch = "reduction_rows_1"} ins(%zero : f32) outs(%out : memref<6xf32>)
  linalg.generic {indexing_maps = [#row2, #row1], iterator_types = ["parallel", "reduction"]}
      ins(%x : memref<6x100xf32>) outs(%out : memref<6xf32>) attrs = {twintrack.dispatch = "reduction_rows_1"} {
  ^bb0(%v: f32, %s: f32):
    %r = arith.addf %v, %s : f32
    linalg.yield %r : f32
  }
  return
}

// Without a fill in the group, a reduction folds its total into the
// output's old value: loaded, combined, stored.
// CHECK-LABEL: func.func @accumulates(
// CHECK-SAME:    %{{.*}}: memref<6x100xf32>, %[[ACC:.*]]: memref<6xf32>)
// CHECK:         gpu.launch
// CHECK:           gpu.all_reduce add
// CHECK:           %[[OLD:.*]] = memref.load %[[ACC]]
// CHECK:           arith.addf %[[OLD]]
// CHECK:           memref.store %{{.*}}, %[[ACC]]
func.func @accumulates(%x: memref<6x100xf32>, %out: memref<6xf32>) {
  linalg.generic {indexing_maps = [#row2, #row1], iterator_types = ["parallel", "reduction"]}
      ins(%x : memref<6x100xf32>) outs(%out : memref<6xf32>) attrs = {twintrack.dispatch = "reduction_rows_3"} {
  ^bb0(%v: f32, %s: f32):
    %r = arith.addf %v, %s : f32
    linalg.yield %r : f32
  }
  return
}

// Negative: an untagged op between the dispatch's ops (the group is not
// contiguous) leaves them to the generic pipeline.
// CHECK-LABEL: func.func @split_group(
// CHECK-NOT:     gpu.launch
// CHECK:         linalg.generic
func.func @split_group(%x: memref<6x100xf32>, %out: memref<6xf32>, %other: memref<6xf32>) {
  %zero = arith.constant 0.0 : f32
  linalg.fill {twintrack.dispatch = "reduction_rows_2"} ins(%zero : f32) outs(%out : memref<6xf32>)
  linalg.fill ins(%zero : f32) outs(%other : memref<6xf32>)
  linalg.generic {indexing_maps = [#row2, #row1], iterator_types = ["parallel", "reduction"]}
      ins(%x : memref<6x100xf32>) outs(%out : memref<6xf32>) attrs = {twintrack.dispatch = "reduction_rows_2"} {
  ^bb0(%v: f32, %s: f32):
    %r = arith.addf %v, %s : f32
    linalg.yield %r : f32
  }
  return
}
