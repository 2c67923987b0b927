// RUN: %stage-distribute %s | FileCheck %s
// RUN: %stage-distribute %s | FileCheck %s --check-prefix=GONE

// The distribute stage (Python pass gpu-distribute) maps each top-level
// scf.parallel nest onto a grid: an outer scf.parallel over blocks (block_x)
// around an inner one over threads (thread_x). Elementwise nests are
// linearized (block * T + thread, innermost index fastest: coalesced) and
// bounds-guarded; row reductions get one block per row, a strided loop per
// thread and a gpu.all_reduce whose result thread 0 folds into the output.

// No multi-dimensional scf.parallel survives (every nest is linearized).
// GONE-NOT: scf.parallel (%{{[^)]*}}, %{{[^)]*}}) =

// (a) 32x63 = 2016 elements -> 8 blocks of 256 threads (rows of 63: no
// vector lanes, see vector-lanes.mlir).
// CHECK-LABEL: func.func @elementwise(
// CHECK-SAME:    %[[A:[a-z0-9_]+]]: memref<32x63xf32>, %[[OUT:[a-z0-9_]+]]: memref<32x63xf32>)
// CHECK:         arith.constant 63 : index
// CHECK-NEXT:    %[[LB:[a-z0-9_]+]] = arith.constant 0 : index
// CHECK-NEXT:    %[[BLOCKS:[a-z0-9_]+]] = arith.constant 8 : index
// CHECK-NEXT:    %[[ONE:[a-z0-9_]+]] = arith.constant 1 : index
// CHECK-NEXT:    scf.parallel (%[[B:[a-z0-9_]+]]) = (%[[LB]]) to (%[[BLOCKS]]) step (%[[ONE]]) {
// CHECK:           %[[THREADS:[a-z0-9_]+]] = arith.constant 256 : index
// CHECK:           scf.parallel (%[[T:[a-z0-9_]+]]) = (%{{[a-z0-9_]+}}) to (%[[THREADS]]) step
// CHECK:             %[[T256:[a-z0-9_]+]] = arith.constant 256 : index
// CHECK:             %[[BASE:[a-z0-9_]+]] = arith.muli %[[B]], %[[T256]] : index
// CHECK:             %[[LIN:[a-z0-9_]+]] = arith.addi %[[BASE]], %[[T]] : index
// CHECK:             %[[TOTAL:[a-z0-9_]+]] = arith.constant 2016 : index
// CHECK:             %[[IN:[a-z0-9_]+]] = arith.cmpi ult, %[[LIN]], %[[TOTAL]] : index
// CHECK:             scf.if %[[IN]] {
// CHECK:               %[[W1:[a-z0-9_]+]] = arith.constant 63 : index
// CHECK:               %[[J:[a-z0-9_]+]] = arith.remui %[[LIN]], %[[W1]] : index
// CHECK:               %[[W2:[a-z0-9_]+]] = arith.constant 63 : index
// CHECK:               %[[I:[a-z0-9_]+]] = arith.divui %[[LIN]], %[[W2]] : index
// CHECK:               %[[X:[a-z0-9_]+]] = memref.load %[[A]][%[[I]], %[[J]]] : memref<32x63xf32>
// CHECK:               %[[Y:[a-z0-9_]+]] = math.exp %[[X]] : f32
// CHECK:               memref.store %[[Y]], %[[OUT]][%[[I]], %[[J]]] : memref<32x63xf32>
// CHECK-NEXT:        }
// CHECK-NEXT:        scf.reduce
// CHECK-NEXT:      } {mapping = [#gpu.loop_dim_map<processor = thread_x,
// CHECK-NEXT:      scf.reduce
// CHECK-NEXT:    } {mapping = [#gpu.loop_dim_map<processor = block_x,
// CHECK-NEXT:    return
func.func @elementwise(%a: memref<32x63xf32>, %out: memref<32x63xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c32 = arith.constant 32 : index
  %c63 = arith.constant 63 : index
  scf.parallel (%i, %j) = (%c0, %c0) to (%c32, %c63) step (%c1, %c1) {
    %x = memref.load %a[%i, %j] : memref<32x63xf32>
    %y = math.exp %x : f32
    memref.store %y, %out[%i, %j] : memref<32x63xf32>
    scf.reduce
  }
  return
}

