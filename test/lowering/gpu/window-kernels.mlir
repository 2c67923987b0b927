// RUN: %PYTHON -m twintrack.compiler.passes "gpu-window-kernels{neighbours=1}" %s | FileCheck %s
// RUN: %PYTHON -m twintrack.compiler.passes "gpu-window-kernels{neighbours=2}" %s | FileCheck %s --check-prefix=PAIRS

// A depthwise 3x3 convolution computing channels-last (loops n·h, w, c, then
// the window; its zero padding read in place: clamped indices, a select)
// and the elementwise op alone reading its f32 result (a per-channel scale,
// the narrowing to f16) become one gpu.launch: 6·6·16 / 8 = 72 threads, each
// computing 8 neighbouring channels over the window, unrolled. The block
// first copies the weight into shared memory with its channels innermost
// (144 elements: one guarded element a thread);
// then the input and the weight are one 16-byte vector each a window
// position, the scale one vector, the result one vector store; the f32
// buffer goes.
#w = affine_map<(d0, d1, d2, d3, d4) -> (d2, d3, d4)>
#out = affine_map<(d0, d1, d2, d3, d4) -> (d0, d1, d2)>
#pad = affine_map<()[s0, s1] -> (s0 + s1 - 1)>
#cl = affine_map<(d0, d1, d2) -> (d1, d2, d0)>
#ch = affine_map<(d0, d1, d2) -> (d0)>
// CHECK-LABEL: func.func @depthwise(
// CHECK-SAME:    %[[X:[^:]*]]: memref<1x6x6x16xf16>, %[[W:[^:]*]]: memref<16x3x3xf16>, %[[S:[^:]*]]: memref<16xf16>, %[[Y:[^:]*]]: memref<6x6x16xf16>)
// CHECK-NOT:     memref.alloc
// CHECK:         gpu.launch {{.*}} in (%{{.*}} = %c1, {{.*}} threads({{.*}}) in (%{{.*}} = %c256, {{.*}} module(@forward_window_kernel_0) function(@forward_window_kernel_0) workgroup(%[[COPY:.*]] : memref<3x3x16xf16, #gpu.address_space<workgroup>>)
// CHECK:           scf.if
// CHECK:             memref.load %[[W]]
// CHECK:             memref.store %{{.*}}, %[[COPY]]
// CHECK:           gpu.barrier
// CHECK-NOT:       scf.for
// CHECK-COUNT-18:  vector.load %{{.*}} {alignment = 16 : i64} : memref<{{3x3x16xf16, #gpu.address_space<workgroup>|1x6x6x16xf16}}>, vector<8xf16>
// CHECK-NOT:       memref.load
// CHECK:           vector.load %[[S]][%{{.*}}] {alignment = 16 : i64} : memref<16xf16>, vector<8xf16>
// CHECK:           vector.store %{{.*}}, %[[Y]][%{{.*}}, %{{.*}}, %{{.*}}] {alignment = 16 : i64, twintrack.kernel_path = "window 3x3 taps, 8 lanes"} : memref<6x6x16xf16>, vector<8xf16>
// CHECK:           gpu.terminator
// CHECK-NOT:     linalg.
// CHECK:         return

