// RUN: %stage-fusion %s | FileCheck %s

// A value several ops of one dispatch read is computed once: the
// elementwise ops over the same iterations become one generic, each body
// once, instead of each consumer holding a copy of its producers (copies of
// copies compound: a chain in which every value is read twice doubled with
// each step).

#map = affine_map<(d0) -> (d0)>

// exp(x) feeds both sides of a product: one generic, one exp.
// CHECK-LABEL: func.func @diamond(
// CHECK:         twintrack.dispatch "elementwise_0" kind<elementwise>
// CHECK:           linalg.generic
// CHECK:             math.exp
// CHECK-NOT:         math.exp
// CHECK-DAG:         %[[TWICE:.*]] = arith.mulf %[[E:.*]], %{{.*}} : f32
// CHECK-DAG:         %[[PLUS:.*]] = arith.addf %[[E]], %{{.*}} : f32
// CHECK:             %[[P:.*]] = arith.mulf
// CHECK-NEXT:        linalg.yield %[[P]]
// CHECK-NOT:       linalg.generic
// CHECK:           twintrack.yield
func.func @diamond(%x: tensor<64xf32>) -> tensor<64xf32> {
  %one = arith.constant 1.000000e+00 : f32
  %two = arith.constant 2.000000e+00 : f32
  %e = tensor.empty() : tensor<64xf32>
  %a = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel"]} ins(%x : tensor<64xf32>) outs(%e : tensor<64xf32>) {
  ^bb0(%in: f32, %out: f32):
    %r = math.exp %in : f32
    linalg.yield %r : f32
  } -> tensor<64xf32>
  %b = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel"]} ins(%a : tensor<64xf32>) outs(%e : tensor<64xf32>) {
  ^bb0(%in: f32, %out: f32):
    %r = arith.mulf %in, %two : f32
    linalg.yield %r : f32
  } -> tensor<64xf32>
  %c = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel"]} ins(%a : tensor<64xf32>) outs(%e : tensor<64xf32>) {
  ^bb0(%in: f32, %out: f32):
    %r = arith.addf %in, %one : f32
    linalg.yield %r : f32
  } -> tensor<64xf32>
  %d = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel"]} ins(%b, %c : tensor<64xf32>, tensor<64xf32>) outs(%e : tensor<64xf32>) {
  ^bb0(%in: f32, %in_0: f32, %out: f32):
    %r = arith.mulf %in, %in_0 : f32
    linalg.yield %r : f32
  } -> tensor<64xf32>
  return %d : tensor<64xf32>
}

