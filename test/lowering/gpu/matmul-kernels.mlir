// RUN: %PYTHON -m twintrack.compiler.passes 'gpu-matmul-kernels{arch=sm_90}' %s | FileCheck %s

// On sm_90 (no wgmma: the fallback for other chips), f16 and bf16 take the
// mma.sync kernels; wgmma-kernels.mlir checks sm_90a, the recipe's default.

// A matmul whose shape fits a tile of lowering/tuning/matmul.toml becomes a
// gpu.launch of a shared-memory tiled kernel, in place of the linalg op.

// f32: CUDA-core kernel. 1024x1024 in 128x128 tiles is 64 blocks, fewer than
// the SMs, so 64x64 tiles (256 blocks, 256 threads with 4x4 register tiles).
// A is staged transposed, B as is, both with 16-byte loads; the zero fill
// right before the matmul folds into the first write (no load of C). The
// first K step's tiles are staged before the loop; inside it, the next
// step's tiles are loaded into registers before this step's FMAs, and
// stored to shared memory between two barriers after them.
// CHECK-LABEL: func.func @fits(
// CHECK-SAME:    %[[A:.*]]: memref<1024x128xf32>, %[[B:.*]]: memref<128x1024xf32>, %[[C:.*]]: memref<1024x1024xf32>)
// CHECK-NOT:     linalg.fill
// CHECK:         gpu.launch blocks({{.*}}) in (%{{.*}} = %c16, %{{.*}} = %c16, %{{.*}} = %c1) threads({{.*}}) in (%{{.*}} = %c256, {{.*}}) module(@forward_simt_matmul_0) function(@forward_simt_matmul_0)
// CHECK-SAME:      workgroup(%[[AS:.*]] : memref<16x68xf32, #gpu.address_space<workgroup>>, %[[BS:.*]] : memref<16x64xf32, #gpu.address_space<workgroup>>)
// CHECK-NOT:       vector.load %[[C]]
// CHECK:           vector.load %[[A]][{{.*}}] {alignment = 16 : i64} : memref<1024x128xf32>, vector<4xf32>
// CHECK:           memref.store %{{.*}}, %[[AS]]
// CHECK:           vector.load %[[B]][{{.*}}] {alignment = 16 : i64} : memref<128x1024xf32>, vector<4xf32>
// CHECK:           vector.store %{{.*}}, %[[BS]]
// CHECK:           gpu.barrier
// CHECK:           scf.for %[[K:.*]] =
// CHECK:             %[[NEXT:.*]] = arith.minui %{{.*}}, %c112
// CHECK:             vector.load %[[A]][%{{.*}}, %{{.*}}] {alignment = 16 : i64} : memref<1024x128xf32>, vector<4xf32>
// CHECK:             vector.load %[[B]][%{{.*}}, %{{.*}}] {alignment = 16 : i64} : memref<128x1024xf32>, vector<4xf32>
// CHECK:             vector.fma
// CHECK:             gpu.barrier
// CHECK:             memref.store %{{.*}}, %[[AS]]
// CHECK:             vector.store %{{.*}}, %[[BS]]
// CHECK:             gpu.barrier
// CHECK:           } {twintrack.kernel_path = "simt-matmul 64x64x16/4x4"}
// CHECK:           vector.store %{{.*}}, %[[C]]{{.*}} : memref<1024x1024xf32>, vector<4xf32>
// CHECK-NOT:     linalg.matmul
// CHECK:         return
func.func @fits(%a: memref<1024x128xf32>, %b: memref<128x1024xf32>, %c: memref<1024x1024xf32>) {
  %zero = arith.constant 0.0 : f32
  linalg.fill ins(%zero : f32) outs(%c : memref<1024x1024xf32>)
  linalg.matmul ins(%a, %b : memref<1024x128xf32>, memref<128x1024xf32>) outs(%c : memref<1024x1024xf32>)
  return
}

// f16 operands: tensor cores. Without a fill the kernel accumulates onto C,
// so it loads C first; fragments come from ldmatrix (B transposed), two B
// fragments (N blocks n0 and n0 + 8) per ldmatrix of four matrices.
// CHECK-LABEL: func.func @accumulates(
// CHECK-SAME:    %{{.*}}: memref<2x64x64xf16>, %{{.*}}: memref<2x64x64xf16>, %[[C16:.*]]: memref<2x64x64xf32>)
// CHECK:         gpu.launch {{.*}} module(@forward_mma_matmul_1) function(@forward_mma_matmul_1)
// CHECK:           vector.load %[[C16]]
// CHECK:           scf.for
// CHECK:             nvgpu.ldmatrix {{.*}} {numTiles = 4 : i32, transpose = false}
// CHECK:             nvgpu.ldmatrix {{.*}} {numTiles = 4 : i32, transpose = true}
// CHECK-NOT:         numTiles = 2
// CHECK:             nvgpu.mma.sync
// CHECK:           } {twintrack.kernel_path = "mma.sync-matmul {{.*}}"}
func.func @accumulates(%a: memref<2x64x64xf16>, %b: memref<2x64x64xf16>, %c: memref<2x64x64xf32>) {
  linalg.batch_matmul ins(%a, %b : memref<2x64x64xf16>, memref<2x64x64xf16>) outs(%c : memref<2x64x64xf32>)
  return
}

// A shape no tile divides stays a linalg op for the generic pipeline.
// CHECK-LABEL: func.func @odd_shape(
// CHECK-NOT:     gpu.launch
// CHECK:         linalg.matmul
func.func @odd_shape(%a: memref<30x7xf32>, %b: memref<7x5xf32>, %c: memref<30x5xf32>) {
  linalg.matmul ins(%a, %b : memref<30x7xf32>, memref<7x5xf32>) outs(%c : memref<30x5xf32>)
  return
}