// Lower bounds and steps other than 0 and 1: (1000 - 2) / 3 -> 333 iterations,
// 2 blocks of 256 threads, index = linear * 3 + 2.
// CHECK-LABEL: func.func @offset(
// CHECK-SAME:    %[[BUF:[a-z0-9_]+]]: memref<1000xf32>)
// CHECK:         arith.constant 1.000000e+00 : f32
// CHECK-NEXT:    %[[LB:[a-z0-9_]+]] = arith.constant 0 : index
// CHECK-NEXT:    %[[BLOCKS:[a-z0-9_]+]] = arith.constant 2 : index
// CHECK-NEXT:    %[[ONE:[a-z0-9_]+]] = arith.constant 1 : index
// CHECK-NEXT:    scf.parallel (%[[B:[a-z0-9_]+]]) = (%[[LB]]) to (%[[BLOCKS]]) step (%[[ONE]]) {
// CHECK:           %[[THREADS:[a-z0-9_]+]] = arith.constant 256 : index
// CHECK:           scf.parallel (%[[T:[a-z0-9_]+]]) = (%{{[a-z0-9_]+}}) to (%[[THREADS]]) step
// CHECK:             %[[LIN:[a-z0-9_]+]] = arith.addi %{{[a-z0-9_]+}}, %[[T]] : index
// CHECK:             %[[TOTAL:[a-z0-9_]+]] = arith.constant 333 : index
// CHECK:             %[[IN:[a-z0-9_]+]] = arith.cmpi ult, %[[LIN]], %[[TOTAL]] : index
// CHECK:             scf.if %[[IN]] {
// CHECK:               %[[STEP:[a-z0-9_]+]] = arith.constant 3 : index
// CHECK:               %[[SCALED:[a-z0-9_]+]] = arith.muli %[[LIN]], %[[STEP]] : index
// CHECK:               %[[LOW:[a-z0-9_]+]] = arith.constant 2 : index
// CHECK:               %[[IDX:[a-z0-9_]+]] = arith.addi %[[SCALED]], %[[LOW]] : index
// CHECK:               memref.store %{{[a-z0-9_]+}}, %[[BUF]][%[[IDX]]] : memref<1000xf32>
// CHECK:         } {mapping = [#gpu.loop_dim_map<processor = block_x,
func.func @offset(%buf: memref<1000xf32>) {
  %c2 = arith.constant 2 : index
  %c3 = arith.constant 3 : index
  %c1000 = arith.constant 1000 : index
  %cst = arith.constant 1.0 : f32
  scf.parallel (%i) = (%c2) to (%c1000) step (%c3) {
    memref.store %cst, %buf[%i] : memref<1000xf32>
    scf.reduce
  }
  return
}

// (b) A row sum (the shape of softmax's denominator): one block per row
// (32 blocks), 256 threads striding over the 1024 columns, a block-wide
// gpu.all_reduce, and only thread 0 folds the total into ACC[row].
// CHECK-LABEL: func.func @row_sum(
// CHECK-SAME:    %[[IN:[a-z0-9_]+]]: memref<32x1024xf32>, %[[ACC:[a-z0-9_]+]]: memref<32xf32>)
// CHECK:         arith.constant 1024 : index
// CHECK-NEXT:    %[[LB:[a-z0-9_]+]] = arith.constant 0 : index
// CHECK-NEXT:    %[[BLOCKS:[a-z0-9_]+]] = arith.constant 32 : index
// CHECK-NEXT:    %[[ONE:[a-z0-9_]+]] = arith.constant 1 : index
// CHECK-NEXT:    scf.parallel (%[[ROW:[a-z0-9_]+]]) = (%[[LB]]) to (%[[BLOCKS]]) step (%[[ONE]]) {
// CHECK:           %[[THREADS:[a-z0-9_]+]] = arith.constant 256 : index
// CHECK:           scf.parallel (%[[T:[a-z0-9_]+]]) = (%{{[a-z0-9_]+}}) to (%[[THREADS]]) step
// CHECK-NOT:         arith.cmpi ult
// CHECK:             %[[LEN:[a-z0-9_]+]] = arith.constant 1024 : index
// CHECK:             %[[STRIDE:[a-z0-9_]+]] = arith.constant 256 : index
// CHECK:             %[[ZERO:[a-z0-9_]+]] = arith.constant 0.000000e+00 : f32
// CHECK:             %[[PART:[a-z0-9_]+]] = scf.for %[[K:[a-z0-9_]+]] = %[[T]] to %[[LEN]] step %[[STRIDE]] iter_args(%[[P:[a-z0-9_]+]] = %[[ZERO]]) -> (f32) {
// CHECK-NEXT:          %[[X:[a-z0-9_]+]] = memref.load %[[IN]][%[[ROW]], %[[K]]] : memref<32x1024xf32>
// CHECK-NEXT:          %[[NEXT:[a-z0-9_]+]] = arith.addf %[[X]], %[[P]] : f32
// CHECK-NEXT:          scf.yield %[[NEXT]] : f32
// CHECK-NEXT:        }
// CHECK-NEXT:        %[[SUM:[a-z0-9_]+]] = gpu.all_reduce add %[[PART]] uniform {
// CHECK:             %[[C0:[a-z0-9_]+]] = arith.constant 0 : index
// CHECK:             %[[LEADER:[a-z0-9_]+]] = arith.cmpi eq, %[[T]], %[[C0]] : index
// CHECK:             scf.if %[[LEADER]] {
// CHECK-NEXT:          %[[OLD:[a-z0-9_]+]] = memref.load %[[ACC]][%[[ROW]]] : memref<32xf32>
// CHECK-NEXT:          %[[NEW:[a-z0-9_]+]] = arith.addf %[[SUM]], %[[OLD]] : f32
// CHECK-NEXT:          memref.store %[[NEW]], %[[ACC]][%[[ROW]]] : memref<32xf32>
// CHECK-NEXT:        }
// CHECK-NEXT:        scf.reduce
// CHECK-NEXT:      } {mapping = [#gpu.loop_dim_map<processor = thread_x,
// CHECK-NEXT:      scf.reduce
// CHECK-NEXT:    } {mapping = [#gpu.loop_dim_map<processor = block_x,
// CHECK-NEXT:    return
func.func @row_sum(%in: memref<32x1024xf32>, %acc: memref<32xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c32 = arith.constant 32 : index
  %c1024 = arith.constant 1024 : index
  scf.parallel (%i) = (%c0) to (%c32) step (%c1) {
    scf.for %k = %c0 to %c1024 step %c1 {
      %x = memref.load %in[%i, %k] : memref<32x1024xf32>
      %old = memref.load %acc[%i] : memref<32xf32>
      %new = arith.addf %x, %old : f32
      memref.store %new, %acc[%i] : memref<32xf32>
    }
    scf.reduce
  }
  return
}