// A Fibonacci-like chain (square-and-multiply, recurrences): each value is
// read by the next two steps. Copied producer by producer, the chain's
// generics held the steps before them over and over (upstream's fusion
// stops copying only at its payload bounds); merged, each product is
// computed once.
// CHECK-LABEL: func.func @chain(
// CHECK:         twintrack.dispatch "elementwise_0" kind<elementwise>
// CHECK:           linalg.generic
// CHECK-COUNT-39:    arith.mulf
// CHECK-NOT:         arith.mulf
// CHECK:             linalg.yield
// CHECK-NOT:       linalg.generic
// CHECK:           twintrack.yield
func.func @chain(%x: tensor<64xf32>) -> tensor<64xf32> {
  %e = tensor.empty() : tensor<64xf32>
  %v1 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel"]} ins(%x : tensor<64xf32>) outs(%e : tensor<64xf32>) {
  ^bb0(%in: f32, %out: f32):
    %r = math.exp %in : f32
    linalg.yield %r : f32
  } -> tensor<64xf32>
  %v2 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel"]} ins(%v1, %x : tensor<64xf32>, tensor<64xf32>) outs(%e : tensor<64xf32>) {
  ^bb0(%in: f32, %in_0: f32, %out: f32):
    %r = arith.mulf %in, %in_0 : f32
    linalg.yield %r : f32
  } -> tensor<64xf32>
  %v3 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel"]} ins(%v2, %v1 : tensor<64xf32>, tensor<64xf32>) outs(%e : tensor<64xf32>) {
  ^bb0(%in: f32, %in_0: f32, %out: f32):
    %r = arith.mulf %in, %in_0 : f32
    linalg.yield %r : f32
  } -> tensor<64xf32>
  %v4 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel"]} ins(%v3, %v2 : tensor<64xf32>, tensor<64xf32>) outs(%e : tensor<64xf32>) {
  ^bb0(%in: f32, %in_0: f32, %out: f32):
    %r = arith.mulf %in, %in_0 : f32
    linalg.yield %r : f32
  } -> tensor<64xf32>
  %v5 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel"]} ins(%v4, %v3 : tensor<64xf32>, tensor<64xf32>) outs(%e : tensor<64xf32>) {
  ^bb0(%in: f32, %in_0: f32, %out: f32):
    %r = arith.mulf %in, %in_0 : f32
    linalg.yield %r : f32
  } -> tensor<64xf32>
  %v6 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel"]} ins(%v5, %v4 : tensor<64xf32>, tensor<64xf32>) outs(%e : tensor<64xf32>) {
  ^bb0(%in: f32, %in_0: f32, %out: f32):
    %r = arith.mulf %in, %in_0 : f32
    linalg.yield %r : f32
  } -> tensor<64xf32>
  %v7 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel"]} ins(%v6, %v5 : tensor<64xf32>, tensor<64xf32>) outs(%e : tensor<64xf32>) {
  ^bb0(%in: f32, %in_0: f32, %out: f32):
    %r = arith.mulf %in, %in_0 : f32
    linalg.yield %r : f32
  } -> tensor<64xf32>
  %v8 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel"]} ins(%v7, %v6 : tensor<64xf32>, tensor<64xf32>) outs(%e : tensor<64xf32>) {
  ^bb0(%in: f32, %in_0: f32, %out: f32):
    %r = arith.mulf %in, %in_0 : f32
    linalg.yield %r : f32
  } -> tensor<64xf32>
  %v9 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel"]} ins(%v8, %v7 : tensor<64xf32>, tensor<64xf32>) outs(%e : tensor<64xf32>) {
  ^bb0(%in: f32, %in_0: f32, %out: f32):
    %r = arith.mulf %in, %in_0 : f32
    linalg.yield %r : f32
  } -> tensor<64xf32>
  %v10 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel"]} ins(%v9, %v8 : tensor<64xf32>, tensor<64xf32>) outs(%e : tensor<64xf32>) {
  ^bb0(%in: f32, %in_0: f32, %out: f32):
    %r = arith.mulf %in, %in_0 : f32
    linalg.yield %r : f32
  } -> tensor<64xf32>
  %v11 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel"]} ins(%v10, %v9 : tensor<64xf32>, tensor<64xf32>) outs(%e : tensor<64xf32>) {
  ^bb0(%in: f32, %in_0: f32, %out: f32):
    %r = arith.mulf %in, %in_0 : f32
    linalg.yield %r : f32
  } -> tensor<64xf32>
  %v12 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel"]} ins(%v11, %v10 : tensor<64xf32>, tensor<64xf32>) outs(%e : tensor<64xf32>) {
  ^bb0(%in: f32, %in_0: f32, %out: f32):
    %r = arith.mulf %in, %in_0 : f32
    linalg.yield %r : f32
  } -> tensor<64xf32>
  %v13 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel"]} ins(%v12, %v11 : tensor<64xf32>, tensor<64xf32>) outs(%e : tensor<64xf32>) {
  ^bb0(%in: f32, %in_0: f32, %out: f32):
    %r = arith.mulf %in, %in_0 : f32
    linalg.yield %r : f32
  } -> tensor<64xf32>
  %v14 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel"]} ins(%v13, %v12 : tensor<64xf32>, tensor<64xf32>) outs(%e : tensor<64xf32>) {
  ^bb0(%in: f32, %in_0: f32, %out: f32):
    %r = arith.mulf %in, %in_0 : f32
    linalg.yield %r : f32
  } -> tensor<64xf32>
  %v15 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel"]} ins(%v14, %v13 : tensor<64xf32>, tensor<64xf32>) outs(%e : tensor<64xf32>) {
  ^bb0(%in: f32, %in_0: f32, %out: f32):
    %r = arith.mulf %in, %in_0 : f32
    linalg.yield %r : f32
  } -> tensor<64xf32>
  %v16 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel"]} ins(%v15, %v14 : tensor<64xf32>, tensor<64xf32>) outs(%e : tensor<64xf32>) {
  ^bb0(%in: f32, %in_0: f32, %out: f32):
    %r = arith.mulf %in, %in_0 : f32
    linalg.yield %r : f32
  } -> tensor<64xf32>
  %v17 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel"]} ins(%v16, %v15 : tensor<64xf32>, tensor<64xf32>) outs(%e : tensor<64xf32>) {
  ^bb0(%in: f32, %in_0: f32, %out: f32):
    %r = arith.mulf %in, %in_0 : f32
    linalg.yield %r : f32
  } -> tensor<64xf32>
  %v18 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel"]} ins(%v17, %v16 : tensor<64xf32>, tensor<64xf32>) outs(%e : tensor<64xf32>) {
  ^bb0(%in: f32, %in_0: f32, %out: f32):
    %r = arith.mulf %in, %in_0 : f32
    linalg.yield %r : f32
  } -> tensor<64xf32>
  %v19 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel"]} ins(%v18, %v17 : tensor<64xf32>, tensor<64xf32>) outs(%e : tensor<64xf32>) {
  ^bb0(%in: f32, %in_0: f32, %out: f32):
    %r = arith.mulf %in, %in_0 : f32
    linalg.yield %r : f32
  } -> tensor<64xf32>
  %v20 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel"]} ins(%v19, %v18 : tensor<64xf32>, tensor<64xf32>) outs(%e : tensor<64xf32>) {
  ^bb0(%in: f32, %in_0: f32, %out: f32):
    %r = arith.mulf %in, %in_0 : f32
    linalg.yield %r : f32
  } -> tensor<64xf32>
  %v21 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel"]} ins(%v20, %v19 : tensor<64xf32>, tensor<64xf32>) outs(%e : tensor<64xf32>) {
  ^bb0(%in: f32, %in_0: f32, %out: f32):
    %r = arith.mulf %in, %in_0 : f32
    linalg.yield %r : f32
  } -> tensor<64xf32>
  %v22 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel"]} ins(%v21, %v20 : tensor<64xf32>, tensor<64xf32>) outs(%e : tensor<64xf32>) {
  ^bb0(%in: f32, %in_0: f32, %out: f32):
    %r = arith.mulf %in, %in_0 : f32
    linalg.yield %r : f32
  } -> tensor<64xf32>
  %v23 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel"]} ins(%v22, %v21 : tensor<64xf32>, tensor<64xf32>) outs(%e : tensor<64xf32>) {
  ^bb0(%in: f32, %in_0: f32, %out: f32):
    %r = arith.mulf %in, %in_0 : f32
    linalg.yield %r : f32
  } -> tensor<64xf32>
  %v24 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel"]} ins(%v23, %v22 : tensor<64xf32>, tensor<64xf32>) outs(%e : tensor<64xf32>) {
  ^bb0(%in: f32, %in_0: f32, %out: f32):
    %r = arith.mulf %in, %in_0 : f32
    linalg.yield %r : f32
  } -> tensor<64xf32>
  %v25 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel"]} ins(%v24, %v23 : tensor<64xf32>, tensor<64xf32>) outs(%e : tensor<64xf32>) {
  ^bb0(%in: f32, %in_0: f32, %out: f32):
    %r = arith.mulf %in, %in_0 : f32
    linalg.yield %r : f32
  } -> tensor<64xf32>
  %v26 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel"]} ins(%v25, %v24 : tensor<64xf32>, tensor<64xf32>) outs(%e : tensor<64xf32>) {
  ^bb0(%in: f32, %in_0: f32, %out: f32):
    %r = arith.mulf %in, %in_0 : f32
    linalg.yield %r : f32
  } -> tensor<64xf32>
  %v27 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel"]} ins(%v26, %v25 : tensor<64xf32>, tensor<64xf32>) outs(%e : tensor<64xf32>) {
  ^bb0(%in: f32, %in_0: f32, %out: f32):
    %r = arith.mulf %in, %in_0 : f32
    linalg.yield %r : f32
  } -> tensor<64xf32>
  %v28 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel"]} ins(%v27, %v26 : tensor<64xf32>, tensor<64xf32>) outs(%e : tensor<64xf32>) {
  ^bb0(%in: f32, %in_0: f32, %out: f32):
    %r = arith.mulf %in, %in_0 : f32
    linalg.yield %r : f32
  } -> tensor<64xf32>
  %v29 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel"]} ins(%v28, %v27 : tensor<64xf32>, tensor<64xf32>) outs(%e : tensor<64xf32>) {
  ^bb0(%in: f32, %in_0: f32, %out: f32):
    %r = arith.mulf %in, %in_0 : f32
    linalg.yield %r : f32
  } -> tensor<64xf32>
  %v30 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel"]} ins(%v29, %v28 : tensor<64xf32>, tensor<64xf32>) outs(%e : tensor<64xf32>) {
  ^bb0(%in: f32, %in_0: f32, %out: f32):
    %r = arith.mulf %in, %in_0 : f32
    linalg.yield %r : f32
  } -> tensor<64xf32>
  %v31 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel"]} ins(%v30, %v29 : tensor<64xf32>, tensor<64xf32>) outs(%e : tensor<64xf32>) {
  ^bb0(%in: f32, %in_0: f32, %out: f32):
    %r = arith.mulf %in, %in_0 : f32
    linalg.yield %r : f32
  } -> tensor<64xf32>
  %v32 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel"]} ins(%v31, %v30 : tensor<64xf32>, tensor<64xf32>) outs(%e : tensor<64xf32>) {
  ^bb0(%in: f32, %in_0: f32, %out: f32):
    %r = arith.mulf %in, %in_0 : f32
    linalg.yield %r : f32
  } -> tensor<64xf32>
  %v33 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel"]} ins(%v32, %v31 : tensor<64xf32>, tensor<64xf32>) outs(%e : tensor<64xf32>) {
  ^bb0(%in: f32, %in_0: f32, %out: f32):
    %r = arith.mulf %in, %in_0 : f32
    linalg.yield %r : f32
  } -> tensor<64xf32>
  %v34 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel"]} ins(%v33, %v32 : tensor<64xf32>, tensor<64xf32>) outs(%e : tensor<64xf32>) {
  ^bb0(%in: f32, %in_0: f32, %out: f32):
    %r = arith.mulf %in, %in_0 : f32
    linalg.yield %r : f32
  } -> tensor<64xf32>
  %v35 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel"]} ins(%v34, %v33 : tensor<64xf32>, tensor<64xf32>) outs(%e : tensor<64xf32>) {
  ^bb0(%in: f32, %in_0: f32, %out: f32):
    %r = arith.mulf %in, %in_0 : f32
    linalg.yield %r : f32
  } -> tensor<64xf32>
  %v36 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel"]} ins(%v35, %v34 : tensor<64xf32>, tensor<64xf32>) outs(%e : tensor<64xf32>) {
  ^bb0(%in: f32, %in_0: f32, %out: f32):
    %r = arith.mulf %in, %in_0 : f32
    linalg.yield %r : f32
  } -> tensor<64xf32>
  %v37 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel"]} ins(%v36, %v35 : tensor<64xf32>, tensor<64xf32>) outs(%e : tensor<64xf32>) {
  ^bb0(%in: f32, %in_0: f32, %out: f32):
    %r = arith.mulf %in, %in_0 : f32
    linalg.yield %r : f32
  } -> tensor<64xf32>
  %v38 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel"]} ins(%v37, %v36 : tensor<64xf32>, tensor<64xf32>) outs(%e : tensor<64xf32>) {
  ^bb0(%in: f32, %in_0: f32, %out: f32):
    %r = arith.mulf %in, %in_0 : f32
    linalg.yield %r : f32
  } -> tensor<64xf32>
  %v39 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel"]} ins(%v38, %v37 : tensor<64xf32>, tensor<64xf32>) outs(%e : tensor<64xf32>) {
  ^bb0(%in: f32, %in_0: f32, %out: f32):
    %r = arith.mulf %in, %in_0 : f32
    linalg.yield %r : f32
  } -> tensor<64xf32>
  %v40 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel"]} ins(%v39, %v38 : tensor<64xf32>, tensor<64xf32>) outs(%e : tensor<64xf32>) {
  ^bb0(%in: f32, %in_0: f32, %out: f32):
    %r = arith.mulf %in, %in_0 : f32
    linalg.yield %r : f32
  } -> tensor<64xf32>
  return %v40 : tensor<64xf32>
}

