// RUN: %PYTHON -m twintrack.compiler.passes gpu-row-kernels %s | FileCheck %s

// A row-wise dispatch (its ops tagged "reduction_rows_N" by
// twintrack-dissolve-dispatches) becomes one gpu.launch with a block per row.
// Softmax, 8 rows of 512: 128 threads, each loading one 16-byte vector of its
// row once; the max and the sum are gpu.all_reduce'd and stay in registers
// (their buffers go), and the division (div.full.f32) stores 16-byte vectors.
// The vectors carry their alignment: without it NVPTX splits them into
// scalar accesses.
#row2 = affine_map<(d0, d1) -> (d0, d1)>
#row1 = affine_map<(d0, d1) -> (d0)>
// CHECK-LABEL: func.func @softmax(
// CHECK-SAME:    %[[X:.*]]: memref<8x512xf32>, %[[Y:.*]]: memref<8x512xf32>)
// CHECK-NOT:     memref.alloc
// CHECK:         gpu.launch blocks(%[[ROW:.*]], %{{.*}}, %{{.*}}) in (%{{.*}} = %c8, %{{.*}} = %c1, %{{.*}} = %c1) threads({{.*}}) in (%{{.*}} = %c128, {{.*}}) module(@forward_row_kernel_0)
// CHECK-COUNT-1:   vector.load %[[X]][%[[ROW]], %{{.*}}] {alignment = 16 : i64} : memref<8x512xf32>, vector<4xf32>
// CHECK-NOT:       vector.load
// CHECK:           gpu.all_reduce maximumf %{{.*}} uniform
// CHECK-NEXT:      } {twintrack.kernel_path = "row-wise 8x512/128"}
// CHECK:           math.exp
// CHECK:           gpu.all_reduce add
// CHECK:           llvm.inline_asm "div.full.f32 $0, $1, $2;", "=f,f,f"
// CHECK-NOT:       arith.divf
// CHECK:           vector.store %{{.*}}, %[[Y]][%[[ROW]], %{{.*}}] {alignment = 16 : i64, {{.*}}: memref<8x512xf32>, vector<4xf32>
// CHECK:           gpu.terminator
// CHECK-NOT:     linalg.
// CHECK:         return
func.func @softmax(%x: memref<8x512xf32>, %y: memref<8x512xf32>) {
  %ninf = arith.constant 0xFF800000 : f32
  %zero = arith.constant 0.0 : f32
  %max = memref.alloc() : memref<8xf32>
  %sum = memref.alloc() : memref<8xf32>
  linalg.fill {twintrack.dispatch = "reduction_rows_0", twintrack.dispatch_kind = #twintrack.dispatch_kind<reduction_rows>} ins(%ninf : f32) outs(%max : memref<8xf32>)
  linalg.generic {indexing_maps = [#row2, #row1], iterator_types = ["parallel", "reduction"]}
      ins(%x : memref<8x512xf32>) outs(%max : memref<8xf32>) attrs = {twintrack.dispatch = "reduction_rows_0", twintrack.dispatch_kind = #twintrack.dispatch_kind<reduction_rows>} {
  ^bb0(%v: f32, %m: f32):
    %r = arith.maximumf %v, %m : f32
    linalg.yield %r : f32
  }
  linalg.fill {twintrack.dispatch = "reduction_rows_0", twintrack.dispatch_kind = #twintrack.dispatch_kind<reduction_rows>} ins(%zero : f32) outs(%sum : memref<8xf32>)
  linalg.generic {indexing_maps = [#row2, #row1, #row1], iterator_types = ["parallel", "reduction"]}
      ins(%x, %max : memref<8x512xf32>, memref<8xf32>) outs(%sum : memref<8xf32>) attrs = {twintrack.dispatch = "reduction_rows_0", twintrack.dispatch_kind = #twintrack.dispatch_kind<reduction_rows>} {
  ^bb0(%v: f32, %m: f32, %s: f32):
    %d = arith.subf %v, %m : f32
    %e = math.exp %d : f32
    %r = arith.addf %e, %s : f32
    linalg.yield %r : f32
  }
  linalg.generic {indexing_maps = [#row2, #row1, #row1, #row2], iterator_types = ["parallel", "parallel"]}
      ins(%x, %max, %sum : memref<8x512xf32>, memref<8xf32>, memref<8xf32>) outs(%y : memref<8x512xf32>) attrs = {twintrack.dispatch = "reduction_rows_0", twintrack.dispatch_kind = #twintrack.dispatch_kind<reduction_rows>} {
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
  linalg.fill {twintrack.dispatch = "reduction_rows_1", twintrack.dispatch_kind = #twintrack.dispatch_kind<reduction_rows>} ins(%zero : f32) outs(%out : memref<6xf32>)
  linalg.generic {indexing_maps = [#row2, #row1], iterator_types = ["parallel", "reduction"]}
      ins(%x : memref<6x100xf32>) outs(%out : memref<6xf32>) attrs = {twintrack.dispatch = "reduction_rows_1", twintrack.dispatch_kind = #twintrack.dispatch_kind<reduction_rows>} {
  ^bb0(%v: f32, %s: f32):
    %r = arith.addf %v, %s : f32
    linalg.yield %r : f32
  }
  return
}

// Many short rows (8192 rows of 60: 15 vectors, more rows than the GPU
// holds blocks at once) pack 16 rows into a block of 256 threads, each row
// a group of 16 lanes: row = block * 16 + thread / 16. Each group sums by
// xor shuffles among its own 16 lanes (offsets 1 to 8), no block-wide
// all_reduce, and its first lane stores the row's sum.
// CHECK-LABEL: func.func @short_row_sums(
// CHECK-SAME:    %[[IN:.*]]: memref<8192x60xf32>, %[[OUT:.*]]: memref<8192xf32>)
// CHECK:         gpu.launch blocks(%[[BLOCK:.*]], %{{.*}}, %{{.*}}) in (%{{.*}} = %c512, %{{.*}} = %c1, %{{.*}} = %c1) threads(%[[T:.*]], %{{.*}}, %{{.*}}) in (%{{.*}} = %c256,
// CHECK:           %[[FIRST:.*]] = arith.muli %[[BLOCK]], %c16
// CHECK:           %[[GROUP:.*]] = arith.divui %[[T]], %c16
// CHECK:           %[[ROW:.*]] = arith.addi %[[FIRST]], %[[GROUP]]
// CHECK:           %[[LANE:.*]] = arith.remui %[[T]], %c16
// CHECK:           vector.load %[[IN]][%[[ROW]], %{{.*}}] {alignment = 16 : i64} : memref<8192x60xf32>, vector<4xf32>
// CHECK-NOT:       gpu.all_reduce
// CHECK:           gpu.shuffle xor %{{.*}}, %c1_i32, %c32_i32 : f32
// CHECK:           gpu.shuffle xor %{{.*}}, %c2_i32, %c32_i32 : f32
// CHECK:           gpu.shuffle xor %{{.*}}, %c4_i32, %c32_i32 : f32
// CHECK:           gpu.shuffle xor %{{.*}}, %c8_i32, %c32_i32 : f32
// CHECK-NOT:       gpu.shuffle
// CHECK:           %[[LEADER:.*]] = arith.cmpi eq, %[[LANE]], %c0
// CHECK:           scf.if %[[LEADER]]
// CHECK-NEXT:        memref.store %{{.*}}, %[[OUT]][%[[ROW]]]
func.func @short_row_sums(%x: memref<8192x60xf32>, %out: memref<8192xf32>) {
  %zero = arith.constant 0.0 : f32
  linalg.fill {twintrack.dispatch = "reduction_rows_1", twintrack.dispatch_kind = #twintrack.dispatch_kind<reduction_rows>} ins(%zero : f32) outs(%out : memref<8192xf32>)
  linalg.generic {indexing_maps = [#row2, #row1], iterator_types = ["parallel", "reduction"]}
      ins(%x : memref<8192x60xf32>) outs(%out : memref<8192xf32>) attrs = {twintrack.dispatch = "reduction_rows_1", twintrack.dispatch_kind = #twintrack.dispatch_kind<reduction_rows>} {
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
      ins(%x : memref<6x100xf32>) outs(%out : memref<6xf32>) attrs = {twintrack.dispatch = "reduction_rows_3", twintrack.dispatch_kind = #twintrack.dispatch_kind<reduction_rows>} {
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
  linalg.fill {twintrack.dispatch = "reduction_rows_2", twintrack.dispatch_kind = #twintrack.dispatch_kind<reduction_rows>} ins(%zero : f32) outs(%out : memref<6xf32>)
  linalg.fill ins(%zero : f32) outs(%other : memref<6xf32>)
  linalg.generic {indexing_maps = [#row2, #row1], iterator_types = ["parallel", "reduction"]}
      ins(%x : memref<6x100xf32>) outs(%out : memref<6xf32>) attrs = {twintrack.dispatch = "reduction_rows_2", twintrack.dispatch_kind = #twintrack.dispatch_kind<reduction_rows>} {
  ^bb0(%v: f32, %s: f32):
    %r = arith.addf %v, %s : f32
    linalg.yield %r : f32
  }
  return
}

// Gathers (an embedding lookup before a layernorm): the token's row of the
// table is loaded element by element, at the row the token id names and the
// lane's column. Elementwise fusion left the looked-up values as a second
// result of the sum, written to the output that the centering overwrites
// before anything reads it: that result is not stored, and the output is
// stored once.
#ids = affine_map<(d0, d1, d2) -> (d0, d1)>
#id3 = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
// CHECK-LABEL: func.func @embedding_rows(
// CHECK-SAME:    %[[IDS:.*]]: memref<2x16xi64>, %[[WORDS:.*]]: memref<128x32xf32>, %[[OUT:.*]]: memref<2x16x32xf32>)
// CHECK-NOT:     memref.alloc
// CHECK:         gpu.launch blocks({{.*}}) in (%{{.*}} = %c32, %{{.*}} = %c1, %{{.*}} = %c1)
// CHECK-NOT:       store
// CHECK:           %[[ID:.*]] = memref.load %[[IDS]][
// CHECK:           %[[ROW:.*]] = arith.index_cast %[[ID]] : i64 to index
// CHECK:           memref.load %[[WORDS]][%[[ROW]], %{{.*}}] : memref<128x32xf32>
// CHECK:           gpu.all_reduce add
// CHECK-NOT:       store
// CHECK:           memref.load %[[WORDS]]
// CHECK:           arith.subf
// CHECK:           vector.store %{{.*}}, %[[OUT]]
// CHECK-NOT:       store
// CHECK:           gpu.terminator
// CHECK-NOT:     linalg.
func.func @embedding_rows(%ids: memref<2x16xi64>, %words: memref<128x32xf32>, %out: memref<2x16x32xf32>) {
  %zero = arith.constant 0.0 : f32
  %sum = memref.alloc() : memref<2x16xf32>
  linalg.fill {twintrack.dispatch = "reduction_rows_4", twintrack.dispatch_kind = #twintrack.dispatch_kind<reduction_rows>} ins(%zero : f32) outs(%sum : memref<2x16xf32>)
  linalg.generic {indexing_maps = [#ids, #id3, #ids], iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%ids : memref<2x16xi64>) outs(%out, %sum : memref<2x16x32xf32>, memref<2x16xf32>)
      attrs = {twintrack.dispatch = "reduction_rows_4", twintrack.dispatch_kind = #twintrack.dispatch_kind<reduction_rows>} {
  ^bb0(%id: i64, %o: f32, %s: f32):
    %row = arith.index_cast %id : i64 to index
    %column = linalg.index 2 : index
    %v = memref.load %words[%row, %column] : memref<128x32xf32>
    %r = arith.addf %v, %s : f32
    linalg.yield %v, %r : f32, f32
  }
  linalg.generic {indexing_maps = [#ids, #ids, #id3], iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%ids, %sum : memref<2x16xi64>, memref<2x16xf32>) outs(%out : memref<2x16x32xf32>)
      attrs = {twintrack.dispatch = "reduction_rows_4", twintrack.dispatch_kind = #twintrack.dispatch_kind<reduction_rows>} {
  ^bb0(%id: i64, %s: f32, %o: f32):
    %row = arith.index_cast %id : i64 to index
    %column = linalg.index 2 : index
    %v = memref.load %words[%row, %column] : memref<128x32xf32>
    %r = arith.subf %v, %s : f32
    linalg.yield %r : f32
  }
  memref.dealloc %sum : memref<2x16xf32>
  return
}

// Negative: a gather from a buffer the group writes (the row sums, at a
// partner's row: another block computes it) leaves the group to the
// generic pipeline.
// CHECK-LABEL: func.func @gather_from_written(
// CHECK-NOT:     gpu.launch
// CHECK:         linalg.generic
func.func @gather_from_written(%x: memref<6x100xf32>, %partner: memref<6xi64>, %sums: memref<6xf32>,
                               %out: memref<6x100xf32>) {
  %zero = arith.constant 0.0 : f32
  linalg.fill {twintrack.dispatch = "reduction_rows_5", twintrack.dispatch_kind = #twintrack.dispatch_kind<reduction_rows>} ins(%zero : f32) outs(%sums : memref<6xf32>)
  linalg.generic {indexing_maps = [#row2, #row1], iterator_types = ["parallel", "reduction"]}
      ins(%x : memref<6x100xf32>) outs(%sums : memref<6xf32>) attrs = {twintrack.dispatch = "reduction_rows_5", twintrack.dispatch_kind = #twintrack.dispatch_kind<reduction_rows>} {
  ^bb0(%v: f32, %s: f32):
    %r = arith.addf %v, %s : f32
    linalg.yield %r : f32
  }
  linalg.generic {indexing_maps = [#row2, #row1, #row2], iterator_types = ["parallel", "parallel"]}
      ins(%x, %partner : memref<6x100xf32>, memref<6xi64>) outs(%out : memref<6x100xf32>)
      attrs = {twintrack.dispatch = "reduction_rows_5", twintrack.dispatch_kind = #twintrack.dispatch_kind<reduction_rows>} {
  ^bb0(%v: f32, %p: i64, %o: f32):
    %row = arith.index_cast %p : i64 to index
    %other = memref.load %sums[%row] : memref<6xf32>
    %r = arith.subf %v, %other : f32
    linalg.yield %r : f32
  }
  return
}

// A step reading an earlier elementwise step's output as it was written
// takes the values from registers (LLaMA's lookup, which elementwise fusion
// cannot fold into the RMSNorm's sum of squares: the sum's loops would lose
// the column's extent): no store, no barrier between them. The output is
// stored once, by the step that overwrites it.
// CHECK-LABEL: func.func @lookup_then_norm(
// CHECK-SAME:    %{{.*}}: memref<2x16xi64>, %[[WORDS:.*]]: memref<128x32xf32>, %[[OUT:.*]]: memref<2x16x32xf32>)
// CHECK:         gpu.launch
// CHECK-NOT:       store
// CHECK-NOT:       gpu.barrier
// CHECK:           %[[V:.*]] = memref.load %[[WORDS]]
// CHECK:           arith.mulf %[[V]], %[[V]]
// CHECK:           gpu.all_reduce add
// CHECK-NOT:       gpu.barrier
// CHECK:           vector.store %{{.*}}, %[[OUT]]
// CHECK-NOT:       store
// CHECK-NOT:       gpu.barrier
// CHECK:           gpu.terminator
func.func @lookup_then_norm(%ids: memref<2x16xi64>, %words: memref<128x32xf32>, %out: memref<2x16x32xf32>) {
  %zero = arith.constant 0.0 : f32
  %squares = memref.alloc() : memref<2x16xf32>
  linalg.generic {indexing_maps = [#ids, #id3], iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%ids : memref<2x16xi64>) outs(%out : memref<2x16x32xf32>) attrs = {twintrack.dispatch = "reduction_rows_6", twintrack.dispatch_kind = #twintrack.dispatch_kind<reduction_rows>} {
  ^bb0(%id: i64, %o: f32):
    %row = arith.index_cast %id : i64 to index
    %column = linalg.index 2 : index
    %v = memref.load %words[%row, %column] : memref<128x32xf32>
    linalg.yield %v : f32
  }
  linalg.fill {twintrack.dispatch = "reduction_rows_6", twintrack.dispatch_kind = #twintrack.dispatch_kind<reduction_rows>} ins(%zero : f32) outs(%squares : memref<2x16xf32>)
  linalg.generic {indexing_maps = [#id3, #ids], iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%out : memref<2x16x32xf32>) outs(%squares : memref<2x16xf32>) attrs = {twintrack.dispatch = "reduction_rows_6", twintrack.dispatch_kind = #twintrack.dispatch_kind<reduction_rows>} {
  ^bb0(%v: f32, %s: f32):
    %p = arith.mulf %v, %v : f32
    %r = arith.addf %p, %s : f32
    linalg.yield %r : f32
  }
  linalg.generic {indexing_maps = [#ids, #ids, #id3], iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%ids, %squares : memref<2x16xi64>, memref<2x16xf32>) outs(%out : memref<2x16x32xf32>)
      attrs = {twintrack.dispatch = "reduction_rows_6", twintrack.dispatch_kind = #twintrack.dispatch_kind<reduction_rows>} {
  ^bb0(%id: i64, %s: f32, %o: f32):
    %row = arith.index_cast %id : i64 to index
    %column = linalg.index 2 : index
    %v = memref.load %words[%row, %column] : memref<128x32xf32>
    %r = arith.mulf %v, %s : f32
    linalg.yield %r : f32
  }
  memref.dealloc %squares : memref<2x16xf32>
  return
}

// An elementwise dispatch with rows enough to fill the GPU (132 or more, of
// 128 or more elements) runs as a row kernel without reductions: 16-byte
// loads and stores, a block per row. A smaller one keeps the generic
// pipeline's flat grid.
// CHECK-LABEL: func.func @elementwise_rows(
// CHECK:         gpu.launch blocks(%[[ROW:.*]], %{{.*}}, %{{.*}}) in (%{{.*}} = %c256, %{{.*}} = %c1, %{{.*}} = %c1) threads({{.*}}) in (%{{.*}} = %c128,
// CHECK:           vector.load %{{.*}}[%[[ROW]], %{{.*}}] {alignment = 16 : i64} : memref<256x512xf32>, vector<4xf32>
// CHECK:           math.tanh
// CHECK:           vector.store %{{.*}}, %{{.*}}[%[[ROW]], %{{.*}}] {alignment = 16 : i64, twintrack.kernel_path = "row-wise 256x512/128"} : memref<256x512xf32>, vector<4xf32>
// CHECK-NOT:     linalg.generic
// CHECK:         return
func.func @elementwise_rows(%x: memref<256x512xf32>, %y: memref<256x512xf32>) {
  linalg.generic {indexing_maps = [#row2, #row2], iterator_types = ["parallel", "parallel"]}
      ins(%x : memref<256x512xf32>) outs(%y : memref<256x512xf32>) attrs = {twintrack.dispatch = "elementwise_0", twintrack.dispatch_kind = #twintrack.dispatch_kind<elementwise>} {
  ^bb0(%v: f32, %o: f32):
    %r = math.tanh %v : f32
    linalg.yield %r : f32
  }
  return
}

// CHECK-LABEL: func.func @elementwise_few_rows(
// CHECK-NOT:     gpu.launch
// CHECK:         linalg.generic
func.func @elementwise_few_rows(%x: memref<8x512xf32>, %y: memref<8x512xf32>) {
  linalg.generic {indexing_maps = [#row2, #row2], iterator_types = ["parallel", "parallel"]}
      ins(%x : memref<8x512xf32>) outs(%y : memref<8x512xf32>) attrs = {twintrack.dispatch = "elementwise_0", twintrack.dispatch_kind = #twintrack.dispatch_kind<elementwise>} {
  ^bb0(%v: f32, %o: f32):
    %r = math.tanh %v : f32
    linalg.yield %r : f32
  }
  return
}


// Loads are issued before the stores that would hold them back (LLVM may
// not move a load above a store to a buffer that might alias it). The
// elementwise zoo's shape, 132 rows of 4096: 256 threads of 4 chunks each
// load their row's and the column vector's 8 vectors, then compute and
// store 4. A division by a constant stays arith.divf.
#col = affine_map<(d0, d1) -> (d1)>
// CHECK-LABEL: func.func @loads_before_stores(
// CHECK:         gpu.launch {{.*}} threads({{.*}}) in (%{{.*}} = %c256,
// CHECK-COUNT-8:   vector.load {{.*}} {alignment = 16 : i64} : memref<{{132x4096|4096}}xf32>, vector<4xf32>
// CHECK-NOT:       vector.load
// CHECK:           arith.divf %{{.*}}, %{{.*}} : f32
// CHECK-NOT:       vector.load
// CHECK-COUNT-4:   vector.store
// CHECK-NOT:       vector.load
// CHECK:           gpu.terminator
func.func @loads_before_stores(%x: memref<132x4096xf32>, %scale: memref<4096xf32>, %y: memref<132x4096xf32>) {
  linalg.generic {indexing_maps = [#row2, #col, #row2], iterator_types = ["parallel", "parallel"]}
      ins(%x, %scale : memref<132x4096xf32>, memref<4096xf32>) outs(%y : memref<132x4096xf32>)
      attrs = {twintrack.dispatch = "elementwise_1", twintrack.dispatch_kind = #twintrack.dispatch_kind<elementwise>} {
  ^bb0(%v: f32, %s: f32, %o: f32):
    %two = arith.constant 2.0 : f32
    %m = arith.mulf %v, %s : f32
    %r = arith.divf %m, %two : f32
    linalg.yield %r : f32
  }
  return
}

// A later step's row input that the kernel does not write is loaded at the
// kernel's start, before the reduction (its latency overlaps the row's);
// one that views the output's memory (a subview of it) waits for its step.
// Column vectors (layernorm's weight) are loaded by their step, all its
// chunks before its first store.
// CHECK-LABEL: func.func @row_inputs_first(
// CHECK-SAME:    %[[X:[^:]*]]: memref<8x512xf32>, %[[R:[^:]*]]: memref<8x512xf32>, %[[W:[^:]*]]: memref<512xf32>,
// CHECK:         gpu.launch
// CHECK:           vector.load %[[X]]
// CHECK:           vector.load %[[R]]
// CHECK:           gpu.all_reduce add
// CHECK:           vector.load %[[W]]
// CHECK:           vector.store
// CHECK:         gpu.launch
// CHECK:           vector.load %[[X]]
// CHECK-NOT:       vector.load
// CHECK:           gpu.all_reduce add
// CHECK:           vector.load %{{.*}} : memref<8x512xf32, strided<[512, 1]>>
// CHECK:           vector.store
func.func @row_inputs_first(%x: memref<8x512xf32>, %r: memref<8x512xf32>, %w: memref<512xf32>,
                            %y: memref<8x512xf32>) {
  %zero = arith.constant 0.0 : f32
  %sum = memref.alloc() : memref<8xf32>
  linalg.fill {twintrack.dispatch = "reduction_rows_7", twintrack.dispatch_kind = #twintrack.dispatch_kind<reduction_rows>} ins(%zero : f32) outs(%sum : memref<8xf32>)
  linalg.generic {indexing_maps = [#row2, #row1], iterator_types = ["parallel", "reduction"]}
      ins(%x : memref<8x512xf32>) outs(%sum : memref<8xf32>) attrs = {twintrack.dispatch = "reduction_rows_7", twintrack.dispatch_kind = #twintrack.dispatch_kind<reduction_rows>} {
  ^bb0(%v: f32, %s: f32):
    %a = arith.addf %v, %s : f32
    linalg.yield %a : f32
  }
  linalg.generic {indexing_maps = [#row2, #row1, #row2, #col, #row2], iterator_types = ["parallel", "parallel"]}
      ins(%x, %sum, %r, %w : memref<8x512xf32>, memref<8xf32>, memref<8x512xf32>, memref<512xf32>)
      outs(%y : memref<8x512xf32>) attrs = {twintrack.dispatch = "reduction_rows_7", twintrack.dispatch_kind = #twintrack.dispatch_kind<reduction_rows>} {
  ^bb0(%v: f32, %s: f32, %rv: f32, %wv: f32, %o: f32):
    %d = arith.subf %v, %s : f32
    %m = arith.mulf %d, %wv : f32
    %a = arith.addf %m, %rv : f32
    linalg.yield %a : f32
  }
  memref.dealloc %sum : memref<8xf32>
  %view = memref.subview %y[0, 0] [8, 512] [1, 1] : memref<8x512xf32> to memref<8x512xf32, strided<[512, 1]>>
  %sum2 = memref.alloc() : memref<8xf32>
  linalg.fill {twintrack.dispatch = "reduction_rows_8", twintrack.dispatch_kind = #twintrack.dispatch_kind<reduction_rows>} ins(%zero : f32) outs(%sum2 : memref<8xf32>)
  linalg.generic {indexing_maps = [#row2, #row1], iterator_types = ["parallel", "reduction"]}
      ins(%x : memref<8x512xf32>) outs(%sum2 : memref<8xf32>) attrs = {twintrack.dispatch = "reduction_rows_8", twintrack.dispatch_kind = #twintrack.dispatch_kind<reduction_rows>} {
  ^bb0(%v: f32, %s: f32):
    %a = arith.addf %v, %s : f32
    linalg.yield %a : f32
  }
  linalg.generic {indexing_maps = [#row2, #row1, #row2, #row2], iterator_types = ["parallel", "parallel"]}
      ins(%x, %sum2, %view : memref<8x512xf32>, memref<8xf32>, memref<8x512xf32, strided<[512, 1]>>)
      outs(%y : memref<8x512xf32>) attrs = {twintrack.dispatch = "reduction_rows_8", twintrack.dispatch_kind = #twintrack.dispatch_kind<reduction_rows>} {
  ^bb0(%v: f32, %s: f32, %rv: f32, %o: f32):
    %d = arith.subf %v, %s : f32
    %a = arith.addf %d, %rv : f32
    linalg.yield %a : f32
  }
  memref.dealloc %sum2 : memref<8xf32>
  return
}

// A half-precision row max (an fp16 absmax): each thread's partial is f16,
// but the shuffles gpu.all_reduce lowers to move 32-bit words
// (nvvm.shfl.sync takes nothing narrower), so it travels as f32 (exact for
// max) and comes back as f16 for the combination with the fill and the store.
// CHECK-LABEL: func.func @half_row_max(
// CHECK-SAME:    %{{.*}}: memref<8x512xf16>, %[[MAX:.*]]: memref<8xf16>)
// CHECK:         gpu.launch
// CHECK:           arith.maximumf %{{.*}} : f16
// CHECK:           %[[W:.*]] = arith.extf %{{.*}} : f16 to f32
// CHECK-NEXT:      %[[R:.*]] = gpu.all_reduce maximumf %[[W]] uniform
// CHECK-NEXT:      } {twintrack.kernel_path = "row-wise 8x512/128"} : (f32) -> f32
// CHECK-NEXT:      %[[N:.*]] = arith.truncf %[[R]] : f32 to f16
// CHECK-NEXT:      %[[M:.*]] = arith.maximumf %{{.*}}, %[[N]] : f16
// CHECK:           memref.store %[[M]], %[[MAX]]
// CHECK-NOT:       gpu.all_reduce
// CHECK:           gpu.terminator
func.func @half_row_max(%x: memref<8x512xf16>, %out: memref<8xf16>) {
  %ninf = arith.constant 0xFC00 : f16
  linalg.fill {twintrack.dispatch = "reduction_rows_9", twintrack.dispatch_kind = #twintrack.dispatch_kind<reduction_rows>} ins(%ninf : f16) outs(%out : memref<8xf16>)
  linalg.generic {indexing_maps = [#row2, #row1], iterator_types = ["parallel", "reduction"]}
      ins(%x : memref<8x512xf16>) outs(%out : memref<8xf16>) attrs = {twintrack.dispatch = "reduction_rows_9", twintrack.dispatch_kind = #twintrack.dispatch_kind<reduction_rows>} {
  ^bb0(%v: f16, %m: f16):
    %r = arith.maximumf %v, %m : f16
    linalg.yield %r : f16
  }
  return
}

// A bf16 row sum (should the frontend leave one in bf16) travels as f32 too.
// CHECK-LABEL: func.func @bf16_row_sum(
// CHECK:         gpu.launch
// CHECK:           %[[W:.*]] = arith.extf %{{.*}} : bf16 to f32
// CHECK-NEXT:      %[[R:.*]] = gpu.all_reduce add %[[W]] uniform
// CHECK-NEXT:      } {{.*}} : (f32) -> f32
// CHECK-NEXT:      arith.truncf %[[R]] : f32 to bf16
func.func @bf16_row_sum(%x: memref<8x512xbf16>, %out: memref<8xbf16>) {
  %zero = arith.constant 0.0 : bf16
  linalg.fill {twintrack.dispatch = "reduction_rows_10", twintrack.dispatch_kind = #twintrack.dispatch_kind<reduction_rows>} ins(%zero : bf16) outs(%out : memref<8xbf16>)
  linalg.generic {indexing_maps = [#row2, #row1], iterator_types = ["parallel", "reduction"]}
      ins(%x : memref<8x512xbf16>) outs(%out : memref<8xbf16>) attrs = {twintrack.dispatch = "reduction_rows_10", twintrack.dispatch_kind = #twintrack.dispatch_kind<reduction_rows>} {
  ^bb0(%v: bf16, %s: bf16):
    %r = arith.addf %v, %s : bf16
    linalg.yield %r : bf16
  }
  return
}
