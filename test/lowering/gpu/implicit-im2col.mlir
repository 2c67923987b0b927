// RUN: %PYTHON -m twintrack.compiler.passes 'gpu-matmul-kernels{arch=sm_90a}' %s | FileCheck %s

// A convolution's matmul reads its patches (conv-as-matmul's im2col) from
// the convolution's input: the windows op that would write them goes, and
// each 16-byte copy of A reads 8 channels of the input where the window
// puts them, zero-filled (source size 0) where the window hangs over the
// padding (an implicit im2col, twintrack.compiler.kernels.window_read).

// Padded 3x3 windows of a channels-last input (fold-patch-padding's gather):
// the copies of A read the input at the window's clamped place, their size
// 8 where the window is inside it, else 0.
// CHECK-LABEL: func.func @padded(
// CHECK-SAME:    %[[X:.*]]: memref<2x8x8x64xf16>, %[[W:.*]]: memref<64x576xf16>
// CHECK-NOT:     memref.alloc
// CHECK-NOT:     linalg.generic
// CHECK:         gpu.launch
// CHECK:           %[[ROW_INSIDE:.*]] = arith.andi %{{.*}}, %{{.*}} : i1
// CHECK:           %[[COL_INSIDE:.*]] = arith.andi %{{.*}}, %{{.*}} : i1
// CHECK-NEXT:      %[[INSIDE:.*]] = arith.andi %[[ROW_INSIDE]], %[[COL_INSIDE]] : i1
// CHECK:           %[[SIZE:.*]] = arith.select %[[INSIDE]], %c8, %{{.*}} : index
// CHECK:           nvgpu.device_async_copy %[[X]][%{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}], %{{.*}}[%{{.*}}], 8, %[[SIZE]] {bypassL1} : memref<2x8x8x64xf16>
// CHECK:           nvgpu.device_async_copy %[[W]]
// CHECK:         } {twintrack.kernel_path = "wgmma-matmul {{.*}} implicit im2col TMA stores"}
// CHECK-NOT:     memref.dealloc
#id6 = affine_map<(d0, d1, d2, d3, d4, d5) -> (d0, d1, d2, d3, d4, d5)>
#shifted = affine_map<()[s0, s1] -> (s0 + s1 - 1)>
#lhs = affine_map<(d0, d1, d2) -> (d0, d2)>
#rhs = affine_map<(d0, d1, d2) -> (d1, d2)>
#out = affine_map<(d0, d1, d2) -> (d0, d1)>
#strided = affine_map<(d0, d1, d2, d3, d4, d5) -> (d0, d1 * 2, d2 * 2, d5)>
#nchw = affine_map<(d0, d1, d2, d3, d4, d5) -> (d0, d5, d1 + d3, d2 + d4)>
#nhwc = affine_map<(d0, d1, d2, d3, d4, d5) -> (d0, d1 + d3, d2 + d4, d5)>
#id4 = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>
#strided4 = affine_map<(d0, d1, d2, d3) -> (d0, d1 * 2, d2 * 2, d3)>

