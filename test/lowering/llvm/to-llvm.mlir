// RUN: %stage-llvm %s | FileCheck %s
// RUN: %stage-llvm %s | FileCheck %s --check-prefix=GONE

// The llvm stage lowers everything (affine loops, vector transfers, memrefs,
// math) to the LLVM dialect and adds a C-interface wrapper
// `_mlir_ciface_<name>` per function for the JIT.

// GONE-NOT: func.func
// GONE-NOT: func.return
// GONE-NOT: memref.
// GONE-NOT: memref<
// GONE-NOT: affine.
// GONE-NOT: vector.
// GONE-NOT: scf.
// GONE-NOT: cf.
// GONE-NOT: arith.
// GONE-NOT: math.
// GONE-NOT: ub.
// GONE-NOT: unrealized_conversion_cast

// memref.alloc and dealloc call MLIR's generic allocation functions, which
// the runtime gives the buffer pool (compiler/buffer_pool.c).
// CHECK-DAG: llvm.func @_mlir_memref_to_llvm_alloc(i64) -> !llvm.ptr
// CHECK-DAG: llvm.func @_mlir_memref_to_llvm_free(!llvm.ptr)
// CHECK-DAG: llvm.func @erff(f32) -> f32
// CHECK-DAG: llvm.func @log1pf(f32) -> f32

// A vectorized function with a temporary buffer. Each memref argument is
// expanded into its descriptor fields (allocated/aligned pointers, offset,
// sizes, strides).
// CHECK-LABEL: llvm.func @forward(
// CHECK-SAME:    %{{.*}}: !llvm.ptr, %{{.*}}: !llvm.ptr, %{{.*}}: i64, %{{.*}}: i64, %{{.*}}: i64, %{{.*}}: i64, %{{.*}}: i64,
// CHECK-SAME:    attributes {llvm.emit_c_interface}
// CHECK:         llvm.call @_mlir_memref_to_llvm_alloc(
// CHECK:         llvm.intr.exp(%{{.*}}) : (vector<8xf32>) -> vector<8xf32>
// CHECK:         llvm.fadd %{{.*}}, %{{.*}} : vector<8xf32>
// maximumf as arith-expand writes it (the stage runs it for bf16's rounding):
// the larger, or the NaN of either operand.
// CHECK:         %[[GT:.*]] = llvm.fcmp "ugt" %[[SUM:.*]], %[[OTHER:.*]] : vector<8xf32>
// CHECK:         %[[MAX:.*]] = llvm.select %[[GT]], %[[SUM]], %[[OTHER]]
// CHECK:         %[[NAN:.*]] = llvm.fcmp "uno" %[[OTHER]], %[[OTHER]] : vector<8xf32>
// CHECK:         llvm.select %[[NAN]], %[[OTHER]], %[[MAX]]
// CHECK:         llvm.call @_mlir_memref_to_llvm_free(
// CHECK:         llvm.return{{$}}

// The C-interface wrapper (asked for by the functions stage) takes one
// pointer per memref descriptor.
// CHECK-LABEL: llvm.func @_mlir_ciface_forward(
// CHECK-SAME:    %[[A:.*]]: !llvm.ptr, %[[B:.*]]: !llvm.ptr, %[[C:.*]]: !llvm.ptr)
// CHECK-SAME:    attributes {llvm.emit_c_interface}
// CHECK:         llvm.load %[[A]] : !llvm.ptr -> !llvm.struct<(ptr, ptr, i64, array<2 x i64>, array<2 x i64>)>
// CHECK:         llvm.load %[[B]] : !llvm.ptr -> !llvm.struct<(ptr, ptr, i64, array<1 x i64>, array<1 x i64>)>
// CHECK:         llvm.load %[[C]] : !llvm.ptr -> !llvm.struct<(ptr, ptr, i64, array<2 x i64>, array<2 x i64>)>
// CHECK:         llvm.call @forward(
// CHECK:         llvm.return
func.func @forward(%arg0: memref<4x16xf32>, %arg1: memref<16xf32>, %arg2: memref<4x16xf32>) attributes {llvm.emit_c_interface} {
  %0 = ub.poison : f32
  %cst = arith.constant dense<0.000000e+00> : vector<8xf32>
  %alloc = memref.alloc() {alignment = 64 : i64} : memref<16xf32>
  affine.for %i = 0 to 16 step 8 {
    %1 = vector.transfer_read %arg1[%i], %0 : memref<16xf32>, vector<8xf32>
    %2 = math.exp %1 : vector<8xf32>
    vector.transfer_write %2, %alloc[%i] : vector<8xf32>, memref<16xf32>
  }
  affine.for %arg3 = 0 to 4 {
    affine.for %arg4 = 0 to 16 step 8 {
      %1 = vector.transfer_read %arg0[%arg3, %arg4], %0 : memref<4x16xf32>, vector<8xf32>
      %2 = vector.transfer_read %alloc[%arg4], %0 : memref<16xf32>, vector<8xf32>
      %3 = arith.addf %1, %2 : vector<8xf32>
      %4 = arith.maximumf %3, %cst : vector<8xf32>
      vector.transfer_write %4, %arg2[%arg3, %arg4] : vector<8xf32>, memref<4x16xf32>
    }
  }
  memref.dealloc %alloc : memref<16xf32>
  return
}

// Scalar loops: math with an LLVM intrinsic becomes the intrinsic, math
// without one becomes a libm call.
// CHECK-LABEL: llvm.func @scalar_math(
// CHECK:         %[[X:.*]] = llvm.load %{{.*}} : !llvm.ptr -> f32
// CHECK:         %[[T:.*]] = llvm.intr.tanh(%[[X]]) : (f32) -> f32
// CHECK:         %[[R:.*]] = llvm.call @erff(%[[T]]) : (f32) -> f32
// CHECK:         llvm.store %[[R]], %{{.*}} : f32, !llvm.ptr
// CHECK:         llvm.return
// CHECK-LABEL: llvm.func @_mlir_ciface_scalar_math(
// CHECK-SAME:    %{{.*}}: !llvm.ptr, %{{.*}}: !llvm.ptr)
// CHECK:         llvm.call @scalar_math(
func.func @scalar_math(%arg0: memref<4xf32>, %arg1: memref<4xf32>) attributes {llvm.emit_c_interface} {
  affine.for %i = 0 to 4 {
    %0 = affine.load %arg0[%i] : memref<4xf32>
    %1 = math.tanh %0 : f32
    %2 = math.erf %1 : f32
    affine.store %2, %arg1[%i] : memref<4xf32>
  }
  return
}

// log1p is libm's, not LLVM's log(1 + x), which loses every digit of a
// tiny x (log1p(1e-10) came out 0).
// CHECK-LABEL: llvm.func @tiny_logs(
// CHECK-NOT:     llvm.intr.log
// CHECK:         llvm.call @log1pf(%{{.*}}) : (f32) -> f32
// CHECK-NOT:     llvm.intr.log
// CHECK:         llvm.return
func.func @tiny_logs(%arg0: memref<4xf32>, %arg1: memref<4xf32>) attributes {llvm.emit_c_interface} {
  affine.for %i = 0 to 4 {
    %0 = affine.load %arg0[%i] : memref<4xf32>
    %1 = math.log1p %0 : f32
    affine.store %1, %arg1[%i] : memref<4xf32>
  }
  return
}
