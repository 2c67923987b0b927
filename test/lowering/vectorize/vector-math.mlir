// RUN: %PYTHON -m twintrack.compiler.passes "vector-math" %s | FileCheck %s

// exp on an f32 vector becomes a polynomial: x clamped, k = round(x/ln 2),
// r = x - k ln 2 in two fused multiply-adds, the degree-7 polynomial in
// seven more, 2^k built in the exponent bits in two halves, NaN kept.
// CHECK-LABEL: func.func @vector(
// CHECK-NOT:     math.exp
// CHECK:         arith.maximumf
// CHECK:         arith.minimumf
// CHECK:         math.roundeven %{{.*}} : vector<16xf32>
// CHECK-COUNT-9: math.fma
// CHECK:         arith.fptosi %{{.*}} : vector<16xf32> to vector<16xi32>
// CHECK:         arith.shli
// CHECK:         arith.bitcast %{{.*}} : vector<16xi32> to vector<16xf32>
// CHECK:         arith.cmpf uno
// CHECK:         arith.select
func.func @vector(%x: vector<16xf32>) -> vector<16xf32> {
  %y = math.exp %x : vector<16xf32>
  return %y : vector<16xf32>
}

// erf on an f32 vector: three polynomials (|x| below 1 in x^2, on [1, 2]
// and on [2, 4]; 10 + 14 + 14 coefficients) chosen per lane, 1 past
// 3.9192, the sign copied back, NaN kept.
// CHECK-LABEL: func.func @erf(
// CHECK-NOT:      math.erf
// CHECK:          math.absf %{{.*}} : vector<8xf32>
// CHECK-COUNT-35: math.fma
// CHECK:          arith.cmpf olt
// CHECK:          arith.cmpf oge
// CHECK:          math.copysign
// CHECK:          arith.cmpf uno
func.func @erf(%x: vector<8xf32>) -> vector<8xf32> {
  %y = math.erf %x : vector<8xf32>
  return %y : vector<8xf32>
}

// A scalar exp, and an f64 vector's, stay for libm.
// CHECK-LABEL: func.func @others(
// CHECK:         math.exp %{{.*}} : f32
// CHECK:         math.exp %{{.*}} : vector<4xf64>
func.func @others(%x: f32, %y: vector<4xf64>) -> (f32, vector<4xf64>) {
  %a = math.exp %x : f32
  %b = math.exp %y : vector<4xf64>
  return %a, %b : f32, vector<4xf64>
}
