// RUN: %stage-outline %s | FileCheck %s
// RUN: %stage-outline %s | FileCheck %s --check-prefix=GONE
// RUN: %stage-outline %s | FileCheck %s --check-prefix=HOST

// The outline stage turns the block_x/thread_x-mapped scf.parallel nests of
// gpu-distribute into gpu.launch ops, sinks the constants they use into them,
// and outlines each launch into a gpu.module holding one gpu.func kernel; the
// host function keeps only gpu.launch_func calls whose arguments are memrefs.

// GONE-NOT: scf.parallel
// GONE-NOT: scf.reduce
// GONE-NOT: gpu.launch blocks
// GONE-NOT: #gpu.loop_dim_map

// CHECK:       module attributes {gpu.container_module} {

// Nothing of the kernels' arithmetic stays on the host: no f32 value at all.
// HOST-LABEL: func.func @softmax_parts(
// HOST-NOT:     : f32
// HOST-NOT:     gpu.{{block|thread}}_id
// HOST:         return

// The host side: the launches, in program order, with the grid from the loop
// bounds (8 x 256 for the elementwise nest, 32 x 64 for the row max) and only
// memref arguments (the f32 and index constants were sunk into the kernels).
// CHECK-LABEL: func.func @softmax_parts(
// CHECK-SAME:    %[[A:[a-z0-9_]+]]: memref<32x64xf32>, %[[OUT:[a-z0-9_]+]]: memref<32x64xf32>)
// CHECK-DAG:     %[[C1:[a-z0-9_]+]] = arith.constant 1 : index
// CHECK-DAG:     %[[C8:[a-z0-9_]+]] = arith.constant 8 : index
// CHECK-DAG:     %[[C32:[a-z0-9_]+]] = arith.constant 32 : index
// CHECK-DAG:     %[[C64:[a-z0-9_]+]] = arith.constant 64 : index
// CHECK-DAG:     %[[C256:[a-z0-9_]+]] = arith.constant 256 : index
// CHECK:         %[[MAX:[a-z0-9_]+]] = memref.alloc() {{.*}}: memref<32xf32>
// CHECK:         gpu.launch_func @[[K0:[a-z0-9_]+]]::@[[F0:[a-z0-9_]+]] blocks in (%[[C32]], %[[C1]], %[[C1]]) threads in (%[[C64]], %[[C1]], %[[C1]]) args(%[[A]] : memref<32x64xf32>, %[[MAX]] : memref<32xf32>){{$}}
// CHECK-NEXT:    gpu.launch_func @[[K1:[a-z0-9_]+]]::@[[F1:[a-z0-9_]+]] blocks in (%[[C8]], %[[C1]], %[[C1]]) threads in (%[[C256]], %[[C1]], %[[C1]]) args(%[[A]] : memref<32x64xf32>, %[[MAX]] : memref<32xf32>, %[[OUT]] : memref<32x64xf32>){{$}}
// CHECK-NEXT:    memref.dealloc %[[MAX]] : memref<32xf32>
// CHECK-NEXT:    return

// The row-max kernel: block = row, thread = column start.
// CHECK:       gpu.module @[[K0]] {
// CHECK-NEXT:    gpu.func @[[F0]](%[[IN:[a-z0-9_]+]]: memref<32x64xf32>, %[[ACC:[a-z0-9_]+]]: memref<32xf32>) kernel {
// CHECK-DAG:       arith.constant 0xFF800000 : f32
// CHECK-DAG:       %[[BID:[a-z0-9_]+]] = gpu.block_id x
// CHECK-DAG:       %[[TID:[a-z0-9_]+]] = gpu.thread_id x
// CHECK:           scf.for %[[K:[a-z0-9_]+]] = %[[TID]] to
// CHECK-NEXT:        memref.load %[[IN]][%[[BID]], %[[K]]] : memref<32x64xf32>
// CHECK:           gpu.all_reduce maximumf
// CHECK:           memref.store %{{[a-z0-9_]+}}, %[[ACC]][%[[BID]]] : memref<32xf32>
// CHECK:           gpu.return

