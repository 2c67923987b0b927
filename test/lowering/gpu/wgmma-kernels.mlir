// RUN: %PYTHON -m twintrack.compiler.passes 'gpu-matmul-kernels{arch=sm_90a}' %s | FileCheck %s
// RUN: %PYTHON -m twintrack.compiler.passes 'gpu-matmul-kernels{arch=sm_90}' %s | FileCheck %s --check-prefix=SM90
// RUN: %PYTHON -m twintrack.compiler.passes 'gpu-matmul-kernels{arch=sm_90a tf32=true}' %s | FileCheck %s --check-prefix=TF32
// RUN: %PYTHON -m twintrack.compiler.passes 'gpu-matmul-kernels{arch=sm_90 tf32=true}' %s | FileCheck %s --check-prefix=EXACT

// On sm_90a (H100/H200, the recipe's default arch) f16 and bf16 matmuls take
// the warpgroup-MMA kernel (twintrack.kernels.wgmma_matmul); other chips keep
// mma.sync (matmul-kernels.mlir).

// 2048x2048 in 128x256 tiles is 128 blocks of two warpgroups (256 threads).
// K = 512 is 8 steps, more than the ring holds: the ring of 4 stages (the
// most that fit), (128 + 256) x 64 f16 each, is dynamic shared memory
// (192 KiB + 1 KiB to align its base to the 1024-byte swizzle atom); the
// wgmma descriptors carry its address >> 4, 128-byte swizzle (bit 62) and
// the stride between 8-row atoms (1024 bytes >> 4 = 64, bit 32 up); B,
// K x N, is N-major: 64-column atom columns 8 KiB apart (leading offset
// 512 << 16). The copies of the first two K steps go out before the loop,
// one cp.async group each; at each step the block waits for the step's
// group, fences it to the async proxy and meets at a barrier; each
// warpgroup issues four m64n256k16 wgmmas (B transposed by the hardware:
// <row>) as one group, then the block issues the copies two steps ahead
// (zero-filled past K) and waits until one wgmma group is in flight. Each
// thread then stores its 128 accumulators (64 rows x 256 of a warpgroup over
// 128 threads) as 64 pairs of adjacent columns.
// CHECK-LABEL: func.func @plain(
// CHECK-SAME:    %[[A:.*]]: memref<2048x512xf16>, %[[B:.*]]: memref<512x2048xf16>, %[[C:.*]]: memref<2048x2048xf32>)
// CHECK-DAG:     %[[SMEM:.*]] = arith.constant 197632 : i32
// CHECK-DAG:     %[[A_BITS:.*]] = arith.constant 4611686293305360384 : i64
// CHECK-DAG:     %[[B_BITS:.*]] = arith.constant 4611686293338849280 : i64
// CHECK:         gpu.launch blocks({{.*}}) in (%{{.*}} = %c8, %{{.*}} = %c16, %{{.*}} = %c1) threads({{.*}}) in (%{{.*}} = %c256, {{.*}}) dynamic_shared_memory_size %[[SMEM]] module(@forward_wgmma_matmul_0)
// CHECK:           %[[RAW:.*]] = gpu.dynamic_shared_memory : memref<?xi8, #gpu.address_space<workgroup>>
// CHECK:           %[[BASE:.*]] = memref.extract_aligned_pointer_as_index %[[RAW]]
// CHECK:           %[[RING:.*]] = memref.view %[[RAW]][%{{.*}}][] : memref<?xi8, #gpu.address_space<workgroup>> to memref<98304xf16, #gpu.address_space<workgroup>>
// CHECK:           %[[A_DESC:.*]] = arith.ori %{{.*}}, %[[A_BITS]] : i64
// CHECK:           %[[B_DESC:.*]] = arith.ori %{{.*}}, %[[B_BITS]] : i64
// CHECK-COUNT-4:   nvgpu.device_async_copy %[[A]][{{.*}}], %[[RING]][{{.*}}], 8 {bypassL1}
// CHECK-COUNT-8:   nvgpu.device_async_copy %[[B]][{{.*}}], %[[RING]][{{.*}}], 8 {bypassL1}
// CHECK-NEXT:      nvvm.cp.async.commit.group
// CHECK:           nvgpu.device_async_copy
// CHECK:           nvvm.cp.async.commit.group
// CHECK-NOT:       nvgpu.device_async_copy
// CHECK:           %[[ZERO:.*]] = llvm.mlir.zero : !llvm.struct<(f32, {{.*}})>
// CHECK:           scf.for %[[K:.*]] = %c0 to %c512 step %c64{{(_[0-9]+)?}} iter_args(%[[ACC:.*]] = %[[ZERO]])
// CHECK:             nvvm.cp.async.wait.group 1
// CHECK-NEXT:        nvvm.fence.proxy {kind = #nvvm.proxy_kind<async.shared>, space = #nvvm.shared_space<cta>}
// CHECK-NEXT:        gpu.barrier
// CHECK:             %[[A0:.*]] = arith.addi %[[A_DESC]], %{{.*}} : i64
// CHECK:             %[[B0:.*]] = arith.addi %[[B_DESC]], %{{.*}} : i64
// CHECK-NEXT:        nvvm.wgmma.fence.aligned
// CHECK-NEXT:        %[[D0:.*]] = nvvm.wgmma.mma_async %[[A0]], %[[B0]], %[[ACC]], <m = 64, n = 256, k = 16>, D[<f32>, <one>], A[<f16>, <one>, <row>], B[<f16>, <one>, <row>]
// CHECK:             %[[A1:.*]] = arith.addi %[[A0]], %c2_i64 : i64
// CHECK:             %[[B1:.*]] = arith.addi %[[B0]], %c128_i64 : i64
// CHECK:             nvvm.wgmma.mma_async %[[A1]], %[[B1]], %[[D0]]
// CHECK-COUNT-2:     nvvm.wgmma.mma_async
// CHECK-NEXT:        nvvm.wgmma.commit.group.sync.aligned
// CHECK:             %[[INSIDE:.*]] = arith.cmpi ult, %{{.*}}, %c512 : index
// CHECK:             %[[SIZE:.*]] = arith.select %[[INSIDE]], %c8, %c0 : index
// CHECK-COUNT-12:    nvgpu.device_async_copy {{.*}}, 8, %[[SIZE]] {bypassL1}
// CHECK-NEXT:        nvvm.cp.async.commit.group
// CHECK-NEXT:        nvvm.wgmma.wait.group.sync.aligned 1
// CHECK-NEXT:        scf.yield
// CHECK:           } {twintrack.kernel_path = "wgmma-matmul 128x256x64/2 warpgroups/4 stages TMA stores"}
// CHECK-NEXT:      nvvm.wgmma.wait.group.sync.aligned 0
// CHECK-NEXT:      nvvm.cp.async.wait.group 0
// The results staged over the ring (once every warpgroup is done with it),
// 32 f32 columns a TMA store, 8 stores a warpgroup, none from registers.
// CHECK:           gpu.barrier
// CHECK:           llvm.extractvalue %{{.*}}[0]
// CHECK-NEXT:      llvm.extractvalue %{{.*}}[1]
// CHECK-NEXT:      vector.from_elements %{{.*}}, %{{.*}} : vector<2xf32>
// CHECK:           llvm.store %{{.*}}, %{{.*}} {alignment = 8 : i64} : vector<2xf32>, !llvm.ptr<3>
// CHECK-COUNT-8:   nvvm.cp.async.bulk.tensor.global.shared.cta
// CHECK:           nvvm.cp.async.bulk.wait_group 0
// CHECK-NOT:       vector.store
// CHECK:           gpu.terminator
// CHECK-NOT:     linalg.matmul
// SM90-LABEL: func.func @plain(
// SM90:         nvgpu.mma.sync
// SM90-NOT:     nvvm.wgmma
func.func @plain(%a: memref<2048x512xf16>, %b: memref<512x2048xf16>, %c: memref<2048x2048xf32>) {
  %zero = arith.constant 0.0 : f32
  linalg.fill ins(%zero : f32) outs(%c : memref<2048x2048xf32>)
  linalg.matmul ins(%a, %b : memref<2048x512xf16>, memref<512x2048xf16>) outs(%c : memref<2048x2048xf32>)
  return
}

