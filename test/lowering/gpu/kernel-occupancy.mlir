// RUN: %PYTHON -m twintrack.compiler.passes kernel-occupancy %s | FileCheck %s

// kernel-occupancy: a kernel whose body carries twintrack.blocks_per_sm
// (the wgmma flash kernel marks its key loop; outlining keeps it there)
// gets nvvm.minctasm, the most any of its ops asks for; ptxas then holds
// its registers to that many resident blocks. A kernel built for clusters
// (twintrack.cluster_blocks, the TMA matmul's tile loop) gets
// nvvm.cluster_dim, its 1-d cluster shape. A kernel with no marker is
// left as it was.

// CHECK-LABEL: gpu.module @marked
// CHECK:       gpu.func @kernel({{.*}}) kernel attributes {{{.*}}nvvm.minctasm = 2 : i32
module attributes {gpu.container_module} {
  gpu.module @marked {
    gpu.func @kernel(%n: index) kernel {
      %c0 = arith.constant 0 : index
      %c1 = arith.constant 1 : index
      scf.for %i = %c0 to %n step %c1 {
      } {twintrack.blocks_per_sm = 2 : i64}
      gpu.return
    }
  }
// CHECK-LABEL: gpu.module @clustered
// CHECK:       gpu.func @kernel({{.*}}) kernel attributes {{{.*}}nvvm.cluster_dim = array<i32: 2, 1, 1>
  gpu.module @clustered {
    gpu.func @kernel(%n: index) kernel {
      %c0 = arith.constant 0 : index
      %c1 = arith.constant 1 : index
      scf.for %i = %c0 to %n step %c1 {
      } {twintrack.cluster_blocks = 2 : i64}
      gpu.return
    }
  }
// CHECK-LABEL: gpu.module @plain
// CHECK-NOT:   nvvm.minctasm
// CHECK-NOT:   nvvm.cluster_dim
  gpu.module @plain {
    gpu.func @kernel(%n: index) kernel {
      gpu.return
    }
  }
}
