// RUN: %stage-distribute %s | FileCheck %s
// RUN: %PYTHON -m twintrack.compiler.passes gpu-serial-kernels %s | FileCheck %s --check-prefix=SERIAL

// No loop stays on the host. A reduction with no parallel dims left (x.sum()
// into a 0-d tensor) becomes one block striding the whole nest, its fill
// folded into the leader's store; what no mapping takes (an argmax's
// compare-and-select, scalar arithmetic, a fill of a 0-d buffer) becomes a
// one-thread kernel, whose path the kernel report shows as serial-fallback.

// CHECK-LABEL: func.func @full_sum(
// CHECK-SAME:    %[[IN:.*]]: memref<8x33xf32>, %[[OUT:.*]]: memref<f32>)
// CHECK-NOT:     memref.store
// CHECK:         gpu.launch blocks({{.*}}) in ({{.*}} = %c1{{.*}}, {{.*}} = %c1{{.*}}, {{.*}} = %c1{{.*}}) threads(%[[T:.*]], %{{.*}}, %{{.*}}) in ({{.*}} = %c288
// CHECK:           %[[P:.*]] = scf.for %[[K:.*]] = %[[T]] to %c264 step %c288 iter_args
// CHECK:             %[[J:.*]] = arith.remui %[[K]], %c33
// CHECK:             %[[I:.*]] = arith.divui %[[K]], %c33
// CHECK:             memref.load %[[IN]][%[[I]], %[[J]]]
// CHECK:           } {twintrack.kernel_path = "block-reduce 1x288"}
// CHECK:           %[[TOTAL:.*]] = gpu.all_reduce add %[[P]] uniform
// CHECK:           scf.if
// CHECK:             %[[S:.*]] = arith.addf %[[TOTAL]], %cst
// CHECK:             memref.store %[[S]], %[[OUT]][]
// CHECK:         return
func.func @full_sum(%in: memref<8x33xf32>, %out: memref<f32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c8 = arith.constant 8 : index
  %c33 = arith.constant 33 : index
  %zero = arith.constant 0.0 : f32
  memref.store %zero, %out[] : memref<f32>
  scf.for %i = %c0 to %c8 step %c1 {
    scf.for %j = %c0 to %c33 step %c1 {
      %x = memref.load %in[%i, %j] : memref<8x33xf32>
      %a = memref.load %out[] : memref<f32>
      %s = arith.addf %x, %a : f32
      memref.store %s, %out[] : memref<f32>
    }
  }
  return
}

// An argmax over a vector: the running maximum decides the index, so no
// gpu.all_reduce kind combines it; the fills and the loop run in one thread.
// The mean after it reads a scalar the kernel computed: it is one more
// serial kernel, after the buffer copy that ends the first run.

// SERIAL-LABEL: func.func @argmax_then_scale(
// SERIAL-SAME:    %[[IN:.*]]: memref<64xf32>, %[[IDX:.*]]: memref<i64>, %[[OUT:.*]]: memref<f32>)
// SERIAL:         %[[MAX:.*]] = memref.alloc() : memref<f32>
// SERIAL:         %[[SPILL:.*]] = memref.alloc() : memref<f32>
// SERIAL:         gpu.launch {{.*}} threads({{.*}}) in ({{.*}} = %c1{{.*}}, {{.*}} = %c1{{.*}}, {{.*}} = %c1{{.*}}) module(@argmax_then_scale_serial_0)
// SERIAL:           memref.store {{.*}}, %[[MAX]][] {twintrack.kernel_path = "serial-fallback"}
// SERIAL:           scf.for
// SERIAL:             arith.cmpf ogt
// SERIAL:           } {twintrack.kernel_path = "serial-fallback"}
// SERIAL:           %[[M:.*]] = memref.load %[[MAX]][]
// SERIAL:           memref.store %[[M]], %[[SPILL]][] {twintrack.kernel_path = "serial-fallback"}
// SERIAL:           gpu.terminator
// SERIAL:         memref.copy %[[MAX]], %[[OUT]]
// SERIAL:         gpu.launch {{.*}} module(@argmax_then_scale_serial_1)
// SERIAL:           %[[R:.*]] = memref.load %[[SPILL]][]
// SERIAL:           arith.mulf %[[R]]
// SERIAL:         memref.dealloc %[[SPILL]]
// SERIAL-NEXT:    return
func.func @argmax_then_scale(%in: memref<64xf32>, %idx: memref<i64>, %out: memref<f32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c64 = arith.constant 64 : index
  %ninf = arith.constant 0xFF800000 : f32
  %zero = arith.constant 0 : i64
  %half = arith.constant 0.5 : f32
  %max = memref.alloc() : memref<f32>
  memref.store %ninf, %max[] : memref<f32>
  memref.store %zero, %idx[] : memref<i64>
  scf.for %k = %c0 to %c64 step %c1 {
    %x = memref.load %in[%k] : memref<64xf32>
    %m = memref.load %max[] : memref<f32>
    %bigger = arith.cmpf ogt, %x, %m : f32
    %new = arith.select %bigger, %x, %m : f32
    %i = memref.load %idx[] : memref<i64>
    %k64 = arith.index_cast %k : index to i64
    %at = arith.select %bigger, %k64, %i : i64
    memref.store %new, %max[] : memref<f32>
    memref.store %at, %idx[] : memref<i64>
  }
  %final = memref.load %max[] : memref<f32>
  memref.copy %max, %out : memref<f32> to memref<f32>
  %scaled = arith.mulf %final, %half : f32
  memref.store %scaled, %out[] : memref<f32>
  return
}