// A short K fits the ring whole: 2048x256x256 in 64x64 tiles (128 blocks,
// one per SM) is 4 K steps in 4 stages of 16 KiB. Every step's copies go
// out before the loop, one group each; nothing is refilled, so the loop
// issues no copies and commits an empty group per step: waiting until 3
// groups are pending is waiting for step i's.
// CHECK-LABEL: func.func @whole_k(
// CHECK-SAME:    %[[X:.*]]: memref<2048x256xf16>, %[[W:.*]]: memref<256x256xf16>, %{{.*}}: memref<2048x256xf32>)
// CHECK-DAG:     %[[SMEM:.*]] = arith.constant 66560 : i32
// CHECK:         gpu.launch {{.*}} in (%{{.*}} = %c4{{(_[0-9]+)?}}, %{{.*}} = %c32{{(_[0-9]+)?}}, {{.*}}) dynamic_shared_memory_size %[[SMEM]]
// CHECK-COUNT-4:   nvvm.cp.async.commit.group
// CHECK-NOT:       nvgpu.device_async_copy
// CHECK:           scf.for %{{.*}} = %c0 to %c256 step %c64
// CHECK-NEXT:        arith.divui
// CHECK-NEXT:        nvvm.cp.async.wait.group 3
// CHECK-NOT:         nvgpu.device_async_copy
// CHECK:             nvvm.wgmma.commit.group.sync.aligned
// CHECK-NEXT:        nvvm.cp.async.commit.group
// CHECK-NEXT:        nvvm.wgmma.wait.group.sync.aligned 1
// CHECK-NEXT:        scf.yield
// CHECK:           } {twintrack.kernel_path = "wgmma-matmul 64x64x64/1 warpgroups/4 stages TMA stores"}
func.func @whole_k(%x: memref<2048x256xf16>, %w: memref<256x256xf16>, %y: memref<2048x256xf32>) {
  %zero = arith.constant 0.0 : f32
  linalg.fill ins(%zero : f32) outs(%y : memref<2048x256xf32>)
  linalg.matmul indexing_maps = [affine_map<(m, n, k) -> (m, k)>, affine_map<(m, n, k) -> (n, k)>,
                                 affine_map<(m, n, k) -> (m, n)>]
      ins(%x, %w : memref<2048x256xf16>, memref<256x256xf16>) outs(%y : memref<2048x256xf32>)
  return
}