// A row max over 64 columns (softmax's first reduction): the block is the
// row length rounded to a warp, 64 threads, so each thread takes one column.
// CHECK-LABEL: func.func @row_max(
// CHECK:         scf.parallel (%{{[a-z0-9_]+}}) = (%{{[a-z0-9_]+}}) to (%[[ROWS:[a-z0-9_]+]]) step
// CHECK:           %[[THREADS:[a-z0-9_]+]] = arith.constant 64 : index
// CHECK:           scf.parallel (%[[T:[a-z0-9_]+]]) = (%{{[a-z0-9_]+}}) to (%[[THREADS]]) step
// CHECK:             %[[NEG:[a-z0-9_]+]] = arith.constant 0xFF800000 : f32
// CHECK:             scf.for %{{[a-z0-9_]+}} = %[[T]] to %{{[a-z0-9_]+}} step %{{[a-z0-9_]+}} iter_args(%{{[a-z0-9_]+}} = %[[NEG]]) -> (f32) {
// CHECK:               arith.maximumf
// CHECK:             gpu.all_reduce maximumf %{{[a-z0-9_]+}} uniform {
// CHECK:             arith.cmpi eq, %[[T]],
func.func @row_max(%in: memref<16x64xf32>, %acc: memref<16xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c16 = arith.constant 16 : index
  %c64 = arith.constant 64 : index
  scf.parallel (%i) = (%c0) to (%c16) step (%c1) {
    scf.for %k = %c0 to %c64 step %c1 {
      %x = memref.load %in[%i, %k] : memref<16x64xf32>
      %old = memref.load %acc[%i] : memref<16xf32>
      %new = arith.maximumf %x, %old : f32
      memref.store %new, %acc[%i] : memref<16xf32>
    }
    scf.reduce
  }
  return
}

