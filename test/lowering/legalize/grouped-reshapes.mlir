// RUN: %PYTHON -m twintrack.compiler.passes "grouped-reshapes" %s | FileCheck %s

// A linear layer's (b·s, 384) result unflattened to (b, s, 384) by a tensor
// of sizes: the trailing dims agree, so the reshape splits dim 0.
// CHECK-LABEL: func.func @split_rows
// CHECK-NOT: tensor.reshape
// CHECK: %[[B:.*]] = arith.index_cast %arg1 : i64 to index
// CHECK: %[[S:.*]] = arith.index_cast %arg2 : i64 to index
// CHECK: tensor.expand_shape %arg0 {{\[}}[0, 1], [2]] output_shape [%[[B]], %[[S]], 384] : tensor<?x384xf32> into tensor<?x?x384xf32>
func.func @split_rows(%x: tensor<?x384xf32>, %b: i64, %s: i64) -> tensor<?x?x384xf32> {
  %c384 = arith.constant 384 : i64
  %shape = tensor.from_elements %b, %s, %c384 : tensor<3xi64>
  %r = tensor.reshape %x(%shape) : (tensor<?x384xf32>, tensor<3xi64>) -> tensor<?x?x384xf32>
  return %r : tensor<?x?x384xf32>
}

// Batch·heads (8) split into (2, 4); the scores' run-time dims are the sizes
// their tensor.empty was made with, the values the sizes tensor holds.
// CHECK-LABEL: func.func @split_batch
// CHECK-NOT: tensor.reshape
// CHECK: tensor.expand_shape %{{.*}} {{\[}}[0, 1], [2], [3]] output_shape [2, 4, %{{.*}}, %{{.*}}] : tensor<8x?x?xf32> into tensor<2x4x?x?xf32>
func.func @split_batch(%n: index) -> tensor<2x4x?x?xf32> {
  %zero = arith.constant 0.0 : f32
  %empty = tensor.empty(%n, %n) : tensor<8x?x?xf32>
  %scores = linalg.fill ins(%zero : f32) outs(%empty : tensor<8x?x?xf32>) -> tensor<8x?x?xf32>
  %c2 = arith.constant 2 : i64
  %c4 = arith.constant 4 : i64
  %n64 = arith.index_cast %n : index to i64
  %shape = tensor.from_elements %c2, %c4, %n64, %n64 : tensor<4xi64>
  %r = tensor.reshape %scores(%shape) : (tensor<8x?x?xf32>, tensor<4xi64>) -> tensor<2x4x?x?xf32>
  return %r : tensor<2x4x?x?xf32>
}

// Two run-time dims to two others of unknown relation: (a, b) to (c, d)
// with a·b = c·d says nothing of a and c. The reshape stays.
// CHECK-LABEL: func.func @unrelated_sizes
// CHECK: tensor.reshape
func.func @unrelated_sizes(%x: tensor<?x?x32xf32>, %c: i64, %d: i64) -> tensor<?x?x32xf32> {
  %c32 = arith.constant 32 : i64
  %shape = tensor.from_elements %c, %d, %c32 : tensor<3xi64>
  %r = tensor.reshape %x(%shape) : (tensor<?x?x32xf32>, tensor<3xi64>) -> tensor<?x?x32xf32>
  return %r : tensor<?x?x32xf32>
}

// A transpose's result, sized by its init: found through it (a linalg op
// whose results are its inits', whatever its view calls them).
// CHECK-LABEL: func.func @through_a_transpose
// CHECK-NOT: tensor.reshape
// CHECK: tensor.expand_shape %{{.*}} {{\[}}[0], [1, 2]] output_shape [%{{.*}}, 4, 32] : tensor<?x128xf32> into tensor<?x4x32xf32>
func.func @through_a_transpose(%n: index, %x: tensor<128x?xf32>) -> tensor<?x4x32xf32> {
  %empty = tensor.empty(%n) : tensor<?x128xf32>
  %t = linalg.transpose ins(%x : tensor<128x?xf32>) outs(%empty : tensor<?x128xf32>) permutation = [1, 0]
  %c4 = arith.constant 4 : i64
  %c32 = arith.constant 32 : i64
  %n64 = arith.index_cast %n : index to i64
  %shape = tensor.from_elements %n64, %c4, %c32 : tensor<3xi64>
  %r = tensor.reshape %t(%shape) : (tensor<?x128xf32>, tensor<3xi64>) -> tensor<?x4x32xf32>
  return %r : tensor<?x4x32xf32>
}