// A half-precision matmul as torch-mlir writes it: an f32 temporary, zero
// filled, then narrowed into the result. The narrowing becomes the kernel's
// epilogue: it stores f16 straight into the result; the temporary, the fill
// and the narrowing op are gone.
// CHECK-LABEL: func.func @narrowed(
// CHECK-SAME:    %{{.*}}: memref<128x64xf16>, %{{.*}}: memref<64x128xf16>, %[[OUT16:.*]]: memref<128x128xf16>)
// CHECK-NOT:     memref.alloc
// CHECK:         gpu.launch
// CHECK:           nvgpu.mma.sync
// CHECK:           arith.truncf %{{.*}} : f32 to f16
// CHECK:           vector.from_elements %{{.*}}, %{{.*}} : vector<2xf16>
// CHECK:           vector.store %{{.*}}, %[[OUT16]]
// CHECK-NOT:     linalg.
// CHECK-NOT:     memref.dealloc
// CHECK:         return
#id = affine_map<(d0, d1) -> (d0, d1)>
func.func @narrowed(%a: memref<128x64xf16>, %b: memref<64x128xf16>, %out: memref<128x128xf16>) {
  %zero = arith.constant 0.0 : f32
  %acc = memref.alloc() : memref<128x128xf32>
  linalg.fill ins(%zero : f32) outs(%acc : memref<128x128xf32>)
  linalg.matmul ins(%a, %b : memref<128x64xf16>, memref<64x128xf16>) outs(%acc : memref<128x128xf32>)
  linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%acc : memref<128x128xf32>) outs(%out : memref<128x128xf16>) {
  ^bb0(%x: f32, %o: f16):
    %t = arith.truncf %x : f32 to f16
    linalg.yield %t : f16
  }
  memref.dealloc %acc : memref<128x128xf32>
  return
}

