// RUN: %stage-cpu-kernels %s | FileCheck %s
// RUN: %PYTHON -m twintrack.compiler.passes "cpu-row-kernels{threads=2}" %s | FileCheck %s --check-prefix=THREADS

// A row-wise dispatch (softmax: a max, a sum of exponentials, a division)
// becomes one CPU row kernel: per row, one pass per step in 16-lane
// vectors (the host's 512-bit registers), the reductions carried in a
// vector and combined with vector.reduction; the row of 40 ends in a masked
// vector of 8. The temporaries of the per-row values go.

#rows = affine_map<(d0, d1) -> (d0, d1)>
#row = affine_map<(d0, d1) -> (d0)>
// CHECK-LABEL: func.func @softmax(
// CHECK-NOT:     linalg.
// CHECK-NOT:     memref.alloc
// CHECK:         scf.for %[[ROW:.*]] = %{{.*}} to %{{.*}} step %{{.*}} {
// CHECK:           scf.for {{.*}} iter_args({{.*}}) -> (vector<16xf32>) {
// CHECK:             arith.maximumf %{{.*}} : vector<16xf32>
// CHECK:           vector.maskedload
// CHECK:           arith.select
// CHECK:           vector.reduction <maximumf>
// CHECK:           math.exp %{{.*}} : vector<16xf32>
// CHECK:           vector.reduction <add>
// CHECK:           scf.for
// CHECK:             arith.divf %{{.*}} : vector<16xf32>
// CHECK:             vector.store %{{.*}}[%[[ROW]], %{{.*}}] : memref<4x40xf32>, vector<16xf32>
// CHECK:           vector.maskedstore
// CHECK:         twintrack.schedule = "cpu-row lanes=16 threads=1: 16 lanes: the host's 512-bit vectors of f32; 3 passes over each row of 160 B, which stays in L1

// 160 elements do not pay for starting two threads.
// THREADS-LABEL: func.func @softmax(
// THREADS-NOT:     scf.parallel
// THREADS:         threads=1: {{.*}}one thread: 160 elements, under the 262144 that pay for starting 2 threads
func.func @softmax(%x: memref<4x40xf32>, %out: memref<4x40xf32>) {
  %ninf = arith.constant 0xFF800000 : f32
  %zero = arith.constant 0.000000e+00 : f32
  %max = memref.alloc() {alignment = 64 : i64} : memref<4xf32>
  linalg.fill {twintrack.dispatch = "reduction_rows_0", twintrack.dispatch_kind = #twintrack.dispatch_kind<reduction_rows>} ins(%ninf : f32) outs(%max : memref<4xf32>)
  linalg.generic {indexing_maps = [#rows, #row], iterator_types = ["parallel", "reduction"]} ins(%x : memref<4x40xf32>) outs(%max : memref<4xf32>) attrs = {twintrack.dispatch = "reduction_rows_0", twintrack.dispatch_kind = #twintrack.dispatch_kind<reduction_rows>} {
  ^bb0(%in: f32, %acc: f32):
    %m = arith.maximumf %in, %acc : f32
    linalg.yield %m : f32
  }
  %sum = memref.alloc() {alignment = 64 : i64} : memref<4xf32>
  linalg.fill {twintrack.dispatch = "reduction_rows_0", twintrack.dispatch_kind = #twintrack.dispatch_kind<reduction_rows>} ins(%zero : f32) outs(%sum : memref<4xf32>)
  linalg.generic {indexing_maps = [#rows, #row, #row], iterator_types = ["parallel", "reduction"]} ins(%x, %max : memref<4x40xf32>, memref<4xf32>) outs(%sum : memref<4xf32>) attrs = {twintrack.dispatch = "reduction_rows_0", twintrack.dispatch_kind = #twintrack.dispatch_kind<reduction_rows>} {
  ^bb0(%in: f32, %m: f32, %acc: f32):
    %d = arith.subf %in, %m : f32
    %e = math.exp %d : f32
    %s = arith.addf %e, %acc : f32
    linalg.yield %s : f32
  }
  linalg.generic {indexing_maps = [#rows, #row, #row, #rows], iterator_types = ["parallel", "parallel"]} ins(%x, %max, %sum : memref<4x40xf32>, memref<4xf32>, memref<4xf32>) outs(%out : memref<4x40xf32>) attrs = {twintrack.dispatch = "reduction_rows_0", twintrack.dispatch_kind = #twintrack.dispatch_kind<reduction_rows>} {
  ^bb0(%in: f32, %m: f32, %s: f32, %o: f32):
    %d = arith.subf %in, %m : f32
    %e = math.exp %d : f32
    %q = arith.divf %e, %s : f32
    linalg.yield %q : f32
  }
  memref.dealloc %max : memref<4xf32>
  memref.dealloc %sum : memref<4xf32>
  return
}
