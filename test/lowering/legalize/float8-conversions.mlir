// RUN: %PYTHON -m twintrack.compiler.passes float8-conversions %s | FileCheck %s

// Conversions to and from float8 become integer arithmetic on the bits
// (the LLVM and NVVM lowerings convert neither): e4m3fn from f32 rounds to
// nearest even through the subnormals (an f32 add of 2^14) and saturates
// at 448 (code 0x7E = 126) for all but NaN; e5m2 to f32 is an f16's bits.
// CHECK-LABEL: func.func @down(
// CHECK-NOT:     arith.truncf {{.*}} to f8E4M3FN
// CHECK:         arith.addf
// CHECK:         arith.minui %{{.*}}, %c126_i32
// CHECK:         %[[BYTE:.*]] = arith.trunci %{{.*}} : i32 to i8
// CHECK:         arith.bitcast %[[BYTE]] : i8 to f8E4M3FN
func.func @down(%x: f32) -> f8E4M3FN {
  %y = arith.truncf %x : f32 to f8E4M3FN
  return %y : f8E4M3FN
}

// CHECK-LABEL: func.func @up(
// CHECK-NOT:     arith.extf {{.*}} f8E5M2
// CHECK:         arith.bitcast %{{.*}} : f8E5M2 to i8
// CHECK:         arith.shli
// CHECK:         arith.bitcast %{{.*}} : i16 to f16
// CHECK:         arith.extf %{{.*}} : f16 to f32
func.func @up(%x: f8E5M2) -> f32 {
  %y = arith.extf %x : f8E5M2 to f32
  return %y : f32
}
