// RUN: %PYTHON -m twintrack.compiler.passes 'gpu-matmul-kernels{arch=sm_90a}' %s | FileCheck %s
// RUN: %PYTHON -m twintrack.compiler.passes 'gpu-matmul-kernels{arch=sm_90a},outline-kernels' %s | FileCheck %s --check-prefix=SHARED

// A repeated layer asks for the same kernel again: the first site's launch
// is built, the second's is a clone of it reading its own weight and
// writing its own output (through its own tensor map), the constants the
// launch reads (its dynamic shared memory, its grid) the first site's. A
// third site whose epilogue scales by 3 instead of 2 gets a kernel of its
// own; outlining then keeps two modules.
// CHECK-LABEL: func.func @layers(
// CHECK-SAME:    %[[X:[a-z0-9]+]]: memref<256x128xbf16>, %[[W0:[a-z0-9]+]]: memref<256x128xbf16>, %[[W1:[a-z0-9]+]]: memref<256x128xbf16>, %[[W2:[a-z0-9]+]]: memref<256x128xbf16>, %[[Y0:[a-z0-9]+]]: memref<256x256xbf16>, %[[Y1:[a-z0-9]+]]: memref<256x256xbf16>
// CHECK:         memref.cast %[[Y0]]
// CHECK:         %[[SMEM:.*]] = arith.constant 33792 : i32
// CHECK:         gpu.launch {{.*}} dynamic_shared_memory_size %[[SMEM]] module(@forward_wgmma_matmul_0)
// CHECK:           nvgpu.device_async_copy %[[W0]]
// CHECK:           arith.constant 2.000000e+00 : f32
// CHECK:         memref.cast %[[Y1]]
// CHECK-NOT:     arith.constant 33792 : i32
// CHECK:         gpu.launch {{.*}} dynamic_shared_memory_size %[[SMEM]] module(@forward_wgmma_matmul_1)
// CHECK:           nvgpu.device_async_copy %[[X]]
// CHECK:           nvgpu.device_async_copy %[[W1]]
// CHECK:           arith.constant 2.000000e+00 : f32
// CHECK:         arith.constant 33792 : i32
// CHECK:         gpu.launch {{.*}} module(@forward_wgmma_matmul_2)
// CHECK:           nvgpu.device_async_copy %[[W2]]
// CHECK:           arith.constant 3.000000e+00 : f32
// SHARED-COUNT-2: gpu.module @
// SHARED-NOT:     gpu.module @
#lhs = affine_map<(m, n, k) -> (m, k)>
#weight = affine_map<(m, n, k) -> (n, k)>
#res = affine_map<(m, n, k) -> (m, n)>
#id = affine_map<(i, j) -> (i, j)>

func.func @layers(%x: memref<256x128xbf16>, %w0: memref<256x128xbf16>, %w1: memref<256x128xbf16>,
                  %w2: memref<256x128xbf16>, %y0: memref<256x256xbf16>, %y1: memref<256x256xbf16>,
                  %y2: memref<256x256xbf16>) {
  %zero = arith.constant 0.0 : f32
  %a0 = memref.alloc() : memref<256x256xf32>
  linalg.fill ins(%zero : f32) outs(%a0 : memref<256x256xf32>)
  linalg.matmul indexing_maps = [#lhs, #weight, #res]
      ins(%x, %w0 : memref<256x128xbf16>, memref<256x128xbf16>) outs(%a0 : memref<256x256xf32>)
  linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%a0 : memref<256x256xf32>) outs(%y0 : memref<256x256xbf16>) {
  ^bb0(%v: f32, %o: bf16):
    %c = arith.constant 2.0 : f32
    %s = arith.mulf %v, %c : f32
    %t = arith.truncf %s : f32 to bf16
    linalg.yield %t : bf16
  }
  memref.dealloc %a0 : memref<256x256xf32>
  %a1 = memref.alloc() : memref<256x256xf32>
  linalg.fill ins(%zero : f32) outs(%a1 : memref<256x256xf32>)
  linalg.matmul indexing_maps = [#lhs, #weight, #res]
      ins(%x, %w1 : memref<256x128xbf16>, memref<256x128xbf16>) outs(%a1 : memref<256x256xf32>)
  linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%a1 : memref<256x256xf32>) outs(%y1 : memref<256x256xbf16>) {
  ^bb0(%v: f32, %o: bf16):
    %c = arith.constant 2.0 : f32
    %s = arith.mulf %v, %c : f32
    %t = arith.truncf %s : f32 to bf16
    linalg.yield %t : bf16
  }
  memref.dealloc %a1 : memref<256x256xf32>
  %a2 = memref.alloc() : memref<256x256xf32>
  linalg.fill ins(%zero : f32) outs(%a2 : memref<256x256xf32>)
  linalg.matmul indexing_maps = [#lhs, #weight, #res]
      ins(%x, %w2 : memref<256x128xbf16>, memref<256x128xbf16>) outs(%a2 : memref<256x256xf32>)
  linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%a2 : memref<256x256xf32>) outs(%y2 : memref<256x256xbf16>) {
  ^bb0(%v: f32, %o: bf16):
    %c = arith.constant 3.0 : f32
    %s = arith.mulf %v, %c : f32
    %t = arith.truncf %s : f32 to bf16
    linalg.yield %t : bf16
  }
  memref.dealloc %a2 : memref<256x256xf32>
  return
}