// (c) arith.subf is no combiner gpu.all_reduce knows: the elementwise mapping,
// one thread per row running the whole sequential loop. 32 rows -> 1 block of
// 32 threads. (Whether OUT[row] is read and written per iteration or kept in
// a register across the loop is left open here.)
// CHECK-LABEL: func.func @row_sub(
// CHECK-SAME:    %[[IN:[a-z0-9_]+]]: memref<32x1024xf32>, %[[ACC:[a-z0-9_]+]]: memref<32xf32>)
// CHECK:         arith.constant 1024 : index
// CHECK-NEXT:    %[[LB:[a-z0-9_]+]] = arith.constant 0 : index
// CHECK-NEXT:    %[[BLOCKS:[a-z0-9_]+]] = arith.constant 1 : index
// CHECK-NEXT:    %[[ONE:[a-z0-9_]+]] = arith.constant 1 : index
// CHECK-NEXT:    scf.parallel (%[[B:[a-z0-9_]+]]) = (%[[LB]]) to (%[[BLOCKS]]) step (%[[ONE]]) {
// CHECK:           %[[THREADS:[a-z0-9_]+]] = arith.constant 32 : index
// CHECK:           scf.parallel (%[[T:[a-z0-9_]+]]) = (%{{[a-z0-9_]+}}) to (%[[THREADS]]) step
// CHECK:             %[[LIN:[a-z0-9_]+]] = arith.addi %{{[a-z0-9_]+}}, %[[T]] : index
// CHECK:             %[[GUARD:[a-z0-9_]+]] = arith.cmpi ult, %[[LIN]], %{{[a-z0-9_]+}} : index
// CHECK:             scf.if %[[GUARD]] {
// CHECK:               scf.for %[[K:[a-z0-9_]+]] = %{{[a-z0-9_]+}} to %{{[a-z0-9_]+}} step %{{[a-z0-9_]+}}
// CHECK-NEXT:            memref.load %[[IN]][%[[LIN]], %[[K]]] : memref<32x1024xf32>
// CHECK-NOT:             gpu.all_reduce
// CHECK:                 arith.subf
// CHECK-NOT:             gpu.all_reduce
// CHECK:               memref.store %{{[a-z0-9_]+}}, %[[ACC]][%[[LIN]]] : memref<32xf32>
// CHECK-NOT:       gpu.all_reduce
// CHECK:         } {mapping = [#gpu.loop_dim_map<processor = block_x,
// CHECK-NEXT:    return
func.func @row_sub(%in: memref<32x1024xf32>, %acc: memref<32xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c32 = arith.constant 32 : index
  %c1024 = arith.constant 1024 : index
  scf.parallel (%i) = (%c0) to (%c32) step (%c1) {
    scf.for %k = %c0 to %c1024 step %c1 {
      %x = memref.load %in[%i, %k] : memref<32x1024xf32>
      %old = memref.load %acc[%i] : memref<32xf32>
      %new = arith.subf %x, %old : f32
      memref.store %new, %acc[%i] : memref<32xf32>
    }
    scf.reduce
  }
  return
}

// (c) Rows shorter than 64 are not worth a block each: elementwise mapping too.
// CHECK-LABEL: func.func @short_rows(
// CHECK-SAME:    %[[IN:[a-z0-9_]+]]: memref<32x16xf32>, %[[ACC:[a-z0-9_]+]]: memref<32xf32>)
// CHECK:         arith.constant 16 : index
// CHECK-NEXT:    %[[LB:[a-z0-9_]+]] = arith.constant 0 : index
// CHECK-NEXT:    %[[BLOCKS:[a-z0-9_]+]] = arith.constant 1 : index
// CHECK-NEXT:    %[[ONE:[a-z0-9_]+]] = arith.constant 1 : index
// CHECK-NEXT:    scf.parallel (%[[B:[a-z0-9_]+]]) = (%[[LB]]) to (%[[BLOCKS]]) step (%[[ONE]]) {
// CHECK:           %[[THREADS:[a-z0-9_]+]] = arith.constant 32 : index
// CHECK:           scf.parallel (%[[T:[a-z0-9_]+]]) = (%{{[a-z0-9_]+}}) to (%[[THREADS]]) step
// CHECK:             %[[LIN:[a-z0-9_]+]] = arith.addi %{{[a-z0-9_]+}}, %[[T]] : index
// CHECK:             %[[GUARD:[a-z0-9_]+]] = arith.cmpi ult, %[[LIN]], %{{[a-z0-9_]+}} : index
// CHECK:             scf.if %[[GUARD]] {
// CHECK:               scf.for %[[K:[a-z0-9_]+]] = %{{[a-z0-9_]+}} to %{{[a-z0-9_]+}} step %{{[a-z0-9_]+}}
// CHECK-NEXT:            memref.load %[[IN]][%[[LIN]], %[[K]]] : memref<32x16xf32>
// CHECK-NOT:             gpu.all_reduce
// CHECK:                 arith.addf
// CHECK-NOT:             gpu.all_reduce
// CHECK:               memref.store %{{[a-z0-9_]+}}, %[[ACC]][%[[LIN]]] : memref<32xf32>
// CHECK-NOT:       gpu.all_reduce
// CHECK:         } {mapping = [#gpu.loop_dim_map<processor = block_x,
// CHECK-NEXT:    return
func.func @short_rows(%in: memref<32x16xf32>, %acc: memref<32xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c32 = arith.constant 32 : index
  %c16 = arith.constant 16 : index
  scf.parallel (%i) = (%c0) to (%c32) step (%c1) {
    scf.for %k = %c0 to %c16 step %c1 {
      %x = memref.load %in[%i, %k] : memref<32x16xf32>
      %old = memref.load %acc[%i] : memref<32xf32>
      %new = arith.addf %x, %old : f32
      memref.store %new, %acc[%i] : memref<32xf32>
    }
    scf.reduce
  }
  return
}

