// RUN: %PYTHON -m twintrack.compiler.passes concat-in-place %s | FileCheck %s

// Two elementwise ops' results copied into the halves of a concatenation:
// each op writes its half itself, seen through the inverse of the reshape
// between its allocation and its copy, and the copies go. The target's
// allocation moves up to before the first piece's.
// CHECK-LABEL: func.func @halves(
// CHECK:         %[[TARGET:.*]] = memref.alloc() {{.*}} : memref<1x4x64x64xf16>
// CHECK:         %[[LOW:.*]] = memref.subview %[[TARGET]][0, 0, 0, 0] [1, 4, 64, 32] [1, 1, 1, 1]
// CHECK:         %[[LOW3:.*]] = memref.collapse_shape %[[LOW]] {{\[\[}}0, 1], [2], [3]] : memref<1x4x64x32xf16, strided<[16384, 4096, 64, 1]>> into memref<4x64x32xf16, strided<[4096, 64, 1]>>
// CHECK:         linalg.generic {{.*}} outs(%[[LOW3]] :
// CHECK:         %[[HIGH:.*]] = memref.subview %[[TARGET]][0, 0, 0, 32] [1, 4, 64, 32] [1, 1, 1, 1]
// CHECK:         %[[HIGH3:.*]] = memref.collapse_shape %[[HIGH]] {{.*}} into memref<4x64x32xf16, strided<[4096, 64, 1], offset: 32>>
// CHECK:         linalg.generic {{.*}} outs(%[[HIGH3]] :
// CHECK-NOT:     memref.copy
// CHECK:         linalg.generic {{.*}} ins(%[[TARGET]] :
#id3 = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
#id4 = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>
func.func @halves(%x: memref<4x64x32xf16>, %out: memref<1x4x64x64xf16>) {
  %a = memref.alloc() {alignment = 64 : i64} : memref<4x64x32xf16>
  linalg.generic {indexing_maps = [#id3, #id3], iterator_types = ["parallel", "parallel", "parallel"]} ins(%x : memref<4x64x32xf16>) outs(%a : memref<4x64x32xf16>) attrs = {twintrack.dispatch = "elementwise_1", twintrack.dispatch_kind = #twintrack.dispatch_kind<elementwise>} {
  ^bb0(%in: f16, %o: f16):
    %n = arith.negf %in : f16
    linalg.yield %n : f16
  }
  %b = memref.alloc() {alignment = 64 : i64} : memref<4x64x32xf16>
  linalg.generic {indexing_maps = [#id3, #id3], iterator_types = ["parallel", "parallel", "parallel"]} ins(%x : memref<4x64x32xf16>) outs(%b : memref<4x64x32xf16>) attrs = {twintrack.dispatch = "elementwise_2", twintrack.dispatch_kind = #twintrack.dispatch_kind<elementwise>} {
  ^bb0(%in: f16, %o: f16):
    %d = arith.addf %in, %in : f16
    linalg.yield %d : f16
  }
  %a4 = memref.expand_shape %a [[0, 1], [2], [3]] output_shape [1, 4, 64, 32] : memref<4x64x32xf16> into memref<1x4x64x32xf16>
  %b4 = memref.expand_shape %b [[0, 1], [2], [3]] output_shape [1, 4, 64, 32] : memref<4x64x32xf16> into memref<1x4x64x32xf16>
  %cat = memref.alloc() {alignment = 64 : i64} : memref<1x4x64x64xf16>
  %low = memref.subview %cat[0, 0, 0, 0] [1, 4, 64, 32] [1, 1, 1, 1] : memref<1x4x64x64xf16> to memref<1x4x64x32xf16, strided<[16384, 4096, 64, 1]>>
  memref.copy %a4, %low : memref<1x4x64x32xf16> to memref<1x4x64x32xf16, strided<[16384, 4096, 64, 1]>>
  %high = memref.subview %cat[0, 0, 0, 32] [1, 4, 64, 32] [1, 1, 1, 1] : memref<1x4x64x64xf16> to memref<1x4x64x32xf16, strided<[16384, 4096, 64, 1], offset: 32>>
  memref.copy %b4, %high : memref<1x4x64x32xf16> to memref<1x4x64x32xf16, strided<[16384, 4096, 64, 1], offset: 32>>
  memref.dealloc %a : memref<4x64x32xf16>
  memref.dealloc %b : memref<4x64x32xf16>
  linalg.generic {indexing_maps = [#id4, #id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%cat : memref<1x4x64x64xf16>) outs(%out : memref<1x4x64x64xf16>) attrs = {twintrack.dispatch = "elementwise_3", twintrack.dispatch_kind = #twintrack.dispatch_kind<elementwise>} {
  ^bb0(%in: f16, %o: f16):
    linalg.yield %in : f16
  }
  memref.dealloc %cat : memref<1x4x64x64xf16>
  return
}

// A piece read by another op after its copy keeps its buffer and its copy;
// so does a piece whose target is read before the copy.
// CHECK-LABEL: func.func @kept(
// CHECK-COUNT-2: memref.copy
func.func @kept(%x: memref<4x64x32xf16>, %y: memref<4x64x32xf16>, %out: memref<4x64x64xf16>) {
  %a = memref.alloc() {alignment = 64 : i64} : memref<4x64x32xf16>
  linalg.generic {indexing_maps = [#id3, #id3], iterator_types = ["parallel", "parallel", "parallel"]} ins(%x : memref<4x64x32xf16>) outs(%a : memref<4x64x32xf16>) attrs = {twintrack.dispatch = "elementwise_1", twintrack.dispatch_kind = #twintrack.dispatch_kind<elementwise>} {
  ^bb0(%in: f16, %o: f16):
    %n = arith.negf %in : f16
    linalg.yield %n : f16
  }
  %low = memref.subview %out[0, 0, 0] [4, 64, 32] [1, 1, 1] : memref<4x64x64xf16> to memref<4x64x32xf16, strided<[4096, 64, 1]>>
  memref.copy %a, %low : memref<4x64x32xf16> to memref<4x64x32xf16, strided<[4096, 64, 1]>>
  linalg.generic {indexing_maps = [#id3, #id3], iterator_types = ["parallel", "parallel", "parallel"]} ins(%a : memref<4x64x32xf16>) outs(%y : memref<4x64x32xf16>) attrs = {twintrack.dispatch = "elementwise_2", twintrack.dispatch_kind = #twintrack.dispatch_kind<elementwise>} {
  ^bb0(%in: f16, %o: f16):
    linalg.yield %in : f16
  }
  memref.dealloc %a : memref<4x64x32xf16>
  %b = memref.alloc() {alignment = 64 : i64} : memref<4x64x32xf16>
  linalg.generic {indexing_maps = [#id3, #id3], iterator_types = ["parallel", "parallel", "parallel"]} ins(%x : memref<4x64x32xf16>) outs(%b : memref<4x64x32xf16>) attrs = {twintrack.dispatch = "elementwise_3", twintrack.dispatch_kind = #twintrack.dispatch_kind<elementwise>} {
  ^bb0(%in: f16, %o: f16):
    %n = arith.negf %in : f16
    linalg.yield %n : f16
  }
  linalg.generic {indexing_maps = [#id3, #id3], iterator_types = ["parallel", "parallel", "parallel"]} ins(%low : memref<4x64x32xf16, strided<[4096, 64, 1]>>) outs(%y : memref<4x64x32xf16>) attrs = {twintrack.dispatch = "elementwise_4", twintrack.dispatch_kind = #twintrack.dispatch_kind<elementwise>} {
  ^bb0(%in: f16, %o: f16):
    linalg.yield %in : f16
  }
  %high = memref.subview %out[0, 0, 32] [4, 64, 32] [1, 1, 1] : memref<4x64x64xf16> to memref<4x64x32xf16, strided<[4096, 64, 1], offset: 32>>
  memref.copy %b, %high : memref<4x64x32xf16> to memref<4x64x32xf16, strided<[4096, 64, 1], offset: 32>>
  memref.dealloc %b : memref<4x64x32xf16>
  return
}
