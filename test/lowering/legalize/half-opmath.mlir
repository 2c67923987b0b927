// RUN: %stage-legalize %s | FileCheck %s

// An elementwise op computing in bf16 (torch-mlir's sigmoid: every step
// rounds to bf16) computes in f32 and rounds its result once, where it
// yields it: eager's opmath. Comparisons and selects read the f32 values.
// CHECK-LABEL: func.func @sigmoid(
// CHECK:         ^bb0(%[[X:[a-z0-9_]+]]: bf16, %{{.*}}: bf16):
// CHECK-NEXT:      %[[W:.*]] = arith.extf %[[X]] : bf16 to f32
// CHECK-NEXT:      %[[N:.*]] = arith.negf %[[W]] : f32
// CHECK-NEXT:      %[[E:.*]] = math.exp %[[N]] : f32
// CHECK-NEXT:      %[[ONE:.*]] = arith.extf %{{.*}} : bf16 to f32
// CHECK-NEXT:      %[[D:.*]] = arith.addf %[[E]], %[[ONE]] : f32
// CHECK-NEXT:      %[[Q:.*]] = arith.divf %[[ONE]], %[[D]] : f32
// CHECK-NEXT:      %[[R:.*]] = arith.truncf %[[Q]] : f32 to bf16
// CHECK-NEXT:      linalg.yield %[[R]] : bf16
#id = affine_map<(d0) -> (d0)>
func.func @sigmoid(%x: tensor<8xbf16>) -> tensor<8xbf16> {
  %one = arith.constant 1.0 : bf16
  %e = tensor.empty() : tensor<8xbf16>
  %s = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel"]}
      ins(%x : tensor<8xbf16>) outs(%e : tensor<8xbf16>) {
  ^bb0(%v: bf16, %o: bf16):
    %n = arith.negf %v : bf16
    %x1 = math.exp %n : bf16
    %d = arith.addf %x1, %one : bf16
    %q = arith.divf %one, %d : bf16
    linalg.yield %q : bf16
  } -> tensor<8xbf16>
  return %s : tensor<8xbf16>
}

// A clamp in f16: the comparison and the select read the widened value;
// the i1 result stays. A reduction keeps its body (its accumulator is the
// output's type), and a cast alone is no arithmetic.
// CHECK-LABEL: func.func @clamp_and_sum(
// CHECK:         linalg.generic
// CHECK-NEXT:      ^bb0
// CHECK-NEXT:      %[[W:.*]] = arith.extf %{{.*}} : f16 to f32
// CHECK-NEXT:      %[[TOP:.*]] = arith.extf %{{.*}} : f16 to f32
// CHECK-NEXT:      %[[C:.*]] = arith.cmpf ogt, %[[W]], %[[TOP]] : f32
// CHECK-NEXT:      %[[S:.*]] = arith.select %[[C]], %[[TOP]], %[[W]] : f32
// CHECK-NEXT:      arith.truncf %[[S]] : f32 to f16
// CHECK:         linalg.generic
// CHECK:           arith.addf %{{.*}}, %{{.*}} : f16
// CHECK:         linalg.generic
// CHECK-NEXT:      ^bb0
// CHECK-NEXT:      arith.extf %{{.*}} : f16 to f32
// CHECK-NEXT:      linalg.yield
#all = affine_map<(d0) -> ()>
func.func @clamp_and_sum(%x: tensor<8xf16>) -> (tensor<8xf16>, tensor<f16>, tensor<8xf32>) {
  %top = arith.constant 2.0 : f16
  %e = tensor.empty() : tensor<8xf16>
  %c = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel"]}
      ins(%x : tensor<8xf16>) outs(%e : tensor<8xf16>) {
  ^bb0(%v: f16, %o: f16):
    %gt = arith.cmpf ogt, %v, %top : f16
    %r = arith.select %gt, %top, %v : f16
    linalg.yield %r : f16
  } -> tensor<8xf16>
  %zero = arith.constant 0.0 : f16
  %es = tensor.empty() : tensor<f16>
  %fs = linalg.fill ins(%zero : f16) outs(%es : tensor<f16>) -> tensor<f16>
  %s = linalg.generic {indexing_maps = [#id, #all], iterator_types = ["reduction"]}
      ins(%x : tensor<8xf16>) outs(%fs : tensor<f16>) {
  ^bb0(%v: f16, %acc: f16):
    %a = arith.addf %v, %acc : f16
    linalg.yield %a : f16
  } -> tensor<f16>
  %ew = tensor.empty() : tensor<8xf32>
  %w = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel"]}
      ins(%x : tensor<8xf16>) outs(%ew : tensor<8xf32>) {
  ^bb0(%v: f16, %o: f32):
    %wide = arith.extf %v : f16 to f32
    linalg.yield %wide : f32
  } -> tensor<8xf32>
  return %c, %s, %w : tensor<8xf16>, tensor<f16>, tensor<8xf32>
}
