// RUN: %PYTHON -m twintrack.compiler.passes tensor-map-params %s | FileCheck %s

// A kernel parameter a TMA store reads as its tensor map is passed by value
// (128 bytes, 64-byte aligned) as a grid constant, also where the map
// reaches the store as a block argument: a horizontal kernel's matmuls
// store alike, the CFG's simplification merges their stores, and each
// branch passes its own map. The other parameters stay as they are.
// CHECK-LABEL: llvm.func @merged_stores(
// CHECK-SAME:    %arg0: !llvm.ptr {llvm.align = 64 : i64, llvm.byval = !llvm.array<128 x i8>, nvvm.grid_constant},
// CHECK-SAME:    %arg1: !llvm.ptr {llvm.align = 64 : i64, llvm.byval = !llvm.array<128 x i8>, nvvm.grid_constant},
// CHECK-SAME:    %arg2: !llvm.ptr<3>, %arg3: i1, %arg4: i32)
module attributes {gpu.container_module} {
  gpu.module @kernels {
    llvm.func @merged_stores(%first: !llvm.ptr, %second: !llvm.ptr, %staged: !llvm.ptr<3>, %which: i1, %row: i32) attributes {nvvm.kernel} {
      llvm.cond_br %which, ^first, ^second
    ^first:
      llvm.br ^store(%first : !llvm.ptr)
    ^second:
      llvm.br ^store(%second : !llvm.ptr)
    ^store(%map: !llvm.ptr):
      nvvm.cp.async.bulk.tensor.global.shared.cta %map, %staged, box[%row, %row] : !llvm.ptr, <3>
      llvm.return
    }
  }
}

// A map chosen by a select is marked too.
// CHECK-LABEL: llvm.func @selected_map(
// CHECK-SAME:    %arg0: !llvm.ptr {llvm.align = 64 : i64, llvm.byval = !llvm.array<128 x i8>, nvvm.grid_constant},
// CHECK-SAME:    %arg1: !llvm.ptr {llvm.align = 64 : i64, llvm.byval = !llvm.array<128 x i8>, nvvm.grid_constant},
// CHECK-SAME:    %arg2: !llvm.ptr<3>, %arg3: i1, %arg4: i32)
module attributes {gpu.container_module} {
  gpu.module @kernels {
    llvm.func @selected_map(%first: !llvm.ptr, %second: !llvm.ptr, %staged: !llvm.ptr<3>, %which: i1, %row: i32) attributes {nvvm.kernel} {
      %map = llvm.select %which, %first, %second : i1, !llvm.ptr
      nvvm.cp.async.bulk.tensor.global.shared.cta %map, %staged, box[%row, %row] : !llvm.ptr, <3>
      llvm.return
    }
  }
}
