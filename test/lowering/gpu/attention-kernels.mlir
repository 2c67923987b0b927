// RUN: %PYTHON -m twintrack.passes gpu-attention-kernels %s | FileCheck %s

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
// CHECK:           vector.load %[[Q]]
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
// CHECK:           } {twintrack.kernel_path = "flash-attention-simt 64x64x32/4x8"}
// CHECK:           arith.divf
// CHECK:           vector.store %{{.*}}, %[[O]]
// CHECK:         return
#id = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
#row = affine_map<(d0, d1, d2) -> (d0, d1)>
func.func @attention(%q: memref<4x64x32xf32>, %kt: memref<4x32x64xf32>, %v: memref<4x64x32xf32>, %out: memref<4x64x32xf32>) {
  %zero = arith.constant 0.0 : f32
  %ninf = arith.constant 0xFF800000 : f32
  %s = memref.alloc() {alignment = 64 : i64} : memref<4x64x64xf32>
  linalg.fill {twintrack.dispatch = "matmul_0"} ins(%zero : f32) outs(%s : memref<4x64x64xf32>)
  linalg.batch_matmul {twintrack.dispatch = "matmul_0"} ins(%q, %kt : memref<4x64x32xf32>, memref<4x32x64xf32>) outs(%s : memref<4x64x64xf32>)
  linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel", "parallel"]} ins(%s : memref<4x64x64xf32>) outs(%s : memref<4x64x64xf32>) attrs = {twintrack.dispatch = "matmul_0"} {
  ^bb0(%in: f32, %o: f32):
    %i = linalg.index 1 : index
    %j = linalg.index 2 : index
    %above = arith.cmpi ugt, %j, %i : index
    %masked = arith.select %above, %ninf, %in : f32
    linalg.yield %masked : f32
  }
  %max = memref.alloc() {alignment = 64 : i64} : memref<4x64xf32>
  linalg.fill {twintrack.dispatch = "reduction_rows_1"} ins(%ninf : f32) outs(%max : memref<4x64xf32>)
  linalg.generic {indexing_maps = [#id, #row], iterator_types = ["parallel", "parallel", "reduction"]} ins(%s : memref<4x64x64xf32>) outs(%max : memref<4x64xf32>) attrs = {twintrack.dispatch = "reduction_rows_1"} {
  ^bb0(%in: f32, %o: f32):
    %m = arith.maximumf %in, %o : f32
    linalg.yield %m : f32
  }
  %sum = memref.alloc() {alignment = 64 : i64} : memref<4x64xf32>
  linalg.fill {twintrack.dispatch = "reduction_rows_1"} ins(%zero : f32) outs(%sum : memref<4x64xf32>)
  linalg.generic {indexing_maps = [#id, #row, #row], iterator_types = ["parallel", "parallel", "reduction"]} ins(%s, %max : memref<4x64x64xf32>, memref<4x64xf32>) outs(%sum : memref<4x64xf32>) attrs = {twintrack.dispatch = "reduction_rows_1"} {
  ^bb0(%in: f32, %m: f32, %o: f32):
    %d = arith.subf %in, %m : f32
    %e = math.exp %d : f32
    %a = arith.addf %e, %o : f32
    linalg.yield %a : f32
  }
  linalg.generic {indexing_maps = [#id, #row, #row, #id], iterator_types = ["parallel", "parallel", "parallel"]} ins(%s, %max, %sum : memref<4x64x64xf32>, memref<4x64xf32>, memref<4x64xf32>) outs(%s : memref<4x64x64xf32>) attrs = {twintrack.dispatch = "reduction_rows_1"} {
  ^bb0(%in: f32, %m: f32, %t: f32, %o: f32):
    %d = arith.subf %in, %m : f32
    %e = math.exp %d : f32
    %p = arith.divf %e, %t : f32
    linalg.yield %p : f32
  }
  linalg.fill {twintrack.dispatch = "matmul_2"} ins(%zero : f32) outs(%out : memref<4x64x32xf32>)
  linalg.batch_matmul {twintrack.dispatch = "matmul_2"} ins(%s, %v : memref<4x64x64xf32>, memref<4x64x32xf32>) outs(%out : memref<4x64x32xf32>)
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
  linalg.fill {twintrack.dispatch = "matmul_0"} ins(%zero : f32) outs(%s : memref<4x64x64xf32>)
  linalg.batch_matmul {twintrack.dispatch = "matmul_0"} ins(%q, %kt : memref<4x64x32xf32>, memref<4x32x64xf32>) outs(%s : memref<4x64x64xf32>)
  %max = memref.alloc() {alignment = 64 : i64} : memref<4x64xf32>
  linalg.fill {twintrack.dispatch = "reduction_rows_1"} ins(%ninf : f32) outs(%max : memref<4x64xf32>)
  linalg.generic {indexing_maps = [#id, #row], iterator_types = ["parallel", "parallel", "reduction"]} ins(%s : memref<4x64x64xf32>) outs(%max : memref<4x64xf32>) attrs = {twintrack.dispatch = "reduction_rows_1"} {
  ^bb0(%in: f32, %o: f32):
    %m = arith.maximumf %in, %o : f32
    linalg.yield %m : f32
  }
  %sum = memref.alloc() {alignment = 64 : i64} : memref<4x64xf32>
  linalg.fill {twintrack.dispatch = "reduction_rows_1"} ins(%zero : f32) outs(%sum : memref<4x64xf32>)
  linalg.generic {indexing_maps = [#id, #row, #row], iterator_types = ["parallel", "parallel", "reduction"]} ins(%s, %max : memref<4x64x64xf32>, memref<4x64xf32>) outs(%sum : memref<4x64xf32>) attrs = {twintrack.dispatch = "reduction_rows_1"} {
  ^bb0(%in: f32, %m: f32, %o: f32):
    %d = arith.subf %in, %m : f32
    %e = math.exp %d : f32
    %a = arith.addf %e, %o : f32
    linalg.yield %a : f32
  }
  linalg.generic {indexing_maps = [#id, #row, #row, #id], iterator_types = ["parallel", "parallel", "parallel"]} ins(%s, %max, %sum : memref<4x64x64xf32>, memref<4x64xf32>, memref<4x64xf32>) outs(%s : memref<4x64x64xf32>) attrs = {twintrack.dispatch = "reduction_rows_1"} {
  ^bb0(%in: f32, %m: f32, %t: f32, %o: f32):
    %d = arith.subf %in, %m : f32
    %e = math.exp %d : f32
    %p = arith.divf %e, %t : f32
    linalg.yield %p : f32
  }
  linalg.fill {twintrack.dispatch = "matmul_2"} ins(%zero : f32) outs(%out : memref<4x64x32xf32>)
  linalg.batch_matmul {twintrack.dispatch = "matmul_2"} ins(%s, %v : memref<4x64x64xf32>, memref<4x64x32xf32>) outs(%out : memref<4x64x32xf32>)
  memref.copy %s, %probabilities : memref<4x64x64xf32> to memref<4x64x64xf32>
  memref.dealloc %max : memref<4x64xf32>
  memref.dealloc %sum : memref<4x64xf32>
  memref.dealloc %s : memref<4x64x64xf32>
  return
}
