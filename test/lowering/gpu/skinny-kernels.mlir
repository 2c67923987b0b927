// RUN: %PYTHON -m twintrack.compiler.passes 'gpu-matmul-kernels{arch=sm_90a strict=true}' %s | FileCheck %s

// Matmuls with a few rows of A (decode) take the skinny kernel: 16-byte
// loads of B, several in flight, f32 sums.

// B as stored: the block's warps stride down K over 256 columns and meet in
// shared memory; 16 column blocks alone are too few, so K splits 32 ways
// and split-K's kernel sums the slices.
// CHECK-LABEL: func.func @one_row(
// CHECK-SAME:    %[[A:.*]]: memref<1x4096xf16>, %[[B:.*]]: memref<4096x4096xf16>, %[[C:.*]]: memref<1x4096xf16>)
// CHECK:         %[[W:.*]] = memref.alloc() : memref<32x4096xf32>
// CHECK:         gpu.launch blocks({{.*}}) in (%{{.*}} = %c16{{.*}}, %{{.*}} = %c1{{.*}}, %{{.*}} = %c32{{.*}}) {{.*}}module(@forward_skinny_matmul_0) {{.*}}workgroup(%{{.*}} : memref<8x256xf32, #gpu.address_space<workgroup>>)
// CHECK-COUNT-4:   vector.load %[[B]][{{.*}}] {alignment = 16 : i64{{.*}}} : memref<4096x4096xf16>, vector<8xf16>
// CHECK:           vector.fma {{.*}} : vector<8xf32>
// CHECK:           } {twintrack.kernel_path = "skinny-matmul B 8 warps x4 vectors, 32 splits"}
// CHECK:           memref.store %{{.*}}, %[[W]]
// CHECK:         module(@forward_skinny_matmul_0_reduce)
// CHECK:           arith.truncf %{{.*}} : vector<4xf32> to vector<4xf16>
// CHECK:         memref.dealloc %[[W]]
// CHECK-NOT:     linalg.matmul
func.func @one_row(%a: memref<1x4096xf16>, %b: memref<4096x4096xf16>, %c: memref<1x4096xf16>) {
  %zero = arith.constant 0.0 : f16
  linalg.fill ins(%zero : f16) outs(%c : memref<1x4096xf16>)
  linalg.matmul ins(%a, %b : memref<1x4096xf16>, memref<4096x4096xf16>) outs(%c : memref<1x4096xf16>)
  return
}