// With neighbours=2 a thread computes two neighbouring output columns
// (36 threads): both sums, then both epilogues, then the two stores.
// PAIRS-LABEL: func.func @depthwise(
// PAIRS:         gpu.launch {{.*}} in (%{{.*}} = %c1, {{.*}} module(@forward_window_kernel_0)
// PAIRS-COUNT-36:  vector.load %{{.*}} {alignment = 16 : i64} : memref<{{3x3x16xf16, #gpu.address_space<workgroup>|1x6x6x16xf16}}>, vector<8xf16>
// PAIRS-COUNT-2:   vector.load %{{.*}} : memref<16xf16>, vector<8xf16>
// PAIRS-COUNT-2:   vector.store {{.*}} {alignment = 16 : i64, twintrack.kernel_path = "window 3x3 taps, 8 lanes x 2"} : memref<6x6x16xf16>, vector<8xf16>
// PAIRS:           gpu.terminator
func.func @depthwise(%x: memref<1x6x6x16xf16>, %w: memref<16x3x3xf16>, %s: memref<16xf16>, %y: memref<6x6x16xf16>) {
  %c0 = arith.constant 0 : index
  %c5 = arith.constant 5 : index
  %zero = arith.constant 0.0 : f32
  %zero_h = arith.constant 0.0 : f16
  %acc = memref.alloc() : memref<6x6x16xf32>
  linalg.fill {twintrack.dispatch = "reduction_0", twintrack.dispatch_kind = #twintrack.dispatch_kind<reduction>} ins(%zero : f32) outs(%acc : memref<6x6x16xf32>)
  linalg.generic {indexing_maps = [#w, #out], iterator_types = ["parallel", "parallel", "parallel", "reduction", "reduction"]}
      ins(%w : memref<16x3x3xf16>) outs(%acc : memref<6x6x16xf32>)
      attrs = {twintrack.dispatch = "reduction_0", twintrack.dispatch_kind = #twintrack.dispatch_kind<reduction>} {
  ^bb0(%tap: f16, %total: f32):
    %h = linalg.index 0 : index
    %col = linalg.index 1 : index
    %c = linalg.index 2 : index
    %kh = linalg.index 3 : index
    %kw = linalg.index 4 : index
    %ih = affine.apply #pad()[%h, %kh]
    %ih_low = arith.cmpi sge, %ih, %c0 : index
    %ih_high = arith.cmpi sle, %ih, %c5 : index
    %ih_in = arith.andi %ih_low, %ih_high : i1
    %ih_max = arith.maxsi %ih, %c0 : index
    %ih_clamped = arith.minsi %ih_max, %c5 : index
    %iw = affine.apply #pad()[%col, %kw]
    %iw_low = arith.cmpi sge, %iw, %c0 : index
    %iw_high = arith.cmpi sle, %iw, %c5 : index
    %iw_in = arith.andi %iw_low, %iw_high : i1
    %inside = arith.andi %ih_in, %iw_in : i1
    %iw_max = arith.maxsi %iw, %c0 : index
    %iw_clamped = arith.minsi %iw_max, %c5 : index
    %value = memref.load %x[%c0, %ih_clamped, %iw_clamped, %c] : memref<1x6x6x16xf16>
    %padded = arith.select %inside, %value, %zero_h : f16
    %wide = arith.extf %padded : f16 to f32
    %weight = arith.extf %tap : f16 to f32
    %product = arith.mulf %wide, %weight : f32
    %sum = arith.addf %total, %product : f32
    linalg.yield %sum : f32
  }
  linalg.generic {indexing_maps = [#cl, #ch, #cl], iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%acc, %s : memref<6x6x16xf32>, memref<16xf16>) outs(%y : memref<6x6x16xf16>)
      attrs = {twintrack.dispatch = "elementwise_1", twintrack.dispatch_kind = #twintrack.dispatch_kind<elementwise>} {
  ^bb0(%a: f32, %scale: f16, %o: f16):
    %scale_wide = arith.extf %scale : f16 to f32
    %scaled = arith.mulf %a, %scale_wide : f32
    %narrow = arith.truncf %scaled : f32 to f16
    linalg.yield %narrow : f16
  }
  memref.dealloc %acc : memref<6x6x16xf32>
  return
}

// A small reduction along the rows' last dim (a sum of 4) loads nothing
// along the lanes (the output's last dim): it stays for the generic path.
#rows = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
#sums = affine_map<(d0, d1, d2) -> (d0, d1)>
// CHECK-LABEL: func.func @short_rows(
// CHECK-NOT:     gpu.launch
// CHECK:         linalg.generic
func.func @short_rows(%x: memref<8x16x4xf32>, %y: memref<8x16xf32>) {
  %zero = arith.constant 0.0 : f32
  linalg.fill {twintrack.dispatch = "reduction_0", twintrack.dispatch_kind = #twintrack.dispatch_kind<reduction>} ins(%zero : f32) outs(%y : memref<8x16xf32>)
  linalg.generic {indexing_maps = [#rows, #sums], iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%x : memref<8x16x4xf32>) outs(%y : memref<8x16xf32>)
      attrs = {twintrack.dispatch = "reduction_0", twintrack.dispatch_kind = #twintrack.dispatch_kind<reduction>} {
  ^bb0(%in: f32, %total: f32):
    %sum = arith.addf %total, %in : f32
    linalg.yield %sum : f32
  }
  return
}