// A loop's body fuses too: its two steps are one dispatch inside the loop,
// numbered after the function's own.
// CHECK-LABEL: func.func @loop_body(
// CHECK:         scf.for
// CHECK:           twintrack.dispatch "elementwise_0" kind<elementwise>
// CHECK:             linalg.generic
// CHECK:               math.exp
// CHECK:               arith.mulf
// CHECK-NOT:         linalg.generic
// CHECK:             twintrack.yield
// CHECK:           scf.yield
func.func @loop_body(%x: tensor<64xf32>) -> tensor<64xf32> {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c4 = arith.constant 4 : index
  %two = arith.constant 2.000000e+00 : f32
  %e = tensor.empty() : tensor<64xf32>
  %r = scf.for %i = %c0 to %c4 step %c1 iter_args(%acc = %x) -> (tensor<64xf32>) {
    %a = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel"]} ins(%acc : tensor<64xf32>) outs(%e : tensor<64xf32>) {
    ^bb0(%in: f32, %out: f32):
      %v = math.exp %in : f32
      linalg.yield %v : f32
    } -> tensor<64xf32>
    %b = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel"]} ins(%a : tensor<64xf32>) outs(%e : tensor<64xf32>) {
    ^bb0(%in: f32, %out: f32):
      %v = arith.mulf %in, %two : f32
      linalg.yield %v : f32
    } -> tensor<64xf32>
    scf.yield %b : tensor<64xf32>
  }
  return %r : tensor<64xf32>
}