// The elementwise kernel: linear index block * 256 + thread, guarded.
// CHECK:       gpu.module @[[K1]] {
// CHECK-NEXT:    gpu.func @[[F1]](%[[IN:[a-z0-9_]+]]: memref<32x64xf32>, %[[ROWMAX:[a-z0-9_]+]]: memref<32xf32>, %[[RES:[a-z0-9_]+]]: memref<32x64xf32>) kernel {
// CHECK-DAG:       %[[K256:[a-z0-9_]+]] = arith.constant 256 : index
// CHECK-DAG:       %[[K2048:[a-z0-9_]+]] = arith.constant 2048 : index
// CHECK-DAG:       %[[K64:[a-z0-9_]+]] = arith.constant 64 : index
// CHECK-DAG:       %[[BID:[a-z0-9_]+]] = gpu.block_id x
// CHECK-DAG:       %[[TID:[a-z0-9_]+]] = gpu.thread_id x
// CHECK:           %[[BASE:[a-z0-9_]+]] = arith.muli %[[BID]], %[[K256]] : index
// CHECK-NEXT:      %[[LIN:[a-z0-9_]+]] = arith.addi %[[BASE]], %[[TID]] : index
// CHECK-NEXT:      %[[GUARD:[a-z0-9_]+]] = arith.cmpi ult, %[[LIN]], %[[K2048]] : index
// CHECK-NEXT:      scf.if %[[GUARD]] {
// CHECK-NEXT:        %[[J:[a-z0-9_]+]] = arith.remui %[[LIN]], %[[K64]] : index
// CHECK-NEXT:        %[[I:[a-z0-9_]+]] = arith.divui %[[LIN]], %[[K64]] : index
// CHECK-NEXT:        %[[X:[a-z0-9_]+]] = memref.load %[[IN]][%[[I]], %[[J]]] : memref<32x64xf32>
// CHECK-NEXT:        %[[M:[a-z0-9_]+]] = memref.load %[[ROWMAX]][%[[I]]] : memref<32xf32>
// CHECK-NEXT:        %[[D:[a-z0-9_]+]] = arith.subf %[[X]], %[[M]] : f32
// CHECK-NEXT:        %[[E:[a-z0-9_]+]] = math.exp %[[D]] : f32
// CHECK-NEXT:        memref.store %[[E]], %[[RES]][%[[I]], %[[J]]] : memref<32x64xf32>
// CHECK-NEXT:      }
// CHECK-NEXT:      gpu.return
func.func @softmax_parts(%a: memref<32x64xf32>, %out: memref<32x64xf32>) {
  %neg_inf = arith.constant 0xFF800000 : f32
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c8 = arith.constant 8 : index
  %c32 = arith.constant 32 : index
  %c64 = arith.constant 64 : index
  %c256 = arith.constant 256 : index
  %c2048 = arith.constant 2048 : index
  %max = memref.alloc() {alignment = 64 : i64} : memref<32xf32>
  scf.parallel (%b) = (%c0) to (%c32) step (%c1) {
    scf.parallel (%t) = (%c0) to (%c64) step (%c1) {
      %part = scf.for %k = %t to %c64 step %c64 iter_args(%p = %neg_inf) -> (f32) {
        %x = memref.load %a[%b, %k] : memref<32x64xf32>
        %m = arith.maximumf %x, %p : f32
        scf.yield %m : f32
      }
      %all = gpu.all_reduce maximumf %part uniform {
      } : (f32) -> f32
      %leader = arith.cmpi eq, %t, %c0 : index
      scf.if %leader {
        %old = memref.load %max[%b] : memref<32xf32>
        %new = arith.maximumf %all, %old : f32
        memref.store %new, %max[%b] : memref<32xf32>
      }
      scf.reduce
    } {mapping = [#gpu.loop_dim_map<processor = thread_x, map = (d0) -> (d0), bound = (d0) -> (d0)>]}
    scf.reduce
  } {mapping = [#gpu.loop_dim_map<processor = block_x, map = (d0) -> (d0), bound = (d0) -> (d0)>]}
  scf.parallel (%b) = (%c0) to (%c8) step (%c1) {
    scf.parallel (%t) = (%c0) to (%c256) step (%c1) {
      %base = arith.muli %b, %c256 : index
      %lin = arith.addi %base, %t : index
      %in = arith.cmpi ult, %lin, %c2048 : index
      scf.if %in {
        %j = arith.remui %lin, %c64 : index
        %i = arith.divui %lin, %c64 : index
        %x = memref.load %a[%i, %j] : memref<32x64xf32>
        %m = memref.load %max[%i] : memref<32xf32>
        %d = arith.subf %x, %m : f32
        %e = math.exp %d : f32
        memref.store %e, %out[%i, %j] : memref<32x64xf32>
      }
      scf.reduce
    } {mapping = [#gpu.loop_dim_map<processor = thread_x, map = (d0) -> (d0), bound = (d0) -> (d0)>]}
    scf.reduce
  } {mapping = [#gpu.loop_dim_map<processor = block_x, map = (d0) -> (d0), bound = (d0) -> (d0)>]}
  memref.dealloc %max : memref<32xf32>
  return
}
