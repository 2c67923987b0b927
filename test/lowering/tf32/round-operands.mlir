// RUN: %PYTHON -m twintrack.compiler.passes "round-tf32-operands{tf32=true}" %s | FileCheck %s
// RUN: %PYTHON -m twintrack.compiler.passes "round-tf32-operands{tf32=false}" %s | FileCheck %s --check-prefix=OFF

// round-tf32-operands: an f32 matmul the tf32 tensor-core kernels take
// reads its B rounded to tf32 (to nearest, ties away: add half of tf32's
// last place to the bits, keep the top 19, NaN kept). The rounding sits on
// B's source, ahead of views, so fusion can fold it into the producer; a
// source two matmuls read is rounded once. A is left as it is: the kernels
// round A's fragments in registers.

// OFF-NOT: arith.andi

#a = affine_map<(d0, d1, d2) -> (d0, d2)>
#bt = affine_map<(d0, d1, d2) -> (d1, d2)>
#c = affine_map<(d0, d1, d2) -> (d0, d1)>
#id = affine_map<(d0, d1) -> (d0, d1)>

// A linear layer's weight (read transposed), an argument: rounded once at
// the function's start, for both matmuls; their A (the input, the first
// layer's result) as they are.
// CHECK-LABEL: func.func @linear_twice(
// CHECK-SAME:      %[[X:[a-z0-9]+]]: tensor<256x512xf32>, %[[W:[a-z0-9]+]]: tensor<512x512xf32>
// CHECK:         %[[RW:.*]] = linalg.generic {{.*}} ins(%[[W]] : tensor<512x512xf32>)
// CHECK:           arith.bitcast %{{.*}} : f32 to i32
// CHECK:           arith.addi %{{.*}}, %c4096_i32
// CHECK:           arith.andi %{{.*}}, %c-8192_i32
// CHECK:           arith.bitcast %{{.*}} : i32 to f32
// CHECK:           arith.cmpf uno
// CHECK:           arith.select
// CHECK:         %[[Y:.*]] = linalg.matmul {{.*}} ins(%[[X]], %[[RW]] :
// CHECK:         %[[RELU:.*]] = linalg.generic {{.*}} ins(%[[Y]] :
// CHECK-NOT:       arith.andi
// CHECK:         linalg.matmul {{.*}} ins(%[[RELU]], %[[RW]] :
// CHECK-NOT:     arith.andi
// CHECK:         return
func.func @linear_twice(%x: tensor<256x512xf32>, %w: tensor<512x512xf32>) -> tensor<256x512xf32> {
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<256x512xf32>
  %f = linalg.fill ins(%zero : f32) outs(%e : tensor<256x512xf32>) -> tensor<256x512xf32>
  %y = linalg.matmul indexing_maps = [#a, #bt, #c] ins(%x, %w : tensor<256x512xf32>, tensor<512x512xf32>) outs(%f : tensor<256x512xf32>) -> tensor<256x512xf32>
  %relu = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]} ins(%y : tensor<256x512xf32>) outs(%e : tensor<256x512xf32>) {
  ^bb0(%in: f32, %out: f32):
    %m = arith.maximumf %in, %zero : f32
    linalg.yield %m : f32
  } -> tensor<256x512xf32>
  %z = linalg.matmul indexing_maps = [#a, #bt, #c] ins(%relu, %w : tensor<256x512xf32>, tensor<512x512xf32>) outs(%f : tensor<256x512xf32>) -> tensor<256x512xf32>
  return %z : tensor<256x512xf32>
}

// A plain B (K x N) behind a transpose and a reshape: rounded ahead of both,
// so the matmul kernels still read the weight through them.
// CHECK-LABEL: func.func @behind_views(
// CHECK-SAME:      %[[A:[a-z0-9]+]]: tensor<256x512xf32>, %[[B:[a-z0-9]+]]: tensor<512x8x64xf32>
// CHECK:         %[[RB:.*]] = linalg.generic {{.*}} ins(%[[B]] : tensor<512x8x64xf32>)
// CHECK:         tensor.collapse_shape %[[RB]]
// CHECK:         linalg.transpose
// CHECK:         linalg.matmul
func.func @behind_views(%a: tensor<256x512xf32>, %b: tensor<512x8x64xf32>) -> tensor<256x512xf32> {
  %zero = arith.constant 0.0 : f32
  %flat = tensor.collapse_shape %b [[0], [1, 2]] : tensor<512x8x64xf32> into tensor<512x512xf32>
  %t0 = tensor.empty() : tensor<512x512xf32>
  %bt = linalg.transpose ins(%flat : tensor<512x512xf32>) outs(%t0 : tensor<512x512xf32>) permutation = [1, 0]
  %e = tensor.empty() : tensor<256x512xf32>
  %f = linalg.fill ins(%zero : f32) outs(%e : tensor<256x512xf32>) -> tensor<256x512xf32>
  %y = linalg.matmul ins(%a, %bt : tensor<256x512xf32>, tensor<512x512xf32>) outs(%f : tensor<256x512xf32>) -> tensor<256x512xf32>
  return %y : tensor<256x512xf32>
}

