// RUN: %PYTHON -m twintrack.compiler.passes 'gpu-matmul-kernels{arch=sm_90a strict=true}' %s | FileCheck %s --check-prefixes=CHECK,WGMMA
// RUN: %PYTHON -m twintrack.compiler.passes 'gpu-matmul-kernels{arch=sm_90 strict=true}' %s | FileCheck %s --check-prefixes=CHECK,MMA

// Split-K (twintrack.kernels.split_k_matmul): a 512x512 f16 output has 64
// tiles of 64x64 for 132 SMs, and K = 16384 is long, so the matmul takes a
// split-K generator of the registry: on sm_90a split_k_wgmma_matmul, ahead
// of plain wgmma; on sm_90 split_k_matmul (mma.sync). The first kernel has
// a grid z of 4 K slices (4096 each: a static loop, its copies offset by
// the slice) and stores f32 partials into a 4 x 512 row workspace; the
// second sums the 4 partials of 4 columns a thread (16-byte loads) and
// narrows them to f16 into C. The workspace is freed after it.
// CHECK-LABEL: func.func @long_k(
// CHECK-SAME:    %[[A:.*]]: memref<512x16384xf16>, %[[B:.*]]: memref<16384x512xf16>, %[[C:.*]]: memref<512x512xf16>)
// CHECK-NOT:     linalg.fill
// CHECK:         %[[W:.*]] = memref.alloc() : memref<2048x512xf32>
// WGMMA:         gpu.launch blocks({{.*}}) in (%{{.*}} = %c8, %{{.*}} = %c8, %{{.*}} = %c4) threads({{.*}}) in (%{{.*}} = %c128, {{.*}}) dynamic_shared_memory_size {{.*}} module(@forward_split_k_wgmma_matmul_0)
// WGMMA:           scf.for %{{.*}} = %c0 to %c4096 step %c64
// WGMMA:             nvvm.wgmma.mma_async
// WGMMA:           } {twintrack.kernel_path = "split-k-matmul 64x64x64/1 warpgroups/4 stages/4 splits"}
// MMA:           gpu.launch blocks({{.*}}) in (%{{.*}} = %c8, %{{.*}} = %c8, %{{.*}} = %c4) threads({{.*}}) in (%{{.*}} = %c128, {{.*}}) module(@forward_split_k_matmul_0)
// MMA:             scf.for %{{.*}} = %c0 to %c4096 step %c32
// MMA:               nvgpu.mma.sync
// MMA:             } {twintrack.kernel_path = "split-k-matmul 64x64x32/2x2 warps/4 splits"}
// CHECK:           vector.store %{{.*}}, %[[W]][{{.*}}] {alignment = 8 : i64} : memref<2048x512xf32>, vector<2xf32>
// CHECK:         gpu.launch blocks({{.*}}) in (%{{.*}} = %c256{{.*}}, %{{.*}} = %c1{{.*}}, %{{.*}} = %c1{{.*}}) threads({{.*}}) in (%{{.*}} = %c256{{.*}}, {{.*}}) module(@forward_split_k{{.*}}_0_reduce)
// CHECK-COUNT-4:   vector.load %[[W]][{{.*}}] {alignment = 16 : i64{{.*}}} : memref<2048x512xf32>, vector<4xf32>
// CHECK:           arith.truncf %{{.*}} : vector<4xf32> to vector<4xf16>
// CHECK:           vector.store %{{.*}}, %[[C]][{{.*}}] {alignment = 8 : i64} : memref<512x512xf16>, vector<4xf16>
// CHECK:         memref.dealloc %[[W]] : memref<2048x512xf32>
// CHECK-NOT:     linalg.matmul
func.func @long_k(%a: memref<512x16384xf16>, %b: memref<16384x512xf16>, %c: memref<512x512xf16>) {
  %zero = arith.constant 0.0 : f16
  linalg.fill ins(%zero : f16) outs(%c : memref<512x512xf16>)
  linalg.matmul ins(%a, %b : memref<512x16384xf16>, memref<16384x512xf16>) outs(%c : memref<512x512xf16>)
  return
}

// Decode-like: 32 rows (16 and fewer take the skinny kernel). wgmma's
// tiles take 64, so on sm_90a too the mma.sync split-K kernel (16 x 64
// tiles, one warp per 16 rows) takes it.
// CHECK-LABEL: func.func @decode(
// CHECK:         gpu.launch blocks({{.*}}) in (%{{.*}} = %c64, %{{.*}} = %c2, %{{.*}} = %c4) {{.*}} module(@forward_split_k_matmul_{{[0-9]+}})
// CHECK:           } {twintrack.kernel_path = "split-k-matmul 16x64x32/1x2 warps/4 splits"}
func.func @decode(%a: memref<32x4096xf16>, %b: memref<4096x4096xf16>, %c: memref<32x4096xf16>) {
  %zero = arith.constant 0.0 : f16
  linalg.fill ins(%zero : f16) outs(%c : memref<32x4096xf16>)
  linalg.matmul ins(%a, %b : memref<32x4096xf16>, memref<4096x4096xf16>) outs(%c : memref<32x4096xf16>)
  return
}

// A 2048x2048 output fills the SMs with plain tiles: the split-K
// generators refuse it (their reasons go to the remarks) and a plain
// tensor-core kernel takes it.
// CHECK-LABEL: func.func @many_tiles(
// CHECK-NOT:     split_k
// WGMMA:         gpu.launch {{.*}} module(@forward_wgmma_matmul_{{[0-9]+}})
// MMA:           gpu.launch {{.*}} module(@forward_mma_matmul_{{[0-9]+}})
func.func @many_tiles(%a: memref<2048x4096xf16>, %b: memref<4096x2048xf16>, %c: memref<2048x2048xf16>) {
  %zero = arith.constant 0.0 : f16
  linalg.fill ins(%zero : f16) outs(%c : memref<2048x2048xf16>)
  linalg.matmul ins(%a, %b : memref<2048x4096xf16>, memref<4096x2048xf16>) outs(%c : memref<2048x2048xf16>)
  return
}
