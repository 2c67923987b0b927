// RUN: %stage-nvvm %s | FileCheck %s
// RUN: %stage-nvvm %s | FileCheck %s --check-prefix=GONE
// RUN: %stage-nvvm %s | FileCheck %s --check-prefix=POWI

// The nvvm stage attaches the NVVM target (sm_90a by default, -O3, libdevice linked in)
// to every gpu.module and lowers the kernels to the LLVM dialect: gpu.func ->
// llvm.func {gpu.kernel, nvvm.kernel}, memrefs -> pointers + sizes, ids ->
// nvvm.read.ptx.sreg.*, math functions -> libdevice calls, gpu.all_reduce ->
// warp shuffles and shared memory. The host function is not touched.

// The host side keeps its launches and their annotations.
// CHECK:       module attributes {gpu.container_module} {
// CHECK-LABEL: func.func @forward(
// CHECK:         gpu.launch_func @exp_kernel::@exp_kernel blocks in
// CHECK-SAME:      {twintrack.bytes = 8000 : i64, twintrack.flops = 1000 : i64, twintrack.source_ops = ["model.py:12:0"]}
// CHECK:         gpu.launch_func @sum_kernel::@sum_kernel blocks in

// Elementwise exp, squared: the guard becomes a branch, math.exp a
// libdevice call, and the integer power with an i64 exponent (torch-mlir's
// x ** 2) multiplies: libdevice's __nv_powif takes an i32 exponent, and calling it
// with an i64 one returned garbage on the H200.
// POWI-NOT: __nv_powi
// CHECK:       gpu.module @exp_kernel [#nvvm.target<O = 3, chip = "sm_90a", link = ["{{.*}}libdevice{{[^"]*}}.bc"]>] {
// CHECK-DAG:     llvm.func @__nv_expf(f32) -> f32
// CHECK-DAG:     llvm.func @exp_kernel(%[[A:[a-z0-9_]+]]: !llvm.ptr, %[[A_ALIGNED:[a-z0-9_]+]]: !llvm.ptr, %{{[a-z0-9_]+}}: i64, %{{[a-z0-9_]+}}: i64, %{{[a-z0-9_]+}}: i64, %[[O:[a-z0-9_]+]]: !llvm.ptr, %[[O_ALIGNED:[a-z0-9_]+]]: !llvm.ptr, %{{[a-z0-9_]+}}: i64, %{{[a-z0-9_]+}}: i64, %{{[a-z0-9_]+}}: i64) attributes {gpu.kernel, nvvm.kernel} {
// CHECK-DAG:       %[[N:[0-9]+]] = llvm.mlir.constant(1000 : index) : i64
// CHECK-DAG:       %[[T:[0-9]+]] = llvm.mlir.constant(256 : index) : i64
// CHECK-DAG:       %[[BID32:[0-9]+]] = nvvm.read.ptx.sreg.ctaid.x : i32
// CHECK-DAG:       %[[BID:[0-9]+]] = llvm.sext %[[BID32]] : i32 to i64
// CHECK-DAG:       %[[TID32:[0-9]+]] = nvvm.read.ptx.sreg.tid.x : i32
// CHECK-DAG:       %[[TID:[0-9]+]] = llvm.sext %[[TID32]] : i32 to i64
// CHECK:           %[[BASE:[0-9]+]] = llvm.mul %[[BID]], %[[T]] : i64
// CHECK-NEXT:      %[[LIN:[0-9]+]] = llvm.add %[[BASE]], %[[TID]] : i64
// CHECK-NEXT:      %[[IN:[0-9]+]] = llvm.icmp "ult" %[[LIN]], %[[N]] : i64
// CHECK-NEXT:      llvm.cond_br %[[IN]], ^[[BODY:bb[0-9]+]], ^[[EXIT:bb[0-9]+]]
// CHECK:         ^[[BODY]]:
// CHECK-NEXT:      %[[SRC:[0-9]+]] = llvm.getelementptr {{.*}}%[[A_ALIGNED]][%[[LIN]]] : (!llvm.ptr, i64) -> !llvm.ptr, f32
// CHECK-NEXT:      %[[X:[0-9]+]] = llvm.load %[[SRC]] : !llvm.ptr -> f32
// CHECK-NEXT:      %[[Y:[0-9]+]] = llvm.call @__nv_expf(%[[X]]) : (f32) -> f32
// CHECK-NEXT:      %[[Y2:[0-9]+]] = llvm.fmul %[[Y]], %[[Y]] : f32
// CHECK-NEXT:      %[[DST:[0-9]+]] = llvm.getelementptr {{.*}}%[[O_ALIGNED]][%[[LIN]]] : (!llvm.ptr, i64) -> !llvm.ptr, f32
// CHECK-NEXT:      llvm.store %[[Y2]], %[[DST]] : f32, !llvm.ptr
// CHECK:         ^[[EXIT]]:
// CHECK-NEXT:      llvm.return