// A long K with a small output: 2048x256x1024 is again 128 blocks of 64x64,
// one per SM, so the ring takes the table's most for this tile, 8 stages
// (128 KiB + 1 KiB), and the copies run 6 of the 16 K steps ahead: 6 groups
// before the loop, the wait leaves 5 pending, and step i refills the stage
// of step i + 6.
// CHECK-LABEL: func.func @deep_ring(
// CHECK-DAG:     %[[SMEM:.*]] = arith.constant 132096 : i32
// CHECK:         gpu.launch {{.*}} in (%{{.*}} = %c4{{(_[0-9]+)?}}, %{{.*}} = %c32{{(_[0-9]+)?}}, {{.*}}) dynamic_shared_memory_size %[[SMEM]]
// CHECK:           %[[RING:.*]] = memref.view {{.*}} to memref<65536xf16, #gpu.address_space<workgroup>>
// CHECK-COUNT-6:   nvvm.cp.async.commit.group
// CHECK-NOT:       nvvm.cp.async.commit.group
// CHECK:           scf.for %{{.*}} = %c0 to %c1024 step %c64
// CHECK:             nvvm.cp.async.wait.group 5
// CHECK:             nvvm.wgmma.commit.group.sync.aligned
// CHECK:             %[[AHEAD:.*]] = arith.addi %{{.*}}, %c384 : index
// CHECK-NEXT:        arith.cmpi ult, %[[AHEAD]], %c1024 : index
// CHECK:             %[[NEXT:.*]] = arith.addi %{{.*}}, %c6 : index
// CHECK-NEXT:        arith.remui %[[NEXT]], %c8 : index
// CHECK:             nvgpu.device_async_copy
// CHECK:             nvvm.cp.async.commit.group
// CHECK-NEXT:        nvvm.wgmma.wait.group.sync.aligned 1
// CHECK:           } {twintrack.kernel_path = "wgmma-matmul 64x64x64/1 warpgroups/8 stages TMA stores"}
func.func @deep_ring(%x: memref<2048x1024xf16>, %w: memref<256x1024xf16>, %y: memref<2048x256xf32>) {
  %zero = arith.constant 0.0 : f32
  linalg.fill ins(%zero : f32) outs(%y : memref<2048x256xf32>)
  linalg.matmul indexing_maps = [affine_map<(m, n, k) -> (m, k)>, affine_map<(m, n, k) -> (n, k)>,
                                 affine_map<(m, n, k) -> (m, n)>]
      ins(%x, %w : memref<2048x1024xf16>, memref<256x1024xf16>) outs(%y : memref<2048x256xf32>)
  return
}

