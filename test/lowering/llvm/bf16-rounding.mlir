// RUN: %stage-llvm %s | FileCheck %s

// f32 to bf16 rounds to nearest even in integer bit operations (as c10
// does), not with llvm.fptrunc: on an x86 host with AVX512-BF16, LLVM would
// select vcvtneps2bf16, which flushes subnormal inputs to zero.

// CHECK-LABEL: llvm.func @round_to_bf16(
// CHECK-NOT:     llvm.fptrunc
// CHECK:         llvm.bitcast %{{.*}} : vector<8xf32> to vector<8xi32>
// CHECK:         llvm.lshr
// CHECK:         llvm.bitcast %{{.*}} : vector<8xi16> to vector<8xbf16>
// CHECK-NOT:     llvm.fptrunc
// CHECK:         llvm.return
func.func @round_to_bf16(%x: vector<8xf32>) -> vector<8xbf16> {
  %r = arith.truncf %x : vector<8xf32> to vector<8xbf16>
  return %r : vector<8xbf16>
}
