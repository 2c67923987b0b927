// RUN: %stage-vectorize %s | FileCheck %s
// RUN: %stage-vectorize %s | FileCheck %s --check-prefix=GONE

// The vectorize stage turns innermost affine loops into 8-lane vector code
// (affine-super-vectorize{virtual-vector-size=8}): the loop steps by 8 and
// scalar loads/stores become vector.transfer_read/write.

// GONE-NOT: affine.load
// GONE-NOT: affine.store
// GONE-NOT: {{(arith|math)\.[a-z]+ .*: f32$}}

// CHECK-LABEL: func.func @add_relu(
// CHECK-SAME:    %[[X:.*]]: memref<4x64xf32>, %[[B:.*]]: memref<64xf32>, %[[OUT:.*]]: memref<4x64xf32>)
// CHECK-DAG:     %[[ZERO:.*]] = arith.constant dense<0.000000e+00> : vector<8xf32>
// CHECK:         affine.for %[[I:.*]] = 0 to 4 {
// CHECK-NEXT:      affine.for %[[J:.*]] = 0 to 64 step 8 {
// CHECK-NEXT:        %[[XV:.*]] = vector.transfer_read %[[X]][%[[I]], %[[J]]], %{{.*}} : memref<4x64xf32>, vector<8xf32>
// CHECK-NEXT:        %[[BV:.*]] = vector.transfer_read %[[B]][%[[J]]], %{{.*}} : memref<64xf32>, vector<8xf32>
// CHECK-NEXT:        %[[SUM:.*]] = arith.addf %[[XV]], %[[BV]] : vector<8xf32>
// CHECK-NEXT:        %[[MAX:.*]] = arith.maximumf %[[SUM]], %[[ZERO]] : vector<8xf32>
// CHECK-NEXT:        vector.transfer_write %[[MAX]], %[[OUT]][%[[I]], %[[J]]] : vector<8xf32>, memref<4x64xf32>
func.func @add_relu(%arg0: memref<4x64xf32>, %arg1: memref<64xf32>, %arg2: memref<4x64xf32>) {
  %cst = arith.constant 0.000000e+00 : f32
  affine.for %i = 0 to 4 {
    affine.for %j = 0 to 64 {
      %0 = affine.load %arg0[%i, %j] : memref<4x64xf32>
      %1 = affine.load %arg1[%j] : memref<64xf32>
      %2 = arith.addf %0, %1 : f32
      %3 = arith.maximumf %2, %cst : f32
      affine.store %3, %arg2[%i, %j] : memref<4x64xf32>
    }
  }
  return
}

// A trip count that is not a multiple of 8 still vectorizes: the transfers
// are not marked in_bounds, so the last, partial vector is masked later.
// CHECK-LABEL: func.func @ragged(
// CHECK:         affine.for %[[I:.*]] = 0 to 20 step 8 {
// CHECK-NEXT:      %[[V:.*]] = vector.transfer_read %{{.*}}[%[[I]]], %{{.*}} : memref<20xf32>, vector<8xf32>
// CHECK-NEXT:      %[[E:.*]] = math.sqrt %[[V]] : vector<8xf32>
// CHECK-NEXT:      vector.transfer_write %[[E]], %{{.*}}[%[[I]]] : vector<8xf32>, memref<20xf32>
func.func @ragged(%arg0: memref<20xf32>, %arg1: memref<20xf32>) {
  affine.for %i = 0 to 20 {
    %0 = affine.load %arg0[%i] : memref<20xf32>
    %1 = math.sqrt %0 : f32
    affine.store %1, %arg1[%i] : memref<20xf32>
  }
  return
}