// A convolution-like nest: out[n, c, h, w] += in[n, ci, h + kh, w] * wt[c, ci, kh].
// (h, w) tiles would reuse nothing (the input depends on both), but (c, h) is
// an outer product, so each thread takes a 4x4 tile of (channel, row) with w
// one per thread. The 16 accumulators stay in registers through both
// reduction loops: C is read once before them and written once after.
// CHECK-LABEL: func.func @conv_like(
// CHECK:         scf.parallel
// CHECK:           scf.parallel
// CHECK-COUNT-16:    memref.load %{{.*}} : memref<2x64x64x64xf32>
// CHECK:             scf.for {{.*}} iter_args({{.*}}) -> (f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32) {
// CHECK:               %[[INNER:.*]]:16 = scf.for {{.*}} iter_args({{.*}}) -> (f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32) {
// CHECK-NOT:             memref.store
// CHECK:               }
// The outer loop carries each of the inner loop's 16 results, in order.
// CHECK-NEXT:          scf.yield %[[INNER]]#0, %[[INNER]]#1, %[[INNER]]#2, {{.*}}, %[[INNER]]#15 :
// CHECK:             }
// CHECK-COUNT-16:    memref.store %{{.*}} : memref<2x64x64x64xf32>
func.func @conv_like(%in: memref<2x8x66x64xf32>, %wt: memref<64x8x3xf32>, %out: memref<2x64x64x64xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %c3 = arith.constant 3 : index
  %c8 = arith.constant 8 : index
  %c64 = arith.constant 64 : index
  scf.parallel (%n, %c, %h, %w) = (%c0, %c0, %c0, %c0) to (%c2, %c64, %c64, %c64) step (%c1, %c1, %c1, %c1) {
    scf.for %ci = %c0 to %c8 step %c1 {
      scf.for %kh = %c0 to %c3 step %c1 {
        %row = arith.addi %h, %kh : index
        %x = memref.load %in[%n, %ci, %row, %w] : memref<2x8x66x64xf32>
        %k = memref.load %wt[%c, %ci, %kh] : memref<64x8x3xf32>
        %acc = memref.load %out[%n, %c, %h, %w] : memref<2x64x64x64xf32>
        %p = arith.mulf %x, %k : f32
        %s = arith.addf %acc, %p : f32
        memref.store %s, %out[%n, %c, %h, %w] : memref<2x64x64x64xf32>
      }
    }
    scf.reduce
  }
  return
}

// (g) Bounds known at run time (dynamic shapes): the host computes the trip
// count (rows x 64), the blocks (at least one) from it, and each thread
// compares its linear index with that count.
// CHECK-LABEL: func.func @dynamic_rows(
// CHECK:         %[[ROWS:.*]] = memref.dim %{{.*}}, %{{.*}} : memref<?x64xf32>
// CHECK:         %[[TOTAL:.*]] = arith.muli %[[ROWS]], %{{.*}} : index
// CHECK:         %[[CEIL:.*]] = arith.ceildivui %[[TOTAL]], %{{.*}} : index
// CHECK:         %[[BLOCKS:.*]] = arith.maxui %[[CEIL]], %{{.*}} : index
// CHECK:         scf.parallel (%[[B:.*]]) = (%{{.*}}) to (%[[BLOCKS]])
// CHECK:           scf.parallel (%[[T:.*]]) = (%{{.*}}) to (%{{.*}})
// CHECK:             %[[LINEAR:.*]] = arith.addi %{{.*}}, %[[T]] : index
// CHECK:             arith.cmpi ult, %[[LINEAR]], %[[TOTAL]] : index
func.func @dynamic_rows(%a: memref<?x64xf32>, %out: memref<?x64xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c64 = arith.constant 64 : index
  %rows = memref.dim %a, %c0 : memref<?x64xf32>
  scf.parallel (%i, %j) = (%c0, %c0) to (%rows, %c64) step (%c1, %c1) {
    %x = memref.load %a[%i, %j] : memref<?x64xf32>
    %y = arith.addf %x, %x : f32
    memref.store %y, %out[%i, %j] : memref<?x64xf32>
    scf.reduce
  }
  return
}