// An elementwise consumer (bias + ReLU, reading the bias along the columns)
// becomes the kernel's epilogue: each result gets the bias loaded for its
// column and the ReLU before the store; the temporary is gone.
// CHECK-LABEL: func.func @bias_relu(
// CHECK-SAME:    %{{.*}}: memref<256x64xf32>, %{{.*}}: memref<64x512xf32>, %[[BIAS:.*]]: memref<512xf32>, %[[Y:.*]]: memref<256x512xf32>)
// CHECK-NOT:     memref.alloc
// CHECK:         gpu.launch
// CHECK:           vector.fma
// CHECK:           memref.load %[[BIAS]][%{{.*}}] : memref<512xf32>
// CHECK:           arith.addf %{{.*}}, %{{.*}} : f32
// CHECK:           arith.maximumf %{{.*}}, %{{.*}} : f32
// CHECK:           vector.from_elements
// CHECK:           vector.store %{{.*}}, %[[Y]]
// CHECK-NOT:     linalg.
// CHECK:         return
#col = affine_map<(d0, d1) -> (d1)>
func.func @bias_relu(%a: memref<256x64xf32>, %b: memref<64x512xf32>, %bias: memref<512xf32>, %y: memref<256x512xf32>) {
  %zero = arith.constant 0.0 : f32
  %acc = memref.alloc() : memref<256x512xf32>
  linalg.fill ins(%zero : f32) outs(%acc : memref<256x512xf32>)
  linalg.matmul ins(%a, %b : memref<256x64xf32>, memref<64x512xf32>) outs(%acc : memref<256x512xf32>)
  linalg.generic {indexing_maps = [#id, #col, #id], iterator_types = ["parallel", "parallel"]}
      ins(%acc, %bias : memref<256x512xf32>, memref<512xf32>) outs(%y : memref<256x512xf32>) {
  ^bb0(%v: f32, %c: f32, %o: f32):
    %s = arith.addf %v, %c : f32
    %r = arith.maximumf %s, %zero : f32
    linalg.yield %r : f32
  }
  memref.dealloc %acc : memref<256x512xf32>
  return
}

// Bufferization may allocate the epilogue's output between the two ops: the
// allocation moves before the kernel, which writes into it.
// CHECK-LABEL: func.func @output_allocated_between(
// CHECK:         %[[H:.*]] = memref.alloc() : memref<256x512xf32>
// CHECK:         gpu.launch
// CHECK:           arith.maximumf %{{.*}}, %{{.*}} : f32
// CHECK:           vector.store %{{.*}}, %[[H]]
// CHECK-NOT:     linalg.generic
// CHECK:         memref.copy %[[H]], %{{.*}}
func.func @output_allocated_between(%a: memref<256x64xf32>, %b: memref<64x512xf32>, %y: memref<256x512xf32>) {
  %zero = arith.constant 0.0 : f32
  %acc = memref.alloc() : memref<256x512xf32>
  linalg.fill ins(%zero : f32) outs(%acc : memref<256x512xf32>)
  linalg.matmul ins(%a, %b : memref<256x64xf32>, memref<64x512xf32>) outs(%acc : memref<256x512xf32>)
  %h = memref.alloc() : memref<256x512xf32>
  linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%acc : memref<256x512xf32>) outs(%h : memref<256x512xf32>) {
  ^bb0(%v: f32, %o: f32):
    %r = arith.maximumf %v, %zero : f32
    linalg.yield %r : f32
  }
  memref.dealloc %acc : memref<256x512xf32>
  memref.copy %h, %y : memref<256x512xf32> to memref<256x512xf32>
  memref.dealloc %h : memref<256x512xf32>
  return
}

// torch-mlir writes a linear on a 3-D input as a 2-D matmul whose result is
// viewed as 3-D (memref.expand_shape) for the bias + residual. The kernel
// splits each result's row into (batch, row) and applies that epilogue at
// those loop indices: the residual and the output are read and written as
// they are, the bias by column.
// CHECK-LABEL: func.func @rows_split_by_a_view(
// CHECK-SAME:    %{{.*}}: memref<256x64xf32>, %{{.*}}: memref<64x512xf32>, %[[BIAS:.*]]: memref<512xf32>, %[[RES:.*]]: memref<2x128x512xf32>, %[[Y:.*]]: memref<2x128x512xf32>)
// CHECK-NOT:     memref.collapse_shape
// CHECK:         gpu.launch
// CHECK:           %[[ROW:.*]] = arith.remui %{{.*}}, %c128
// CHECK:           %[[BATCH:.*]] = arith.divui %{{.*}}, %c128
// CHECK:           memref.load %[[RES]][%[[BATCH]], %[[ROW]], %{{.*}}] : memref<2x128x512xf32>
// CHECK:           memref.load %[[BIAS]][%{{.*}}] : memref<512xf32>
// CHECK:           vector.store %{{.*}}, %[[Y]][%[[BATCH]], %[[ROW]], %{{.*}}] {{.*}} : memref<2x128x512xf32>, vector<4xf32>
// CHECK-NOT:     linalg.
// CHECK-NOT:     memref.expand_shape
// CHECK:         return
#id3 = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
#col3 = affine_map<(d0, d1, d2) -> (d2)>
func.func @rows_split_by_a_view(%a: memref<256x64xf32>, %b: memref<64x512xf32>, %bias: memref<512xf32>,
                                %res: memref<2x128x512xf32>, %y: memref<2x128x512xf32>) {
  %zero = arith.constant 0.0 : f32
  %acc = memref.alloc() : memref<256x512xf32>
  linalg.fill ins(%zero : f32) outs(%acc : memref<256x512xf32>)
  linalg.matmul ins(%a, %b : memref<256x64xf32>, memref<64x512xf32>) outs(%acc : memref<256x512xf32>)
  %view = memref.expand_shape %acc [[0, 1], [2]] output_shape [2, 128, 512] : memref<256x512xf32> into memref<2x128x512xf32>
  linalg.generic {indexing_maps = [#id3, #id3, #col3, #id3], iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%res, %view, %bias : memref<2x128x512xf32>, memref<2x128x512xf32>, memref<512xf32>) outs(%y : memref<2x128x512xf32>) {
  ^bb0(%r: f32, %v: f32, %c: f32, %o: f32):
    %s = arith.addf %v, %c : f32
    %t = arith.addf %r, %s : f32
    linalg.yield %t : f32
  }
  memref.dealloc %acc : memref<256x512xf32>
  return
}

// The epilogue may already write into the matmul's result (reuse-buffers
// makes an elementwise op overwrite a dying input): the kernel then stores
// the epilogue's values there, and later readers see them.
// CHECK-LABEL: func.func @in_place(
// CHECK-SAME:    %{{.*}}: memref<256x64xf32>, %{{.*}}: memref<64x512xf32>, %[[OUT:.*]]: memref<256x512xf32>)
// CHECK:         gpu.launch
// CHECK:           math.tanh %{{.*}} : f32
// CHECK:           vector.store %{{.*}}, %[[OUT]]
// CHECK-NOT:     linalg.
// CHECK:         return
func.func @in_place(%a: memref<256x64xf32>, %b: memref<64x512xf32>, %out: memref<256x512xf32>) {
  %zero = arith.constant 0.0 : f32
  linalg.fill ins(%zero : f32) outs(%out : memref<256x512xf32>)
  linalg.matmul ins(%a, %b : memref<256x64xf32>, memref<64x512xf32>) outs(%out : memref<256x512xf32>)
  linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%out : memref<256x512xf32>) outs(%out : memref<256x512xf32>) {
  ^bb0(%v: f32, %o: f32):
    %t = math.tanh %v : f32
    linalg.yield %t : f32
  }
  return
}

// Negative: the epilogue writes the buffer the matmul reads as A (the next
// layer's input overwritten by its output). A fused kernel would store
// results while other blocks still read A, so the epilogue stays a separate
// op, run after the matmul.
// CHECK-LABEL: func.func @output_aliases_input(
// CHECK:         gpu.launch
// CHECK:         linalg.generic
func.func @output_aliases_input(%x: memref<256x256xf32>, %w: memref<256x256xf32>) {
  %zero = arith.constant 0.0 : f32
  %acc = memref.alloc() : memref<256x256xf32>
  linalg.fill ins(%zero : f32) outs(%acc : memref<256x256xf32>)
  linalg.matmul ins(%x, %w : memref<256x256xf32>, memref<256x256xf32>) outs(%acc : memref<256x256xf32>)
  linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%acc : memref<256x256xf32>) outs(%x : memref<256x256xf32>) {
  ^bb0(%v: f32, %o: f32):
    %t = math.tanh %v : f32
    linalg.yield %t : f32
  }
  memref.dealloc %acc : memref<256x256xf32>
  return
}