// Bᵀ (a linear layer's weight): a warp per column, its lanes along K, their
// sums meeting by shuffles; 512 blocks need no split, so the kernel stores C,
// its bias and ReLU applied: the epilogue reads the result through the
// collapse_shape that dropped its unit dim.
// CHECK-LABEL: func.func @linear_row(
// CHECK-NOT:     memref.alloc
// CHECK:         gpu.launch blocks({{.*}}) in (%{{.*}} = %c512{{.*}}, %{{.*}} = %c1{{.*}}, %{{.*}} = %c1{{.*}}) {{.*}}module(@forward_skinny_matmul_1)
// CHECK-COUNT-2:   vector.load %{{.*}} : memref<4096x4096xf16>, vector<8xf16>
// CHECK:           } {twintrack.kernel_path = "skinny-matmul Bt 8 warps x2 vectors, 1 splits"}
// CHECK:           vector.reduction <add>
// CHECK-COUNT-5:   gpu.shuffle xor
// CHECK:           arith.select
// CHECK:           vector.store %{{.*}} : memref<4096xf16>, vector<1xf16>
// CHECK-NOT:     linalg.generic
// CHECK-NOT:     linalg.matmul
#a = affine_map<(m, n, k) -> (m, k)>
#bt = affine_map<(m, n, k) -> (n, k)>
#c = affine_map<(m, n, k) -> (m, n)>
#id1 = affine_map<(d0) -> (d0)>
func.func @linear_row(%x: memref<1x4096xf16>, %w: memref<4096x4096xf16>, %bias: memref<4096xf16>, %y: memref<4096xf16>) {
  %zero = arith.constant 0.0 : f32
  %t = memref.alloc() : memref<1x4096xf32>
  linalg.fill ins(%zero : f32) outs(%t : memref<1x4096xf32>)
  linalg.matmul indexing_maps = [#a, #bt, #c] ins(%x, %w : memref<1x4096xf16>, memref<4096x4096xf16>) outs(%t : memref<1x4096xf32>)
  %row = memref.collapse_shape %t [[0, 1]] : memref<1x4096xf32> into memref<4096xf32>
  linalg.generic {indexing_maps = [#id1, #id1, #id1], iterator_types = ["parallel"]}
      ins(%bias, %row : memref<4096xf16>, memref<4096xf32>) outs(%y : memref<4096xf16>) {
  ^bb0(%b: f16, %s: f32, %o: f16):
    %wide = arith.extf %b : f16 to f32
    %sum = arith.addf %wide, %s : f32
    %positive = arith.cmpf ugt, %sum, %zero : f32
    %relu = arith.select %positive, %sum, %zero : f32
    %narrow = arith.truncf %relu : f32 to f16
    linalg.yield %narrow : f16
  }
  memref.dealloc %t : memref<1x4096xf32>
  return
}

// Bᵀ in bf16 with 8 rows of A: tensor cores, A and B swapped. 16 columns of
// C a block (256 blocks), its 8 warps along K; each lane loads 16 bytes of
// two rows of Bᵀ and of A's row, for two m16n8k16 MMAs. K = 11008 is 43
// units of 256: 21 trips of two, then one trip of one. The warps' sums meet
// in shared memory ([warp, column, row]) and each thread finishes one element.
// CHECK-LABEL: func.func @linear_rows_on_tensor_cores(
// CHECK:         gpu.launch blocks({{.*}}) in (%{{.*}} = %c256{{.*}}, %{{.*}} = %c1{{.*}}, %{{.*}} = %c1{{.*}}) threads({{.*}}) in (%{{.*}} = %c256{{.*}}module(@forward_skinny_matmul_{{[0-9]+}}) {{.*}}workgroup(%{{.*}} : memref<8x16x8xf32, #gpu.address_space<workgroup>>)
// CHECK:           scf.for %{{.*}} = %c0 to %c10752 step %c512 iter_args(%{{.*}} = %{{.*}}) -> (vector<2x2xf32>)
// CHECK-COUNT-4:     vector.load %{{.*}} : memref<4096x11008xbf16>, vector<8xbf16>
// CHECK-COUNT-2:     vector.load %{{.*}} : memref<8x11008xbf16>, vector<8xbf16>
// CHECK-COUNT-4:     nvvm.mma.sync {{.*}}multiplicandAPtxType = #nvvm.mma_type<bf16>
// CHECK:           } {twintrack.kernel_path = "skinny-matmul Bt mma 8 warps x2 vectors, 1 splits"}
// CHECK:           scf.for %{{.*}} = %c10752 to %c11008 step %c256
// CHECK-COUNT-2:     nvvm.mma.sync
// CHECK:           }
// CHECK-COUNT-2:   vector.store %{{.*}} : memref<8x16x8xf32, #gpu.address_space<workgroup>>, vector<2xf32>
// CHECK:           gpu.barrier
// CHECK-COUNT-8:   memref.load %{{.*}} : memref<8x16x8xf32, #gpu.address_space<workgroup>>
// CHECK:           arith.truncf %{{.*}} : f32 to bf16
// CHECK:           vector.store %{{.*}} : memref<8x4096xbf16>, vector<1xbf16>
// CHECK-NOT:     linalg.matmul
#id2 = affine_map<(m, n) -> (m, n)>
func.func @linear_rows_on_tensor_cores(%x: memref<8x11008xbf16>, %w: memref<4096x11008xbf16>, %y: memref<8x4096xbf16>) {
  %zero = arith.constant 0.0 : f32
  %t = memref.alloc() : memref<8x4096xf32>
  linalg.fill ins(%zero : f32) outs(%t : memref<8x4096xf32>)
  linalg.matmul indexing_maps = [#a, #bt, #c] ins(%x, %w : memref<8x11008xbf16>, memref<4096x11008xbf16>) outs(%t : memref<8x4096xf32>)
  linalg.generic {indexing_maps = [#id2, #id2], iterator_types = ["parallel", "parallel"]}
      ins(%t : memref<8x4096xf32>) outs(%y : memref<8x4096xbf16>) {
  ^bb0(%s: f32, %o: bf16):
    %narrow = arith.truncf %s : f32 to bf16
    linalg.yield %narrow : bf16
  }
  memref.dealloc %t : memref<8x4096xf32>
  return
}

// B as stored in f16 with 4 rows of A (GPT-2 XL's Conv1D, 1600 -> 6400):
// tensor cores, A's rows the MMA's, B's 16-byte rows its n8 tiles through
// movmatrix (an 8x8 transpose across the warp). 32 columns of C a block:
// 200 blocks are too few, so K splits 2 ways; each slice of 800 is 3 units
// of 256 (one trip of two, one of one) and 32 more, which only the first
// warp's span covers (an scf.if on its offset). The warps' sums meet in
// shared memory ([warp, row, column]) and split-K's kernel finishes C.
// CHECK-LABEL: func.func @stored_rows_on_tensor_cores(
// CHECK:         gpu.launch blocks({{.*}}) in (%{{.*}} = %c200{{.*}}, %{{.*}} = %c1{{.*}}, %{{.*}} = %c2{{.*}}) threads({{.*}}) in (%{{.*}} = %c256{{.*}}module(@forward_skinny_matmul_{{[0-9]+}}) {{.*}}workgroup(%{{.*}} : memref<8x16x32xf32, #gpu.address_space<workgroup>>)
// CHECK:           scf.for %{{.*}} = %c0 to %c512 step %c512
// CHECK-COUNT-8:     vector.load %{{.*}} : memref<1600x6400xf16>, vector<8xf16>
// CHECK-COUNT-4:     vector.load %{{.*}} : memref<4x1600xf16>, vector<8xf16>
// CHECK-COUNT-32:    llvm.inline_asm "movmatrix.sync.aligned.m8n8.trans.b16
// CHECK:           } {twintrack.kernel_path = "skinny-matmul B mma 8 warps x2 vectors, 2 splits"}
// CHECK:           scf.for %{{.*}} = %c512 to %c768 step %c256
// CHECK-COUNT-4:     vector.load %{{.*}} : memref<1600x6400xf16>, vector<8xf16>
// CHECK-COUNT-16:    llvm.inline_asm "movmatrix
// CHECK:           arith.cmpi ult, %{{.*}}, %c32
// CHECK:           scf.if %{{.*}} -> (vector<2x2xf32>, vector<2x2xf32>, vector<2x2xf32>, vector<2x2xf32>)
// CHECK-COUNT-4:     vector.load %{{.*}} : memref<1600x6400xf16>, vector<8xf16>
// CHECK:           } else {
// CHECK-COUNT-8:   vector.store %{{.*}} : memref<8x16x32xf32, #gpu.address_space<workgroup>>, vector<2xf32>
// CHECK:           gpu.barrier
// CHECK-COUNT-8:   memref.load %{{.*}} : memref<8x16x32xf32, #gpu.address_space<workgroup>>
// CHECK:         module(@forward_skinny_matmul_{{[0-9]+}}_reduce)
// CHECK:           arith.truncf %{{.*}} : vector<4xf32> to vector<4xf16>
// CHECK-NOT:     linalg.matmul
func.func @stored_rows_on_tensor_cores(%x: memref<4x1600xf16>, %w: memref<1600x6400xf16>, %y: memref<4x6400xf16>) {
  %zero = arith.constant 0.0 : f16
  linalg.fill ins(%zero : f16) outs(%y : memref<4x6400xf16>)
  linalg.matmul ins(%x, %w : memref<4x1600xf16>, memref<1600x6400xf16>) outs(%y : memref<4x6400xf16>)
  return
}
