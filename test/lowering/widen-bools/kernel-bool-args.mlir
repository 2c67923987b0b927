// RUN: %stage-widen-bools %s | FileCheck %s

// A kernel outlined before widen-bools (outline-kernels ends each GPU kernel
// stage) takes its bool buffers as bytes too: its arguments and its
// function type, the workgroup buffers after the arguments left out of it.

// CHECK-LABEL: func.func @forward(
// CHECK-SAME:    %{{.*}}: memref<4xi8>
// CHECK:         gpu.launch_func @masked::@masked {{.*}} args(%{{.*}} : memref<4xi8>, %{{.*}} : memref<4xf32>)
// CHECK:       gpu.func @masked(%[[MASK:.*]]: memref<4xi8>, %[[OUT:.*]]: memref<4xf32>) workgroup(%{{.*}} : memref<4xf32, #gpu.address_space<workgroup>>) kernel
// CHECK:         %[[BYTE:.*]] = memref.load %[[MASK]][%{{.*}}] : memref<4xi8>
// CHECK-NEXT:    %[[BIT:.*]] = arith.trunci %[[BYTE]] : i8 to i1
// CHECK:         arith.select %[[BIT]],
module attributes {gpu.container_module} {
  func.func @forward(%mask: memref<4xi1>, %out: memref<4xf32>) {
    %c1 = arith.constant 1 : index
    %c4 = arith.constant 4 : index
    gpu.launch_func @masked::@masked blocks in (%c1, %c1, %c1) threads in (%c4, %c1, %c1)
        args(%mask : memref<4xi1>, %out : memref<4xf32>)
    return
  }
  gpu.module @masked {
    gpu.func @masked(%mask: memref<4xi1>, %out: memref<4xf32>)
        workgroup(%staged : memref<4xf32, #gpu.address_space<workgroup>>) kernel {
      %t = gpu.thread_id x
      %bit = memref.load %mask[%t] : memref<4xi1>
      %one = arith.constant 1.0 : f32
      %zero = arith.constant 0.0 : f32
      %value = arith.select %bit, %one, %zero : f32
      memref.store %value, %staged[%t] : memref<4xf32, #gpu.address_space<workgroup>>
      %again = memref.load %staged[%t] : memref<4xf32, #gpu.address_space<workgroup>>
      memref.store %again, %out[%t] : memref<4xf32>
      gpu.return
    }
  }
}
