// RUN: %stage-annotate %s | FileCheck %s
// RUN: %stage-annotate %s | FileCheck %s --check-prefix=ONLY

// The annotate stage (Python pass annotate-kernels) records on each
// gpu.launch_func what its kernel does, for the kernel report:
//   twintrack.bytes       the sizes of the memref arguments (each moved once)
//   twintrack.flops       float arith/math ops per thread (math.fma = 2, casts
//                         and compares free), times enclosing scf.for trip
//                         counts, times the threads the bounds guard admits
//                         (linear index ult N -> N), else all launched threads
//   twintrack.source_ops  the kernel ops' source locations, deduplicated,
//                         innermost frame of call-site locations (after the
//                         op marker the frontend adds: "aten.addmm at ...")
//   twintrack.source_keys the op and the model's own frames, outermost first
//                         (torch's frames left out), by which tools/compare.py
//                         matches kernels with Inductor's
//   twintrack.path        the twintrack.kernel_path a kernel generator left
//                         in the kernel (a fast path), else "generic"
// Vector ops count once per lane (vector.fma: 2 per lane).
// Ops without a source location (loc(unknown)) are not listed; the kernels'
// plumbing carries loc(unknown) here so that the lists are exact.

#unk = loc(unknown)
#add = loc("model.py":12:0)
#load = loc("model.py":19:4)
#fma = loc(callsite("aten.addmm":0:0 at callsite("/venv/site-packages/torch/nn/modules/linear.py":134:0 at callsite("model.py":20:4 at "model.py":30:0))))

// CHECK-LABEL: func.func @forward(
// Elementwise add over 1000 floats, launched as 4 x 256 = 1024 threads of
// which the guard admits 1000: 1000 flops; 3 x 1000 x 4 bytes.
// CHECK:         gpu.launch_func @add_kernel::@add_kernel blocks in
// CHECK-SAME:      {twintrack.bytes = 12000 : i64, twintrack.flops = 1000 : i64, twintrack.path = "generic", twintrack.source_keys = [], twintrack.source_ops = ["model.py:12:0"]}
// A 16-step loop with one math.fma (2 flops) per step and no guard: 2 x 64 =
// 128 threads x 16 x 2 = 4096 flops; 128 x 16 halves + 128 floats = 4608 bytes.
// CHECK-NEXT:    gpu.launch_func @dot_kernel::@dot_kernel blocks in
// CHECK-SAME:      {twintrack.bytes = 4608 : i64, twintrack.flops = 4096 : i64, twintrack.path = "generic", twintrack.source_keys = ["aten.addmm @ model.py:30 > model.py:20"], twintrack.source_ops = ["model.py:19:4", "aten.addmm at /venv/site-packages/torch/nn/modules/linear.py:134:0"]}
// A generated kernel: 32 threads x 4 steps x one vector.fma on 4 lanes (8
// flops) = 1024 flops; its main loop names the path.
// CHECK-NEXT:    gpu.launch_func @tile_kernel::@tile_kernel blocks in
// CHECK-SAME:      {twintrack.bytes = 512 : i64, twintrack.flops = 1024 : i64, twintrack.path = "simt-matmul 4x4", twintrack.source_keys = ["aten.addmm @ model.py:30 > model.py:20"], twintrack.source_ops = ["aten.addmm at /venv/site-packages/torch/nn/modules/linear.py:134:0"]}
// CHECK-NEXT:    return

