// RUN: %stage-f32-intermediates %s | FileCheck %s
// RUN: %PYTHON -m twintrack.compiler.passes 'f32-intermediates{emulate_precision_casts=true}' %s | FileCheck %s --check-prefix=EAGER

// Two bf16 ops fused into one body (softmax's normalization, then a
// sigmoid): the first rounds its f32 result to bf16 and the second widens
// it again. By default the sigmoid reads the f32 value (Inductor's
// numerics); the rounding of the stored result stays. With
// emulate_precision_casts the round trip stays (eager's numerics). A
// round trip through f32 (not a half type) is a real rounding either way.
// CHECK-LABEL: func.func @fused(
// CHECK:         ^bb0(%[[X:[a-z0-9_]+]]: f32, %[[Y:[a-z0-9_]+]]: f64, %{{.*}}: bf16, %{{.*}}: f64):
// CHECK:           %[[P:.*]] = arith.divf %[[X]], %{{.*}} : f32
// CHECK-NOT:       arith.extf %{{.*}} : bf16 to f32
// CHECK:           %[[N:.*]] = arith.negf %[[P]] : f32
// CHECK:           %[[R:.*]] = arith.truncf %{{.*}} : f32 to bf16
// CHECK:           %[[T:.*]] = arith.truncf %[[Y]] : f64 to f32
// CHECK:           %[[TW:.*]] = arith.extf %[[T]] : f32 to f64
// CHECK:           linalg.yield %[[R]], %[[TW]]
// EAGER-LABEL: func.func @fused(
// EAGER:         %[[P:.*]] = arith.divf
// EAGER:         %[[H:.*]] = arith.truncf %[[P]] : f32 to bf16
// EAGER:         %[[W:.*]] = arith.extf %[[H]] : bf16 to f32
// EAGER:         arith.negf %[[W]] : f32
#id = affine_map<(d0) -> (d0)>
func.func @fused(%x: tensor<8xf32>, %y: tensor<8xf64>) -> (tensor<8xbf16>, tensor<8xf64>) {
  %sum = arith.constant 3.0 : f32
  %one = arith.constant 1.0 : f32
  %e = tensor.empty() : tensor<8xbf16>
  %e64 = tensor.empty() : tensor<8xf64>
  %r:2 = linalg.generic {indexing_maps = [#id, #id, #id, #id], iterator_types = ["parallel"]}
      ins(%x, %y : tensor<8xf32>, tensor<8xf64>) outs(%e, %e64 : tensor<8xbf16>, tensor<8xf64>) {
  ^bb0(%v: f32, %w: f64, %o: bf16, %o64: f64):
    %p = arith.divf %v, %sum : f32
    %h = arith.truncf %p : f32 to bf16
    %hw = arith.extf %h : bf16 to f32
    %n = arith.negf %hw : f32
    %x1 = math.exp %n : f32
    %d = arith.addf %x1, %one : f32
    %q = arith.divf %one, %d : f32
    %qh = arith.truncf %q : f32 to bf16
    %t = arith.truncf %w : f64 to f32
    %tw = arith.extf %t : f32 to f64
    linalg.yield %qh, %tw : bf16, f64
  } -> (tensor<8xbf16>, tensor<8xf64>)
  return %r#0, %r#1 : tensor<8xbf16>, tensor<8xf64>
}
