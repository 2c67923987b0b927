// RUN: %stage-cpu-kernels %s | FileCheck %s
// RUN: %PYTHON -m twintrack.compiler.passes "cpu-matmul-kernels{threads=2}" %s | FileCheck %s --check-prefix=THREADS

// The cpu-kernels stage turns an f32 matmul into the register-blocked
// kernel: an 8x32 accumulator tile (16 vectors of 16 lanes, the host's
// 512-bit registers) carried through the k loop, each k step loading two
// B vectors and broadcasting A's eight elements into 16 fused
// multiply-adds. The zero fill before the matmul becomes the first K
// block's zero accumulators. The schedule, and why, is on the kernel.

// CHECK-LABEL: func.func @filled(
// CHECK-NOT:     linalg.fill
// CHECK-NOT:     linalg.matmul
// CHECK:         scf.if
// CHECK:           scf.yield %{{.*}} : vector<16xf32>, {{.*}}
// CHECK:         } else {
// CHECK-COUNT-16:  vector.load
// CHECK:         scf.for {{.*}} iter_args({{.*}}) -> (vector<16xf32>,
// CHECK-COUNT-2:   vector.load %{{.*}} : memref<64x64xf32>, vector<16xf32>
// CHECK:           memref.load
// CHECK-NEXT:      vector.broadcast
// CHECK-NEXT:      vector.fma
// CHECK-NEXT:      vector.fma
// CHECK-COUNT-16:  vector.store
// CHECK:         twintrack.schedule = "cpu-matmul rows=8 cols=32 (2x16-lane vectors) k-block=64 n-block=64 threads=1: {{.*}}half of the 32 KiB L1{{.*}}B read in place
// CHECK-NOT:     linalg.matmul

// A matmul this short runs on one thread even when there are more: starting
// and joining them would cost more than they save.
// THREADS-LABEL: func.func @filled(
// THREADS-NOT:     scf.parallel
// THREADS:         threads=1: {{.*}}one thread: 0.5 MFLOP is less than the 40 MFLOP that pays for starting 2 threads
func.func @filled(%a: memref<64x64xf32>, %b: memref<64x64xf32>, %c: memref<64x64xf32>) {
  %zero = arith.constant 0.0 : f32
  linalg.fill ins(%zero : f32) outs(%c : memref<64x64xf32>)
  linalg.matmul ins(%a, %b : memref<64x64xf32>, memref<64x64xf32>) outs(%c : memref<64x64xf32>)
  return
}

// A linear layer's weight (N x K) is packed into zero-padded K x 32 panels
// first; 40 columns are a whole block and a last one of 8 lanes, whose
// loads and stores of C are masked. Without a fill the kernel adds onto C.

// CHECK-LABEL: func.func @transposed_with_a_tail(
// CHECK:         memref.alloc() {alignment = 64 : i64} : memref<2x48x32xf32>
// CHECK:         arith.select
// CHECK:         memref.store {{.*}} : memref<2x48x32xf32>
// CHECK:         twintrack.schedule = "cpu-matmul {{.*}} pack-b threads=1: {{.*}}B packed into K x cols panels: it is transposed (N x K); one thread
// CHECK-NOT:     scf.if
// CHECK:         vector.maskedload %{{.*}} : memref<5x40xf32>, vector<16xi1>, vector<16xf32> into vector<16xf32>
// CHECK:         vector.maskedstore
// CHECK:         memref.dealloc {{.*}} : memref<2x48x32xf32>
func.func @transposed_with_a_tail(%a: memref<5x48xf32>, %w: memref<40x48xf32>, %c: memref<5x40xf32>) {
  linalg.matmul indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d2)>, affine_map<(d0, d1, d2) -> (d1, d2)>,
                                 affine_map<(d0, d1, d2) -> (d0, d1)>]
    ins(%a, %w : memref<5x48xf32>, memref<40x48xf32>) outs(%c : memref<5x40xf32>)
  return
}

// Other element types stay linalg ops for the generic loops.

// CHECK-LABEL: func.func @half(
// CHECK:         linalg.matmul
func.func @half(%a: memref<4x4xf16>, %b: memref<4x4xf16>, %c: memref<4x4xf16>) {
  linalg.matmul ins(%a, %b : memref<4x4xf16>, memref<4x4xf16>) outs(%c : memref<4x4xf16>)
  return
}

// A long one is split into one run of whole row blocks per thread, in
// parallel (the llvm stage makes each a task for MLIR's async runtime).
// THREADS-LABEL: func.func @long(
// THREADS:         scf.parallel ({{.*}}) = (%c0) to (%c2) step (%c1) {
// THREADS:           arith.minui
// THREADS:           vector.fma
// THREADS:           scf.reduce
// THREADS:         threads=2: {{.*}}2 threads, each a run of the whole row blocks
func.func @long(%a: memref<256x512xf32>, %b: memref<512x256xf32>, %c: memref<256x256xf32>) {
  linalg.matmul ins(%a, %b : memref<256x512xf32>, memref<512x256xf32>) outs(%c : memref<256x256xf32>)
  return
}