// A linear layer's weight read transposed (indexing maps, as
// twintrack-form-dispatches folds a weight transpose). CUDA cores: Bᵀ rows
// are contiguous along K, so the B tile is loaded with 16-byte vectors along
// K and stored transposed into shared memory, as A is.
#lhs = affine_map<(m, n, k) -> (m, k)>
#weight = affine_map<(m, n, k) -> (n, k)>
#res = affine_map<(m, n, k) -> (m, n)>
// CHECK-LABEL: func.func @weight_transposed_f32(
// CHECK-SAME:    %{{.*}}: memref<1024x128xf32>, %[[WT:.*]]: memref<1024x128xf32>, %{{.*}}: memref<1024x1024xf32>)
// CHECK:         gpu.launch {{.*}} workgroup(%{{.*}} : memref<16x68xf32, #gpu.address_space<workgroup>>, %[[BST:.*]] : memref<16x64xf32, #gpu.address_space<workgroup>>)
// CHECK:             vector.load %[[WT]][{{.*}}] {alignment = 16 : i64} : memref<1024x128xf32>, vector<4xf32>
// CHECK-COUNT-4:     memref.store %{{.*}}, %[[BST]]
// CHECK:             vector.fma
// CHECK-NOT:     linalg.matmul
func.func @weight_transposed_f32(%a: memref<1024x128xf32>, %wt: memref<1024x128xf32>, %c: memref<1024x1024xf32>) {
  %zero = arith.constant 0.0 : f32
  linalg.fill ins(%zero : f32) outs(%c : memref<1024x1024xf32>)
  linalg.matmul indexing_maps = [#lhs, #weight, #res]
      ins(%a, %wt : memref<1024x128xf32>, memref<1024x128xf32>) outs(%c : memref<1024x1024xf32>)
  return
}

// Tensor cores: Bᵀ is already the column-major B that mma.sync takes, so its
// tile is copied as it is (N x K, rows padded) and ldmatrix reads it
// untransposed.
// CHECK-LABEL: func.func @weight_transposed_f16(
// CHECK:         gpu.launch {{.*}} workgroup(%{{.*}} : memref<{{.*}}xf16, #gpu.address_space<workgroup>>, %[[BS16:.*]] : memref<128x40xf16, #gpu.address_space<workgroup>>)
// CHECK:             vector.store %{{.*}}, %[[BS16]]{{.*}} : memref<128x40xf16, #gpu.address_space<workgroup>>, vector<8xf16>
// CHECK:             nvgpu.ldmatrix %[[BS16]][{{.*}}] {numTiles = 4 : i32, transpose = false}
// CHECK:             nvgpu.mma.sync
// CHECK-NOT:     linalg.matmul
func.func @weight_transposed_f16(%a: memref<2048x256xf16>, %wt: memref<2048x256xf16>, %c: memref<2048x2048xf32>) {
  %zero = arith.constant 0.0 : f32
  linalg.fill ins(%zero : f32) outs(%c : memref<2048x2048xf32>)
  linalg.matmul indexing_maps = [#lhs, #weight, #res]
      ins(%a, %wt : memref<2048x256xf16>, memref<2048x256xf16>) outs(%c : memref<2048x2048xf32>)
  return
}

// Negative: other indexing maps (A read transposed) have no kernel here;
// the matmul stays a linalg op for the generic pipeline.
#lhs_t = affine_map<(m, n, k) -> (k, m)>
#rhs = affine_map<(m, n, k) -> (k, n)>
// CHECK-LABEL: func.func @left_transposed_stays(
// CHECK-NOT:     gpu.launch
// CHECK:         linalg.matmul
func.func @left_transposed_stays(%at: memref<128x1024xf32>, %b: memref<128x1024xf32>, %c: memref<1024x1024xf32>) {
  %zero = arith.constant 0.0 : f32
  linalg.fill ins(%zero : f32) outs(%c : memref<1024x1024xf32>)
  linalg.matmul indexing_maps = [#lhs_t, #rhs, #res]
      ins(%at, %b : memref<128x1024xf32>, memref<128x1024xf32>) outs(%c : memref<1024x1024xf32>)
  return
}

// bf16: tensor cores too. The tile is nvvm.mma.sync on the fragments'
// 32-bit registers, which names the operand type (nvgpu.mma.sync cannot).
// CHECK-LABEL: func.func @bf16_tensor_cores(
// CHECK:         gpu.launch {{.*}} module(@forward_mma_matmul_{{[0-9]+}})
// CHECK:             nvgpu.ldmatrix {{.*}} -> vector<4x2xbf16>
// CHECK:             vector.bitcast %{{.*}} : vector<2xbf16> to vector<1xi32>
// CHECK:             nvvm.mma.sync A[{{.*}}] B[{{.*}}] C[{{.*}}] {{{.*}}multiplicandAPtxType = #nvvm.mma_type<bf16>, multiplicandBPtxType = #nvvm.mma_type<bf16>, shape = #nvvm.shape<m = 16, n = 8, k = 16>} : (i32, i32, f32) -> !llvm.struct<(f32, f32, f32, f32)>
// CHECK-NOT:     linalg.matmul
func.func @bf16_tensor_cores(%a: memref<2048x256xbf16>, %b: memref<256x2048xbf16>, %c: memref<2048x2048xf32>) {
  %zero = arith.constant 0.0 : f32
  linalg.fill ins(%zero : f32) outs(%c : memref<2048x2048xf32>)
  linalg.matmul ins(%a, %b : memref<2048x256xbf16>, memref<256x2048xbf16>) outs(%c : memref<2048x2048xf32>)
  return
}

// Attention's output: the batched P @ V result (B*H, S, D) split into
// (B, H, S, D) and permuted to (B, S, H, D). The kernel stores each result
// vector at its permuted place; the temporary, the view and the transpose go.
// CHECK-LABEL: func.func @permuted_store(
// CHECK-SAME:    %{{.*}}: memref<16x128x128xf32>, %{{.*}}: memref<16x128x64xf32>, %[[OUT:.*]]: memref<2x128x8x64xf32>)
// CHECK-NOT:     memref.alloc
// CHECK:         gpu.launch blocks(%{{[a-z0-9]+}}, %{{[a-z0-9]+}}, %[[BATCH:[a-z0-9]+]]) in
// CHECK:           %[[H:.*]] = arith.remui %[[BATCH]], %c8
// CHECK:           %[[B:.*]] = arith.divui %[[BATCH]], %c8
// CHECK:           vector.store %{{.*}}, %[[OUT]][%[[B]], %{{.*}}, %[[H]], %{{.*}}] {{.*}} : memref<2x128x8x64xf32>, vector<4xf32>
// CHECK-NOT:     linalg.transpose
// CHECK:         return
func.func @permuted_store(%p: memref<16x128x128xf32>, %v: memref<16x128x64xf32>, %out: memref<2x128x8x64xf32>) {
  %zero = arith.constant 0.0 : f32
  %acc = memref.alloc() : memref<16x128x64xf32>
  linalg.fill ins(%zero : f32) outs(%acc : memref<16x128x64xf32>)
  linalg.batch_matmul ins(%p, %v : memref<16x128x128xf32>, memref<16x128x64xf32>) outs(%acc : memref<16x128x64xf32>)
  %split = memref.expand_shape %acc [[0, 1], [2], [3]] output_shape [2, 8, 128, 64] : memref<16x128x64xf32> into memref<2x8x128x64xf32>
  linalg.transpose ins(%split : memref<2x8x128x64xf32>) outs(%out : memref<2x128x8x64xf32>) permutation = [0, 2, 1, 3]
  memref.dealloc %acc : memref<16x128x64xf32>
  return
}

// A causal mask on the attention scores: an epilogue in place, through the
// batch split (B*H, S, S) -> (B, H, S, S), that reads its loop indices
// (linalg.index). The kernel applies it with the split indices.
#id4 = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>
// CHECK-LABEL: func.func @causal_mask(
// CHECK:         %[[VIEW:.*]] = memref.expand_shape
// CHECK:         gpu.launch
// CHECK:           arith.cmpi ugt, %{{.*}}, %{{.*}} : index
// CHECK:           arith.select
// CHECK:           vector.store %{{.*}}, %[[VIEW]][{{.*}}] {{.*}} : memref<2x8x128x128xf32>, vector<4xf32>
// CHECK-NOT:     linalg.generic
// CHECK:         return
func.func @causal_mask(%q: memref<16x128x64xf32>, %k: memref<16x64x128xf32>, %out: memref<16x128x128xf32>) {
  %zero = arith.constant 0.0 : f32
  %ninf = arith.constant 0xFF800000 : f32
  linalg.fill ins(%zero : f32) outs(%out : memref<16x128x128xf32>)
  linalg.batch_matmul ins(%q, %k : memref<16x128x64xf32>, memref<16x64x128xf32>) outs(%out : memref<16x128x128xf32>)
  %split = memref.expand_shape %out [[0, 1], [2], [3]] output_shape [2, 8, 128, 128] : memref<16x128x128xf32> into memref<2x8x128x128xf32>
  linalg.generic {indexing_maps = [#id4, #id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]}
      ins(%split : memref<2x8x128x128xf32>) outs(%split : memref<2x8x128x128xf32>) {
  ^bb0(%s: f32, %o: f32):
    %i = linalg.index 2 : index
    %j = linalg.index 3 : index
    %above = arith.cmpi ugt, %j, %i : index
    %m = arith.select %above, %ninf, %s : f32
    linalg.yield %m : f32
  }
  return
}

// A projection split into heads, as BERT writes its query: the (B·S) x (H·D)
// result viewed as (B, S, H, D), the bias (H, D) added and the result
// permuted to (B, H, S, D), in one generic. Each result's row and column
// split into loop indices; the stores land in the permuted output, 4 columns
// (one D run) at a time.
// CHECK-LABEL: func.func @heads_split_epilogue(
// CHECK-SAME:    %{{.*}}: memref<256x64xf32>, %{{.*}}: memref<64x512xf32>, %[[BIAS:.*]]: memref<512xf32>, %[[Q:.*]]: memref<2x8x128x64xf32>)
// CHECK:         gpu.launch
// CHECK:           %[[S:.*]] = arith.remui %{{.*}}, %c128
// CHECK:           %[[B:.*]] = arith.divui %{{.*}}, %c128
// CHECK:           %[[D:.*]] = arith.remui %{{.*}}, %c64
// CHECK:           %[[H:.*]] = arith.divui %{{.*}}, %c64
// CHECK:           memref.load %{{.*}}[%[[H]], %[[D]]] : memref<8x64xf32>
// CHECK:           vector.store %{{.*}}, %[[Q]][%[[B]], %[[H]], %[[S]], %[[D]]] {{.*}} : memref<2x8x128x64xf32>, vector<4xf32>
// CHECK-NOT:     linalg.
// CHECK:         return
#heads_read = affine_map<(d0, d1, d2, d3) -> (d0, d2, d1, d3)>
#heads_bias = affine_map<(d0, d1, d2, d3) -> (d1, d3)>
#heads_id = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>
func.func @heads_split_epilogue(%a: memref<256x64xf32>, %b: memref<64x512xf32>, %bias: memref<512xf32>,
                                %q: memref<2x8x128x64xf32>) {
  %zero = arith.constant 0.0 : f32
  %acc = memref.alloc() : memref<256x512xf32>
  linalg.fill ins(%zero : f32) outs(%acc : memref<256x512xf32>)
  linalg.matmul ins(%a, %b : memref<256x64xf32>, memref<64x512xf32>) outs(%acc : memref<256x512xf32>)
  %view = memref.expand_shape %acc [[0, 1], [2, 3]] output_shape [2, 128, 8, 64] : memref<256x512xf32> into memref<2x128x8x64xf32>
  %bias2 = memref.expand_shape %bias [[0, 1]] output_shape [8, 64] : memref<512xf32> into memref<8x64xf32>
  linalg.generic {indexing_maps = [#heads_read, #heads_bias, #heads_id], iterator_types = ["parallel", "parallel", "parallel", "parallel"]}
      ins(%view, %bias2 : memref<2x128x8x64xf32>, memref<8x64xf32>) outs(%q : memref<2x8x128x64xf32>) {
  ^bb0(%v: f32, %c: f32, %o: f32):
    %r = arith.addf %v, %c : f32
    linalg.yield %r : f32
  }
  memref.dealloc %acc : memref<256x512xf32>
  return
}

// The key, permuted to (B, H, D, S) for QKᵀ: consecutive columns of the
// result (along D) are S apart in the output, so each is stored alone.
// CHECK-LABEL: func.func @heads_split_scattered(
// CHECK:         gpu.launch
// CHECK:           memref.store %{{.*}}, %{{.*}}[%{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}] : memref<2x8x64x128xf32>
// CHECK-NOT:       vector.store %{{.*}} : memref<2x8x64x128xf32>
// CHECK-NOT:     linalg.
// CHECK:         return
#key_read = affine_map<(d0, d1, d2, d3) -> (d0, d3, d1, d2)>
func.func @heads_split_scattered(%a: memref<256x64xf32>, %b: memref<64x512xf32>, %k: memref<2x8x64x128xf32>) {
  %zero = arith.constant 0.0 : f32
  %acc = memref.alloc() : memref<256x512xf32>
  linalg.fill ins(%zero : f32) outs(%acc : memref<256x512xf32>)
  linalg.matmul ins(%a, %b : memref<256x64xf32>, memref<64x512xf32>) outs(%acc : memref<256x512xf32>)
  %view = memref.expand_shape %acc [[0, 1], [2, 3]] output_shape [2, 128, 8, 64] : memref<256x512xf32> into memref<2x128x8x64xf32>
  linalg.generic {indexing_maps = [#key_read, #heads_id], iterator_types = ["parallel", "parallel", "parallel", "parallel"]}
      ins(%view : memref<2x128x8x64xf32>) outs(%k : memref<2x8x64x128xf32>) {
  ^bb0(%v: f32, %o: f32):
    linalg.yield %v : f32
  }
  memref.dealloc %acc : memref<256x512xf32>
  return
}

// A projection without bias split into heads by a transpose alone (LLaMA's
// q_proj, then view + transpose(1, 2)): the transpose is the store pattern.
// CHECK-LABEL: func.func @heads_split_transpose(
// CHECK-SAME:    %{{.*}}: memref<256x64xf32>, %{{.*}}: memref<64x512xf32>, %[[Q:.*]]: memref<2x8x128x64xf32>)
// CHECK-NOT:     memref.alloc
// CHECK:         gpu.launch
// CHECK:           vector.store %{{.*}}, %[[Q]][%{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}] {{.*}} : memref<2x8x128x64xf32>, vector<4xf32>
// CHECK-NOT:     linalg.transpose
// CHECK:         return
func.func @heads_split_transpose(%a: memref<256x64xf32>, %b: memref<64x512xf32>, %q: memref<2x8x128x64xf32>) {
  %zero = arith.constant 0.0 : f32
  %acc = memref.alloc() : memref<256x512xf32>
  linalg.fill ins(%zero : f32) outs(%acc : memref<256x512xf32>)
  linalg.matmul ins(%a, %b : memref<256x64xf32>, memref<64x512xf32>) outs(%acc : memref<256x512xf32>)
  %view = memref.expand_shape %acc [[0, 1], [2, 3]] output_shape [2, 128, 8, 64] : memref<256x512xf32> into memref<2x128x8x64xf32>
  linalg.transpose ins(%view : memref<2x128x8x64xf32>) outs(%q : memref<2x8x128x64xf32>) permutation = [0, 2, 1, 3]
  memref.dealloc %acc : memref<256x512xf32>
  return
}

// Horizontal fusion: the matmuls of one matmul_horizontal dispatch (Q, K, V
// projections reading one input) become one kernel. Its 1-D grid holds each
// matmul's blocks in turn (here 2 x 128 blocks of 32x32 tiles: the tile
// is chosen for both, and 64x32 tiles would give 128 blocks in all, under
// the table's min_blocks of 132), a
// block runs the body its index falls in, and each matmul keeps its
// epilogue, even one placed after the other matmul.
// CHECK-LABEL: func.func @horizontal(
// CHECK-SAME:    %[[X:.*]]: memref<256x64xf32>, %[[WQ:.*]]: memref<64x512xf32>, %[[WK:.*]]: memref<64x512xf32>, %[[BQ:.*]]: memref<512xf32>, %[[Q:.*]]: memref<256x512xf32>, %[[K:.*]]: memref<256x512xf32>)
// CHECK:         gpu.launch blocks(%[[BLOCK:[a-z0-9]+]], %{{.*}}, %{{.*}}) in (%{{.*}} = %c256,
// CHECK:           %[[FIRST:.*]] = arith.cmpi ult, %[[BLOCK]], %c128 : index
// CHECK:           scf.if %[[FIRST]] {
// CHECK:             vector.load %[[WQ]]
// CHECK:             memref.load %[[BQ]]
// CHECK:             vector.store %{{.*}}, %[[Q]]
// CHECK:           } else {
// CHECK:             arith.subi %[[BLOCK]], %c128 : index
// CHECK:             vector.load %[[WK]]
// CHECK:             vector.store %{{.*}}, %[[K]]
// CHECK:           }
// CHECK-NOT:     gpu.launch
// CHECK-NOT:     linalg.
// CHECK:         return
#hz_id = affine_map<(d0, d1) -> (d0, d1)>
#hz_col = affine_map<(d0, d1) -> (d1)>
func.func @horizontal(%x: memref<256x64xf32>, %wq: memref<64x512xf32>, %wk: memref<64x512xf32>,
                      %bq: memref<512xf32>, %q: memref<256x512xf32>, %k: memref<256x512xf32>) {
  %zero = arith.constant 0.0 : f32
  %accq = memref.alloc() : memref<256x512xf32>
  linalg.fill {twintrack.dispatch = "matmul_horizontal_0", twintrack.dispatch_kind = #twintrack.dispatch_kind<matmul_horizontal>} ins(%zero : f32) outs(%accq : memref<256x512xf32>)
  linalg.matmul {twintrack.dispatch = "matmul_horizontal_0", twintrack.dispatch_kind = #twintrack.dispatch_kind<matmul_horizontal>} ins(%x, %wq : memref<256x64xf32>, memref<64x512xf32>) outs(%accq : memref<256x512xf32>)
  linalg.fill {twintrack.dispatch = "matmul_horizontal_0", twintrack.dispatch_kind = #twintrack.dispatch_kind<matmul_horizontal>} ins(%zero : f32) outs(%k : memref<256x512xf32>)
  linalg.matmul {twintrack.dispatch = "matmul_horizontal_0", twintrack.dispatch_kind = #twintrack.dispatch_kind<matmul_horizontal>} ins(%x, %wk : memref<256x64xf32>, memref<64x512xf32>) outs(%k : memref<256x512xf32>)
  linalg.generic {indexing_maps = [#hz_id, #hz_col, #hz_id], iterator_types = ["parallel", "parallel"]}
      ins(%accq, %bq : memref<256x512xf32>, memref<512xf32>) outs(%q : memref<256x512xf32>) attrs = {twintrack.dispatch = "matmul_horizontal_0", twintrack.dispatch_kind = #twintrack.dispatch_kind<matmul_horizontal>} {
  ^bb0(%v: f32, %b: f32, %o: f32):
    %r = arith.addf %v, %b : f32
    linalg.yield %r : f32
  }
  memref.dealloc %accq : memref<256x512xf32>
  return
}

// Negative: the second matmul's epilogue reads the first one's result (a
// SwiGLU's silu(gate) * up on the up projection). In one kernel its blocks
// would run beside the first's, in no order, and read results not yet
// stored: each matmul keeps its own kernel, the first's before the second's.
// CHECK-LABEL: func.func @horizontal_gated(
// CHECK-SAME:    %[[X:.*]]: memref<256x64xf32>, %[[WG:.*]]: memref<64x512xf32>, %[[WU:.*]]: memref<64x512xf32>, %[[Y:.*]]: memref<256x512xf32>)
// CHECK:         %[[GATE:.*]] = memref.alloc() : memref<256x512xf32>
// CHECK:         gpu.launch
// CHECK:           vector.load %[[WG]]
// CHECK:           vector.store %{{.*}}, %[[GATE]]
// CHECK:         gpu.launch
// CHECK:           vector.load %[[WU]]
// CHECK:           memref.load %[[GATE]]
// CHECK:           vector.store %{{.*}}, %[[Y]]
// CHECK-NOT:     linalg.
// CHECK:         return
func.func @horizontal_gated(%x: memref<256x64xf32>, %wg: memref<64x512xf32>, %wu: memref<64x512xf32>,
                            %y: memref<256x512xf32>) {
  %zero = arith.constant 0.0 : f32
  %gate = memref.alloc() : memref<256x512xf32>
  linalg.fill {twintrack.dispatch = "matmul_horizontal_0", twintrack.dispatch_kind = #twintrack.dispatch_kind<matmul_horizontal>} ins(%zero : f32) outs(%gate : memref<256x512xf32>)
  linalg.matmul {twintrack.dispatch = "matmul_horizontal_0", twintrack.dispatch_kind = #twintrack.dispatch_kind<matmul_horizontal>} ins(%x, %wg : memref<256x64xf32>, memref<64x512xf32>) outs(%gate : memref<256x512xf32>)
  %up = memref.alloc() : memref<256x512xf32>
  linalg.fill {twintrack.dispatch = "matmul_horizontal_0", twintrack.dispatch_kind = #twintrack.dispatch_kind<matmul_horizontal>} ins(%zero : f32) outs(%up : memref<256x512xf32>)
  linalg.matmul {twintrack.dispatch = "matmul_horizontal_0", twintrack.dispatch_kind = #twintrack.dispatch_kind<matmul_horizontal>} ins(%x, %wu : memref<256x64xf32>, memref<64x512xf32>) outs(%up : memref<256x512xf32>)
  linalg.generic {indexing_maps = [#hz_id, #hz_id, #hz_id], iterator_types = ["parallel", "parallel"]}
      ins(%gate, %up : memref<256x512xf32>, memref<256x512xf32>) outs(%y : memref<256x512xf32>) attrs = {twintrack.dispatch = "matmul_horizontal_0", twintrack.dispatch_kind = #twintrack.dispatch_kind<matmul_horizontal>} {
  ^bb0(%g: f32, %u: f32, %o: f32):
    %r = arith.mulf %g, %u : f32
    linalg.yield %r : f32
  }
  memref.dealloc %gate : memref<256x512xf32>
  memref.dealloc %up : memref<256x512xf32>
  return
}

// Negative: an op of another dispatch between the two matmuls (it reads the
// first one's result) would run before that result exists if the kernel
// took the second's place: each matmul keeps its own kernel.
// CHECK-LABEL: func.func @horizontal_interrupted(
// CHECK:         gpu.launch
// CHECK:         linalg.generic
// CHECK:         gpu.launch
// CHECK:         return
func.func @horizontal_interrupted(%x: memref<256x64xf32>, %wq: memref<64x512xf32>, %wk: memref<64x512xf32>,
                                  %q: memref<256x512xf32>, %k: memref<256x512xf32>, %y: memref<256x512xf32>) {
  %zero = arith.constant 0.0 : f32
  linalg.fill {twintrack.dispatch = "matmul_horizontal_0", twintrack.dispatch_kind = #twintrack.dispatch_kind<matmul_horizontal>} ins(%zero : f32) outs(%q : memref<256x512xf32>)
  linalg.matmul {twintrack.dispatch = "matmul_horizontal_0", twintrack.dispatch_kind = #twintrack.dispatch_kind<matmul_horizontal>} ins(%x, %wq : memref<256x64xf32>, memref<64x512xf32>) outs(%q : memref<256x512xf32>)
  linalg.generic {indexing_maps = [#hz_id, #hz_id], iterator_types = ["parallel", "parallel"]}
      ins(%q : memref<256x512xf32>) outs(%y : memref<256x512xf32>) attrs = {twintrack.dispatch = "elementwise_1"} {
  ^bb0(%v: f32, %o: f32):
    %r = math.exp %v : f32
    linalg.yield %r : f32
  }
  linalg.fill {twintrack.dispatch = "matmul_horizontal_0", twintrack.dispatch_kind = #twintrack.dispatch_kind<matmul_horizontal>} ins(%zero : f32) outs(%k : memref<256x512xf32>)
  linalg.matmul {twintrack.dispatch = "matmul_horizontal_0", twintrack.dispatch_kind = #twintrack.dispatch_kind<matmul_horizontal>} ins(%x, %wk : memref<256x64xf32>, memref<64x512xf32>) outs(%k : memref<256x512xf32>)
  return
}

// A view between the zero fill and the matmul (an earlier pass moved an
// epilogue's operand view up) touches no data: the fill still folds into
// the kernel's first write.
// CHECK-LABEL: func.func @view_between_fill_and_matmul(
// CHECK-NOT:     linalg.fill
// CHECK:         gpu.launch
// CHECK-NOT:     linalg.
// CHECK:         return
func.func @view_between_fill_and_matmul(%a: memref<256x64xf32>, %b: memref<64x512xf32>, %bias: memref<512xf32>,
                                        %y: memref<256x512xf32>) {
  %zero = arith.constant 0.0 : f32
  %acc = memref.alloc() : memref<256x512xf32>
  linalg.fill ins(%zero : f32) outs(%acc : memref<256x512xf32>)
  %bias2 = memref.expand_shape %bias [[0, 1]] output_shape [1, 512] : memref<512xf32> into memref<1x512xf32>
  linalg.matmul ins(%a, %b : memref<256x64xf32>, memref<64x512xf32>) outs(%acc : memref<256x512xf32>)
  linalg.generic {indexing_maps = [#hz_id, #hz_col, #hz_id], iterator_types = ["parallel", "parallel"]}
      ins(%acc, %bias : memref<256x512xf32>, memref<512xf32>) outs(%y : memref<256x512xf32>) {
  ^bb0(%v: f32, %c: f32, %o: f32):
    %r = arith.addf %v, %c : f32
    linalg.yield %r : f32
  }
  memref.dealloc %acc : memref<256x512xf32>
  return
}


// ViT's key projection at 197 tokens, permuted to (B, H, D, S): no tile
// divides its 394 rows (ragged: rows past 393 read as zeros, not stored),
// and the output's rows of 197 are no whole 16-byte vectors: each result is
// stored alone, where the store guard lets it through.
// CHECK-LABEL: func.func @heads_split_unaligned(
// CHECK-SAME:    %[[X:.*]]: memref<394x64xf32>, %{{.*}}: memref<64x512xf32>, %[[K:.*]]: memref<2x8x64x197xf32>)
// CHECK:         gpu.launch
// CHECK:           %[[ROW:.*]] = arith.minui %{{.*}}, %c393 : index
// CHECK:           %[[LOADED:.*]] = vector.load %[[X]][%[[ROW]], %{{.*}}] {alignment = 16 : i64} : memref<394x64xf32>, vector<4xf32>
// CHECK:           arith.select %{{.*}}, %[[LOADED]], %{{.*}} : vector<4xf32>
// CHECK:           } {twintrack.kernel_path = "simt-matmul
// CHECK:           %[[IN:.*]] = arith.cmpi ult, %{{.*}}, %c394 : index
// CHECK-NEXT:      scf.if %[[IN]] {
// CHECK:             memref.store %{{.*}}, %[[K]][%{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}] : memref<2x8x64x197xf32>
// CHECK-NOT:       vector.store %{{.*}} : memref<2x8x64x197xf32>
// CHECK-NOT:     linalg.
// CHECK:         return
func.func @heads_split_unaligned(%a: memref<394x64xf32>, %b: memref<64x512xf32>, %k: memref<2x8x64x197xf32>) {
  %zero = arith.constant 0.0 : f32
  %acc = memref.alloc() : memref<394x512xf32>
  linalg.fill ins(%zero : f32) outs(%acc : memref<394x512xf32>)
  linalg.matmul ins(%a, %b : memref<394x64xf32>, memref<64x512xf32>) outs(%acc : memref<394x512xf32>)
  %view = memref.expand_shape %acc [[0, 1], [2, 3]] output_shape [2, 197, 8, 64] : memref<394x512xf32> into memref<2x197x8x64xf32>
  linalg.generic {indexing_maps = [#key_read, #heads_id], iterator_types = ["parallel", "parallel", "parallel", "parallel"]}
      ins(%view : memref<2x197x8x64xf32>) outs(%k : memref<2x8x64x197xf32>) {
  ^bb0(%v: f32, %o: f32):
    linalg.yield %v : f32
  }
  memref.dealloc %acc : memref<394x512xf32>
  return
}
