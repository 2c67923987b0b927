// RUN: %stage-cpu-kernels %s | FileCheck %s
// RUN: %PYTHON -m twintrack.compiler.passes "cpu-conv-kernels{threads=2}" %s | FileCheck %s --check-prefix=THREADS

// A 2-D convolution becomes one matmul per image over its patches (im2col):
// the filter read as a 32x144 matrix, each image's 16x3x3 patches copied
// into a 144x1024 matrix, written straight in the matmul kernel's packed
// layout (32 panels of 144x32; 16-lane vectors along each output row: unit
// stride), and the matmul kernel accumulating onto the output, seen as
// 32x1024 per image. The schedule, and why, is on the image loop.

// CHECK-LABEL: func.func @conv(
// CHECK-NOT:     linalg.conv_2d_nchw_fchw
// CHECK:         memref.collapse_shape %{{.*}} {{\[}}[0], [1, 2, 3]] : memref<32x16x3x3xf32> into memref<32x144xf32>
// CHECK:         memref.collapse_shape %{{.*}} {{\[}}[0], [1], [2, 3]] : memref<8x32x32x32xf32> into memref<8x32x1024xf32>
// CHECK:         memref.alloc() {alignment = 64 : i64} : memref<32x144x32xf32>
// CHECK:         vector.load %{{.*}} : memref<8x16x34x34xf32>, vector<16xf32>
// CHECK-NEXT:    vector.store %{{.*}} : memref<32x144x32xf32>, vector<16xf32>
// CHECK:         vector.fma
// CHECK:         vector.store %{{.*}} : memref<8x32x1024xf32>, vector<16xf32>
// CHECK:         twintrack.schedule = "cpu-conv im2col images-threads=1; matmul rows=8 cols=32 {{.*}}: im2col: each image's patches copied into a 144x1024 matrix (576 KiB)

// With two threads, and 75 MFLOP to pay for them, runs of images go in
// parallel, each with its own patch matrix.
// THREADS-LABEL: func.func @conv(
// THREADS:         scf.parallel
// THREADS:           memref.alloc() {alignment = 64 : i64} : memref<32x144x32xf32>
// THREADS:         twintrack.schedule = "cpu-conv im2col images-threads=2; {{.*}}2 threads, each a run of 4 images with its own patches
func.func @conv(%input: memref<8x16x34x34xf32>, %filter: memref<32x16x3x3xf32>, %output: memref<8x32x32x32xf32>) {
  linalg.conv_2d_nchw_fchw {dilations = dense<1> : vector<2xi64>, strides = dense<1> : vector<2xi64>}
    ins(%input, %filter : memref<8x16x34x34xf32>, memref<32x16x3x3xf32>) outs(%output : memref<8x32x32x32xf32>)
  return
}

// Stride 2 along the width: the patches are copied element by element, and
// the last panel's 32 - 16 columns past the output are zeroed once.
// CHECK-LABEL: func.func @strided(
// CHECK-NOT:     linalg.conv_2d_nchw_fchw
// CHECK:         memref.alloc() {alignment = 64 : i64} : memref<1x27x32xf32>
// CHECK:         vector.store %{{.*}} : memref<1x27x32xf32>, vector<16xf32>
// CHECK-NEXT:    vector.store %{{.*}} : memref<1x27x32xf32>, vector<16xf32>
// CHECK:         memref.store %{{.*}} : memref<1x27x32xf32>
// CHECK:         twintrack.schedule = "cpu-conv {{.*}}patch rows copied element by element (a stride along the width
func.func @strided(%input: memref<1x3x9x9xf32>, %filter: memref<4x3x3x3xf32>, %output: memref<1x4x4x4xf32>) {
  linalg.conv_2d_nchw_fchw {dilations = dense<1> : vector<2xi64>, strides = dense<2> : vector<2xi64>}
    ins(%input, %filter : memref<1x3x9x9xf32>, memref<4x3x3x3xf32>) outs(%output : memref<1x4x4x4xf32>)
  return
}

// f16 stays on the loops.
// CHECK-LABEL: func.func @half(
// CHECK:         linalg.conv_2d_nchw_fchw
func.func @half(%input: memref<1x3x9x9xf16>, %filter: memref<4x3x3x3xf16>, %output: memref<1x4x7x7xf16>) {
  linalg.conv_2d_nchw_fchw {dilations = dense<1> : vector<2xi64>, strides = dense<1> : vector<2xi64>}
    ins(%input, %filter : memref<1x3x9x9xf16>, memref<4x3x3x3xf16>) outs(%output : memref<1x4x7x7xf16>)
  return
}
