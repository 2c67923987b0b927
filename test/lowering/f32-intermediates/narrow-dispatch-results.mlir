// RUN: %stage-f32-intermediates %s | FileCheck %s

// A dispatch whose body rounds its f32 values to f16 and widens them again
// before they leave it (an epilogue that took the widening: the gate
// projection of a SwiGLU) returns the f16 values, through the reshape
// between; the dispatches reading them (elementwise, a row sum) widen
// them as they load them. The
// values are the same, half the bytes. A widened result the function
// returns stays f32 (the caller asked for f32; f32-intermediates then
// drops its round trip).
// CHECK-LABEL: func.func @gate_then_product(
// CHECK:         %[[GATE:.*]] = twintrack.dispatch "gate" kind<elementwise> ({{.*}}) -> (tensor<2x4x8xf16>) {
// CHECK:           tensor.empty() : tensor<8x8xf16>
// CHECK:           ^bb0(%[[X:.*]]: f32, %{{.*}}: f16):
// CHECK-NEXT:        %[[ROUNDED:.*]] = arith.truncf %[[X]] : f32 to f16
// CHECK-NEXT:        linalg.yield %[[ROUNDED]] : f16
// CHECK:           tensor.expand_shape {{.*}} : tensor<8x8xf16> into tensor<2x4x8xf16>
// CHECK:           twintrack.yield %{{.*}} : tensor<2x4x8xf16>
// CHECK:         twintrack.dispatch "product" kind<elementwise> (%[[GATE]], %{{.*}} : tensor<2x4x8xf16>, tensor<2x4x8xf32>)
// CHECK:           ^bb0(%[[G:.*]]: f16, %[[U:.*]]: f32, %{{.*}}: f16):
// CHECK-NEXT:        %[[WIDE:.*]] = arith.extf %[[G]] : f16 to f32
// CHECK-NEXT:        arith.mulf %[[WIDE]], %[[U]] : f32
// CHECK:         twintrack.dispatch "row_sums" kind<reduction> (%[[GATE]] : tensor<2x4x8xf16>)
// CHECK:           ^bb0(%[[S:.*]]: f16, %[[ACC:.*]]: f32):
// CHECK-NEXT:        %[[SW:.*]] = arith.extf %[[S]] : f16 to f32
// CHECK-NEXT:        arith.addf %[[SW]], %[[ACC]] : f32
// CHECK:         twintrack.dispatch "returned" kind<elementwise> ({{.*}}) -> (tensor<8xf32>)
// CHECK:           linalg.yield %{{.*}} : f32
#id2 = affine_map<(d0, d1) -> (d0, d1)>
#id3 = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
#id1 = affine_map<(d0) -> (d0)>
#rows = affine_map<(d0, d1, d2) -> (d0, d1)>
func.func @gate_then_product(%x: tensor<8x8xf32>, %up: tensor<2x4x8xf32>, %v: tensor<8xf32>)
    -> (tensor<2x4x8xf16>, tensor<2x4xf32>, tensor<8xf32>) {
  %gate = twintrack.dispatch "gate" kind<elementwise> (%x : tensor<8x8xf32>) -> (tensor<2x4x8xf32>) {
  ^bb0(%a: tensor<8x8xf32>):
    %e = tensor.empty() : tensor<8x8xf32>
    %r = linalg.generic {indexing_maps = [#id2, #id2], iterator_types = ["parallel", "parallel"]}
        ins(%a : tensor<8x8xf32>) outs(%e : tensor<8x8xf32>) {
    ^bb0(%in: f32, %out: f32):
      %h = arith.truncf %in : f32 to f16
      %w = arith.extf %h : f16 to f32
      linalg.yield %w : f32
    } -> tensor<8x8xf32>
    %s = tensor.expand_shape %r [[0, 1], [2]] output_shape [2, 4, 8] : tensor<8x8xf32> into tensor<2x4x8xf32>
    twintrack.yield %s : tensor<2x4x8xf32>
  }
  %p = twintrack.dispatch "product" kind<elementwise> (%gate, %up : tensor<2x4x8xf32>, tensor<2x4x8xf32>) -> (tensor<2x4x8xf16>) {
  ^bb0(%g: tensor<2x4x8xf32>, %u: tensor<2x4x8xf32>):
    %e = tensor.empty() : tensor<2x4x8xf16>
    %r = linalg.generic {indexing_maps = [#id3, #id3, #id3], iterator_types = ["parallel", "parallel", "parallel"]}
        ins(%g, %u : tensor<2x4x8xf32>, tensor<2x4x8xf32>) outs(%e : tensor<2x4x8xf16>) {
    ^bb0(%gi: f32, %ui: f32, %out: f16):
      %m = arith.mulf %gi, %ui : f32
      %h = arith.truncf %m : f32 to f16
      linalg.yield %h : f16
    } -> tensor<2x4x8xf16>
    twintrack.yield %r : tensor<2x4x8xf16>
  }
  %sums = twintrack.dispatch "row_sums" kind<reduction> (%gate : tensor<2x4x8xf32>) -> (tensor<2x4xf32>) {
  ^bb0(%g: tensor<2x4x8xf32>):
    %zero = arith.constant 0.0 : f32
    %e = tensor.empty() : tensor<2x4xf32>
    %z = linalg.fill ins(%zero : f32) outs(%e : tensor<2x4xf32>) -> tensor<2x4xf32>
    %r = linalg.generic {indexing_maps = [#id3, #rows], iterator_types = ["parallel", "parallel", "reduction"]}
        ins(%g : tensor<2x4x8xf32>) outs(%z : tensor<2x4xf32>) {
    ^bb0(%gi: f32, %acc: f32):
      %s = arith.addf %gi, %acc : f32
      linalg.yield %s : f32
    } -> tensor<2x4xf32>
    twintrack.yield %r : tensor<2x4xf32>
  }
  %ret = twintrack.dispatch "returned" kind<elementwise> (%v : tensor<8xf32>) -> (tensor<8xf32>) {
  ^bb0(%a: tensor<8xf32>):
    %e = tensor.empty() : tensor<8xf32>
    %r = linalg.generic {indexing_maps = [#id1, #id1], iterator_types = ["parallel"]}
        ins(%a : tensor<8xf32>) outs(%e : tensor<8xf32>) {
    ^bb0(%in: f32, %out: f32):
      %h = arith.truncf %in : f32 to f16
      %w = arith.extf %h : f16 to f32
      linalg.yield %w : f32
    } -> tensor<8xf32>
    twintrack.yield %r : tensor<8xf32>
  }
  return %p, %sums, %ret : tensor<2x4x8xf16>, tensor<2x4xf32>, tensor<8xf32>
}