// One row (a decode step) goes to the CUDA cores, exact f32: nothing rounded.
// CHECK-LABEL: func.func @one_row(
// CHECK-NOT:     arith.andi
// CHECK:         return
func.func @one_row(%x: tensor<1x4096xf32>, %w: tensor<4096x4096xf32>) -> tensor<1x4096xf32> {
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<1x4096xf32>
  %f = linalg.fill ins(%zero : f32) outs(%e : tensor<1x4096xf32>) -> tensor<1x4096xf32>
  %y = linalg.matmul indexing_maps = [#a, #bt, #c] ins(%x, %w : tensor<1x4096xf32>, tensor<4096x4096xf32>) outs(%f : tensor<1x4096xf32>) -> tensor<1x4096xf32>
  return %y : tensor<1x4096xf32>
}

// An attention's batched matmuls go to the attention kernels (f32 on the CUDA cores): nothing rounded.
// CHECK-LABEL: func.func @scores(
// CHECK-NOT:     arith.andi
// CHECK:         return
func.func @scores(%q: tensor<16x256x64xf32>, %k: tensor<16x64x256xf32>) -> tensor<16x256x256xf32> {
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<16x256x256xf32>
  %f = linalg.fill ins(%zero : f32) outs(%e : tensor<16x256x256xf32>) -> tensor<16x256x256xf32>
  %s = linalg.batch_matmul ins(%q, %k : tensor<16x256x64xf32>, tensor<16x64x256xf32>) outs(%f : tensor<16x256x256xf32>) -> tensor<16x256x256xf32>
  return %s : tensor<16x256x256xf32>
}

// A layer's output that a residual add reads too is A: the matmul reads
// it as it is (its kernel rounds it); the weight, an argument, is rounded.
// CHECK-LABEL: func.func @shortcut(
// CHECK-SAME:      %[[H:[a-z0-9]+]]: tensor<256x512xf32>, %[[W2:[a-z0-9]+]]: tensor<512x512xf32>
// CHECK:         %[[RW2:.*]] = linalg.generic {{.*}} ins(%[[W2]] :
// CHECK:           arith.andi
// CHECK:         %[[ACT:.*]] = linalg.generic {{.*}} ins(%[[H]] :
// CHECK-NOT:       arith.andi
// CHECK:         linalg.matmul {{.*}} ins(%[[ACT]], %[[RW2]] :
func.func @shortcut(%h: tensor<256x512xf32>, %w: tensor<512x512xf32>) -> tensor<256x512xf32> {
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<256x512xf32>
  %act = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]} ins(%h : tensor<256x512xf32>) outs(%e : tensor<256x512xf32>) {
  ^bb0(%in: f32, %out: f32):
    %m = arith.maximumf %in, %zero : f32
    linalg.yield %m : f32
  } -> tensor<256x512xf32>
  %f = linalg.fill ins(%zero : f32) outs(%e : tensor<256x512xf32>) -> tensor<256x512xf32>
  %y = linalg.matmul indexing_maps = [#a, #bt, #c] ins(%act, %w : tensor<256x512xf32>, tensor<512x512xf32>) outs(%f : tensor<256x512xf32>) -> tensor<256x512xf32>
  %sum = linalg.generic {indexing_maps = [#id, #id, #id], iterator_types = ["parallel", "parallel"]} ins(%act, %y : tensor<256x512xf32>, tensor<256x512xf32>) outs(%e : tensor<256x512xf32>) {
  ^bb0(%in: f32, %in_1: f32, %out: f32):
    %s = arith.addf %in, %in_1 : f32
    linalg.yield %s : f32
  } -> tensor<256x512xf32>
  return %sum : tensor<256x512xf32>
}