func.func @padded(%x: memref<2x8x8x64xf16>, %w: memref<64x576xf16>, %c: memref<128x64xf32>) {
  %zero = arith.constant 0.0 : f32
  %c0 = arith.constant 0 : index
  %c7 = arith.constant 7 : index
  %patches = memref.alloc() : memref<2x8x8x3x3x64xf16>
  linalg.generic {indexing_maps = [#id6], iterator_types = ["parallel", "parallel", "parallel", "parallel", "parallel", "parallel"]} outs(%patches : memref<2x8x8x3x3x64xf16>) {
  ^bb0(%o: f16):
    %n = linalg.index 0 : index
    %oh = linalg.index 1 : index
    %ow = linalg.index 2 : index
    %kh = linalg.index 3 : index
    %kw = linalg.index 4 : index
    %ch = linalg.index 5 : index
    %h = affine.apply #shifted()[%oh, %kh]
    %h0 = arith.cmpi sge, %h, %c0 : index
    %h1 = arith.cmpi sle, %h, %c7 : index
    %hin = arith.andi %h0, %h1 : i1
    %hlo = arith.maxsi %h, %c0 : index
    %hc = arith.minsi %hlo, %c7 : index
    %v = affine.apply #shifted()[%ow, %kw]
    %v0 = arith.cmpi sge, %v, %c0 : index
    %v1 = arith.cmpi sle, %v, %c7 : index
    %vin = arith.andi %v0, %v1 : i1
    %in = arith.andi %hin, %vin : i1
    %vlo = arith.maxsi %v, %c0 : index
    %vc = arith.minsi %vlo, %c7 : index
    %e = memref.load %x[%n, %hc, %vc, %ch] : memref<2x8x8x64xf16>
    %wide = arith.extf %e : f16 to f32
    %s = arith.select %in, %wide, %zero : f32
    %r = arith.truncf %s : f32 to f16
    linalg.yield %r : f16
  }
  %a = memref.collapse_shape %patches [[0, 1, 2], [3, 4, 5]] : memref<2x8x8x3x3x64xf16> into memref<128x576xf16>
  linalg.fill ins(%zero : f32) outs(%c : memref<128x64xf32>)
  linalg.matmul indexing_maps = [#lhs, #rhs, #out] ins(%a, %w : memref<128x576xf16>, memref<64x576xf16>) outs(%c : memref<128x64xf32>)
  memref.dealloc %patches : memref<2x8x8x3x3x64xf16>
  return
}

// The same windows over ResNet's 14x14 stage at batch 64 (256 channels):
// the TMA kernel takes the matmul and reads A by TMA's im2col mode. The
// windows' geometry (stride 1, dilation 1, padding 1, read off the gather)
// becomes an im2col tensor map of X: pixel box corners (-1, -1) and
// (-1, -1), 128 pixels of 64 channels a copy. Its producer issues one copy
// of A a K step: the first window's corner and the step's tap as offsets.
// No cp.async, no fence: TMA writes through the async proxy.
// CHECK-LABEL: func.func @padded_persistent(
// CHECK-SAME:    %[[X:.*]]: memref<64x14x14x256xf16>
// CHECK-NOT:     memref.alloc
// CHECK:         nvgpu.tma.create.descriptor %{{.*}} box[%{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}] {twintrack.im2col = {channels = 64 : i64, element_strides = array<i64: 1, 1, 1, 1>, lower = array<i64: -1, -1>, pixels = 128 : i64, upper = array<i64: -1, -1>}} : memref<*xf16>
// CHECK:         gpu.launch
// CHECK-NOT:       nvvm.fence.proxy {kind = #nvvm.proxy_kind<async.shared>
// CHECK-NOT:       nvgpu.device_async_copy
// CHECK:           nvvm.wgmma.mma_async
// CHECK:           nvvm.cp.async.bulk.tensor.shared.cluster.global %{{.*}}, %{{.*}}, %{{.*}}, box[%{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}] im2col[%{{.*}}, %{{.*}}] {mode = #nvvm.tma_load_mode<im2col>}
// CHECK:           nvvm.cp.async.bulk.tensor.shared.cluster.global %{{.*}}, %{{.*}}, %{{.*}}, box[%{{.*}}, %{{.*}}] :
// CHECK:         } {twintrack.kernel_path = "tma-wgmma-matmul {{.*}}/persistent implicit im2col by TMA's im2col mode TMA stores"}
// CHECK-NOT:     memref.dealloc

func.func @padded_persistent(%x: memref<64x14x14x256xf16>, %w: memref<256x2304xf16>, %c: memref<12544x256xf16>) {
  %zero = arith.constant 0.0 : f16
  %c0 = arith.constant 0 : index
  %c13 = arith.constant 13 : index
  %patches = memref.alloc() : memref<64x14x14x3x3x256xf16>
  linalg.generic {indexing_maps = [#id6], iterator_types = ["parallel", "parallel", "parallel", "parallel", "parallel", "parallel"]} outs(%patches : memref<64x14x14x3x3x256xf16>) {
  ^bb0(%o: f16):
    %n = linalg.index 0 : index
    %oh = linalg.index 1 : index
    %ow = linalg.index 2 : index
    %kh = linalg.index 3 : index
    %kw = linalg.index 4 : index
    %ch = linalg.index 5 : index
    %h = affine.apply #shifted()[%oh, %kh]
    %h0 = arith.cmpi sge, %h, %c0 : index
    %h1 = arith.cmpi sle, %h, %c13 : index
    %hin = arith.andi %h0, %h1 : i1
    %hlo = arith.maxsi %h, %c0 : index
    %hc = arith.minsi %hlo, %c13 : index
    %v = affine.apply #shifted()[%ow, %kw]
    %v0 = arith.cmpi sge, %v, %c0 : index
    %v1 = arith.cmpi sle, %v, %c13 : index
    %vin = arith.andi %v0, %v1 : i1
    %in = arith.andi %hin, %vin : i1
    %vlo = arith.maxsi %v, %c0 : index
    %vc = arith.minsi %vlo, %c13 : index
    %e = memref.load %x[%n, %hc, %vc, %ch] : memref<64x14x14x256xf16>
    %s = arith.select %in, %e, %zero : f16
    linalg.yield %s : f16
  }
  %a = memref.collapse_shape %patches [[0, 1, 2], [3, 4, 5]] : memref<64x14x14x3x3x256xf16> into memref<12544x2304xf16>
  linalg.fill ins(%zero : f16) outs(%c : memref<12544x256xf16>)
  linalg.matmul indexing_maps = [#lhs, #rhs, #out] ins(%a, %w : memref<12544x2304xf16>, memref<256x2304xf16>) outs(%c : memref<12544x256xf16>)
  memref.dealloc %patches : memref<64x14x14x3x3x256xf16>
  return
}

// 32 channels a pixel: a 64-channel K step would straddle two taps, so no
// im2col copy reads the windows. With 128 x 256 tiles enough (28x28 at
// batch 64, 256 filters) the TMA kernel's producer warpgroup gathers A's
// tile with cp.async (each thread arrives on the stage's barrier once its
// copies land, `noinc`), one producer thread copies B's with TMA, and the
// consumers fence the gathered tile to the async proxy before their wgmmas
// read it.
// CHECK-LABEL: func.func @gathered_persistent(
// CHECK-SAME:    %[[X:.*]]: memref<64x28x28x32xf16>
// CHECK-NOT:     twintrack.im2col
// CHECK:         gpu.launch
// CHECK:           nvvm.fence.proxy {kind = #nvvm.proxy_kind<async.shared>, space = #nvvm.shared_space<cta>}
// CHECK:           nvvm.wgmma.mma_async
// CHECK:           nvgpu.device_async_copy %[[X]][%{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}], %{{.*}}[%{{.*}}], 8, %{{.*}} {bypassL1} : memref<64x28x28x32xf16>
// CHECK:           nvvm.cp.async.mbarrier.arrive %{{.*}} {noinc = true}
// CHECK:           nvvm.cp.async.bulk.tensor.shared.cluster.global
// CHECK:         } {twintrack.kernel_path = "tma-wgmma-matmul 128x256x64/{{.*}}/persistent implicit im2col TMA stores"}
func.func @gathered_persistent(%x: memref<64x28x28x32xf16>, %w: memref<256x288xf16>, %c: memref<50176x256xf16>) {
  %zero = arith.constant 0.0 : f16
  %c0 = arith.constant 0 : index
  %c27 = arith.constant 27 : index
  %patches = memref.alloc() : memref<64x28x28x3x3x32xf16>
  linalg.generic {indexing_maps = [#id6], iterator_types = ["parallel", "parallel", "parallel", "parallel", "parallel", "parallel"]} outs(%patches : memref<64x28x28x3x3x32xf16>) {
  ^bb0(%o: f16):
    %n = linalg.index 0 : index
    %oh = linalg.index 1 : index
    %ow = linalg.index 2 : index
    %kh = linalg.index 3 : index
    %kw = linalg.index 4 : index
    %ch = linalg.index 5 : index
    %h = affine.apply #shifted()[%oh, %kh]
    %h0 = arith.cmpi sge, %h, %c0 : index
    %h1 = arith.cmpi sle, %h, %c27 : index
    %hin = arith.andi %h0, %h1 : i1
    %hlo = arith.maxsi %h, %c0 : index
    %hc = arith.minsi %hlo, %c27 : index
    %v = affine.apply #shifted()[%ow, %kw]
    %v0 = arith.cmpi sge, %v, %c0 : index
    %v1 = arith.cmpi sle, %v, %c27 : index
    %vin = arith.andi %v0, %v1 : i1
    %in = arith.andi %hin, %vin : i1
    %vlo = arith.maxsi %v, %c0 : index
    %vc = arith.minsi %vlo, %c27 : index
    %e = memref.load %x[%n, %hc, %vc, %ch] : memref<64x28x28x32xf16>
    %s = arith.select %in, %e, %zero : f16
    linalg.yield %s : f16
  }
  %a = memref.collapse_shape %patches [[0, 1, 2], [3, 4, 5]] : memref<64x28x28x3x3x32xf16> into memref<50176x288xf16>
  linalg.fill ins(%zero : f16) outs(%c : memref<50176x256xf16>)
  linalg.matmul indexing_maps = [#lhs, #rhs, #out] ins(%a, %w : memref<50176x288xf16>, memref<256x288xf16>) outs(%c : memref<50176x256xf16>)
  memref.dealloc %patches : memref<64x28x28x3x3x32xf16>
  return
}

// A strided 1x1 window (stride 2, no padding) read through its map: whole
// copies, no size operand.
// CHECK-LABEL: func.func @strided(
// CHECK-SAME:    %[[X:.*]]: memref<2x16x16x64xf16>
// CHECK-NOT:     linalg.generic
// CHECK:         gpu.launch
// CHECK:           %[[N:.*]] = affine.apply
// CHECK-NEXT:      %[[H:.*]] = affine.apply
// CHECK:           nvgpu.device_async_copy %[[X]][%[[N]], %[[H]], %{{.*}}, %{{.*}}], %{{.*}}[%{{.*}}], 8 {bypassL1}
// CHECK:         } {twintrack.kernel_path = "wgmma-matmul {{.*}} implicit im2col TMA stores"}

func.func @strided(%x: memref<2x16x16x64xf16>, %w: memref<64x64xf16>, %c: memref<128x64xf32>) {
  %zero = arith.constant 0.0 : f32
  %patches = memref.alloc() : memref<2x8x8x1x1x64xf16>
  linalg.generic {indexing_maps = [#strided, #id6], iterator_types = ["parallel", "parallel", "parallel", "parallel", "parallel", "parallel"]} ins(%x : memref<2x16x16x64xf16>) outs(%patches : memref<2x8x8x1x1x64xf16>) {
  ^bb0(%i: f16, %o: f16):
    linalg.yield %i : f16
  }
  %a = memref.collapse_shape %patches [[0, 1, 2], [3, 4, 5]] : memref<2x8x8x1x1x64xf16> into memref<128x64xf16>
  linalg.fill ins(%zero : f32) outs(%c : memref<128x64xf32>)
  linalg.matmul indexing_maps = [#lhs, #rhs, #out] ins(%a, %w : memref<128x64xf16>, memref<64x64xf16>) outs(%c : memref<128x64xf32>)
  memref.dealloc %patches : memref<2x8x8x1x1x64xf16>
  return
}

// The same window written without its unit window dims (fusion folds
// them: a 4-D patch buffer, expanded to the 6-D one A collapses, the unit
// dims grouped with a column): A's rows still end at a group, so the
// kernel reads the input and the buffer and both views go.
// CHECK-LABEL: func.func @strided_unit_dims_folded(
// CHECK-SAME:    %[[X:.*]]: memref<2x16x16x64xf16>
// CHECK-NOT:     memref.alloc
// CHECK-NOT:     linalg.generic
// CHECK:         gpu.launch
// CHECK:           nvgpu.device_async_copy %[[X]][%{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}], %{{.*}}[%{{.*}}], 8 {bypassL1}
// CHECK:         } {twintrack.kernel_path = "wgmma-matmul {{.*}} implicit im2col TMA stores"}
// CHECK-NOT:     memref.expand_shape
// CHECK-NOT:     memref.dealloc
// CHECK:         return

func.func @strided_unit_dims_folded(%x: memref<2x16x16x64xf16>, %w: memref<64x64xf16>, %c: memref<128x64xf32>) {
  %zero = arith.constant 0.0 : f32
  %patches = memref.alloc() : memref<2x8x8x64xf16>
  linalg.generic {indexing_maps = [#strided4, #id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%x : memref<2x16x16x64xf16>) outs(%patches : memref<2x8x8x64xf16>) {
  ^bb0(%i: f16, %o: f16):
    linalg.yield %i : f16
  }
  %six = memref.expand_shape %patches [[0], [1], [2, 3, 4], [5]] output_shape [2, 8, 8, 1, 1, 64] : memref<2x8x8x64xf16> into memref<2x8x8x1x1x64xf16>
  %a = memref.collapse_shape %six [[0, 1, 2], [3, 4, 5]] : memref<2x8x8x1x1x64xf16> into memref<128x64xf16>
  linalg.fill ins(%zero : f32) outs(%c : memref<128x64xf32>)
  linalg.matmul indexing_maps = [#lhs, #rhs, #out] ins(%a, %w : memref<128x64xf16>, memref<64x64xf16>) outs(%c : memref<128x64xf32>)
  memref.dealloc %patches : memref<2x8x8x64xf16>
  return
}

// A channels-first input: a window's 8 channels are not side by side, so
// the patches are written and read as they are.
// CHECK-LABEL: func.func @channels_first(
// CHECK:         %[[P:.*]] = memref.alloc() : memref<2x8x8x3x3x64xf16>
// CHECK:         linalg.generic {{.*}} outs(%[[P]]
// CHECK:         %[[A:.*]] = memref.collapse_shape %[[P]]
// CHECK:         gpu.launch
// CHECK:           nvgpu.device_async_copy %[[A]]
// CHECK-NOT:     implicit im2col
// CHECK:         return

func.func @channels_first(%x: memref<2x64x10x10xf16>, %w: memref<64x576xf16>, %c: memref<128x64xf32>) {
  %zero = arith.constant 0.0 : f32
  %patches = memref.alloc() : memref<2x8x8x3x3x64xf16>
  linalg.generic {indexing_maps = [#nchw, #id6], iterator_types = ["parallel", "parallel", "parallel", "parallel", "parallel", "parallel"]} ins(%x : memref<2x64x10x10xf16>) outs(%patches : memref<2x8x8x3x3x64xf16>) {
  ^bb0(%i: f16, %o: f16):
    linalg.yield %i : f16
  }
  %a = memref.collapse_shape %patches [[0, 1, 2], [3, 4, 5]] : memref<2x8x8x3x3x64xf16> into memref<128x576xf16>
  linalg.fill ins(%zero : f32) outs(%c : memref<128x64xf32>)
  linalg.matmul indexing_maps = [#lhs, #rhs, #out] ins(%a, %w : memref<128x576xf16>, memref<64x576xf16>) outs(%c : memref<128x64xf32>)
  memref.dealloc %patches : memref<2x8x8x3x3x64xf16>
  return
}

// One patch buffer serving two convolutions in turn (bufferization reuses
// it): each matmul reads its own windows; the buffer goes with the last.
// CHECK-LABEL: func.func @shared_patches(
// CHECK-SAME:    %[[X:.*]]: memref<2x16x16x64xf16>, %[[Y:.*]]: memref<2x16x16x64xf16>
// CHECK-NOT:     memref.alloc
// CHECK:         gpu.launch
// CHECK:           nvgpu.device_async_copy %[[X]]
// CHECK:         } {twintrack.kernel_path = "wgmma-matmul {{.*}} implicit im2col TMA stores"}
// CHECK:         gpu.launch
// CHECK:           nvgpu.device_async_copy %[[Y]]
// CHECK:         } {twintrack.kernel_path = "wgmma-matmul {{.*}} implicit im2col TMA stores"}
// CHECK-NOT:     memref.dealloc
// CHECK:         return

func.func @shared_patches(%x: memref<2x16x16x64xf16>, %y: memref<2x16x16x64xf16>, %w: memref<64x64xf16>, %c: memref<128x64xf32>, %d: memref<128x64xf32>) {
  %zero = arith.constant 0.0 : f32
  %patches = memref.alloc() : memref<2x8x8x1x1x64xf16>
  %a = memref.collapse_shape %patches [[0, 1, 2], [3, 4, 5]] : memref<2x8x8x1x1x64xf16> into memref<128x64xf16>
  linalg.generic {indexing_maps = [#strided, #id6], iterator_types = ["parallel", "parallel", "parallel", "parallel", "parallel", "parallel"]} ins(%x : memref<2x16x16x64xf16>) outs(%patches : memref<2x8x8x1x1x64xf16>) {
  ^bb0(%i: f16, %o: f16):
    linalg.yield %i : f16
  }
  linalg.fill ins(%zero : f32) outs(%c : memref<128x64xf32>)
  linalg.matmul indexing_maps = [#lhs, #rhs, #out] ins(%a, %w : memref<128x64xf16>, memref<64x64xf16>) outs(%c : memref<128x64xf32>)
  linalg.generic {indexing_maps = [#strided, #id6], iterator_types = ["parallel", "parallel", "parallel", "parallel", "parallel", "parallel"]} ins(%y : memref<2x16x16x64xf16>) outs(%patches : memref<2x8x8x1x1x64xf16>) {
  ^bb0(%i: f16, %o: f16):
    linalg.yield %i : f16
  }
  linalg.fill ins(%zero : f32) outs(%d : memref<128x64xf32>)
  linalg.matmul indexing_maps = [#lhs, #rhs, #out] ins(%a, %w : memref<128x64xf16>, memref<64x64xf16>) outs(%d : memref<128x64xf32>)
  memref.dealloc %patches : memref<2x8x8x1x1x64xf16>
  return
}

// Patches read by two matmuls: the first cannot take them from the input
// (the second still reads them), and the second has no windows op before it.
// CHECK-LABEL: func.func @patches_read_twice(
// CHECK:         linalg.generic
// CHECK:         gpu.launch
// CHECK:           nvgpu.device_async_copy %collapse_shape
// CHECK:         gpu.launch
// CHECK-NOT:     implicit im2col
// CHECK:         return
func.func @patches_read_twice(%x: memref<2x16x16x64xf16>, %w: memref<64x64xf16>, %c: memref<128x64xf32>, %d: memref<128x64xf32>) {
  %zero = arith.constant 0.0 : f32
  %patches = memref.alloc() : memref<2x8x8x1x1x64xf16>
  %a = memref.collapse_shape %patches [[0, 1, 2], [3, 4, 5]] : memref<2x8x8x1x1x64xf16> into memref<128x64xf16>
  linalg.generic {indexing_maps = [#strided, #id6], iterator_types = ["parallel", "parallel", "parallel", "parallel", "parallel", "parallel"]} ins(%x : memref<2x16x16x64xf16>) outs(%patches : memref<2x8x8x1x1x64xf16>) {
  ^bb0(%i: f16, %o: f16):
    linalg.yield %i : f16
  }
  linalg.fill ins(%zero : f32) outs(%c : memref<128x64xf32>)
  linalg.matmul indexing_maps = [#lhs, #rhs, #out] ins(%a, %w : memref<128x64xf16>, memref<64x64xf16>) outs(%c : memref<128x64xf32>)
  linalg.fill ins(%zero : f32) outs(%d : memref<128x64xf32>)
  linalg.matmul indexing_maps = [#lhs, #rhs, #out] ins(%a, %w : memref<128x64xf16>, memref<64x64xf16>) outs(%d : memref<128x64xf32>)
  memref.dealloc %patches : memref<2x8x8x1x1x64xf16>
  return
}

// A shared patch buffer whose first convolution keeps its patches (a
// channels-first input): that kernel reads them inside its launch, an
// access like any other; the second convolution still reads its windows
// in place, and the buffer stays for the first.
// CHECK-LABEL: func.func @shared_after_written_patches(
// CHECK-SAME:    %[[X:.*]]: memref<2x64x10x10xf16>, %[[Y:.*]]: memref<2x10x10x64xf16>
// CHECK:         %[[P:.*]] = memref.alloc() : memref<2x8x8x3x3x64xf16>
// CHECK:         linalg.generic {{.*}} ins(%[[X]] {{.*}} outs(%[[P]]
// CHECK:         gpu.launch
// CHECK:           nvgpu.device_async_copy %collapse_shape
// CHECK:         } {twintrack.kernel_path = "wgmma-matmul {{[^"]*}}stages TMA stores"}
// CHECK-NOT:     linalg.generic
// CHECK:         gpu.launch
// CHECK:           nvgpu.device_async_copy %[[Y]]
// CHECK:         } {twintrack.kernel_path = "wgmma-matmul {{.*}} implicit im2col TMA stores"}
// CHECK:         memref.dealloc %[[P]]
func.func @shared_after_written_patches(%x: memref<2x64x10x10xf16>, %y: memref<2x10x10x64xf16>, %w: memref<64x576xf16>, %c: memref<128x64xf32>, %d: memref<128x64xf32>) {
  %zero = arith.constant 0.0 : f32
  %patches = memref.alloc() : memref<2x8x8x3x3x64xf16>
  %a = memref.collapse_shape %patches [[0, 1, 2], [3, 4, 5]] : memref<2x8x8x3x3x64xf16> into memref<128x576xf16>
  linalg.generic {indexing_maps = [#nchw, #id6], iterator_types = ["parallel", "parallel", "parallel", "parallel", "parallel", "parallel"]} ins(%x : memref<2x64x10x10xf16>) outs(%patches : memref<2x8x8x3x3x64xf16>) {
  ^bb0(%i: f16, %o: f16):
    linalg.yield %i : f16
  }
  linalg.fill ins(%zero : f32) outs(%c : memref<128x64xf32>)
  linalg.matmul indexing_maps = [#lhs, #rhs, #out] ins(%a, %w : memref<128x576xf16>, memref<64x576xf16>) outs(%c : memref<128x64xf32>)
  linalg.generic {indexing_maps = [#nhwc, #id6], iterator_types = ["parallel", "parallel", "parallel", "parallel", "parallel", "parallel"]} ins(%y : memref<2x10x10x64xf16>) outs(%patches : memref<2x8x8x3x3x64xf16>) {
  ^bb0(%i: f16, %o: f16):
    linalg.yield %i : f16
  }
  linalg.fill ins(%zero : f32) outs(%d : memref<128x64xf32>)
  linalg.matmul indexing_maps = [#lhs, #rhs, #out] ins(%a, %w : memref<128x576xf16>, memref<64x576xf16>) outs(%d : memref<128x64xf32>)
  memref.dealloc %patches : memref<2x8x8x3x3x64xf16>
  return
}
