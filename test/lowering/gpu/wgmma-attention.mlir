// RUN: %PYTHON -m twintrack.compiler.passes gpu-attention-kernels %s | FileCheck %s
// RUN: %PYTHON -m twintrack.compiler.passes "gpu-attention-kernels{arch=sm_90}" %s | FileCheck %s --check-prefix=MMA

// An f16 causal SDPA (B1 H2 S128 D64, as torch.export gives it) on sm_90a
// becomes the wgmma flash kernel: two warpgroups of 64 query rows; K and V
// tiles of 64 keys in a ring of 4 in dynamic shared memory (swizzled for
// wgmma's descriptors), Q's padded tile after the ring; Q·Kᵀ and P·V as
// wgmmas written as PTX with A in registers (Q's fragments, then P), each
// carrying its shape for the kernel report. The first tile's scores and
// softmax come before the loop; each step issues the next tile's scores
// (B = K, K-major) and this tile's P·V (B = V, transposed by wgmma), waits
// for the scores alone, runs their softmax, then waits for P·V (each wait
// takes the accumulators through it, so nothing reads them early). A tile the
// causal mask reaches takes the masked softmax in a branch: one compare a
// score, its constant key offset against the row's limit. The key loop asks
// for two resident blocks an SM (kernel-occupancy makes it nvvm.minctasm).
// Without wgmma (sm_90) the mma.sync kernel takes it.

// CHECK-LABEL: func.func @forward(
// CHECK:         gpu.launch blocks({{.*}}) in (%{{.*}} = %c1, %{{.*}} = %c1, %{{.*}} = %c2) threads({{.*}}) in (%{{.*}} = %c256, %{{.*}} = %c1, %{{.*}} = %c1) dynamic_shared_memory_size %c84992_i32
// CHECK:           %[[RAW:.*]] = gpu.dynamic_shared_memory : memref<?xi8, #gpu.address_space<workgroup>>
// CHECK:           memref.view %[[RAW]][%{{.*}}][] : memref<?xi8, #gpu.address_space<workgroup>> to memref<32768xf16, #gpu.address_space<workgroup>>
// CHECK:           %[[QS:.*]] = memref.view %[[RAW]][%{{.*}}][] : memref<?xi8, #gpu.address_space<workgroup>> to memref<128x72xf16, #gpu.address_space<workgroup>>
// CHECK:           nvvm.cp.async.wait.group 2
// CHECK-NEXT:      nvvm.fence.proxy {kind = #nvvm.proxy_kind<async.shared>, space = #nvvm.shared_space<cta>}
// CHECK-NEXT:      gpu.barrier
// CHECK:           nvgpu.ldmatrix %[[QS]]
// CHECK:           nvvm.wgmma.fence.aligned
// CHECK-COUNT-4:   llvm.inline_asm has_side_effects {twintrack.wgmma_shape = #nvvm.shape<m = 64, n = 64, k = 16>} "{{.*}}wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 {{.*}}p, 1, 1, 0;
// CHECK:           nvvm.wgmma.commit.group.sync.aligned
// CHECK:           llvm.inline_asm has_side_effects "wgmma.wait_group.sync.aligned 0;", "=f,{{.*}},=f,0,1,{{.*}},31"
// CHECK:           scf.if %{{.*}} -> (f32, f32, f32, f32, f32, f32, i32,
// CHECK:             arith.cmpi sgt, %c0_i32, %[[LIMIT:.*]] : i32
// CHECK:             arith.cmpi sgt, %c1_i32, %[[LIMIT]] : i32
// CHECK:             arith.cmpi sgt, %c8_i32, %[[LIMIT]] : i32
// CHECK:             llvm.inline_asm "ex2.approx.ftz.f32 $0, $1;"
// CHECK:           } {twintrack.then_share = 1.000000e+00 : f64}
// CHECK:           scf.for %{{.*}} = %c0 to %{{.*}} step %c64 iter_args(
// CHECK:             nvvm.cp.async.wait.group 1
// CHECK-NEXT:        nvvm.fence.proxy
// CHECK-NEXT:        gpu.barrier
// CHECK:             nvgpu.device_async_copy
// CHECK:             nvvm.cp.async.commit.group
// CHECK:             nvvm.wgmma.fence.aligned
// CHECK-COUNT-4:     llvm.inline_asm {{.*}}p, 1, 1, 0;
// CHECK:             nvvm.wgmma.commit.group.sync.aligned
// CHECK-COUNT-4:     llvm.inline_asm {{.*}}p, 1, 1, 1;
// CHECK:             nvvm.wgmma.commit.group.sync.aligned
// CHECK:             llvm.inline_asm has_side_effects "wgmma.wait_group.sync.aligned 1;", "=f,{{.*}},=f,0,1,{{.*}},31"
// CHECK:             scf.if
// The wait for P·V takes the P registers it reads ("r"), so nothing reuses
// them before it (ptxas would serialize every wgmma).
// CHECK:             llvm.inline_asm has_side_effects "wgmma.wait_group.sync.aligned 0;", "=f,{{.*}},=f,r,r,r,r,r,r,r,r,r,r,r,r,r,r,r,r,0,1,{{.*}},31"
// CHECK:             scf.yield
// CHECK:           } {twintrack.blocks_per_sm = 2 : i64, twintrack.kernel_path = "flash-attention-wgmma 128x64x64/2 warpgroups/4 stages/2 blocks an SM (2 copies read through)", twintrack.mean_trips = 1.000000e+00 : f64}
// The last tile's P·V after the loop.
// CHECK:           nvvm.wgmma.fence.aligned
// CHECK-COUNT-4:   llvm.inline_asm {{.*}}p, 1, 1, 1;
// CHECK:           llvm.inline_asm has_side_effects "wgmma.wait_group.sync.aligned 0;", "=f,{{.*}},=f,r,r,r,r,r,r,r,r,r,r,r,r,r,r,r,r,0,1,{{.*}},31"

