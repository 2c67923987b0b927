// RUN: %PYTHON -m twintrack.compiler.passes tight-windows %s | FileCheck %s
// RUN: %PYTHON -m twintrack.compiler.passes tight-windows %s | %mlir-opt --pass-pipeline="builtin.module(func.func(linalg-fold-unit-extent-dims))" | FileCheck %s --check-prefix=FOLDED

// A ceil-mode max_pool3d as torch-mlir lowers it: the input padded to
// 5x8x7, while the windows (one along D, three along H, two along W; 3x3x3,
// stride 2) read rows 0..2, 0..6 and 0..4. The pass slices the operand to
// 3x7x5, so folding the unit output dimension leaves a valid generic.

#window_input = affine_map<(d0, d1, d2, d3, d4, d5, d6, d7) -> (d0, d1, d2 * 2 + d5, d3 * 2 + d6, d4 * 2 + d7)>
#window = affine_map<(d0, d1, d2, d3, d4, d5, d6, d7) -> (d5, d6, d7)>
#output = affine_map<(d0, d1, d2, d3, d4, d5, d6, d7) -> (d0, d1, d2, d3, d4)>

// CHECK-LABEL: func.func @ceil_mode_pool(
// CHECK:         %[[PADDED:.+]] = tensor.pad
// CHECK:         %[[TIGHT:.+]] = tensor.extract_slice %[[PADDED]][0, 0, 0, 0, 0] [1, 2, 3, 7, 5] [1, 1, 1, 1, 1] : tensor<1x2x5x8x7xf32> to tensor<1x2x3x7x5xf32>
// CHECK:         linalg.generic {{.*}} ins(%[[TIGHT]], %{{.*}} : tensor<1x2x3x7x5xf32>, tensor<3x3x3xf32>)
// FOLDED-LABEL: func.func @ceil_mode_pool(
// FOLDED:         linalg.generic
// FOLDED:         return {{.*}} : tensor<1x2x1x3x2xf32>
func.func @ceil_mode_pool(%arg0: tensor<1x2x3x6x5xf32>) -> tensor<1x2x1x3x2xf32> {
  %cst = arith.constant 0xFF800000 : f32
  %padded = tensor.pad %arg0 low[0, 0, 0, 0, 0] high[0, 0, 2, 2, 2] {
  ^bb0(%a: index, %b: index, %c: index, %d: index, %e: index):
    tensor.yield %cst : f32
  } : tensor<1x2x3x6x5xf32> to tensor<1x2x5x8x7xf32>
  %0 = tensor.empty() : tensor<1x2x1x3x2xf32>
  %1 = linalg.fill ins(%cst : f32) outs(%0 : tensor<1x2x1x3x2xf32>) -> tensor<1x2x1x3x2xf32>
  %2 = tensor.empty() : tensor<3x3x3xf32>
  %3 = linalg.generic {indexing_maps = [#window_input, #window, #output], iterator_types = ["parallel", "parallel", "parallel", "parallel", "parallel", "reduction", "reduction", "reduction"]} ins(%padded, %2 : tensor<1x2x5x8x7xf32>, tensor<3x3x3xf32>) outs(%1 : tensor<1x2x1x3x2xf32>) {
  ^bb0(%in: f32, %w: f32, %out: f32):
    %4 = arith.maximumf %in, %out : f32
    linalg.yield %4 : f32
  } -> tensor<1x2x1x3x2xf32>
  return %3 : tensor<1x2x1x3x2xf32>
}

// An operand whose windows reach its last row is left alone.
// CHECK-LABEL: func.func @exact_windows(
// CHECK-NOT:     tensor.extract_slice
func.func @exact_windows(%arg0: tensor<7xf32>) -> tensor<3xf32> {
  %cst = arith.constant 0xFF800000 : f32
  %0 = tensor.empty() : tensor<3xf32>
  %1 = linalg.fill ins(%cst : f32) outs(%0 : tensor<3xf32>) -> tensor<3xf32>
  %2 = tensor.empty() : tensor<3xf32>
  %3 = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0 * 2 + d1)>, affine_map<(d0, d1) -> (d1)>, affine_map<(d0, d1) -> (d0)>], iterator_types = ["parallel", "reduction"]} ins(%arg0, %2 : tensor<7xf32>, tensor<3xf32>) outs(%1 : tensor<3xf32>) {
  ^bb0(%in: f32, %w: f32, %out: f32):
    %4 = arith.maximumf %in, %out : f32
    linalg.yield %4 : f32
  } -> tensor<3xf32>
  return %3 : tensor<3xf32>
}
