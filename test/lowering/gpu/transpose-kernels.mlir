// RUN: %PYTHON -m twintrack.compiler.passes gpu-transpose-kernels %s | FileCheck %s

// An NCHW tensor copied channels-last is (N, C, H·W) -> (N, H·W, C): the
// tiled transpose kernel, through collapsed views of both buffers, a block
// per 64 x 64 tile and batch entry (9 / 64 x 1 x 2), 16-byte vectors of 8
// halves along both buffers' rows, a shared tile between.
// CHECK-LABEL: func.func @channels_last(
// CHECK-SAME:    %[[X:[^:]*]]: memref<2x16x24x24xf16>, %[[Y:[^:]*]]: memref<2x24x24x16xf16>)
// CHECK-DAG:     %[[SOURCE:.*]] = memref.collapse_shape %[[X]] {{\[\[}}0], [1], [2, 3]] : memref<2x16x24x24xf16> into memref<2x16x576xf16>
// CHECK-DAG:     %[[TARGET:.*]] = memref.collapse_shape %[[Y]] {{\[\[}}0], [1, 2], [3]] : memref<2x24x24x16xf16> into memref<2x576x16xf16>
// CHECK:         gpu.launch {{.*}} in (%{{.*}} = %c9, %{{.*}} = %c1, %{{.*}} = %c2) {{.*}} module(@forward_transpose_0) {{.*}} workgroup(%{{.*}} : memref<64x65xf16, #gpu.address_space<workgroup>>)
// CHECK:           vector.load %[[SOURCE]]{{.*}} : memref<2x16x576xf16>, vector<8xf16>
// CHECK:           gpu.barrier
// CHECK:           vector.store %{{.*}}, %[[TARGET]]{{.*}} : memref<2x576x16xf16>, vector<8xf16>
// CHECK-NOT:     linalg.transpose
func.func @channels_last(%x: memref<2x16x24x24xf16>, %y: memref<2x24x24x16xf16>) {
  linalg.transpose ins(%x : memref<2x16x24x24xf16>) outs(%y : memref<2x24x24x16xf16>) permutation = [0, 2, 3, 1]
  return
}

// A rotation of three dims is one group moved past another: (4·8, 16) ->
// (16, 4·8). A permutation that keeps the innermost dim (the generic path
// copies it coalesced), or rows no vector divides, stay for the generic path.
// CHECK-LABEL: func.func @rotated(
// CHECK:         memref.collapse_shape %{{.*}} {{\[\[}}0, 1], [2]] : memref<4x8x16xf32> into memref<32x16xf32>
// CHECK:         gpu.launch {{.*}} module(@forward_transpose_1)
func.func @rotated(%x: memref<4x8x16xf32>, %y: memref<16x4x8xf32>) {
  linalg.transpose ins(%x : memref<4x8x16xf32>) outs(%y : memref<16x4x8xf32>) permutation = [2, 0, 1]
  return
}

// CHECK-LABEL: func.func @others(
// CHECK-NOT:     gpu.launch
// CHECK:         linalg.transpose {{.*}} permutation = [1, 0, 2]
// CHECK:         linalg.transpose {{.*}} permutation = [1, 0]
func.func @others(%x: memref<4x8x16xf32>, %y: memref<8x4x16xf32>, %a: memref<6x10xf16>, %b: memref<10x6xf16>) {
  linalg.transpose ins(%x : memref<4x8x16xf32>) outs(%y : memref<8x4x16xf32>) permutation = [1, 0, 2]
  linalg.transpose ins(%a : memref<6x10xf16>) outs(%b : memref<10x6xf16>) permutation = [1, 0]
  return
}