// Block-wide sum: shared memory (address space 3), warp shuffles, barriers.
// CHECK:       gpu.module @sum_kernel [#nvvm.target<O = 3, chip = "sm_90a", link = ["{{.*}}libdevice{{[^"]*}}.bc"]>] {
// CHECK:         llvm.mlir.global internal @{{.*}}() {addr_space = 3 : i32} : !llvm.array<32 x f32>
// CHECK:         llvm.func @sum_kernel({{.*}}) attributes {gpu.kernel, nvvm.kernel} {
// CHECK:           nvvm.read.ptx.sreg.ctaid.x : i32
// CHECK:           nvvm.read.ptx.sreg.tid.x : i32
// CHECK:           nvvm.shfl.sync bfly
// CHECK:           llvm.fadd
// CHECK:           nvvm.barrier0
// CHECK:           llvm.return

// Nothing of the gpu/scf/memref/arith kernel dialects is left in the modules.
// GONE:       gpu.module @exp_kernel
// GONE-NOT:   gpu.func
// GONE-NOT:   gpu.return
// GONE-NOT:   gpu.{{block|thread}}_id
// GONE-NOT:   gpu.all_reduce
// GONE-NOT:   scf.
// GONE-NOT:   memref.
// GONE-NOT:   arith.
// GONE-NOT:   math.
// GONE-NOT:   unrealized_conversion_cast
module attributes {gpu.container_module} {
  func.func @forward(%a: memref<1000xf32>, %out: memref<1000xf32>, %rows: memref<32x1024xf32>, %acc: memref<32xf32>) {
    %c1 = arith.constant 1 : index
    %c4 = arith.constant 4 : index
    %c32 = arith.constant 32 : index
    %c256 = arith.constant 256 : index
    gpu.launch_func @exp_kernel::@exp_kernel blocks in (%c4, %c1, %c1) threads in (%c256, %c1, %c1)
        args(%a : memref<1000xf32>, %out : memref<1000xf32>)
        {twintrack.bytes = 8000 : i64, twintrack.flops = 1000 : i64, twintrack.source_ops = ["model.py:12:0"]}
    gpu.launch_func @sum_kernel::@sum_kernel blocks in (%c32, %c1, %c1) threads in (%c256, %c1, %c1)
        args(%rows : memref<32x1024xf32>, %acc : memref<32xf32>)
    return
  }
  gpu.module @exp_kernel {
    gpu.func @exp_kernel(%a: memref<1000xf32>, %out: memref<1000xf32>) kernel {
      %c256 = arith.constant 256 : index
      %c1000 = arith.constant 1000 : index
      %bid = gpu.block_id x
      %tid = gpu.thread_id x
      %base = arith.muli %bid, %c256 : index
      %lin = arith.addi %base, %tid : index
      %in = arith.cmpi ult, %lin, %c1000 : index
      scf.if %in {
        %x = memref.load %a[%lin] : memref<1000xf32>
        %y = math.exp %x : f32
        %two = arith.constant 2 : i64
        %squared = math.fpowi %y, %two : f32, i64
        memref.store %squared, %out[%lin] : memref<1000xf32>
      }
      gpu.return
    }
  }
  gpu.module @sum_kernel {
    gpu.func @sum_kernel(%rows: memref<32x1024xf32>, %acc: memref<32xf32>) kernel {
      %zero = arith.constant 0.000000e+00 : f32
      %c0 = arith.constant 0 : index
      %c256 = arith.constant 256 : index
      %c1024 = arith.constant 1024 : index
      %bid = gpu.block_id x
      %tid = gpu.thread_id x
      %part = scf.for %k = %tid to %c1024 step %c256 iter_args(%p = %zero) -> (f32) {
        %x = memref.load %rows[%bid, %k] : memref<32x1024xf32>
        %s = arith.addf %x, %p : f32
        scf.yield %s : f32
      }
      %total = gpu.all_reduce add %part uniform {
      } : (f32) -> f32
      %leader = arith.cmpi eq, %tid, %c0 : index
      scf.if %leader {
        %old = memref.load %acc[%bid] : memref<32xf32>
        %new = arith.addf %total, %old : f32
        memref.store %new, %acc[%bid] : memref<32xf32>
      }
      gpu.return
    }
  }
}
