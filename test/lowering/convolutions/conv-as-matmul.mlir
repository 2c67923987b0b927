// RUN: %stage-convolutions %s | FileCheck %s

// The GPU's convolutions stage: a convolution becomes im2col patches (output
// positions x (window, channel)), a matmul with the weight (its channels
// moved innermost) read as a linear layer's, and one elementwise op back to channels-first that adds the bias
// (read as the vector it is, not its broadcast). The patches read a
// channels-last copy of the channels-first input, so that a window's
// channels are consecutive (the matmul kernel then reads them in place).

// CHECK-DAG: #[[PATCH:.*]] = affine_map<(d0, d1, d2, d3, d4, d5) -> (d0, d1 * 2 + d3, d2 * 2 + d4 * 2, d5)>
// CHECK-DAG: #[[LAST:.*]] = affine_map<(d0, d1, d2, d3) -> (d0, d2, d3, d1)>
// CHECK-DAG: #[[BIAS:.*]] = affine_map<(d0, d1, d2, d3) -> (d1)>
// CHECK-LABEL: func.func @conv_bias(
// CHECK:         %[[XL:.*]] = linalg.transpose ins(%arg0 : tensor<2x8x11x11xf16>) {{.*}} permutation = [0, 2, 3, 1]
// CHECK:         %[[P:.*]] = linalg.generic {indexing_maps = [#[[PATCH]], {{.*}}]{{.*}} ins(%[[XL]] : tensor<2x11x11x8xf16>) outs(%{{.*}} : tensor<2x4x4x3x3x8xf16>)
// CHECK:         %[[A:.*]] = tensor.collapse_shape %[[P]] {{\[\[}}0, 1, 2], [3, 4, 5]] : tensor<2x4x4x3x3x8xf16> into tensor<32x72xf16>
// CHECK:         %[[WL:.*]] = linalg.transpose ins(%arg1 : tensor<16x8x3x3xf16>) {{.*}} permutation = [0, 2, 3, 1]
// CHECK:         %[[W:.*]] = tensor.collapse_shape %[[WL]] {{\[\[}}0], [1, 2, 3]] : tensor<16x3x3x8xf16> into tensor<16x72xf16>
// CHECK:         %[[WT:.*]] = linalg.transpose ins(%[[W]] : tensor<16x72xf16>) {{.*}} permutation = [1, 0]
// CHECK:         %[[ZERO:.*]] = linalg.fill {{.*}} -> tensor<32x16xf32>
// CHECK:         %[[M:.*]] = linalg.matmul ins(%[[A]], %[[WT]] : tensor<32x72xf16>, tensor<72x16xf16>) outs(%[[ZERO]] : tensor<32x16xf32>)
// CHECK:         %[[C:.*]] = tensor.expand_shape %[[M]] {{\[\[}}0, 1, 2], [3]] output_shape [2, 4, 4, 16]
// CHECK:         linalg.generic {indexing_maps = [#[[LAST]], #[[BIAS]], {{.*}}]{{.*}} ins(%[[C]], %arg2 : tensor<2x4x4x16xf32>, tensor<16xf32>)
// CHECK:           arith.addf
// CHECK-NOT:     linalg.conv_2d
// CHECK-NOT:     linalg.broadcast
func.func @conv_bias(%x: tensor<2x8x11x11xf16>, %w: tensor<16x8x3x3xf16>, %b: tensor<16xf32>) -> tensor<2x16x4x4xf32> {
  %e = tensor.empty() : tensor<2x16x4x4xf32>
  %init = linalg.broadcast ins(%b : tensor<16xf32>) outs(%e : tensor<2x16x4x4xf32>) dimensions = [0, 2, 3]
  %y = linalg.conv_2d_nchw_fchw {dilations = dense<[1, 2]> : vector<2xi64>, strides = dense<2> : vector<2xi64>}
      ins(%x, %w : tensor<2x8x11x11xf16>, tensor<16x8x3x3xf16>) outs(%init : tensor<2x16x4x4xf32>) -> tensor<2x16x4x4xf32>
  return %y : tensor<2x16x4x4xf32>
}

// A zero init adds nothing: the last op only puts the result back channels-first.
// CHECK-LABEL: func.func @conv_zero_init(
// CHECK:         linalg.matmul
// CHECK:         linalg.generic
// CHECK-NOT:       arith.addf
// CHECK:         return
func.func @conv_zero_init(%x: tensor<1x16x7x7xf32>, %w: tensor<32x16x1x1xf32>) -> tensor<1x32x7x7xf32> {
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<1x32x7x7xf32>
  %init = linalg.fill ins(%zero : f32) outs(%e : tensor<1x32x7x7xf32>) -> tensor<1x32x7x7xf32>
  %y = linalg.conv_2d_nchw_fchw {dilations = dense<1> : vector<2xi64>, strides = dense<1> : vector<2xi64>}
      ins(%x, %w : tensor<1x16x7x7xf32>, tensor<32x16x1x1xf32>) outs(%init : tensor<1x32x7x7xf32>) -> tensor<1x32x7x7xf32>
  return %y : tensor<1x32x7x7xf32>
}

