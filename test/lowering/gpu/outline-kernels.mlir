// RUN: %PYTHON -m twintrack.compiler.passes outline-kernels %s | FileCheck %s --check-prefix=SHARED
// RUN: %PYTHON -m twintrack.compiler.passes outline-kernels,annotate-kernels %s | FileCheck %s

// outline-kernels ends each kernel stage: the stage's gpu.launch ops are
// outlined into gpu.modules at once, and a module that is an earlier one
// but for its name goes (a repeated layer's kernel). The stages below then
// see each distinct kernel once. A launch whose kernel was shared calls the
// first one's, keeps its own name (twintrack.kernel_name) and its own
// source locations, which annotate-kernels (the annotate stage) keeps when
// it counts the shared kernel's flops.

// SHARED:      gpu.launch_func @forward_row_kernel_0::@forward_row_kernel_0 blocks in
// SHARED-NOT:    twintrack.source_ops
// SHARED-NEXT: gpu.launch_func @forward_row_kernel_0::@forward_row_kernel_0 blocks in
// SHARED-SAME:   {twintrack.kernel_name = "forward_row_kernel_1", twintrack.source_keys = [], twintrack.source_ops = ["model.py:20:0"]}
// SHARED-NEXT: gpu.launch_func @forward_row_kernel_2::@forward_row_kernel_2 blocks in

#first = loc("model.py":10:0)
#second = loc("model.py":20:0)
#third = loc("model.py":30:0)

// CHECK-LABEL: func.func @forward(
// CHECK:         gpu.launch_func @forward_row_kernel_0::@forward_row_kernel_0 blocks in
// CHECK-SAME:      {twintrack.bytes = 2048 : i64, twintrack.flops = 256 : i64, twintrack.path = "row-wise 1x256/256", twintrack.source_keys = [], twintrack.source_ops = ["model.py:10:0"]}
// CHECK-NEXT:    gpu.launch_func @forward_row_kernel_0::@forward_row_kernel_0 blocks in
// CHECK-SAME:      {twintrack.bytes = 2048 : i64, twintrack.flops = 256 : i64, twintrack.kernel_name = "forward_row_kernel_1", twintrack.path = "row-wise 1x256/256", twintrack.source_keys = [], twintrack.source_ops = ["model.py:20:0"]}
// An add is another kernel: it keeps its module.
// CHECK-NEXT:    gpu.launch_func @forward_row_kernel_2::@forward_row_kernel_2 blocks in
// CHECK-SAME:      twintrack.source_ops = ["model.py:30:0"]
// CHECK-NOT:     gpu.launch {
// Each module is marked compared: a later stage's share compares only its own new modules.
// CHECK:         gpu.module @forward_row_kernel_0 attributes {twintrack.compared}
// CHECK:           arith.mulf
// CHECK-NOT:     gpu.module @forward_row_kernel_1
// CHECK:         gpu.module @forward_row_kernel_2
// CHECK:           arith.addf
func.func @forward(%x: memref<256xf32>, %y: memref<256xf32>, %z: memref<256xf32>) {
  %c1 = arith.constant 1 : index
  %c256 = arith.constant 256 : index
  gpu.launch blocks(%bx, %by, %bz) in (%gx = %c1, %gy = %c1, %gz = %c1)
             threads(%tx, %ty, %tz) in (%sx = %c256, %sy = %c1, %sz = %c1)
             module(@forward_row_kernel_0) function(@forward_row_kernel_0) {
    %v = memref.load %x[%tx] : memref<256xf32> loc(#first)
    %w = arith.mulf %v, %v {twintrack.kernel_path = "row-wise 1x256/256"} : f32 loc(#first)
    memref.store %w, %y[%tx] : memref<256xf32> loc(#first)
    gpu.terminator loc(#first)
  } loc(#first)
  gpu.launch blocks(%bx, %by, %bz) in (%gx = %c1, %gy = %c1, %gz = %c1)
             threads(%tx, %ty, %tz) in (%sx = %c256, %sy = %c1, %sz = %c1)
             module(@forward_row_kernel_1) function(@forward_row_kernel_1) {
    %v = memref.load %y[%tx] : memref<256xf32> loc(#second)
    %w = arith.mulf %v, %v {twintrack.kernel_path = "row-wise 1x256/256"} : f32 loc(#second)
    memref.store %w, %z[%tx] : memref<256xf32> loc(#second)
    gpu.terminator loc(#second)
  } loc(#second)
  gpu.launch blocks(%bx, %by, %bz) in (%gx = %c1, %gy = %c1, %gz = %c1)
             threads(%tx, %ty, %tz) in (%sx = %c256, %sy = %c1, %sz = %c1)
             module(@forward_row_kernel_2) function(@forward_row_kernel_2) {
    %v = memref.load %z[%tx] : memref<256xf32> loc(#third)
    %w = arith.addf %v, %v {twintrack.kernel_path = "row-wise 1x256/256"} : f32 loc(#third)
    memref.store %w, %x[%tx] : memref<256xf32> loc(#third)
    gpu.terminator loc(#third)
  } loc(#third)
  return
}
