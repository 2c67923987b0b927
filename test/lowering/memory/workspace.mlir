// RUN: %stage-memory %s | FileCheck %s

// The temporaries every call allocates become views of one private workspace
// global at planned offsets: %a and %b are live together (distinct bytes, the
// second at a 64-byte boundary); %c is allocated after %a is freed and takes
// its bytes. The allocation inside the loop keeps malloc, and so does the
// bool buffer (widen-bools makes it bytes later).
// CHECK:       memref.global "private" @twintrack_workspace : memref<192xi8> {alignment = 64 : i64}
// CHECK-LABEL: func.func @temporaries(
// CHECK-SAME:    attributes {twintrack.workspace_bytes = 192 : i64}
// CHECK:         %[[W:.*]] = memref.get_global @twintrack_workspace : memref<192xi8>
// CHECK:         %[[A:.*]] = memref.view %[[W]][%c0{{.*}}][] : memref<192xi8> to memref<10xf32>
// CHECK:         %[[B:.*]] = memref.view %[[W]][%c64{{.*}}][] : memref<192xi8> to memref<32xf32>
// CHECK:         %[[C:.*]] = memref.view %[[W]][%c0{{.*}}][] : memref<192xi8> to memref<16xf32>
// CHECK:         scf.for
// CHECK:           memref.alloc() : memref<4xf32>
// CHECK:         memref.alloc() : memref<8xi1>
// CHECK-NOT:     memref.dealloc %[[A]]
// CHECK-NOT:     memref.dealloc %[[B]]
// CHECK-NOT:     memref.dealloc %[[C]]
func.func @temporaries(%x: memref<10xf32>, %y: memref<32xf32>, %z: memref<16xf32>) {
  %a = memref.alloc() : memref<10xf32>
  %b = memref.alloc() : memref<32xf32>
  memref.copy %x, %a : memref<10xf32> to memref<10xf32>
  memref.copy %y, %b : memref<32xf32> to memref<32xf32>
  memref.dealloc %a : memref<10xf32>
  %c = memref.alloc() : memref<16xf32>
  memref.copy %z, %c : memref<16xf32> to memref<16xf32>
  memref.dealloc %b : memref<32xf32>
  memref.dealloc %c : memref<16xf32>
  %lo = arith.constant 0 : index
  %hi = arith.constant 4 : index
  %one = arith.constant 1 : index
  scf.for %i = %lo to %hi step %one {
    %d = memref.alloc() : memref<4xf32>
    memref.dealloc %d : memref<4xf32>
  }
  %bools = memref.alloc() : memref<8xi1>
  memref.dealloc %bools : memref<8xi1>
  return
}
