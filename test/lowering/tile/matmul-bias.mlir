// RUN: %stage-affine %s > %t && %stage-tile %t | FileCheck %s
// RUN: %stage-affine %s > %t && %stage-tile %t | FileCheck %s --check-prefix=GONE

// The affine stage lowers linalg on memrefs to affine loop nests; the tile stage tiles
// them for the cache (upstream affine-loop-tile{cache-size=256}): a tiled loop steps
// by its tile size and an intra-tile loop runs from #lb(tile) to #ub(tile).
// The tile sizes themselves are the tiler's choice and not pinned here.

// GONE-NOT: linalg.

// CHECK-DAG: #[[LB:.+]] = affine_map<(d0) -> (d0)>
// CHECK-DAG: #[[UB:.+]] = affine_map<(d0) -> (d0 + {{[0-9]+}})>

// CHECK-LABEL: func.func @matmul_bias(
// CHECK-SAME:    %[[A:[^:]*]]: memref<256x256xf32>, %[[B:[^:]*]]: memref<256x256xf32>, %[[BIAS:[^:]*]]: memref<256xf32>
// CHECK:         %[[ZERO:.*]] = arith.constant 0.000000e+00 : f32
// CHECK:         %[[C:.*]] = memref.alloc()

// linalg.fill: a store of zero in a loop nest.
// CHECK:         affine.for
// CHECK:           affine.store %[[ZERO]], %[[C]][

// linalg.matmul: the reduction loop is tiled.
// CHECK:         affine.for %[[KT:.*]] = 0 to 256 step {{[0-9]+}} {
// CHECK:           affine.for %[[K:.*]] = #[[LB]](%[[KT]]) to #{{.+}}(%[[KT]]) {
// CHECK-NEXT:        affine.load %[[A]][%{{.*}}, %[[K]]]
// CHECK-NEXT:        affine.load %[[B]][%[[K]], %{{.*}}]
// CHECK-NEXT:        affine.load %[[C]][
// CHECK-NEXT:        arith.mulf
// CHECK-NEXT:        arith.addf
// CHECK-NEXT:        affine.store %{{.*}}, %[[C]][

// The bias add (linalg.generic) is a loop nest too.
// CHECK:         affine.for
// CHECK:           affine.load %[[C]][
// CHECK:           affine.load %[[BIAS]][
// CHECK:           arith.addf
// CHECK:           affine.store %{{.*}}, %[[C]][
// CHECK:         return %[[C]] : memref<256x256xf32>
#map = affine_map<(d0, d1) -> (d0, d1)>
#map1 = affine_map<(d0, d1) -> (d1)>
func.func @matmul_bias(%arg0: memref<256x256xf32>, %arg1: memref<256x256xf32>, %arg2: memref<256xf32>) -> memref<256x256xf32> {
  %cst = arith.constant 0.000000e+00 : f32
  %alloc = memref.alloc() {alignment = 64 : i64} : memref<256x256xf32>
  linalg.fill ins(%cst : f32) outs(%alloc : memref<256x256xf32>)
  linalg.matmul ins(%arg0, %arg1 : memref<256x256xf32>, memref<256x256xf32>) outs(%alloc : memref<256x256xf32>)
  linalg.generic {indexing_maps = [#map, #map1, #map], iterator_types = ["parallel", "parallel"]} ins(%alloc, %arg2 : memref<256x256xf32>, memref<256xf32>) outs(%alloc : memref<256x256xf32>) {
  ^bb0(%in: f32, %in_0: f32, %out: f32):
    %0 = arith.addf %in, %in_0 : f32
    linalg.yield %0 : f32
  }
  return %alloc : memref<256x256xf32>
}

// A function of dynamic shapes keeps its loops: the tiler reports an error
// on a dynamic memref's footprint (and the process must not abort).
// CHECK-LABEL: func.func @dynamic_rows(
// CHECK:         affine.for %{{.*}} = 0 to %{{.*}} {
// CHECK-NEXT:      affine.for %{{.*}} = 0 to 64 {
// CHECK-NOT:     step
// CHECK:         return
func.func @dynamic_rows(%arg0: memref<?x64xf32>, %arg1: memref<?x64xf32>) {
  linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel"]} ins(%arg0 : memref<?x64xf32>) outs(%arg1 : memref<?x64xf32>) {
  ^bb0(%in: f32, %out: f32):
    %0 = arith.addf %in, %in : f32
    linalg.yield %0 : f32
  }
  return
}