// Only the launches are annotated; the kernels are left as they were.
// ONLY-COUNT-3: gpu.launch_func {{.*}} {twintrack.bytes = {{.*}}}{{$}}
// ONLY-NOT:     twintrack.{{[a-z_]+}} =
// ONLY:         } {twintrack.kernel_path = "simt-matmul 4x4"}
// ONLY-NOT:     twintrack.
module attributes {gpu.container_module} {
  func.func @forward(%a: memref<1000xf32>, %b: memref<1000xf32>, %out: memref<1000xf32>,
                     %x: memref<128x16xf16>, %acc: memref<128xf32>, %t: memref<32x4xf32>) {
    %c1 = arith.constant 1 : index
    %c2 = arith.constant 2 : index
    %c4 = arith.constant 4 : index
    %c32 = arith.constant 32 : index
    %c64 = arith.constant 64 : index
    %c256 = arith.constant 256 : index
    gpu.launch_func @add_kernel::@add_kernel blocks in (%c4, %c1, %c1) threads in (%c256, %c1, %c1)
        args(%a : memref<1000xf32>, %b : memref<1000xf32>, %out : memref<1000xf32>)
    gpu.launch_func @dot_kernel::@dot_kernel blocks in (%c2, %c1, %c1) threads in (%c64, %c1, %c1)
        args(%x : memref<128x16xf16>, %acc : memref<128xf32>)
    gpu.launch_func @tile_kernel::@tile_kernel blocks in (%c1, %c1, %c1) threads in (%c32, %c1, %c1)
        args(%t : memref<32x4xf32>)
    return
  }
  gpu.module @add_kernel {
    gpu.func @add_kernel(%a: memref<1000xf32>, %b: memref<1000xf32>, %out: memref<1000xf32>) kernel {
      %c256 = arith.constant 256 : index loc(#unk)
      %c1000 = arith.constant 1000 : index loc(#unk)
      %bid = gpu.block_id x loc(#unk)
      %tid = gpu.thread_id x loc(#unk)
      %base = arith.muli %bid, %c256 : index loc(#unk)
      %lin = arith.addi %base, %tid : index loc(#unk)
      %in = arith.cmpi ult, %lin, %c1000 : index loc(#unk)
      scf.if %in {
        %x = memref.load %a[%lin] : memref<1000xf32> loc(#add)
        %y = memref.load %b[%lin] : memref<1000xf32> loc(#add)
        %s = arith.addf %x, %y : f32 loc(#add)
        memref.store %s, %out[%lin] : memref<1000xf32> loc(#add)
        scf.yield loc(#unk)
      } loc(#unk)
      gpu.return loc(#unk)
    } loc(#unk)
  }
  gpu.module @dot_kernel {
    gpu.func @dot_kernel(%x: memref<128x16xf16>, %acc: memref<128xf32>) kernel {
      %c0 = arith.constant 0 : index loc(#unk)
      %c1 = arith.constant 1 : index loc(#unk)
      %c16 = arith.constant 16 : index loc(#unk)
      %c64 = arith.constant 64 : index loc(#unk)
      %zero = arith.constant 0.000000e+00 : f32 loc(#unk)
      %bid = gpu.block_id x loc(#unk)
      %tid = gpu.thread_id x loc(#unk)
      %base = arith.muli %bid, %c64 : index loc(#unk)
      %row = arith.addi %base, %tid : index loc(#unk)
      %sum = scf.for %k = %c0 to %c16 step %c1 iter_args(%p = %zero) -> (f32) {
        %h = memref.load %x[%row, %k] : memref<128x16xf16> loc(#load)
        %v = arith.extf %h : f16 to f32 loc(#load)
        %f = math.fma %v, %v, %p : f32 loc(#fma)
        scf.yield %f : f32 loc(#unk)
      } loc(#unk)
      memref.store %sum, %acc[%row] : memref<128xf32> loc(#unk)
      gpu.return loc(#unk)
    } loc(#unk)
  }
  gpu.module @tile_kernel {
    gpu.func @tile_kernel(%t: memref<32x4xf32>) kernel {
      %c0 = arith.constant 0 : index loc(#unk)
      %c1 = arith.constant 1 : index loc(#unk)
      %c4 = arith.constant 4 : index loc(#unk)
      %zero = arith.constant dense<0.0> : vector<4xf32> loc(#unk)
      %tid = gpu.thread_id x loc(#unk)
      %row = vector.load %t[%tid, %c0] : memref<32x4xf32>, vector<4xf32> loc(#unk)
      %sum = scf.for %k = %c0 to %c4 step %c1 iter_args(%p = %zero) -> (vector<4xf32>) {
        %f = vector.fma %row, %row, %p : vector<4xf32> loc(#fma)
        scf.yield %f : vector<4xf32> loc(#unk)
      } {twintrack.kernel_path = "simt-matmul 4x4"} loc(#unk)
      vector.store %sum, %t[%tid, %c0] : memref<32x4xf32>, vector<4xf32> loc(#unk)
      gpu.return loc(#unk)
    } loc(#unk)
  }
}