// MMA-LABEL: func.func @forward(
// MMA-NOT:     llvm.inline_asm {{.*}}wgmma
// MMA:         nvgpu.mma.sync
// MMA:         twintrack.kernel_path = "flash-attention-mma.sync
// MMA-NOT:     nvvm.wgmma
#map = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
#map1 = affine_map<(d0, d1, d2) -> (d0, d1)>
module attributes {twintrack.largest_buffer_bytes = 131072 : i64} {
  func.func @forward(%arg0: memref<1x2x128x64xf16>, %arg1: memref<1x2x128x64xf16>, %arg2: memref<1x2x128x64xf16>, %arg3: memref<1x2x128x64xf16>) {
    %false = arith.constant false
    %cst = arith.constant 0.000000e+00 : f32
    %c0_i64 = arith.constant 0 : i64
    %cst_0 = arith.constant 0xFF800000 : f32
    %cst_1 = arith.constant 1.250000e-01 : f32
    %collapse_shape = memref.collapse_shape %arg0 [[0, 1], [2], [3]] : memref<1x2x128x64xf16> into memref<2x128x64xf16>
    %alloc = memref.alloc() {alignment = 64 : i64} : memref<2x128x64xf16>
    linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel", "parallel"]} ins(%collapse_shape : memref<2x128x64xf16>) outs(%alloc : memref<2x128x64xf16>) attrs =  {twintrack.dispatch = "elementwise_0", twintrack.dispatch_kind = #twintrack.dispatch_kind<elementwise>} {
    ^bb0(%in: f16, %out: f16):
      %0 = arith.extf %in : f16 to f32
      %1 = arith.mulf %0, %cst_1 : f32
      %2 = arith.truncf %1 : f32 to f16
      linalg.yield %2 : f16
    }
    %alloc_2 = memref.alloc() {alignment = 64 : i64} : memref<1x2x64x128xf16>
    linalg.transpose ins(%arg1 : memref<1x2x128x64xf16>) outs(%alloc_2 : memref<1x2x64x128xf16>) permutation = [0, 1, 3, 2]  {twintrack.dispatch = "elementwise_1", twintrack.dispatch_kind = #twintrack.dispatch_kind<elementwise>}
    %collapse_shape_3 = memref.collapse_shape %alloc_2 [[0, 1], [2], [3]] : memref<1x2x64x128xf16> into memref<2x64x128xf16>
    %alloc_4 = memref.alloc() {alignment = 64 : i64} : memref<2x128x128xf32>
    linalg.fill {twintrack.dispatch = "matmul_2", twintrack.dispatch_kind = #twintrack.dispatch_kind<matmul>} ins(%cst : f32) outs(%alloc_4 : memref<2x128x128xf32>)
    linalg.batch_matmul {twintrack.dispatch = "matmul_2", twintrack.dispatch_kind = #twintrack.dispatch_kind<matmul>} ins(%alloc, %collapse_shape_3 : memref<2x128x64xf16>, memref<2x64x128xf16>) outs(%alloc_4 : memref<2x128x128xf32>)
    %alloc_5 = memref.alloc() {alignment = 64 : i64} : memref<2x128x128xf16>
    linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel", "parallel"]} ins(%alloc_4 : memref<2x128x128xf32>) outs(%alloc_5 : memref<2x128x128xf16>) attrs =  {twintrack.dispatch = "matmul_2", twintrack.dispatch_kind = #twintrack.dispatch_kind<matmul>} {
    ^bb0(%in: f32, %out: f16):
      %0 = linalg.index 1 : index
      %1 = arith.index_cast %0 : index to i64
      %2 = linalg.index 2 : index
      %3 = arith.index_cast %2 : index to i64
      %4 = arith.subi %3, %1 : i64
      %5 = arith.cmpi sle, %4, %c0_i64 : i64
      %6 = arith.cmpi eq, %5, %false : i1
      %7 = arith.select %6, %cst_0, %in : f32
      %8 = arith.truncf %7 : f32 to f16
      linalg.yield %8 : f16
    }
    %alloc_6 = memref.alloc() {alignment = 64 : i64} : memref<2x128xf32>
    linalg.fill {twintrack.dispatch = "reduction_rows_3", twintrack.dispatch_kind = #twintrack.dispatch_kind<reduction_rows>} ins(%cst_0 : f32) outs(%alloc_6 : memref<2x128xf32>)
    linalg.generic {indexing_maps = [#map, #map1], iterator_types = ["parallel", "parallel", "reduction"]} ins(%alloc_5 : memref<2x128x128xf16>) outs(%alloc_6 : memref<2x128xf32>) attrs =  {twintrack.dispatch = "reduction_rows_3", twintrack.dispatch_kind = #twintrack.dispatch_kind<reduction_rows>} {
    ^bb0(%in: f16, %out: f32):
      %0 = arith.extf %in : f16 to f32
      %1 = arith.maximumf %0, %out : f32
      linalg.yield %1 : f32
    }
    %alloc_7 = memref.alloc() {alignment = 64 : i64} : memref<2x128xf32>
    linalg.fill {twintrack.dispatch = "reduction_rows_3", twintrack.dispatch_kind = #twintrack.dispatch_kind<reduction_rows>} ins(%cst : f32) outs(%alloc_7 : memref<2x128xf32>)
    linalg.generic {indexing_maps = [#map, #map1, #map1], iterator_types = ["parallel", "parallel", "reduction"]} ins(%alloc_5, %alloc_6 : memref<2x128x128xf16>, memref<2x128xf32>) outs(%alloc_7 : memref<2x128xf32>) attrs =  {twintrack.dispatch = "reduction_rows_3", twintrack.dispatch_kind = #twintrack.dispatch_kind<reduction_rows>} {
    ^bb0(%in: f16, %in_11: f32, %out: f32):
      %0 = arith.extf %in : f16 to f32
      %1 = arith.subf %0, %in_11 : f32
      %2 = math.exp %1 : f32
      %3 = arith.addf %2, %out : f32
      linalg.yield %3 : f32
    }
    linalg.generic {indexing_maps = [#map, #map1, #map1, #map], iterator_types = ["parallel", "parallel", "parallel"]} ins(%alloc_5, %alloc_6, %alloc_7 : memref<2x128x128xf16>, memref<2x128xf32>, memref<2x128xf32>) outs(%alloc_5 : memref<2x128x128xf16>) attrs =  {twintrack.dispatch = "reduction_rows_3", twintrack.dispatch_kind = #twintrack.dispatch_kind<reduction_rows>} {
    ^bb0(%in: f16, %in_11: f32, %in_12: f32, %out: f16):
      %0 = arith.extf %in : f16 to f32
      %1 = arith.subf %0, %in_11 : f32
      %2 = math.exp %1 : f32
      %3 = arith.divf %2, %in_12 : f32
      %4 = arith.truncf %3 : f32 to f16
      linalg.yield %4 : f16
    }
    %collapse_shape_8 = memref.collapse_shape %arg2 [[0, 1], [2], [3]] : memref<1x2x128x64xf16> into memref<2x128x64xf16>
    %alloc_9 = memref.alloc() {alignment = 64 : i64} : memref<2x128x64xf32>
    linalg.fill {twintrack.dispatch = "matmul_4", twintrack.dispatch_kind = #twintrack.dispatch_kind<matmul>} ins(%cst : f32) outs(%alloc_9 : memref<2x128x64xf32>)
    linalg.batch_matmul {twintrack.dispatch = "matmul_4", twintrack.dispatch_kind = #twintrack.dispatch_kind<matmul>} ins(%alloc_5, %collapse_shape_8 : memref<2x128x128xf16>, memref<2x128x64xf16>) outs(%alloc_9 : memref<2x128x64xf32>)
    %collapse_shape_10 = memref.collapse_shape %arg3 [[0, 1], [2], [3]] : memref<1x2x128x64xf16> into memref<2x128x64xf16>
    linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel", "parallel"]} ins(%alloc_9 : memref<2x128x64xf32>) outs(%collapse_shape_10 : memref<2x128x64xf16>) attrs =  {twintrack.dispatch = "matmul_4", twintrack.dispatch_kind = #twintrack.dispatch_kind<matmul>} {
    ^bb0(%in: f32, %out: f16):
      %0 = arith.truncf %in : f32 to f16
      linalg.yield %0 : f16
    }
    %expand_shape = memref.expand_shape %collapse_shape_10 [[0, 1], [2], [3]] output_shape [1, 2, 128, 64] : memref<2x128x64xf16> into memref<1x2x128x64xf16>
    memref.dealloc %alloc : memref<2x128x64xf16>
    memref.dealloc %alloc_2 : memref<1x2x64x128xf16>
    memref.dealloc %alloc_4 : memref<2x128x128xf32>
    memref.dealloc %alloc_6 : memref<2x128xf32>
    memref.dealloc %alloc_7 : memref<2x128xf32>
    memref.dealloc %alloc_9 : memref<2x128x64xf32>
    memref.dealloc %alloc_5 : memref<2x128x128xf16>
    return
  }
}