// A linear layer (weight Bᵀ, N x K: K-major like A, so wgmma reads it
// untransposed, <col>, and 16 of K is 32 bytes further, as for A) in bf16,
// with bias and narrowing as its epilogue. 256x256 gives the most blocks
// (16) in 64x64 tiles of one warpgroup; its K of 128 is 2 steps, so a ring
// of 2 stages of 16 KiB holds all of it (+ 1 KiB of alignment). Each thread's
// accumulator pairs get the bias of their two columns, are narrowed to
// bf16 and stored as pairs.
#lhs = affine_map<(m, n, k) -> (m, k)>
#weight = affine_map<(m, n, k) -> (n, k)>
#res = affine_map<(m, n, k) -> (m, n)>
#id = affine_map<(d0, d1) -> (d0, d1)>
#col = affine_map<(d0, d1) -> (d1)>
// CHECK-LABEL: func.func @linear_bias(
// CHECK-SAME:    %[[X:.*]]: memref<256x128xbf16>, %[[W:.*]]: memref<256x128xbf16>, %[[BIAS:.*]]: memref<256xf32>, %[[Y:.*]]: memref<256x256xbf16>)
// CHECK-NOT:     memref.alloc
// CHECK-DAG:     %[[SMEM:.*]] = arith.constant 33792 : i32
// CHECK-DAG:     %[[KMAJOR:.*]] = arith.constant 4611686293305360384 : i64
// CHECK:         gpu.launch {{.*}} in (%{{.*}} = %c128, {{.*}}) dynamic_shared_memory_size %[[SMEM]] module(@forward_wgmma_matmul_{{[0-9]+}})
// CHECK:           arith.ori %{{.*}}, %[[KMAJOR]] : i64
// CHECK:           arith.ori %{{.*}}, %[[KMAJOR]] : i64
// CHECK:           nvgpu.device_async_copy %[[W]]
// CHECK:           scf.for
// CHECK:             nvvm.wgmma.mma_async {{.*}}, <m = 64, n = 64, k = 16>, D[<f32>, <one>], A[<bf16>, <one>, <row>], B[<bf16>, <one>, <col>]
// CHECK:             %{{.*}} = arith.addi %{{.*}}, %c2_i64 : i64
// CHECK-NEXT:        %{{.*}} = arith.addi %{{.*}}, %c2_i64 : i64
// CHECK-NEXT:        nvvm.wgmma.mma_async
// CHECK:           } {twintrack.kernel_path = "wgmma-matmul 64x64x64/1 warpgroups/2 stages TMA stores"}
// CHECK:           memref.load %[[BIAS]]
// CHECK:           arith.addf
// CHECK:           arith.truncf %{{.*}} : f32 to bf16
// CHECK:           vector.from_elements %{{.*}}, %{{.*}} : vector<2xbf16>
// CHECK:           llvm.store %{{.*}}, %{{.*}} {alignment = 4 : i64} : vector<2xbf16>, !llvm.ptr<3>
// CHECK:           nvvm.cp.async.bulk.tensor.global.shared.cta
// CHECK-NOT:     linalg.
// CHECK-NOT:     memref.dealloc
// CHECK:         return
func.func @linear_bias(%x: memref<256x128xbf16>, %w: memref<256x128xbf16>, %bias: memref<256xf32>,
                       %y: memref<256x256xbf16>) {
  %zero = arith.constant 0.0 : f32
  %acc = memref.alloc() : memref<256x256xf32>
  linalg.fill ins(%zero : f32) outs(%acc : memref<256x256xf32>)
  linalg.matmul indexing_maps = [#lhs, #weight, #res]
      ins(%x, %w : memref<256x128xbf16>, memref<256x128xbf16>) outs(%acc : memref<256x256xf32>)
  linalg.generic {indexing_maps = [#id, #col, #id], iterator_types = ["parallel", "parallel"]}
      ins(%acc, %bias : memref<256x256xf32>, memref<256xf32>) outs(%y : memref<256x256xbf16>) {
  ^bb0(%v: f32, %b: f32, %o: bf16):
    %s = arith.addf %v, %b : f32
    %t = arith.truncf %s : f32 to bf16
    linalg.yield %t : bf16
  }
  memref.dealloc %acc : memref<256x256xf32>
  return
}

// Without the zero fill the kernel accumulates: each thread loads its
// accumulator pairs from C into the wgmma accumulator before the loop.
// A K of 64 is one step: a ring of one stage, one copy group before the loop.
// CHECK-LABEL: func.func @accumulates(
// CHECK-SAME:    %{{.*}}: memref<2x64x64xf16>, %{{.*}}: memref<2x64x64xf16>, %[[C3:.*]]: memref<2x64x64xf32>)
// CHECK:         gpu.launch {{.*}} in (%{{.*}} = %c1{{(_[0-9]+)?}}, %{{.*}} = %c1{{(_[0-9]+)?}}, %{{.*}} = %c2) threads
// CHECK:           nvvm.cp.async.commit.group
// CHECK-NOT:       nvvm.cp.async.commit.group
// CHECK:           vector.load %[[C3]][%{{.*}}, %{{.*}}, %{{.*}}] {alignment = 8 : i64} : memref<2x64x64xf32>, vector<2xf32>
// CHECK:           llvm.insertvalue %{{.*}}, %{{.*}}[0]
// CHECK:           scf.for
// CHECK:             nvvm.wgmma.mma_async
func.func @accumulates(%a: memref<2x64x64xf16>, %b: memref<2x64x64xf16>, %c: memref<2x64x64xf32>) {
  linalg.batch_matmul ins(%a, %b : memref<2x64x64xf16>, memref<2x64x64xf16>) outs(%c : memref<2x64x64xf32>)
  return
}

// Negative: a K of 32 is no 64-wide step: mma.sync takes it.
// CHECK-LABEL: func.func @short_k(
// CHECK-NOT:     nvvm.wgmma
// CHECK:         nvgpu.mma.sync
func.func @short_k(%a: memref<256x32xf16>, %b: memref<32x256xf16>, %c: memref<256x256xf32>) {
  %zero = arith.constant 0.0 : f32
  linalg.fill ins(%zero : f32) outs(%c : memref<256x256xf32>)
  linalg.matmul ins(%a, %b : memref<256x32xf16>, memref<32x256xf16>) outs(%c : memref<256x256xf32>)
  return
}

// f32 matmuls stay exact f32 on CUDA cores unless tf32 is allowed; then,
// on sm_90a only, wgmma multiplies them as tf32: k = 8 per wgmma (32 bytes,
// as 16 of f16), a K step of one 128-byte row (32 of f32). wgmma cannot
// transpose tf32, so B (K x N) is first copied transposed by a kernel of
// its own (64 x 64 tiles through shared memory, 16-byte loads and stores);
// the matmul reads that Bᵀ (N x K) as A, in 16-byte copies of 4 elements,
// and wgmma reads it as <col>; the copy is freed after the matmul.
// CHECK-LABEL: func.func @tf32(
// CHECK-NOT:     nvvm.wgmma
// CHECK:         } {twintrack.kernel_path = "simt-matmul
// TF32-LABEL: func.func @tf32(
// TF32-SAME:    %[[A:.*]]: memref<256x64xf32>, %[[B:.*]]: memref<64x256xf32>, %[[C:.*]]: memref<256x256xf32>)
// TF32:         %[[BT:.*]] = memref.alloc() : memref<256x64xf32>
// TF32:         gpu.launch {{.*}} module(@[[KERNEL:.*]]_transpose_b) {{.*}} workgroup(%{{.*}} : memref<64x65xf32, #gpu.address_space<workgroup>>)
// TF32-COUNT-4:   vector.load %[[B]][{{.*}}] {alignment = 16 : i64} : memref<64x256xf32>, vector<4xf32>
// TF32:           gpu.barrier {twintrack.kernel_path = "transpose"}
// TF32-COUNT-4:   vector.store %{{.*}}, %[[BT]][{{.*}}] {alignment = 16 : i64} : memref<256x64xf32>, vector<4xf32>
// TF32:         gpu.launch {{.*}} module(@[[KERNEL]])
// TF32:         %[[RING:.*]] = memref.view {{.*}} to memref<8192xf32, #gpu.address_space<workgroup>>
// TF32:         nvgpu.device_async_copy %[[A]][{{.*}}], %[[RING]][{{.*}}], 4 {bypassL1}
// TF32:         nvgpu.device_async_copy %[[BT]][{{.*}}], %[[RING]][{{.*}}], 4 {bypassL1} : memref<256x64xf32>
// TF32-NOT:     nvgpu.device_async_copy %[[B]]
// A's fragments go through registers, rounded to nearest on their way (wgmma
// alone would truncate), four ldmatrix a step, one per wgmma; the two K
// steps (K = 64) are the loop's first and its odd last, no pairs between.
// TF32-NOT:     nvvm.wgmma.mma_async
// TF32-COUNT-4:   nvgpu.ldmatrix %[[RING]][{{.*}}] {numTiles = 4 : i32, transpose = false} : {{.*}} -> vector<4x1xf32>
// TF32:           arith.andi %{{.*}}, %c-8192_i32
// TF32-COUNT-4:   wgmma.mma_async.sync.aligned.m64n64k8.f32.tf32.tf32 {{.*}}, p, 1, 1;
// TF32-NEXT:      nvvm.wgmma.commit.group.sync.aligned
// TF32:           nvvm.cp.async.commit.group
// TF32-NEXT:      "wgmma.wait_group.sync.aligned 1;", ""
// TF32-COUNT-4:   nvgpu.ldmatrix %[[RING]]
// TF32-COUNT-4:   wgmma.mma_async.sync.aligned.m64n64k8.f32.tf32.tf32
// The second step's wait holds the first step's A registers until its wgmmas are done.
// TF32:           "wgmma.wait_group.sync.aligned 1;", "r,r,r,r,r,r,r,r,r,r,r,r,r,r,r,r"
// TF32:           "wgmma.wait_group.sync.aligned 0;"
// TF32-NOT:     nvvm.wgmma.mma_async
// TF32:         {twintrack.kernel_path = "wgmma-matmul 64x64x32/1 warpgroups/2 stages A rounded in registers TMA stores"}
// TF32:         memref.dealloc %[[BT]] : memref<256x64xf32>
// EXACT-LABEL: func.func @tf32(
// EXACT-NOT:     nvvm.wgmma
// EXACT:         } {twintrack.kernel_path = "simt-matmul
func.func @tf32(%a: memref<256x64xf32>, %b: memref<64x256xf32>, %c: memref<256x256xf32>) {
  %zero = arith.constant 0.0 : f32
  linalg.fill ins(%zero : f32) outs(%c : memref<256x256xf32>)
  linalg.matmul ins(%a, %b : memref<256x64xf32>, memref<64x256xf32>) outs(%c : memref<256x256xf32>)
  return
}

// A tf32 linear layer's weight (N x K) is K-major already: 16-byte copies
// for both operands.
// TF32-LABEL: func.func @tf32_linear(
// TF32-SAME:    %{{.*}}: memref<256x64xf32>, %[[W:.*]]: memref<256x64xf32>, %{{.*}}: memref<256x256xf32>)
// TF32-NOT:     nvgpu.device_async_copy %[[W]]{{.*}}, 1 :
// TF32:         nvgpu.device_async_copy %[[W]][{{.*}}], %{{.*}}[{{.*}}], 4 {bypassL1}
// TF32:         nvgpu.ldmatrix
// TF32:         wgmma.mma_async.sync.aligned.m64n{{[0-9]+}}k8.f32.tf32.tf32
func.func @tf32_linear(%x: memref<256x64xf32>, %w: memref<256x64xf32>, %y: memref<256x256xf32>) {
  %zero = arith.constant 0.0 : f32
  linalg.fill ins(%zero : f32) outs(%y : memref<256x256xf32>)
  linalg.matmul indexing_maps = [#lhs, #weight, #res]
      ins(%x, %w : memref<256x64xf32>, memref<256x64xf32>) outs(%y : memref<256x256xf32>)
  return
}

// Ragged edges: no tile divides 197 rows or a K of 224 (3.5 steps), and
// rounding up adds 49% of the work (the most is half): 64x64 tiles, 4 x 4
// blocks. A copy past row 196 or column 223 reads from a clamped address
// with source size 0 (zeros); the K loop runs 4 whole steps; the TMA stores
// drop the rows past 196. The loop records the share of its work inside
// the data, which the kernel report counts.
// CHECK-LABEL: func.func @ragged(
// CHECK-SAME:    %[[A:.*]]: memref<197x224xf16>, %[[B:.*]]: memref<224x256xf16>, %[[C:.*]]: memref<197x256xf32>)
// CHECK:         gpu.launch blocks({{.*}}) in (%{{.*}} = %c4, %{{.*}} = %c4, %{{.*}} = %c1)
// CHECK:           %[[ROW_AT:.*]] = arith.minui %[[ROW:.*]], %c196 : index
// CHECK-NEXT:      %[[COL_AT:.*]] = arith.minui %[[COL:.*]], %c216 : index
// CHECK-NEXT:      %[[ROW_IN:.*]] = arith.cmpi ult, %[[ROW]], %c197 : index
// CHECK-NEXT:      %[[COL_IN:.*]] = arith.cmpi ult, %[[COL]], %c224 : index
// CHECK-NEXT:      %[[IN:.*]] = arith.andi %[[ROW_IN]], %[[COL_IN]] : i1
// CHECK-NEXT:      %[[SIZE:.*]] = arith.select %[[IN]], %c8, %c0 : index
// CHECK-NEXT:      nvgpu.device_async_copy %[[A]][%[[ROW_AT]], %[[COL_AT]]], %{{.*}}[%{{.*}}], 8, %[[SIZE]] {bypassL1}
// CHECK:           %[[K_AT:.*]] = arith.minui %[[K:.*]], %c223 : index
// CHECK-NEXT:      %[[K_IN:.*]] = arith.cmpi ult, %[[K]], %c224 : index
// CHECK-NEXT:      %[[B_SIZE:.*]] = arith.select %[[K_IN]], %c8, %c0 : index
// CHECK-NEXT:      nvgpu.device_async_copy %[[B]][%[[K_AT]], %{{.*}}], %{{.*}}[%{{.*}}], 8, %[[B_SIZE]] {bypassL1}
// CHECK:           scf.for %{{.*}} = %c0 to %c256 step %c64
// CHECK:           } {twintrack.kernel_path = "wgmma-matmul 64x64x64/1 warpgroups/4 stages TMA stores", twintrack.useful_fraction = 0.67333984375 : f64}
// CHECK:           nvvm.cp.async.bulk.tensor.global.shared.cta
// CHECK-NOT:       vector.store
// CHECK:           gpu.terminator
func.func @ragged(%a: memref<197x224xf16>, %b: memref<224x256xf16>, %c: memref<197x256xf32>) {
  %zero = arith.constant 0.0 : f32
  linalg.fill ins(%zero : f32) outs(%c : memref<197x256xf32>)
  linalg.matmul ins(%a, %b : memref<197x224xf16>, memref<224x256xf16>) outs(%c : memref<197x256xf32>)
  return
}

// Rounding 40 rows up to 64 would add 60% of the work: mma.sync's tiles
// would too, so the CUDA-core kernel takes it in 48 rows (20%), its
// 16x8 tile giving the most blocks (96).
// CHECK-LABEL: func.func @too_ragged(
// CHECK-NOT:     nvvm.wgmma
// CHECK:         gpu.barrier {twintrack.kernel_path = "simt-matmul 16x8x8/2x2"}
func.func @too_ragged(%a: memref<40x256xf16>, %b: memref<256x256xf16>, %c: memref<40x256xf32>) {
  %zero = arith.constant 0.0 : f32
  linalg.fill ins(%zero : f32) outs(%c : memref<40x256xf32>)
  linalg.matmul ins(%a, %b : memref<40x256xf16>, memref<256x256xf16>) outs(%c : memref<40x256xf32>)
  return
}
