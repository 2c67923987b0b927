// RUN: %PYTHON -m twintrack.compiler.passes gpu-attention-kernels %s | FileCheck %s

// Q·Kᵀ (with its causal-mask epilogue, in place), the row-wise softmax
// dispatch and P·V become one flash-attention kernel: a block per (64 query
// rows, batch·head), a loop over the keys carrying each thread's output
// rows, running maxima and sums (online softmax; the row statistics combine
// over the 8 lanes of a row with xor shuffles), the scores never in memory:
// the scores buffer, the max and the sum go with the matmuls and the softmax.
// CHECK-LABEL: func.func @attention(
// CHECK-SAME:    %[[Q:.*]]: memref<4x64x32xf32>, %[[KT:.*]]: memref<4x32x64xf32>, %[[V:.*]]: memref<4x64x32xf32>, %[[O:.*]]: memref<4x64x32xf32>)
// CHECK-NOT:     memref.alloc
// CHECK-NOT:     linalg.
// CHECK:         gpu.launch blocks({{.*}}) in (%{{.*}} = %c1, %{{.*}} = %c1, %{{.*}} = %c4) threads({{.*}}) in (%{{.*}} = %c128, {{.*}}) module(@forward_attention_0) function(@forward_attention_0)
// CHECK-SAME:      workgroup(%[[QS:.*]] : memref<32x68xf32, #gpu.address_space<workgroup>>, %[[KS:.*]] : memref<32x64xf32, #gpu.address_space<workgroup>>, %[[VS:.*]] : memref<64x32xf32, #gpu.address_space<workgroup>>, %[[PS:.*]] : memref<64x68xf32, #gpu.address_space<workgroup>>)
// Each block reads its batch entry's tiles through rank-2 subviews.
// CHECK:           %[[QT:.*]] = memref.subview %[[Q]][%{{.*}}, 0, 0] [1, 64, 32] [1, 1, 1] : memref<4x64x32xf32> to memref<64x32xf32, strided<[32, 1], offset: ?>>
// CHECK:           memref.subview %[[KT]][%{{.*}}, 0, 0] [1, 32, 64] [1, 1, 1]
// CHECK:           memref.subview %[[V]][%{{.*}}, 0, 0] [1, 64, 32] [1, 1, 1]
// CHECK:           vector.load %[[QT]]
// CHECK:           memref.store %{{.*}}, %[[QS]]
// CHECK:           scf.for %[[KEY:.*]] = %c0 to %c64 step %c64 iter_args({{.*}}) -> (vector<4xf32>, vector<4xf32>, vector<4xf32>, vector<4xf32>, f32, f32, f32, f32, f32, f32, f32, f32)
// CHECK:             vector.fma
// The mask, on each score: its key index against its query row.
// CHECK:             arith.cmpi ugt
// CHECK:             arith.select
// CHECK:             arith.maximumf
// CHECK:             gpu.shuffle  xor %{{.*}}, %c1_i32, %c32_i32 : f32
// CHECK:             gpu.shuffle  xor %{{.*}}, %c2_i32, %c32_i32 : f32
// CHECK:             gpu.shuffle  xor %{{.*}}, %c4_i32, %c32_i32 : f32
// CHECK:             math.exp
// CHECK:             vector.store %{{.*}}, %[[PS]]
// CHECK:             gpu.barrier
// CHECK:             vector.load %[[PS]]
// CHECK:             vector.load %[[VS]]
// CHECK:             scf.yield
// CHECK:           } {twintrack.kernel_path = "flash-attention-simt 64x64x32/4x8", twintrack.mean_trips = 1.000000e+00 : f64}
// CHECK:           arith.divf
// CHECK:           vector.store %{{.*}}, %[[O]]
// CHECK:         return
#id = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
#row = affine_map<(d0, d1, d2) -> (d0, d1)>
func.func @attention(%q: memref<4x64x32xf32>, %kt: memref<4x32x64xf32>, %v: memref<4x64x32xf32>, %out: memref<4x64x32xf32>) {
  %zero = arith.constant 0.0 : f32
  %ninf = arith.constant 0xFF800000 : f32
  %s = memref.alloc() {alignment = 64 : i64} : memref<4x64x64xf32>
  linalg.fill {twintrack.dispatch = "matmul_0", twintrack.dispatch_kind = #twintrack.dispatch_kind<matmul>} ins(%zero : f32) outs(%s : memref<4x64x64xf32>)
  linalg.batch_matmul {twintrack.dispatch = "matmul_0", twintrack.dispatch_kind = #twintrack.dispatch_kind<matmul>} ins(%q, %kt : memref<4x64x32xf32>, memref<4x32x64xf32>) outs(%s : memref<4x64x64xf32>)
  linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel", "parallel"]} ins(%s : memref<4x64x64xf32>) outs(%s : memref<4x64x64xf32>) attrs = {twintrack.dispatch = "matmul_0", twintrack.dispatch_kind = #twintrack.dispatch_kind<matmul>} {
  ^bb0(%in: f32, %o: f32):
    %i = linalg.index 1 : index
    %j = linalg.index 2 : index
    %above = arith.cmpi ugt, %j, %i : index
    %masked = arith.select %above, %ninf, %in : f32
    linalg.yield %masked : f32
  }
  %max = memref.alloc() {alignment = 64 : i64} : memref<4x64xf32>
  linalg.fill {twintrack.dispatch = "reduction_rows_1", twintrack.dispatch_kind = #twintrack.dispatch_kind<reduction_rows>} ins(%ninf : f32) outs(%max : memref<4x64xf32>)
  linalg.generic {indexing_maps = [#id, #row], iterator_types = ["parallel", "parallel", "reduction"]} ins(%s : memref<4x64x64xf32>) outs(%max : memref<4x64xf32>) attrs = {twintrack.dispatch = "reduction_rows_1", twintrack.dispatch_kind = #twintrack.dispatch_kind<reduction_rows>} {
  ^bb0(%in: f32, %o: f32):
    %m = arith.maximumf %in, %o : f32
    linalg.yield %m : f32
  }
  %sum = memref.alloc() {alignment = 64 : i64} : memref<4x64xf32>
  linalg.fill {twintrack.dispatch = "reduction_rows_1", twintrack.dispatch_kind = #twintrack.dispatch_kind<reduction_rows>} ins(%zero : f32) outs(%sum : memref<4x64xf32>)
  linalg.generic {indexing_maps = [#id, #row, #row], iterator_types = ["parallel", "parallel", "reduction"]} ins(%s, %max : memref<4x64x64xf32>, memref<4x64xf32>) outs(%sum : memref<4x64xf32>) attrs = {twintrack.dispatch = "reduction_rows_1", twintrack.dispatch_kind = #twintrack.dispatch_kind<reduction_rows>} {
  ^bb0(%in: f32, %m: f32, %o: f32):
    %d = arith.subf %in, %m : f32
    %e = math.exp %d : f32
    %a = arith.addf %e, %o : f32
    linalg.yield %a : f32
  }
  linalg.generic {indexing_maps = [#id, #row, #row, #id], iterator_types = ["parallel", "parallel", "parallel"]} ins(%s, %max, %sum : memref<4x64x64xf32>, memref<4x64xf32>, memref<4x64xf32>) outs(%s : memref<4x64x64xf32>) attrs = {twintrack.dispatch = "reduction_rows_1", twintrack.dispatch_kind = #twintrack.dispatch_kind<reduction_rows>} {
  ^bb0(%in: f32, %m: f32, %t: f32, %o: f32):
    %d = arith.subf %in, %m : f32
    %e = math.exp %d : f32
    %p = arith.divf %e, %t : f32
    linalg.yield %p : f32
  }
  linalg.fill {twintrack.dispatch = "matmul_2", twintrack.dispatch_kind = #twintrack.dispatch_kind<matmul>} ins(%zero : f32) outs(%out : memref<4x64x32xf32>)
  linalg.batch_matmul {twintrack.dispatch = "matmul_2", twintrack.dispatch_kind = #twintrack.dispatch_kind<matmul>} ins(%s, %v : memref<4x64x64xf32>, memref<4x64x32xf32>) outs(%out : memref<4x64x32xf32>)
  memref.dealloc %max : memref<4x64xf32>
  memref.dealloc %sum : memref<4x64xf32>
  memref.dealloc %s : memref<4x64x64xf32>
  return
}

// P (the softmax's result, in the scores' buffer) is also copied out: the
// scores must exist, so the chain stays three ops groups (three kernels later).
// CHECK-LABEL: func.func @scores_read_elsewhere(
// CHECK-NOT:     gpu.launch
// CHECK:         linalg.batch_matmul
// CHECK:         linalg.generic
// CHECK:         linalg.batch_matmul
// CHECK:         memref.copy
func.func @scores_read_elsewhere(%q: memref<4x64x32xf32>, %kt: memref<4x32x64xf32>, %v: memref<4x64x32xf32>, %out: memref<4x64x32xf32>, %probabilities: memref<4x64x64xf32>) {
  %zero = arith.constant 0.0 : f32
  %ninf = arith.constant 0xFF800000 : f32
  %s = memref.alloc() {alignment = 64 : i64} : memref<4x64x64xf32>
  linalg.fill {twintrack.dispatch = "matmul_0", twintrack.dispatch_kind = #twintrack.dispatch_kind<matmul>} ins(%zero : f32) outs(%s : memref<4x64x64xf32>)
  linalg.batch_matmul {twintrack.dispatch = "matmul_0", twintrack.dispatch_kind = #twintrack.dispatch_kind<matmul>} ins(%q, %kt : memref<4x64x32xf32>, memref<4x32x64xf32>) outs(%s : memref<4x64x64xf32>)
  %max = memref.alloc() {alignment = 64 : i64} : memref<4x64xf32>
  linalg.fill {twintrack.dispatch = "reduction_rows_1", twintrack.dispatch_kind = #twintrack.dispatch_kind<reduction_rows>} ins(%ninf : f32) outs(%max : memref<4x64xf32>)
  linalg.generic {indexing_maps = [#id, #row], iterator_types = ["parallel", "parallel", "reduction"]} ins(%s : memref<4x64x64xf32>) outs(%max : memref<4x64xf32>) attrs = {twintrack.dispatch = "reduction_rows_1", twintrack.dispatch_kind = #twintrack.dispatch_kind<reduction_rows>} {
  ^bb0(%in: f32, %o: f32):
    %m = arith.maximumf %in, %o : f32
    linalg.yield %m : f32
  }
  %sum = memref.alloc() {alignment = 64 : i64} : memref<4x64xf32>
  linalg.fill {twintrack.dispatch = "reduction_rows_1", twintrack.dispatch_kind = #twintrack.dispatch_kind<reduction_rows>} ins(%zero : f32) outs(%sum : memref<4x64xf32>)
  linalg.generic {indexing_maps = [#id, #row, #row], iterator_types = ["parallel", "parallel", "reduction"]} ins(%s, %max : memref<4x64x64xf32>, memref<4x64xf32>) outs(%sum : memref<4x64xf32>) attrs = {twintrack.dispatch = "reduction_rows_1", twintrack.dispatch_kind = #twintrack.dispatch_kind<reduction_rows>} {
  ^bb0(%in: f32, %m: f32, %o: f32):
    %d = arith.subf %in, %m : f32
    %e = math.exp %d : f32
    %a = arith.addf %e, %o : f32
    linalg.yield %a : f32
  }
  linalg.generic {indexing_maps = [#id, #row, #row, #id], iterator_types = ["parallel", "parallel", "parallel"]} ins(%s, %max, %sum : memref<4x64x64xf32>, memref<4x64xf32>, memref<4x64xf32>) outs(%s : memref<4x64x64xf32>) attrs = {twintrack.dispatch = "reduction_rows_1", twintrack.dispatch_kind = #twintrack.dispatch_kind<reduction_rows>} {
  ^bb0(%in: f32, %m: f32, %t: f32, %o: f32):
    %d = arith.subf %in, %m : f32
    %e = math.exp %d : f32
    %p = arith.divf %e, %t : f32
    linalg.yield %p : f32
  }
  linalg.fill {twintrack.dispatch = "matmul_2", twintrack.dispatch_kind = #twintrack.dispatch_kind<matmul>} ins(%zero : f32) outs(%out : memref<4x64x32xf32>)
  linalg.batch_matmul {twintrack.dispatch = "matmul_2", twintrack.dispatch_kind = #twintrack.dispatch_kind<matmul>} ins(%s, %v : memref<4x64x64xf32>, memref<4x64x32xf32>) outs(%out : memref<4x64x32xf32>)
  memref.copy %s, %probabilities : memref<4x64x64xf32> to memref<4x64x64xf32>
  memref.dealloc %max : memref<4x64xf32>
  memref.dealloc %sum : memref<4x64xf32>
  memref.dealloc %s : memref<4x64x64xf32>
  return
}

// fp16 on tensor cores, with gpt's causal mask (truncf, then -inf where
// key - row > 0, through i64 casts): the block of query rows m0 … m0+63
// needs keys up to m0+63 only, so its key loops end at min(128, the tile
// past them). The mask is the epilogue's only effect, so the kernel applies
// it itself, in f32, and only where it reaches: a first loop over the
// tiles every row sees in full (keys below m0 + 1, whole tiles) has no
// mask, the second (the diagonal tile) compares each key with its row.
// K and V tiles come through a ring of shared buffers (two here: the keys
// are two tiles) filled by cp.async, a tile ahead of the one computed on,
// one barrier a step; each row's sum is P times a B of ones, one more
// mma.sync per K step; the exponentials are exp2 with log2(e) folded into
// one FMA, as PTX's flushing ex2 (one instruction; the non-flushing one
// takes three more); K's and V's fragments come two per ldmatrix.
// CHECK-LABEL: func.func @causal_f16(
// CHECK:         %[[ONES:.*]] = arith.constant dense<1.000000e+00> : vector<2x2xf16>
// CHECK:         gpu.launch blocks({{.*}}) in (%{{.*}} = %c1, %{{.*}} = %c2, %{{.*}} = %c4) threads({{.*}}) in (%{{.*}} = %c128,
// CHECK-SAME:      workgroup(%[[QS:.*]] : memref<64x40xf16, #gpu.address_space<workgroup>>, %[[KS:.*]] : memref<64x72xf16, #gpu.address_space<workgroup>>, %[[VS:.*]] : memref<128x40xf16, #gpu.address_space<workgroup>>)
// CHECK:           %[[M0:.*]] = arith.muli %{{.*}}, %c64 : index
// CHECK:           %[[PAST:.*]] = arith.addi %[[M0]], %c127 : index
// CHECK:           %[[TILES:.*]] = arith.divui %[[PAST]], %c64 : index
// CHECK:           %[[ROUNDED:.*]] = arith.muli %[[TILES]], %c64 : index
// CHECK:           %[[END:.*]] = arith.minui %[[ROUNDED]], %c128 : index
// CHECK:           nvgpu.device_async_copy %{{.*}}, %[[QS]][{{.*}}], 8 {bypassL1}
// CHECK:           nvvm.cp.async.commit.group
// CHECK:           %[[FIRST:.*]] = arith.cmpi ult, %c0, %[[END]] : index
// CHECK:           %[[READ:.*]] = arith.select %[[FIRST]], %c8, %c0 : index
// CHECK:           nvgpu.device_async_copy %{{.*}}, %[[KS]][{{.*}}], 8, %[[READ]] {bypassL1}
// CHECK:           nvgpu.device_async_copy %{{.*}}, %[[VS]][{{.*}}], 8, %[[READ]] {bypassL1}
// CHECK:           nvvm.cp.async.commit.group
// CHECK-NEXT:      nvvm.cp.async.wait.group 1
// CHECK-NEXT:      gpu.barrier
// CHECK:           nvgpu.ldmatrix %[[QS]]
// CHECK:           %[[SEEN:.*]] = arith.addi %[[M0]], %c1 : index
// CHECK:           %[[SEEN_TILES:.*]] = arith.divui %[[SEEN]], %c64 : index
// CHECK:           %[[SEEN_ROUNDED:.*]] = arith.muli %[[SEEN_TILES]], %c64 : index
// CHECK:           %[[VISIBLE:.*]] = arith.minui %[[SEEN_ROUNDED]], %[[END]] : index
// CHECK:           %[[FULL:.*]]:7 = scf.for %{{.*}} = %c0 to %[[VISIBLE]] step %c64
// Its copies ahead stop at the block's last key, not at the loop's end.
// CHECK:             arith.cmpi ult, %{{.*}}, %[[END]] : index
// CHECK:             nvgpu.mma.sync
// CHECK-NOT:         arith.cmpi sgt
// CHECK-NOT:         arith.select {{.*}} : f16
// CHECK-NOT:         arith.select {{.*}}, %cst{{.*}}, %{{.*}} : f32
// CHECK:             gpu.shuffle
// CHECK:           } {twintrack.kernel_path = "flash-attention-mma.sync 64x64x32", twintrack.mean_trips = 5.000000e-01 : f64}
// CHECK:           scf.for %[[KEY:.*]] = %[[VISIBLE]] to %[[END]] step %c64 iter_args(%{{.*}} = %[[FULL]]#0, {{.*}}) -> (vector<2x2xf32>, vector<2x2xf32>, vector<2x2xf32>, vector<2x2xf32>, vector<2x2xf32>, f32, f32)
// CHECK-NEXT:        nvvm.cp.async.wait.group 0
// CHECK-NEXT:        gpu.barrier
// The next tile's copies, into the other buffer, before this one's mma.sync.
// CHECK:             %[[NEXT:.*]] = arith.addi %[[KEY]], %c64 : index
// CHECK:             arith.cmpi ult, %[[NEXT]], %[[END]] : index
// CHECK:             nvgpu.device_async_copy %{{.*}}, %[[KS]]
// CHECK:             nvgpu.device_async_copy %{{.*}}, %[[VS]]
// CHECK:             nvvm.cp.async.commit.group
// CHECK-NOT:         gpu.barrier
// CHECK:             nvgpu.ldmatrix %[[KS]]{{.*}} {numTiles = 4 : i32, transpose = true}
// CHECK:             nvgpu.mma.sync
// CHECK-NOT:         arith.truncf
// CHECK:             arith.cmpi sgt
// CHECK:             arith.select %{{.*}}, %{{.*}}, %{{.*}} : f32
// CHECK:             gpu.shuffle  xor %{{.*}}, %c1_i32, %c32_i32 : f32
// CHECK:             gpu.shuffle  xor %{{.*}}, %c2_i32, %c32_i32 : f32
// CHECK:             %[[SHIFT:.*]] = arith.mulf %{{.*}}, %[[MINUS_LOG2E:.*]] : f32
// CHECK:             %[[EXPONENT:.*]] = math.fma %{{.*}}, %[[LOG2E:.*]], %[[SHIFT]] : f32
// CHECK:             llvm.inline_asm "ex2.approx.ftz.f32 $0, $1;", "=f,f" %[[EXPONENT]] : (f32) -> f32
// CHECK-NOT:         math.exp {{.*}}
// CHECK:             nvgpu.ldmatrix %[[VS]]{{.*}} {numTiles = 4 : i32, transpose = true}
// Each K step's P·V ends with P times ones: the row sums, on the tensor cores.
// CHECK:             nvgpu.mma.sync(%{{.*}}, %[[ONES]], %{{.*}})
// CHECK-NOT:         gpu.barrier
// CHECK:             scf.yield
// CHECK:           } {twintrack.kernel_path = "flash-attention-mma.sync 64x64x32", twintrack.mean_trips = 1.000000e+00 : f64}
// CHECK-NEXT:      nvvm.cp.async.wait.group 0
// CHECK:           vector.store %{{.*}}, %arg3
func.func @causal_f16(%q: memref<4x128x32xf16>, %kt: memref<4x32x128xf16>, %v: memref<4x128x32xf16>, %out: memref<4x128x32xf32>) {
  %zero = arith.constant 0.0 : f32
  %ninf = arith.constant 0xFF800000 : f32
  %ninf16 = arith.constant 0xFC00 : f16
  %c0_i64 = arith.constant 0 : i64
  %false = arith.constant false
  %s = memref.alloc() {alignment = 64 : i64} : memref<4x128x128xf32>
  linalg.fill {twintrack.dispatch = "matmul_0", twintrack.dispatch_kind = #twintrack.dispatch_kind<matmul>} ins(%zero : f32) outs(%s : memref<4x128x128xf32>)
  linalg.batch_matmul {twintrack.dispatch = "matmul_0", twintrack.dispatch_kind = #twintrack.dispatch_kind<matmul>} ins(%q, %kt : memref<4x128x32xf16>, memref<4x32x128xf16>) outs(%s : memref<4x128x128xf32>)
  %h = memref.alloc() {alignment = 64 : i64} : memref<4x128x128xf16>
  linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel", "parallel"]} ins(%s : memref<4x128x128xf32>) outs(%h : memref<4x128x128xf16>) attrs = {twintrack.dispatch = "matmul_0", twintrack.dispatch_kind = #twintrack.dispatch_kind<matmul>} {
  ^bb0(%in: f32, %o: f16):
    %n = arith.truncf %in : f32 to f16
    %i = linalg.index 1 : index
    %i64 = arith.index_cast %i : index to i64
    %j = linalg.index 2 : index
    %j64 = arith.index_cast %j : index to i64
    %d = arith.subi %j64, %i64 : i64
    %le = arith.cmpi sle, %d, %c0_i64 : i64
    %above = arith.cmpi eq, %le, %false : i1
    %masked = arith.select %above, %ninf16, %n : f16
    linalg.yield %masked : f16
  }
  %max = memref.alloc() {alignment = 64 : i64} : memref<4x128xf32>
  linalg.fill {twintrack.dispatch = "reduction_rows_1", twintrack.dispatch_kind = #twintrack.dispatch_kind<reduction_rows>} ins(%ninf : f32) outs(%max : memref<4x128xf32>)
  linalg.generic {indexing_maps = [#id, #row], iterator_types = ["parallel", "parallel", "reduction"]} ins(%h : memref<4x128x128xf16>) outs(%max : memref<4x128xf32>) attrs = {twintrack.dispatch = "reduction_rows_1", twintrack.dispatch_kind = #twintrack.dispatch_kind<reduction_rows>} {
  ^bb0(%in: f16, %o: f32):
    %w = arith.extf %in : f16 to f32
    %m = arith.maximumf %w, %o : f32
    linalg.yield %m : f32
  }
  %sum = memref.alloc() {alignment = 64 : i64} : memref<4x128xf32>
  linalg.fill {twintrack.dispatch = "reduction_rows_1", twintrack.dispatch_kind = #twintrack.dispatch_kind<reduction_rows>} ins(%zero : f32) outs(%sum : memref<4x128xf32>)
  linalg.generic {indexing_maps = [#id, #row, #row], iterator_types = ["parallel", "parallel", "reduction"]} ins(%h, %max : memref<4x128x128xf16>, memref<4x128xf32>) outs(%sum : memref<4x128xf32>) attrs = {twintrack.dispatch = "reduction_rows_1", twintrack.dispatch_kind = #twintrack.dispatch_kind<reduction_rows>} {
  ^bb0(%in: f16, %m: f32, %o: f32):
    %w = arith.extf %in : f16 to f32
    %d = arith.subf %w, %m : f32
    %e = math.exp %d : f32
    %a = arith.addf %e, %o : f32
    linalg.yield %a : f32
  }
  linalg.generic {indexing_maps = [#id, #row, #row, #id], iterator_types = ["parallel", "parallel", "parallel"]} ins(%h, %max, %sum : memref<4x128x128xf16>, memref<4x128xf32>, memref<4x128xf32>) outs(%h : memref<4x128x128xf16>) attrs = {twintrack.dispatch = "reduction_rows_1", twintrack.dispatch_kind = #twintrack.dispatch_kind<reduction_rows>} {
  ^bb0(%in: f16, %m: f32, %t: f32, %o: f16):
    %w = arith.extf %in : f16 to f32
    %d = arith.subf %w, %m : f32
    %e = math.exp %d : f32
    %p = arith.divf %e, %t : f32
    %n = arith.truncf %p : f32 to f16
    linalg.yield %n : f16
  }
  linalg.fill {twintrack.dispatch = "matmul_2", twintrack.dispatch_kind = #twintrack.dispatch_kind<matmul>} ins(%zero : f32) outs(%out : memref<4x128x32xf32>)
  linalg.batch_matmul {twintrack.dispatch = "matmul_2", twintrack.dispatch_kind = #twintrack.dispatch_kind<matmul>} ins(%h, %v : memref<4x128x128xf16>, memref<4x128x32xf16>) outs(%out : memref<4x128x32xf32>)
  memref.dealloc %max : memref<4x128xf32>
  memref.dealloc %sum : memref<4x128xf32>
  memref.dealloc %h : memref<4x128x128xf16>
  memref.dealloc %s : memref<4x128x128xf32>
  return
}

// A mask of the keys before the row (key < row) leaves later keys in
// play: every block runs over all of them.
// CHECK-LABEL: func.func @anticausal(
// CHECK-NOT:     arith.minui
// CHECK:         scf.for %{{.*}} = %c0 to %c128 step %c64
func.func @anticausal(%q: memref<4x128x32xf16>, %kt: memref<4x32x128xf16>, %v: memref<4x128x32xf16>, %out: memref<4x128x32xf32>) {
  %zero = arith.constant 0.0 : f32
  %ninf = arith.constant 0xFF800000 : f32
  %ninf16 = arith.constant 0xFC00 : f16
  %c0_i64 = arith.constant 0 : i64
  %false = arith.constant false
  %s = memref.alloc() {alignment = 64 : i64} : memref<4x128x128xf32>
  linalg.fill {twintrack.dispatch = "matmul_0", twintrack.dispatch_kind = #twintrack.dispatch_kind<matmul>} ins(%zero : f32) outs(%s : memref<4x128x128xf32>)
  linalg.batch_matmul {twintrack.dispatch = "matmul_0", twintrack.dispatch_kind = #twintrack.dispatch_kind<matmul>} ins(%q, %kt : memref<4x128x32xf16>, memref<4x32x128xf16>) outs(%s : memref<4x128x128xf32>)
  %h = memref.alloc() {alignment = 64 : i64} : memref<4x128x128xf16>
  linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel", "parallel"]} ins(%s : memref<4x128x128xf32>) outs(%h : memref<4x128x128xf16>) attrs = {twintrack.dispatch = "matmul_0", twintrack.dispatch_kind = #twintrack.dispatch_kind<matmul>} {
  ^bb0(%in: f32, %o: f16):
    %n = arith.truncf %in : f32 to f16
    %i = linalg.index 1 : index
    %i64 = arith.index_cast %i : index to i64
    %j = linalg.index 2 : index
    %j64 = arith.index_cast %j : index to i64
    %d = arith.subi %j64, %i64 : i64
    %le = arith.cmpi sge, %d, %c0_i64 : i64
    %above = arith.cmpi eq, %le, %false : i1
    %masked = arith.select %above, %ninf16, %n : f16
    linalg.yield %masked : f16
  }
  %max = memref.alloc() {alignment = 64 : i64} : memref<4x128xf32>
  linalg.fill {twintrack.dispatch = "reduction_rows_1", twintrack.dispatch_kind = #twintrack.dispatch_kind<reduction_rows>} ins(%ninf : f32) outs(%max : memref<4x128xf32>)
  linalg.generic {indexing_maps = [#id, #row], iterator_types = ["parallel", "parallel", "reduction"]} ins(%h : memref<4x128x128xf16>) outs(%max : memref<4x128xf32>) attrs = {twintrack.dispatch = "reduction_rows_1", twintrack.dispatch_kind = #twintrack.dispatch_kind<reduction_rows>} {
  ^bb0(%in: f16, %o: f32):
    %w = arith.extf %in : f16 to f32
    %m = arith.maximumf %w, %o : f32
    linalg.yield %m : f32
  }
  %sum = memref.alloc() {alignment = 64 : i64} : memref<4x128xf32>
  linalg.fill {twintrack.dispatch = "reduction_rows_1", twintrack.dispatch_kind = #twintrack.dispatch_kind<reduction_rows>} ins(%zero : f32) outs(%sum : memref<4x128xf32>)
  linalg.generic {indexing_maps = [#id, #row, #row], iterator_types = ["parallel", "parallel", "reduction"]} ins(%h, %max : memref<4x128x128xf16>, memref<4x128xf32>) outs(%sum : memref<4x128xf32>) attrs = {twintrack.dispatch = "reduction_rows_1", twintrack.dispatch_kind = #twintrack.dispatch_kind<reduction_rows>} {
  ^bb0(%in: f16, %m: f32, %o: f32):
    %w = arith.extf %in : f16 to f32
    %d = arith.subf %w, %m : f32
    %e = math.exp %d : f32
    %a = arith.addf %e, %o : f32
    linalg.yield %a : f32
  }
  linalg.generic {indexing_maps = [#id, #row, #row, #id], iterator_types = ["parallel", "parallel", "parallel"]} ins(%h, %max, %sum : memref<4x128x128xf16>, memref<4x128xf32>, memref<4x128xf32>) outs(%h : memref<4x128x128xf16>) attrs = {twintrack.dispatch = "reduction_rows_1", twintrack.dispatch_kind = #twintrack.dispatch_kind<reduction_rows>} {
  ^bb0(%in: f16, %m: f32, %t: f32, %o: f16):
    %w = arith.extf %in : f16 to f32
    %d = arith.subf %w, %m : f32
    %e = math.exp %d : f32
    %p = arith.divf %e, %t : f32
    %n = arith.truncf %p : f32 to f16
    linalg.yield %n : f16
  }
  linalg.fill {twintrack.dispatch = "matmul_2", twintrack.dispatch_kind = #twintrack.dispatch_kind<matmul>} ins(%zero : f32) outs(%out : memref<4x128x32xf32>)
  linalg.batch_matmul {twintrack.dispatch = "matmul_2", twintrack.dispatch_kind = #twintrack.dispatch_kind<matmul>} ins(%h, %v : memref<4x128x128xf16>, memref<4x128x32xf16>) outs(%out : memref<4x128x32xf32>)
  memref.dealloc %max : memref<4x128xf32>
  memref.dealloc %sum : memref<4x128xf32>
  memref.dealloc %h : memref<4x128x128xf16>
  memref.dealloc %s : memref<4x128x128xf32>
  return
}

// Q, K and V as a fused projection leaves them: one (2, 64, 192) buffer,
// each a column slice split into 2 heads of 32 and copied into (batch,
// heads, seq, dim) by a transpose (K into (batch, heads, dim, seq)); Q's
// copy also scales it. The kernel reads the slices where they are: a block
// takes its head's tile (outer index batch / 2, head batch % 2) by a
// rank-2 subview; K, read (seq, dim), becomes the transposed operand; Q is
// scaled as its fragments are loaded. The copies and their buffers go.
// CHECK-LABEL: func.func @heads_in_place(
// CHECK-SAME:    %[[X:.*]]: memref<2x64x192xf16>, %[[OUT:.*]]: memref<4x64x32xf32>)
// CHECK:         %[[QX:.*]] = memref.expand_shape {{.*}} into memref<2x64x2x32xf16, strided<[12288, 192, 32, 1]>>
// CHECK:         %[[KX:.*]] = memref.expand_shape {{.*}} into memref<2x64x2x32xf16, strided<[12288, 192, 32, 1], offset: 64>>
// CHECK:         %[[VX:.*]] = memref.expand_shape {{.*}} into memref<2x64x2x32xf16, strided<[12288, 192, 32, 1], offset: 128>>
// CHECK-NOT:     linalg.
// CHECK-NOT:     memref.alloc
// CHECK:         %[[SCALE:.*]] = arith.constant dense<1.250000e-01> : vector<4x2xf16>
// CHECK-NOT:     linalg.
// CHECK-NOT:     memref.alloc
// CHECK:         gpu.launch
// CHECK:           %[[OUTER:.*]] = arith.divui %{{.*}}, %c2 : index
// CHECK:           %[[HEAD:.*]] = arith.remui %{{.*}}, %c2 : index
// CHECK:           memref.subview %[[QX]][%[[OUTER]], 0, %[[HEAD]], 0] [1, 64, 1, 32] [1, 1, 1, 1] : memref<2x64x2x32xf16, strided<[12288, 192, 32, 1]>> to memref<64x32xf16, strided<[192, 1], offset: ?>>
// CHECK:           memref.subview %[[KX]][{{.*}}] [1, 64, 1, 32]
// CHECK:           memref.subview %[[VX]][{{.*}}] [1, 64, 1, 32]
// CHECK:           nvgpu.ldmatrix
// CHECK-NEXT:      arith.mulf %{{.*}}, %[[SCALE]] : vector<4x2xf16>
// The scores stay f32 from the mma to the softmax: their narrowing to f16,
// the score epilogue's last op, is left out (the causal test keeps it: a
// select on f16 follows it there).
// CHECK:           nvgpu.mma.sync
// CHECK-NOT:       arith.truncf
// CHECK-NOT:       arith.extf
// CHECK:           gpu.shuffle
// CHECK:         } {twintrack.kernel_path = "flash-attention-mma.sync 64x64x32 (3 copies read through)"}
// CHECK-NOT:     linalg.
// CHECK:         return
#q_in = affine_map<(d0, d1, d2, d3) -> (d0, d2, d1, d3)>
#q_out = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>
func.func @heads_in_place(%x: memref<2x64x192xf16>, %out: memref<4x64x32xf32>) {
  %zero = arith.constant 0.0 : f32
  %ninf = arith.constant 0xFF800000 : f32
  %eighth = arith.constant 1.250000e-01 : f64
  %qs = memref.subview %x[0, 0, 0] [2, 64, 64] [1, 1, 1] : memref<2x64x192xf16> to memref<2x64x64xf16, strided<[12288, 192, 1]>>
  %ks = memref.subview %x[0, 0, 64] [2, 64, 64] [1, 1, 1] : memref<2x64x192xf16> to memref<2x64x64xf16, strided<[12288, 192, 1], offset: 64>>
  %vs = memref.subview %x[0, 0, 128] [2, 64, 64] [1, 1, 1] : memref<2x64x192xf16> to memref<2x64x64xf16, strided<[12288, 192, 1], offset: 128>>
  %qx = memref.expand_shape %qs [[0], [1], [2, 3]] output_shape [2, 64, 2, 32] : memref<2x64x64xf16, strided<[12288, 192, 1]>> into memref<2x64x2x32xf16, strided<[12288, 192, 32, 1]>>
  %kx = memref.expand_shape %ks [[0], [1], [2, 3]] output_shape [2, 64, 2, 32] : memref<2x64x64xf16, strided<[12288, 192, 1], offset: 64>> into memref<2x64x2x32xf16, strided<[12288, 192, 32, 1], offset: 64>>
  %vx = memref.expand_shape %vs [[0], [1], [2, 3]] output_shape [2, 64, 2, 32] : memref<2x64x64xf16, strided<[12288, 192, 1], offset: 128>> into memref<2x64x2x32xf16, strided<[12288, 192, 32, 1], offset: 128>>
  %qh = memref.alloc() {alignment = 64 : i64} : memref<2x2x64x32xf16>
  %vh = memref.alloc() {alignment = 64 : i64} : memref<2x2x64x32xf16>
  linalg.transpose ins(%vx : memref<2x64x2x32xf16, strided<[12288, 192, 32, 1], offset: 128>>) outs(%vh : memref<2x2x64x32xf16>) permutation = [0, 2, 1, 3] {twintrack.dispatch = "elementwise_0", twintrack.dispatch_kind = #twintrack.dispatch_kind<elementwise>}
  linalg.generic {indexing_maps = [#q_in, #q_out], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%qx : memref<2x64x2x32xf16, strided<[12288, 192, 32, 1]>>) outs(%qh : memref<2x2x64x32xf16>) attrs = {twintrack.dispatch = "elementwise_1", twintrack.dispatch_kind = #twintrack.dispatch_kind<elementwise>} {
  ^bb0(%in: f16, %o: f16):
    %c = arith.truncf %eighth : f64 to f16
    %m = arith.mulf %in, %c : f16
    linalg.yield %m : f16
  }
  %kh = memref.alloc() {alignment = 64 : i64} : memref<2x2x32x64xf16>
  linalg.transpose ins(%kx : memref<2x64x2x32xf16, strided<[12288, 192, 32, 1], offset: 64>>) outs(%kh : memref<2x2x32x64xf16>) permutation = [0, 2, 3, 1] {twintrack.dispatch = "elementwise_2", twintrack.dispatch_kind = #twintrack.dispatch_kind<elementwise>}
  %q = memref.collapse_shape %qh [[0, 1], [2], [3]] : memref<2x2x64x32xf16> into memref<4x64x32xf16>
  %kt = memref.collapse_shape %kh [[0, 1], [2], [3]] : memref<2x2x32x64xf16> into memref<4x32x64xf16>
  %v = memref.collapse_shape %vh [[0, 1], [2], [3]] : memref<2x2x64x32xf16> into memref<4x64x32xf16>
  %s = memref.alloc() {alignment = 64 : i64} : memref<4x64x64xf32>
  linalg.fill {twintrack.dispatch = "matmul_3", twintrack.dispatch_kind = #twintrack.dispatch_kind<matmul>} ins(%zero : f32) outs(%s : memref<4x64x64xf32>)
  linalg.batch_matmul {twintrack.dispatch = "matmul_3", twintrack.dispatch_kind = #twintrack.dispatch_kind<matmul>} ins(%q, %kt : memref<4x64x32xf16>, memref<4x32x64xf16>) outs(%s : memref<4x64x64xf32>)
  %h = memref.alloc() {alignment = 64 : i64} : memref<4x64x64xf16>
  linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel", "parallel"]} ins(%s : memref<4x64x64xf32>) outs(%h : memref<4x64x64xf16>) attrs = {twintrack.dispatch = "matmul_3", twintrack.dispatch_kind = #twintrack.dispatch_kind<matmul>} {
  ^bb0(%in: f32, %o: f16):
    %n = arith.truncf %in : f32 to f16
    linalg.yield %n : f16
  }
  %max = memref.alloc() {alignment = 64 : i64} : memref<4x64xf32>
  linalg.fill {twintrack.dispatch = "reduction_rows_4", twintrack.dispatch_kind = #twintrack.dispatch_kind<reduction_rows>} ins(%ninf : f32) outs(%max : memref<4x64xf32>)
  linalg.generic {indexing_maps = [#id, #row], iterator_types = ["parallel", "parallel", "reduction"]} ins(%h : memref<4x64x64xf16>) outs(%max : memref<4x64xf32>) attrs = {twintrack.dispatch = "reduction_rows_4", twintrack.dispatch_kind = #twintrack.dispatch_kind<reduction_rows>} {
  ^bb0(%in: f16, %o: f32):
    %w = arith.extf %in : f16 to f32
    %m = arith.maximumf %w, %o : f32
    linalg.yield %m : f32
  }
  %sum = memref.alloc() {alignment = 64 : i64} : memref<4x64xf32>
  linalg.fill {twintrack.dispatch = "reduction_rows_4", twintrack.dispatch_kind = #twintrack.dispatch_kind<reduction_rows>} ins(%zero : f32) outs(%sum : memref<4x64xf32>)
  linalg.generic {indexing_maps = [#id, #row, #row], iterator_types = ["parallel", "parallel", "reduction"]} ins(%h, %max : memref<4x64x64xf16>, memref<4x64xf32>) outs(%sum : memref<4x64xf32>) attrs = {twintrack.dispatch = "reduction_rows_4", twintrack.dispatch_kind = #twintrack.dispatch_kind<reduction_rows>} {
  ^bb0(%in: f16, %m: f32, %o: f32):
    %w = arith.extf %in : f16 to f32
    %d = arith.subf %w, %m : f32
    %e = math.exp %d : f32
    %a = arith.addf %e, %o : f32
    linalg.yield %a : f32
  }
  linalg.generic {indexing_maps = [#id, #row, #row, #id], iterator_types = ["parallel", "parallel", "parallel"]} ins(%h, %max, %sum : memref<4x64x64xf16>, memref<4x64xf32>, memref<4x64xf32>) outs(%h : memref<4x64x64xf16>) attrs = {twintrack.dispatch = "reduction_rows_4", twintrack.dispatch_kind = #twintrack.dispatch_kind<reduction_rows>} {
  ^bb0(%in: f16, %m: f32, %t: f32, %o: f16):
    %w = arith.extf %in : f16 to f32
    %d = arith.subf %w, %m : f32
    %e = math.exp %d : f32
    %p = arith.divf %e, %t : f32
    %n = arith.truncf %p : f32 to f16
    linalg.yield %n : f16
  }
  linalg.fill {twintrack.dispatch = "matmul_5", twintrack.dispatch_kind = #twintrack.dispatch_kind<matmul>} ins(%zero : f32) outs(%out : memref<4x64x32xf32>)
  linalg.batch_matmul {twintrack.dispatch = "matmul_5", twintrack.dispatch_kind = #twintrack.dispatch_kind<matmul>} ins(%h, %v : memref<4x64x64xf16>, memref<4x64x32xf16>) outs(%out : memref<4x64x32xf32>)
  memref.dealloc %max : memref<4x64xf32>
  memref.dealloc %sum : memref<4x64xf32>
  memref.dealloc %h : memref<4x64x64xf16>
  memref.dealloc %s : memref<4x64x64xf32>
  memref.dealloc %qh : memref<2x2x64x32xf16>
  memref.dealloc %kh : memref<2x2x32x64xf16>
  memref.dealloc %vh : memref<2x2x64x32xf16>
  return
}

// Negative: V's copy is also read elsewhere, so it stays, and the kernel
// reads V from it; Q and K are still read through.
// CHECK-LABEL: func.func @copy_read_elsewhere(
// CHECK:         %[[VH:.*]] = memref.alloc() {{.*}} : memref<2x2x64x32xf16>
// CHECK:         linalg.transpose {{.*}} outs(%[[VH]] : memref<2x2x64x32xf16>) permutation = [0, 2, 1, 3]
// CHECK:         %[[V3:.*]] = memref.collapse_shape %[[VH]]
// CHECK:         gpu.launch
// CHECK:           memref.subview %[[V3]][%{{.*}}, 0, 0] [1, 64, 32] [1, 1, 1]
// CHECK:         } {twintrack.kernel_path = "flash-attention-mma.sync 64x64x32 (2 copies read through)"}
// CHECK:         memref.copy %[[VH]]
func.func @copy_read_elsewhere(%x: memref<2x64x192xf16>, %out: memref<4x64x32xf32>, %vcopy: memref<2x2x64x32xf16>) {
  %zero = arith.constant 0.0 : f32
  %ninf = arith.constant 0xFF800000 : f32
  %eighth = arith.constant 1.250000e-01 : f64
  %qs = memref.subview %x[0, 0, 0] [2, 64, 64] [1, 1, 1] : memref<2x64x192xf16> to memref<2x64x64xf16, strided<[12288, 192, 1]>>
  %ks = memref.subview %x[0, 0, 64] [2, 64, 64] [1, 1, 1] : memref<2x64x192xf16> to memref<2x64x64xf16, strided<[12288, 192, 1], offset: 64>>
  %vs = memref.subview %x[0, 0, 128] [2, 64, 64] [1, 1, 1] : memref<2x64x192xf16> to memref<2x64x64xf16, strided<[12288, 192, 1], offset: 128>>
  %qx = memref.expand_shape %qs [[0], [1], [2, 3]] output_shape [2, 64, 2, 32] : memref<2x64x64xf16, strided<[12288, 192, 1]>> into memref<2x64x2x32xf16, strided<[12288, 192, 32, 1]>>
  %kx = memref.expand_shape %ks [[0], [1], [2, 3]] output_shape [2, 64, 2, 32] : memref<2x64x64xf16, strided<[12288, 192, 1], offset: 64>> into memref<2x64x2x32xf16, strided<[12288, 192, 32, 1], offset: 64>>
  %vx = memref.expand_shape %vs [[0], [1], [2, 3]] output_shape [2, 64, 2, 32] : memref<2x64x64xf16, strided<[12288, 192, 1], offset: 128>> into memref<2x64x2x32xf16, strided<[12288, 192, 32, 1], offset: 128>>
  %qh = memref.alloc() {alignment = 64 : i64} : memref<2x2x64x32xf16>
  %vh = memref.alloc() {alignment = 64 : i64} : memref<2x2x64x32xf16>
  linalg.transpose ins(%vx : memref<2x64x2x32xf16, strided<[12288, 192, 32, 1], offset: 128>>) outs(%vh : memref<2x2x64x32xf16>) permutation = [0, 2, 1, 3] {twintrack.dispatch = "elementwise_0", twintrack.dispatch_kind = #twintrack.dispatch_kind<elementwise>}
  linalg.generic {indexing_maps = [#q_in, #q_out], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%qx : memref<2x64x2x32xf16, strided<[12288, 192, 32, 1]>>) outs(%qh : memref<2x2x64x32xf16>) attrs = {twintrack.dispatch = "elementwise_1", twintrack.dispatch_kind = #twintrack.dispatch_kind<elementwise>} {
  ^bb0(%in: f16, %o: f16):
    %c = arith.truncf %eighth : f64 to f16
    %m = arith.mulf %in, %c : f16
    linalg.yield %m : f16
  }
  %kh = memref.alloc() {alignment = 64 : i64} : memref<2x2x32x64xf16>
  linalg.transpose ins(%kx : memref<2x64x2x32xf16, strided<[12288, 192, 32, 1], offset: 64>>) outs(%kh : memref<2x2x32x64xf16>) permutation = [0, 2, 3, 1] {twintrack.dispatch = "elementwise_2", twintrack.dispatch_kind = #twintrack.dispatch_kind<elementwise>}
  %q = memref.collapse_shape %qh [[0, 1], [2], [3]] : memref<2x2x64x32xf16> into memref<4x64x32xf16>
  %kt = memref.collapse_shape %kh [[0, 1], [2], [3]] : memref<2x2x32x64xf16> into memref<4x32x64xf16>
  %v = memref.collapse_shape %vh [[0, 1], [2], [3]] : memref<2x2x64x32xf16> into memref<4x64x32xf16>
  %s = memref.alloc() {alignment = 64 : i64} : memref<4x64x64xf32>
  linalg.fill {twintrack.dispatch = "matmul_3", twintrack.dispatch_kind = #twintrack.dispatch_kind<matmul>} ins(%zero : f32) outs(%s : memref<4x64x64xf32>)
  linalg.batch_matmul {twintrack.dispatch = "matmul_3", twintrack.dispatch_kind = #twintrack.dispatch_kind<matmul>} ins(%q, %kt : memref<4x64x32xf16>, memref<4x32x64xf16>) outs(%s : memref<4x64x64xf32>)
  %h = memref.alloc() {alignment = 64 : i64} : memref<4x64x64xf16>
  linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel", "parallel"]} ins(%s : memref<4x64x64xf32>) outs(%h : memref<4x64x64xf16>) attrs = {twintrack.dispatch = "matmul_3", twintrack.dispatch_kind = #twintrack.dispatch_kind<matmul>} {
  ^bb0(%in: f32, %o: f16):
    %n = arith.truncf %in : f32 to f16
    linalg.yield %n : f16
  }
  %max = memref.alloc() {alignment = 64 : i64} : memref<4x64xf32>
  linalg.fill {twintrack.dispatch = "reduction_rows_4", twintrack.dispatch_kind = #twintrack.dispatch_kind<reduction_rows>} ins(%ninf : f32) outs(%max : memref<4x64xf32>)
  linalg.generic {indexing_maps = [#id, #row], iterator_types = ["parallel", "parallel", "reduction"]} ins(%h : memref<4x64x64xf16>) outs(%max : memref<4x64xf32>) attrs = {twintrack.dispatch = "reduction_rows_4", twintrack.dispatch_kind = #twintrack.dispatch_kind<reduction_rows>} {
  ^bb0(%in: f16, %o: f32):
    %w = arith.extf %in : f16 to f32
    %m = arith.maximumf %w, %o : f32
    linalg.yield %m : f32
  }
  %sum = memref.alloc() {alignment = 64 : i64} : memref<4x64xf32>
  linalg.fill {twintrack.dispatch = "reduction_rows_4", twintrack.dispatch_kind = #twintrack.dispatch_kind<reduction_rows>} ins(%zero : f32) outs(%sum : memref<4x64xf32>)
  linalg.generic {indexing_maps = [#id, #row, #row], iterator_types = ["parallel", "parallel", "reduction"]} ins(%h, %max : memref<4x64x64xf16>, memref<4x64xf32>) outs(%sum : memref<4x64xf32>) attrs = {twintrack.dispatch = "reduction_rows_4", twintrack.dispatch_kind = #twintrack.dispatch_kind<reduction_rows>} {
  ^bb0(%in: f16, %m: f32, %o: f32):
    %w = arith.extf %in : f16 to f32
    %d = arith.subf %w, %m : f32
    %e = math.exp %d : f32
    %a = arith.addf %e, %o : f32
    linalg.yield %a : f32
  }
  linalg.generic {indexing_maps = [#id, #row, #row, #id], iterator_types = ["parallel", "parallel", "parallel"]} ins(%h, %max, %sum : memref<4x64x64xf16>, memref<4x64xf32>, memref<4x64xf32>) outs(%h : memref<4x64x64xf16>) attrs = {twintrack.dispatch = "reduction_rows_4", twintrack.dispatch_kind = #twintrack.dispatch_kind<reduction_rows>} {
  ^bb0(%in: f16, %m: f32, %t: f32, %o: f16):
    %w = arith.extf %in : f16 to f32
    %d = arith.subf %w, %m : f32
    %e = math.exp %d : f32
    %p = arith.divf %e, %t : f32
    %n = arith.truncf %p : f32 to f16
    linalg.yield %n : f16
  }
  linalg.fill {twintrack.dispatch = "matmul_5", twintrack.dispatch_kind = #twintrack.dispatch_kind<matmul>} ins(%zero : f32) outs(%out : memref<4x64x32xf32>)
  linalg.batch_matmul {twintrack.dispatch = "matmul_5", twintrack.dispatch_kind = #twintrack.dispatch_kind<matmul>} ins(%h, %v : memref<4x64x64xf16>, memref<4x64x32xf16>) outs(%out : memref<4x64x32xf32>)
  memref.dealloc %max : memref<4x64xf32>
  memref.dealloc %sum : memref<4x64xf32>
  memref.dealloc %h : memref<4x64x64xf16>
  memref.dealloc %s : memref<4x64x64xf32>
  memref.copy %vh, %vcopy : memref<2x2x64x32xf16> to memref<2x2x64x32xf16>
  memref.dealloc %qh : memref<2x2x64x32xf16>
  memref.dealloc %kh : memref<2x2x32x64xf16>
  memref.dealloc %vh : memref<2x2x64x32xf16>
  return
}

// With a ring of three buffers or more (here 4: 256 keys in 64-key tiles),
// the scores run a tile ahead: the prologue waits for Q and the first K/V
// tile (2 of 4 copy groups may still be in flight) and computes the first
// tile's scores; the loop carries the 4 output tiles, the row sums' tile
// (P times ones, on the tensor cores), each half's running max and the
// next tile's 8 score tiles; each step waits for the next tile (1 group in flight),
// computes its scores, carried to the next step, and then the softmax and
// P·V of the scores it was given. Neither depends on the other, so the
// tensor-core work of one tile overlaps the exponentials of the other.
// CHECK-LABEL: func.func @scores_a_tile_ahead(
// CHECK:         gpu.launch
// CHECK-SAME:      workgroup(%{{.*}} : memref<64x40xf16, #gpu.address_space<workgroup>>, %[[KS:.*]] : memref<128x72xf16, #gpu.address_space<workgroup>>, %{{.*}} : memref<256x40xf16, #gpu.address_space<workgroup>>)
// CHECK:           nvvm.cp.async.wait.group 2
// CHECK-NEXT:      gpu.barrier
// CHECK:           nvgpu.ldmatrix %[[KS]]
// CHECK:           nvgpu.mma.sync
// CHECK:           scf.for %{{.*}} = %c0 to %c256 step %c64 iter_args({{.*}}) -> (vector<2x2xf32>, vector<2x2xf32>, vector<2x2xf32>, vector<2x2xf32>, vector<2x2xf32>, f32, f32, vector<2x2xf32>, vector<2x2xf32>, vector<2x2xf32>, vector<2x2xf32>, vector<2x2xf32>, vector<2x2xf32>, vector<2x2xf32>, vector<2x2xf32>)
// CHECK-NEXT:        nvvm.cp.async.wait.group 1
// CHECK-NEXT:        gpu.barrier
// CHECK:             nvvm.cp.async.commit.group
// CHECK:             nvgpu.mma.sync
// CHECK:             gpu.shuffle
// CHECK:             scf.yield
// CHECK:           } {twintrack.kernel_path = "flash-attention-mma.sync 64x64x32"}
func.func @scores_a_tile_ahead(%q: memref<4x64x32xf16>, %kt: memref<4x32x256xf16>, %v: memref<4x256x32xf16>, %out: memref<4x64x32xf32>) {
  %zero = arith.constant 0.0 : f32
  %ninf = arith.constant 0xFF800000 : f32
  %s = memref.alloc() {alignment = 64 : i64} : memref<4x64x256xf32>
  linalg.fill {twintrack.dispatch = "matmul_0", twintrack.dispatch_kind = #twintrack.dispatch_kind<matmul>} ins(%zero : f32) outs(%s : memref<4x64x256xf32>)
  linalg.batch_matmul {twintrack.dispatch = "matmul_0", twintrack.dispatch_kind = #twintrack.dispatch_kind<matmul>} ins(%q, %kt : memref<4x64x32xf16>, memref<4x32x256xf16>) outs(%s : memref<4x64x256xf32>)
  %h = memref.alloc() {alignment = 64 : i64} : memref<4x64x256xf16>
  linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel", "parallel"]} ins(%s : memref<4x64x256xf32>) outs(%h : memref<4x64x256xf16>) attrs = {twintrack.dispatch = "matmul_0", twintrack.dispatch_kind = #twintrack.dispatch_kind<matmul>} {
  ^bb0(%in: f32, %o: f16):
    %n = arith.truncf %in : f32 to f16
    linalg.yield %n : f16
  }
  %max = memref.alloc() {alignment = 64 : i64} : memref<4x64xf32>
  linalg.fill {twintrack.dispatch = "reduction_rows_1", twintrack.dispatch_kind = #twintrack.dispatch_kind<reduction_rows>} ins(%ninf : f32) outs(%max : memref<4x64xf32>)
  linalg.generic {indexing_maps = [#id, #row], iterator_types = ["parallel", "parallel", "reduction"]} ins(%h : memref<4x64x256xf16>) outs(%max : memref<4x64xf32>) attrs = {twintrack.dispatch = "reduction_rows_1", twintrack.dispatch_kind = #twintrack.dispatch_kind<reduction_rows>} {
  ^bb0(%in: f16, %o: f32):
    %w = arith.extf %in : f16 to f32
    %m = arith.maximumf %w, %o : f32
    linalg.yield %m : f32
  }
  %sum = memref.alloc() {alignment = 64 : i64} : memref<4x64xf32>
  linalg.fill {twintrack.dispatch = "reduction_rows_1", twintrack.dispatch_kind = #twintrack.dispatch_kind<reduction_rows>} ins(%zero : f32) outs(%sum : memref<4x64xf32>)
  linalg.generic {indexing_maps = [#id, #row, #row], iterator_types = ["parallel", "parallel", "reduction"]} ins(%h, %max : memref<4x64x256xf16>, memref<4x64xf32>) outs(%sum : memref<4x64xf32>) attrs = {twintrack.dispatch = "reduction_rows_1", twintrack.dispatch_kind = #twintrack.dispatch_kind<reduction_rows>} {
  ^bb0(%in: f16, %m: f32, %o: f32):
    %w = arith.extf %in : f16 to f32
    %d = arith.subf %w, %m : f32
    %e = math.exp %d : f32
    %a = arith.addf %e, %o : f32
    linalg.yield %a : f32
  }
  linalg.generic {indexing_maps = [#id, #row, #row, #id], iterator_types = ["parallel", "parallel", "parallel"]} ins(%h, %max, %sum : memref<4x64x256xf16>, memref<4x64xf32>, memref<4x64xf32>) outs(%h : memref<4x64x256xf16>) attrs = {twintrack.dispatch = "reduction_rows_1", twintrack.dispatch_kind = #twintrack.dispatch_kind<reduction_rows>} {
  ^bb0(%in: f16, %m: f32, %t: f32, %o: f16):
    %w = arith.extf %in : f16 to f32
    %d = arith.subf %w, %m : f32
    %e = math.exp %d : f32
    %p = arith.divf %e, %t : f32
    %n = arith.truncf %p : f32 to f16
    linalg.yield %n : f16
  }
  linalg.fill {twintrack.dispatch = "matmul_2", twintrack.dispatch_kind = #twintrack.dispatch_kind<matmul>} ins(%zero : f32) outs(%out : memref<4x64x32xf32>)
  linalg.batch_matmul {twintrack.dispatch = "matmul_2", twintrack.dispatch_kind = #twintrack.dispatch_kind<matmul>} ins(%h, %v : memref<4x64x256xf16>, memref<4x256x32xf16>) outs(%out : memref<4x64x32xf32>)
  memref.dealloc %max : memref<4x64xf32>
  memref.dealloc %sum : memref<4x64xf32>
  memref.dealloc %h : memref<4x64x256xf16>
  memref.dealloc %s : memref<4x64x256xf32>
  return
}

// Grouped KV heads (GQA): 4 query heads share 2 KV heads, so K and V are
// copied into (batch, kv heads, group, seq, dim), each KV head repeated for
// its group of 2. The kernel reads K and V at the group's head instead:
// outer index batch / (2 heads x 2), head (batch / 2) % 2. The copies and
// their buffers go.
// CHECK-LABEL: func.func @grouped_heads(
// CHECK-SAME:    %[[Q:.*]]: memref<4x64x32xf16>, %[[K:.*]]: memref<1x2x64x32xf16>, %[[V:.*]]: memref<1x2x64x32xf16>,
// CHECK-NOT:     linalg.
// CHECK-NOT:     memref.alloc
// CHECK:         gpu.launch
// CHECK:           %[[KV_OUTER:.*]] = arith.divui %[[BATCH:arg[0-9]+]], %c4 : index
// CHECK:           %[[GROUP:.*]] = arith.divui %[[BATCH]], %c2 : index
// CHECK:           %[[KV_HEAD:.*]] = arith.remui %[[GROUP]], %c2 : index
// CHECK:           memref.subview %[[K]][%[[KV_OUTER]], %[[KV_HEAD]], 0, 0] [1, 1, 64, 32] [1, 1, 1, 1] : memref<1x2x64x32xf16> to memref<64x32xf16, strided<[32, 1], offset: ?>>
// CHECK:           memref.subview %[[V]][{{.*}}] [1, 1, 64, 32]
// CHECK:         } {twintrack.kernel_path = "flash-attention-mma.sync 64x64x32 (2 copies read through)"}
// CHECK-NOT:     linalg.
// CHECK:         return
#repeat = affine_map<(d0, d1, d2, d3, d4) -> (d0, d1, d3, d4)>
#repeat_t = affine_map<(d0, d1, d2, d3, d4) -> (d0, d1, d4, d3)>
#whole = affine_map<(d0, d1, d2, d3, d4) -> (d0, d1, d2, d3, d4)>
func.func @grouped_heads(%q: memref<4x64x32xf16>, %k: memref<1x2x64x32xf16>, %v: memref<1x2x64x32xf16>, %out: memref<4x64x32xf32>) {
  %zero = arith.constant 0.0 : f32
  %ninf = arith.constant 0xFF800000 : f32
  %kg = memref.alloc() {alignment = 64 : i64} : memref<1x2x2x32x64xf16>
  linalg.generic {indexing_maps = [#repeat_t, #whole], iterator_types = ["parallel", "parallel", "parallel", "parallel", "parallel"]} ins(%k : memref<1x2x64x32xf16>) outs(%kg : memref<1x2x2x32x64xf16>) attrs = {twintrack.dispatch = "elementwise_0", twintrack.dispatch_kind = #twintrack.dispatch_kind<elementwise>} {
  ^bb0(%in: f16, %o: f16):
    linalg.yield %in : f16
  }
  %vg = memref.alloc() {alignment = 64 : i64} : memref<1x2x2x64x32xf16>
  linalg.generic {indexing_maps = [#repeat, #whole], iterator_types = ["parallel", "parallel", "parallel", "parallel", "parallel"]} ins(%v : memref<1x2x64x32xf16>) outs(%vg : memref<1x2x2x64x32xf16>) attrs = {twintrack.dispatch = "elementwise_1", twintrack.dispatch_kind = #twintrack.dispatch_kind<elementwise>} {
  ^bb0(%in: f16, %o: f16):
    linalg.yield %in : f16
  }
  %kt = memref.collapse_shape %kg [[0, 1, 2], [3], [4]] : memref<1x2x2x32x64xf16> into memref<4x32x64xf16>
  %vv = memref.collapse_shape %vg [[0, 1, 2], [3], [4]] : memref<1x2x2x64x32xf16> into memref<4x64x32xf16>
  %s = memref.alloc() {alignment = 64 : i64} : memref<4x64x64xf32>
  linalg.fill {twintrack.dispatch = "matmul_3", twintrack.dispatch_kind = #twintrack.dispatch_kind<matmul>} ins(%zero : f32) outs(%s : memref<4x64x64xf32>)
  linalg.batch_matmul {twintrack.dispatch = "matmul_3", twintrack.dispatch_kind = #twintrack.dispatch_kind<matmul>} ins(%q, %kt : memref<4x64x32xf16>, memref<4x32x64xf16>) outs(%s : memref<4x64x64xf32>)
  %h = memref.alloc() {alignment = 64 : i64} : memref<4x64x64xf16>
  linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel", "parallel"]} ins(%s : memref<4x64x64xf32>) outs(%h : memref<4x64x64xf16>) attrs = {twintrack.dispatch = "matmul_3", twintrack.dispatch_kind = #twintrack.dispatch_kind<matmul>} {
  ^bb0(%in: f32, %o: f16):
    %n = arith.truncf %in : f32 to f16
    linalg.yield %n : f16
  }
  %max = memref.alloc() {alignment = 64 : i64} : memref<4x64xf32>
  linalg.fill {twintrack.dispatch = "reduction_rows_4", twintrack.dispatch_kind = #twintrack.dispatch_kind<reduction_rows>} ins(%ninf : f32) outs(%max : memref<4x64xf32>)
  linalg.generic {indexing_maps = [#id, #row], iterator_types = ["parallel", "parallel", "reduction"]} ins(%h : memref<4x64x64xf16>) outs(%max : memref<4x64xf32>) attrs = {twintrack.dispatch = "reduction_rows_4", twintrack.dispatch_kind = #twintrack.dispatch_kind<reduction_rows>} {
  ^bb0(%in: f16, %o: f32):
    %w = arith.extf %in : f16 to f32
    %m = arith.maximumf %w, %o : f32
    linalg.yield %m : f32
  }
  %sum = memref.alloc() {alignment = 64 : i64} : memref<4x64xf32>
  linalg.fill {twintrack.dispatch = "reduction_rows_4", twintrack.dispatch_kind = #twintrack.dispatch_kind<reduction_rows>} ins(%zero : f32) outs(%sum : memref<4x64xf32>)
  linalg.generic {indexing_maps = [#id, #row, #row], iterator_types = ["parallel", "parallel", "reduction"]} ins(%h, %max : memref<4x64x64xf16>, memref<4x64xf32>) outs(%sum : memref<4x64xf32>) attrs = {twintrack.dispatch = "reduction_rows_4", twintrack.dispatch_kind = #twintrack.dispatch_kind<reduction_rows>} {
  ^bb0(%in: f16, %m: f32, %o: f32):
    %w = arith.extf %in : f16 to f32
    %d = arith.subf %w, %m : f32
    %e = math.exp %d : f32
    %a = arith.addf %e, %o : f32
    linalg.yield %a : f32
  }
  linalg.generic {indexing_maps = [#id, #row, #row, #id], iterator_types = ["parallel", "parallel", "parallel"]} ins(%h, %max, %sum : memref<4x64x64xf16>, memref<4x64xf32>, memref<4x64xf32>) outs(%h : memref<4x64x64xf16>) attrs = {twintrack.dispatch = "reduction_rows_4", twintrack.dispatch_kind = #twintrack.dispatch_kind<reduction_rows>} {
  ^bb0(%in: f16, %m: f32, %t: f32, %o: f16):
    %w = arith.extf %in : f16 to f32
    %d = arith.subf %w, %m : f32
    %e = math.exp %d : f32
    %p = arith.divf %e, %t : f32
    %n = arith.truncf %p : f32 to f16
    linalg.yield %n : f16
  }
  linalg.fill {twintrack.dispatch = "matmul_5", twintrack.dispatch_kind = #twintrack.dispatch_kind<matmul>} ins(%zero : f32) outs(%out : memref<4x64x32xf32>)
  linalg.batch_matmul {twintrack.dispatch = "matmul_5", twintrack.dispatch_kind = #twintrack.dispatch_kind<matmul>} ins(%h, %vv : memref<4x64x64xf16>, memref<4x64x32xf16>) outs(%out : memref<4x64x32xf32>)
  memref.dealloc %max : memref<4x64xf32>
  memref.dealloc %sum : memref<4x64xf32>
  memref.dealloc %h : memref<4x64x64xf16>
  memref.dealloc %s : memref<4x64x64xf32>
  memref.dealloc %kg : memref<1x2x2x32x64xf16>
  memref.dealloc %vg : memref<1x2x2x64x32xf16>
  return
}