// 3 channels by a 5x5 window: rows of 75 halves are no whole 16-byte vectors.
// The input and the weight get 5 zero channels (25 x 8 = 200 halves a row):
// the weight a padded copy, the input a channels-last copy with its zero
// channels written (not read through the padding: a window's 8 channels
// must be one 16-byte vector of it, for the matmul kernel to read in place).
// CHECK-LABEL: func.func @conv_unaligned(
// CHECK:         %[[W:.*]] = tensor.pad %arg1 low[0, 0, 0, 0] high[0, 5, 0, 0]
// CHECK:         } : tensor<8x3x5x5xf16> to tensor<8x8x5x5xf16>
// CHECK:         %[[XL:.*]] = linalg.transpose ins(%arg0 : tensor<1x3x10x10xf16>) {{.*}} permutation = [0, 2, 3, 1]
// CHECK:         %[[X8:.*]] = tensor.pad %[[XL]] low[0, 0, 0, 0] high[0, 0, 0, 5]
// CHECK:         } : tensor<1x10x10x3xf16> to tensor<1x10x10x8xf16>
// CHECK:         linalg.generic {{.*}} ins(%[[X8]] : tensor<1x10x10x8xf16>) outs(%{{.*}} : tensor<1x6x6x5x5x8xf16>)
// CHECK-NOT:       tensor.extract
// CHECK:         linalg.transpose ins(%[[W]] : tensor<8x8x5x5xf16>) {{.*}} permutation = [0, 2, 3, 1]
// CHECK:         linalg.matmul ins(%{{.*}}, %{{.*}} : tensor<36x200xf16>, tensor<200x8xf16>)
// CHECK-NOT:     linalg.conv_2d_nchw_fchw
// CHECK-NOT:     twintrack.windows
func.func @conv_unaligned(%x: tensor<1x3x10x10xf16>, %w: tensor<8x3x5x5xf16>, %init: tensor<1x8x6x6xf32>) -> tensor<1x8x6x6xf32> {
  %y = linalg.conv_2d_nchw_fchw {dilations = dense<1> : vector<2xi64>, strides = dense<1> : vector<2xi64>}
      ins(%x, %w : tensor<1x3x10x10xf16>, tensor<8x3x5x5xf16>) outs(%init : tensor<1x8x6x6xf32>) -> tensor<1x8x6x6xf32>
  return %y : tensor<1x8x6x6xf32>
}

// 3 channels by a 3x3 window sum 27 products an output (direct_taps: 32):
// computed directly, channels-last, each output over (channel, kh, kw),
// the weight read as it is and the input through its padding, in place;
// then back channels-first with the init added.
// CHECK-LABEL: func.func @conv_direct(
// CHECK-NOT:     linalg.matmul
// CHECK-NOT:     tensor.pad
// CHECK:         %[[SUM:.*]] = linalg.generic {indexing_maps = [#[[WEIGHT:.*]], #[[OUT:.*]]], iterator_types = ["parallel", "parallel", "parallel", "parallel", "reduction", "reduction", "reduction"]} ins(%arg1 : tensor<8x3x3x3xf16>) outs(%{{.*}} : tensor<1x4x4x8xf32>)
// CHECK:           tensor.extract %arg0
// CHECK:           arith.select
// CHECK:           arith.mulf
// CHECK:           arith.addf
// CHECK:         linalg.generic {{.*}} ins(%[[SUM]], %arg2 : tensor<1x4x4x8xf32>, tensor<1x8x4x4xf32>)
// CHECK-NOT:     twintrack.windows
func.func @conv_direct(%x: tensor<1x3x8x8xf16>, %w: tensor<8x3x3x3xf16>, %init: tensor<1x8x4x4xf32>) -> tensor<1x8x4x4xf32> {
  %c0 = arith.constant 0.0 : f16
  %padded = tensor.pad %x low[0, 0, 1, 1] high[0, 0, 1, 1] {
  ^bb0(%a: index, %b: index, %c: index, %d: index):
    tensor.yield %c0 : f16
  } : tensor<1x3x8x8xf16> to tensor<1x3x10x10xf16>
  %y = linalg.conv_2d_nchw_fchw {dilations = dense<1> : vector<2xi64>, strides = dense<2> : vector<2xi64>}
      ins(%padded, %w : tensor<1x3x10x10xf16>, tensor<8x3x3x3xf16>) outs(%init : tensor<1x8x4x4xf32>) -> tensor<1x8x4x4xf32>
  return %y : tensor<1x8x4x4xf32>
}
