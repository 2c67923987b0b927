// RUN: %stage-parameter-prologue %s | FileCheck %s

// The parameter-prologue stage: an allocation written only by work on the
// state (the twintrack.state_arguments arguments the program never writes)
// and constants is kept; the entry names the arguments it reads.

#id = affine_map<(d0, d1) -> (d0, d1)>
#row = affine_map<(d0, d1) -> (d1)>
#a = affine_map<(d0, d1, d2) -> (d0, d2)>
#b = affine_map<(d0, d1, d2) -> (d1, d2)>
#c = affine_map<(d0, d1, d2) -> (d0, d1)>

// A weight rounded for tf32 and a bias added to it: both only on the
// state, so both allocations are kept; the matmul reads the input, its
// output is not. The buffer %arg2 is written in place by the program (a
// running statistic): work reading it is no state-only work, and it is no root.
// CHECK-LABEL: func.func @weights
// CHECK-SAME:    twintrack.kept_roots = array<i64: 0, 1>
// CHECK:         %[[ROUNDED:.*]] = memref.alloc() {{{.*}}twintrack.kept{{.*}}}
// CHECK:         %[[BIASED:.*]] = memref.alloc() {{{.*}}twintrack.kept{{.*}}}
// CHECK:         %[[STAT:.*]] = memref.alloc() {alignment = 64 : i64} : memref<4x4xf32>
// CHECK:         %[[OUT:.*]] = memref.alloc() {alignment = 64 : i64} : memref<8x4xf32>
func.func @weights(%w: memref<4x4xf32>, %bias: memref<4xf32>, %running: memref<4x4xf32>,
                   %x: memref<8x4xf32>, %y: memref<8x4xf32>) attributes {twintrack.state_arguments = array<i64: 0, 1, 2>} {
  %zero = arith.constant 0.0 : f32
  %rounded = memref.alloc() {alignment = 64 : i64} : memref<4x4xf32>
  linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%w : memref<4x4xf32>) outs(%rounded : memref<4x4xf32>) attrs = {twintrack.dispatch = "elementwise_0"} {
  ^bb0(%in: f32, %out: f32):
    linalg.yield %in : f32
  }
  %biased = memref.alloc() {alignment = 64 : i64} : memref<4x4xf32>
  linalg.generic {indexing_maps = [#id, #row, #id], iterator_types = ["parallel", "parallel"]}
      ins(%rounded, %bias : memref<4x4xf32>, memref<4xf32>) outs(%biased : memref<4x4xf32>) {
  ^bb0(%in: f32, %b: f32, %out: f32):
    %sum = arith.addf %in, %b : f32
    linalg.yield %sum : f32
  }
  %stat = memref.alloc() {alignment = 64 : i64} : memref<4x4xf32>
  linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%running : memref<4x4xf32>) outs(%stat : memref<4x4xf32>) {
  ^bb0(%in: f32, %out: f32):
    linalg.yield %in : f32
  }
  memref.copy %biased, %running : memref<4x4xf32> to memref<4x4xf32>
  %out = memref.alloc() {alignment = 64 : i64} : memref<8x4xf32>
  linalg.fill ins(%zero : f32) outs(%out : memref<8x4xf32>)
  linalg.matmul indexing_maps = [#a, #b, #c] ins(%x, %biased : memref<8x4xf32>, memref<4x4xf32>)
      outs(%out : memref<8x4xf32>)
  memref.copy %out, %y : memref<8x4xf32> to memref<8x4xf32>
  memref.dealloc %rounded : memref<4x4xf32>
  memref.dealloc %biased : memref<4x4xf32>
  memref.dealloc %stat : memref<4x4xf32>
  memref.dealloc %out : memref<8x4xf32>
  return
}

// One dispatch mixing state-only work with work on an input is never
// state-only: its kernel would do both on every call.
// CHECK-LABEL: func.func @mixed_dispatch
// CHECK-NOT:     twintrack.kept
// CHECK:         return
func.func @mixed_dispatch(%w: memref<4xf32>, %x: memref<4xf32>, %y: memref<4xf32>)
    attributes {twintrack.state_arguments = array<i64: 0>} {
  %scaled = memref.alloc() : memref<4xf32>
  linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>], iterator_types = ["parallel"]}
      ins(%w : memref<4xf32>) outs(%scaled : memref<4xf32>) attrs = {twintrack.dispatch = "elementwise_7"} {
  ^bb0(%in: f32, %out: f32):
    %twice = arith.addf %in, %in : f32
    linalg.yield %twice : f32
  }
  linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>],
      iterator_types = ["parallel"]}
      ins(%scaled, %x : memref<4xf32>, memref<4xf32>) outs(%y : memref<4xf32>) attrs = {twintrack.dispatch = "elementwise_7"} {
  ^bb0(%a: f32, %b: f32, %out: f32):
    %sum = arith.addf %a, %b : f32
    linalg.yield %sum : f32
  }
  memref.dealloc %scaled : memref<4xf32>
  return
}

// No state marked (an entry the frontend did not import): nothing kept.
// CHECK-LABEL: func.func @unmarked
// CHECK-NOT:     twintrack.kept
// CHECK:         return
func.func @unmarked(%w: memref<4xf32>, %y: memref<4xf32>) {
  %copy = memref.alloc() : memref<4xf32>
  memref.copy %w, %copy : memref<4xf32> to memref<4xf32>
  memref.copy %copy, %y : memref<4xf32> to memref<4xf32>
  memref.dealloc %copy : memref<4xf32>
  return
}

// State among the inputs (torch.compile hands parameters over as inputs,
// in any order): the marked argument %w is a root, the input %x is not.
// CHECK-LABEL: func.func @state_after_an_input
// CHECK-SAME:    twintrack.kept_roots = array<i64: 1>
// CHECK:         memref.alloc() {{{.*}}twintrack.kept{{.*}}}
func.func @state_after_an_input(%x: memref<4xf32>, %w: memref<4xf32>, %y: memref<4xf32>)
    attributes {twintrack.state_arguments = array<i64: 1>} {
  %copy = memref.alloc() : memref<4xf32>
  memref.copy %w, %copy : memref<4xf32> to memref<4xf32>
  linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>],
      iterator_types = ["parallel"]}
      ins(%copy, %x : memref<4xf32>, memref<4xf32>) outs(%y : memref<4xf32>) attrs = {twintrack.dispatch = "elementwise_8"} {
  ^bb0(%a: f32, %b: f32, %out: f32):
    %sum = arith.addf %a, %b : f32
    linalg.yield %sum : f32
  }
  memref.dealloc %copy : memref<4xf32>
  return
}
