// RUN: %stage-functions %s | FileCheck %s

// outline-loop-nests: each loop nest at the top of a CPU function becomes a
// call of a private function LLVM may not inline (LLVM compiles a model's
// hundreds of nests apart, not as one function); the constants a nest reads
// are cloned in, what else it reads is an argument; a nest equal to an
// earlier one but for its buffers calls the earlier one's function; the
// function that held them is inlined into its C-interface wrapper, which
// public functions alone get (public-c-wrappers): nothing calls a nest's.

// CHECK:       func.func private @forward_nest_0(%[[X:.*]]: memref<8xf32>, %[[S:.*]]: f32, %[[Y:.*]]: memref<8xf32>)
// CHECK-SAME:      attributes {passthrough = ["noinline"]}
// CHECK-DAG:     arith.constant 0 : index
// CHECK-DAG:     arith.constant 8 : index
// CHECK:         scf.for
// CHECK:           memref.load %[[X]]
// CHECK:           arith.mulf %{{.*}}, %[[S]]
// CHECK:           memref.store %{{.*}}, %[[Y]]
// CHECK:         return
// The second nest is the first one's on other buffers: no function of its own.
// CHECK-NOT:   func.func private @forward_nest_1(
// CHECK:       func.func private @forward_nest_2(
// CHECK:         scf.for {{.*}} iter_args
// CHECK:         return %{{.*}} : f32
// CHECK-LABEL: func.func @forward(
// CHECK-SAME:      attributes {llvm.emit_c_interface, passthrough = ["alwaysinline"]}
// CHECK:         %[[T:.*]] = memref.alloc()
// CHECK:         call @forward_nest_0(%arg0, %arg2, %[[T]])
// CHECK:         call @forward_nest_0(%[[T]], %arg2, %arg1)
// CHECK:         %[[SUM:.*]] = call @forward_nest_2(%arg1)
// CHECK:         return %[[SUM]]
func.func @forward(%x: memref<8xf32>, %y: memref<8xf32>, %s: f32) -> f32 {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c8 = arith.constant 8 : index
  %zero = arith.constant 0.0 : f32
  %t = memref.alloc() : memref<8xf32>
  scf.for %i = %c0 to %c8 step %c1 {
    %v = memref.load %x[%i] : memref<8xf32>
    %w = arith.mulf %v, %s : f32
    memref.store %w, %t[%i] : memref<8xf32>
  }
  scf.for %i = %c0 to %c8 step %c1 {
    %v = memref.load %t[%i] : memref<8xf32>
    %w = arith.mulf %v, %s : f32
    memref.store %w, %y[%i] : memref<8xf32>
  }
  %sum = scf.for %i = %c0 to %c8 step %c1 iter_args(%acc = %zero) -> (f32) {
    %v = memref.load %y[%i] : memref<8xf32>
    %next = arith.addf %acc, %v : f32
    scf.yield %next : f32
  }
  memref.dealloc %t : memref<8xf32>
  return %sum : f32
}
