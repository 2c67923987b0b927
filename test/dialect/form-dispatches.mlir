// RUN: %twintrack-opt %s -split-input-file --pass-pipeline="builtin.module(func.func(twintrack-form-dispatches))" | FileCheck %s
// RUN: %twintrack-opt %s -split-input-file --pass-pipeline="builtin.module(func.func(twintrack-form-dispatches{explain}))" 2>&1 >/dev/null | FileCheck %s --check-prefix=EXPLAIN
// RUN: %twintrack-opt %s -split-input-file --pass-pipeline="builtin.module(func.func(twintrack-form-dispatches{launch-overhead=0 flop-rate=1.0e6}))" | FileCheck %s --check-prefix=COSTLY
// RUN: %twintrack-opt %s -split-input-file --pass-pipeline="builtin.module(func.func(twintrack-form-dispatches{max-inputs=1}))" | FileCheck %s --check-prefix=NARROW
// RUN: %twintrack-opt %s -split-input-file --pass-pipeline="builtin.module(func.func(twintrack-form-dispatches{max-body-ops=2 explain}))" 2>&1 | FileCheck %s --check-prefix=PRESSURE
// RUN: %twintrack-opt %s -split-input-file --pass-pipeline="builtin.module(func.func(twintrack-form-dispatches{row-fusion=false}))" | FileCheck %s --check-prefix=NOROWS

// twintrack-form-dispatches: every linalg op ends up in one dispatch; the
// cost model decides which share one. Each rule, and what stops it.

#id = affine_map<(d0, d1) -> (d0, d1)>
#row = affine_map<(d0, d1) -> (d0)>
#col = affine_map<(d0, d1) -> (d1)>

// Rule 1: an elementwise chain (each producer with one consumer) is one dispatch.
// CHECK-LABEL: func.func @chain(
// CHECK:         %[[D:.*]] = twintrack.dispatch "elementwise_{{[0-9]+}}" kind<elementwise> (%{{.*}} : tensor<64x64xf32>) -> (tensor<64x64xf32>) {
// CHECK-COUNT-3:   linalg.generic
// CHECK:           twintrack.yield
// CHECK-NEXT:    }
// CHECK-NEXT:    return %[[D]]
// EXPLAIN: form-dispatches.mlir:[[@LINE+16]]:8: remark: fused into its consumer linalg.generic: saves 32768 bytes and a launch
// With no launch overhead and a slow target, recomputing the exp is not worth 32 KiB: three dispatches.
// COSTLY-LABEL: func.func @chain(
// COSTLY-COUNT-3: twintrack.dispatch
// With room for two ops per element, the third op of the chain starts a new dispatch.
// PRESSURE: remark: kept apart: the kernel would compute 3 ops per element, over max-body-ops=2 (register pressure)
// PRESSURE-LABEL: func.func @chain(
// PRESSURE-COUNT-2: twintrack.dispatch
func.func @chain(%x: tensor<64x64xf32>) -> tensor<64x64xf32> {
  %e = tensor.empty() : tensor<64x64xf32>
  %a = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%x : tensor<64x64xf32>) outs(%e : tensor<64x64xf32>) {
  ^bb0(%v: f32, %o: f32):
    %r = math.exp %v : f32
    linalg.yield %r : f32
  } -> tensor<64x64xf32>
  %b = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%a : tensor<64x64xf32>) outs(%e : tensor<64x64xf32>) {
  ^bb0(%v: f32, %o: f32):
    %r = arith.mulf %v, %v : f32
    linalg.yield %r : f32
  } -> tensor<64x64xf32>
  %c = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%b : tensor<64x64xf32>) outs(%e : tensor<64x64xf32>) {
  ^bb0(%v: f32, %o: f32):
    %r = arith.negf %v : f32
    linalg.yield %r : f32
  } -> tensor<64x64xf32>
  return %c : tensor<64x64xf32>
}

// -----

#id = affine_map<(d0, d1) -> (d0, d1)>
#row = affine_map<(d0, d1) -> (d0)>

// Rule 2: softmax's exp(x - max) feeds both the sum and the division. It is
// recomputed in each (copied into both consumers), so it never goes through
// memory. Rule 5 then runs the max, the sum and the division over each row
// in one row-wise dispatch: the max is used inside only, and exp is copied
// in once for both readers.
// CHECK-LABEL: func.func @softmax(
// CHECK:         %[[OUT:.*]] = twintrack.dispatch "reduction_rows_{{[0-9]+}}" kind<reduction_rows> (%{{.*}} : tensor<32x128xf32>) -> (tensor<32x128xf32>) {
// CHECK:           math.exp
// CHECK:           arith.divf
// CHECK:         return %[[OUT]]
// Without row fusion, one dispatch holds one reduction.
// NOROWS-LABEL: func.func @softmax(
// NOROWS:         %[[MAX:.*]] = twintrack.dispatch "reduction_{{[0-9]+}}" kind<reduction> (%[[X:.*]] :
// NOROWS:         %[[SUM:.*]] = twintrack.dispatch "reduction_{{[0-9]+}}" kind<reduction> (%[[X]], %[[MAX]] :
// NOROWS:           math.exp
// NOROWS:           arith.addf
// NOROWS:         %[[OUT:.*]] = twintrack.dispatch "elementwise_{{[0-9]+}}" kind<elementwise> (%[[X]], %[[MAX]], %[[SUM]] :
// NOROWS:           math.exp
// NOROWS:           arith.divf
// NOROWS:         return %[[OUT]]
// EXPLAIN: remark: recomputed in each of its 2 consumers
// EXPLAIN: remark: fused row-wise with the reduction it reads (32 rows of 128)
func.func @softmax(%x: tensor<32x128xf32>) -> tensor<32x128xf32> {
  %ninf = arith.constant 0xFF800000 : f32
  %zero = arith.constant 0.0 : f32
  %er = tensor.empty() : tensor<32xf32>
  %e = tensor.empty() : tensor<32x128xf32>
  %mi = linalg.fill ins(%ninf : f32) outs(%er : tensor<32xf32>) -> tensor<32xf32>
  %max = linalg.generic {indexing_maps = [#id, #row], iterator_types = ["parallel", "reduction"]}
      ins(%x : tensor<32x128xf32>) outs(%mi : tensor<32xf32>) {
  ^bb0(%v: f32, %m: f32):
    %r = arith.maximumf %v, %m : f32
    linalg.yield %r : f32
  } -> tensor<32xf32>
  %ex = linalg.generic {indexing_maps = [#id, #row, #id], iterator_types = ["parallel", "parallel"]}
      ins(%x, %max : tensor<32x128xf32>, tensor<32xf32>) outs(%e : tensor<32x128xf32>) {
  ^bb0(%v: f32, %m: f32, %o: f32):
    %d = arith.subf %v, %m : f32
    %r = math.exp %d : f32
    linalg.yield %r : f32
  } -> tensor<32x128xf32>
  %si = linalg.fill ins(%zero : f32) outs(%er : tensor<32xf32>) -> tensor<32xf32>
  %sum = linalg.generic {indexing_maps = [#id, #row], iterator_types = ["parallel", "reduction"]}
      ins(%ex : tensor<32x128xf32>) outs(%si : tensor<32xf32>) {
  ^bb0(%v: f32, %s: f32):
    %r = arith.addf %v, %s : f32
    linalg.yield %r : f32
  } -> tensor<32xf32>
  %out = linalg.generic {indexing_maps = [#id, #row, #id], iterator_types = ["parallel", "parallel"]}
      ins(%ex, %sum : tensor<32x128xf32>, tensor<32xf32>) outs(%e : tensor<32x128xf32>) {
  ^bb0(%v: f32, %s: f32, %o: f32):
    %r = arith.divf %v, %s : f32
    linalg.yield %r : f32
  } -> tensor<32x128xf32>
  return %out : tensor<32x128xf32>
}

// -----

// The same softmax over rows and a row length known only at run time: the
// cost model prices each dynamic dim at `dynamic-extent` (256), and the
// row-wise rule takes the dynamic ranges (the group's ops agree on them
// through their operands): one row-wise dispatch as for static shapes.
#id = affine_map<(d0, d1) -> (d0, d1)>
#row = affine_map<(d0, d1) -> (d0)>
// CHECK-LABEL: func.func @softmax_dynamic(
// CHECK:         %[[OUT:.*]] = twintrack.dispatch "reduction_rows_{{[0-9]+}}" kind<reduction_rows> (%{{.*}} : tensor<?x?xf32>, index, index) -> (tensor<?x?xf32>) {
// CHECK:           math.exp
// CHECK:           arith.divf
// CHECK:         return %[[OUT]]
// EXPLAIN: remark: recomputed in each of its 2 consumers
// EXPLAIN: remark: fused row-wise with the reduction it reads (? rows of ?)
func.func @softmax_dynamic(%x: tensor<?x?xf32>) -> tensor<?x?xf32> {
  %ninf = arith.constant 0xFF800000 : f32
  %zero = arith.constant 0.0 : f32
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %rows = tensor.dim %x, %c0 : tensor<?x?xf32>
  %cols = tensor.dim %x, %c1 : tensor<?x?xf32>
  %er = tensor.empty(%rows) : tensor<?xf32>
  %e = tensor.empty(%rows, %cols) : tensor<?x?xf32>
  %mi = linalg.fill ins(%ninf : f32) outs(%er : tensor<?xf32>) -> tensor<?xf32>
  %max = linalg.generic {indexing_maps = [#id, #row], iterator_types = ["parallel", "reduction"]}
      ins(%x : tensor<?x?xf32>) outs(%mi : tensor<?xf32>) {
  ^bb0(%v: f32, %m: f32):
    %r = arith.maximumf %v, %m : f32
    linalg.yield %r : f32
  } -> tensor<?xf32>
  %ex = linalg.generic {indexing_maps = [#id, #row, #id], iterator_types = ["parallel", "parallel"]}
      ins(%x, %max : tensor<?x?xf32>, tensor<?xf32>) outs(%e : tensor<?x?xf32>) {
  ^bb0(%v: f32, %m: f32, %o: f32):
    %d = arith.subf %v, %m : f32
    %r = math.exp %d : f32
    linalg.yield %r : f32
  } -> tensor<?x?xf32>
  %si = linalg.fill ins(%zero : f32) outs(%er : tensor<?xf32>) -> tensor<?xf32>
  %sum = linalg.generic {indexing_maps = [#id, #row], iterator_types = ["parallel", "reduction"]}
      ins(%ex : tensor<?x?xf32>) outs(%si : tensor<?xf32>) {
  ^bb0(%v: f32, %s: f32):
    %r = arith.addf %v, %s : f32
    linalg.yield %r : f32
  } -> tensor<?xf32>
  %out = linalg.generic {indexing_maps = [#id, #row, #id], iterator_types = ["parallel", "parallel"]}
      ins(%ex, %sum : tensor<?x?xf32>, tensor<?xf32>) outs(%e : tensor<?x?xf32>) {
  ^bb0(%v: f32, %s: f32, %o: f32):
    %r = arith.divf %v, %s : f32
    linalg.yield %r : f32
  } -> tensor<?x?xf32>
  return %out : tensor<?x?xf32>
}

// -----

// Rule 2 for a mask of the indices alone (a causal attention's tril): its
// compares are integer work, which costs nothing, so it is merged into the
// scores it masks, even though they read each element 64 times and even on
// a slow target; there the flash kernel reads it as a condition on row and
// key, and skips the tiles it hides.
// CHECK-LABEL: func.func @index_mask(
// CHECK:         twintrack.dispatch "elementwise_{{[0-9]+}}" kind<elementwise> (%{{.*}} : tensor<64x512x512xf32>)
// CHECK-NOT:     twintrack.yield
// CHECK:           tensor.empty() : tensor<512x512xi1>
// CHECK-NOT:     twintrack.yield
// CHECK:           tensor.empty() : tensor<64x512x512xf32>
// COSTLY-LABEL: func.func @index_mask(
// COSTLY:         twintrack.dispatch "elementwise_{{[0-9]+}}" kind<elementwise> (%{{.*}} : tensor<64x512x512xf32>)
// COSTLY-NOT:    twintrack.yield
// COSTLY:          tensor.empty() : tensor<512x512xi1>
// COSTLY-NOT:    twintrack.yield
// COSTLY:          tensor.empty() : tensor<64x512x512xf32>
// EXPLAIN: remark: fused into its consumer linalg.generic: {{.*}} recomputes 0 flops
#scores = affine_map<(b, q, k) -> (b, q, k)>
#mask = affine_map<(b, q, k) -> (q, k)>
#plane = affine_map<(q, k) -> (q, k)>
func.func @index_mask(%s: tensor<64x512x512xf32>) -> tensor<64x512x512xf32> {
  %ninf = arith.constant 0xFF800000 : f32
  %me = tensor.empty() : tensor<512x512xi1>
  %m = linalg.generic {indexing_maps = [#plane], iterator_types = ["parallel", "parallel"]} outs(%me : tensor<512x512xi1>) {
  ^bb0(%o: i1):
    %q = linalg.index 0 : index
    %k = linalg.index 1 : index
    %past = arith.cmpi ugt, %k, %q : index
    linalg.yield %past : i1
  } -> tensor<512x512xi1>
  %e = tensor.empty() : tensor<64x512x512xf32>
  %out = linalg.generic {indexing_maps = [#scores, #mask, #scores], iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%s, %m : tensor<64x512x512xf32>, tensor<512x512xi1>) outs(%e : tensor<64x512x512xf32>) {
  ^bb0(%v: f32, %hidden: i1, %o: f32):
    %r = arith.select %hidden, %ninf, %v : f32
    linalg.yield %r : f32
  } -> tensor<64x512x512xf32>
  return %out : tensor<64x512x512xf32>
}

// -----

#id = affine_map<(d0, d1) -> (d0, d1)>
#col = affine_map<(d0, d1) -> (d1)>

// Rule 3: a matmul takes its elementwise consumer (bias + ReLU) as an
// epilogue, and its zero fill is copied in. The weight transpose feeding its
// right operand goes: the matmul reads the weight through its indexing maps.
// CHECK:         #[[WEIGHT:.*]] = affine_map<(d0, d1, d2) -> (d1, d2)>
// CHECK-LABEL: func.func @linear_relu(
// CHECK-SAME:      %[[X:.*]]: tensor<128x64xf32>, %[[W:.*]]: tensor<32x64xf32>
// CHECK-NOT:     linalg.transpose
// CHECK:         %[[Y:.*]] = twintrack.dispatch "matmul_{{[0-9]+}}" kind<matmul> (%[[X]], %[[W]], %{{.*}} : tensor<128x64xf32>, tensor<32x64xf32>, tensor<32xf32>) -> (tensor<128x32xf32>) {
// CHECK:           linalg.fill
// CHECK:           linalg.matmul indexing_maps = [#{{.*}}, #[[WEIGHT]], #{{.*}}] ins(%{{.*}}, %{{.*}} : tensor<128x64xf32>, tensor<32x64xf32>)
// CHECK:           linalg.generic
// CHECK:           arith.maximumf
// CHECK:         return %[[Y]]
// EXPLAIN: remark: reads its right operand transposed: the transpose's kernel goes (saves 16384 bytes and a launch)
// EXPLAIN: remark: fused as the matmul's epilogue: saves 32768 bytes and a launch
func.func @linear_relu(%x: tensor<128x64xf32>, %w: tensor<32x64xf32>, %b: tensor<32xf32>) -> tensor<128x32xf32> {
  %zero = arith.constant 0.0 : f32
  %et = tensor.empty() : tensor<64x32xf32>
  %wt = linalg.transpose ins(%w : tensor<32x64xf32>) outs(%et : tensor<64x32xf32>) permutation = [1, 0]
  %e = tensor.empty() : tensor<128x32xf32>
  %f = linalg.fill ins(%zero : f32) outs(%e : tensor<128x32xf32>) -> tensor<128x32xf32>
  %m = linalg.matmul ins(%x, %wt : tensor<128x64xf32>, tensor<64x32xf32>) outs(%f : tensor<128x32xf32>) -> tensor<128x32xf32>
  %r = linalg.generic {indexing_maps = [#id, #col, #id], iterator_types = ["parallel", "parallel"]}
      ins(%m, %b : tensor<128x32xf32>, tensor<32xf32>) outs(%e : tensor<128x32xf32>) {
  ^bb0(%v: f32, %c: f32, %o: f32):
    %s = arith.addf %v, %c : f32
    %t = arith.maximumf %s, %zero : f32
    linalg.yield %t : f32
  } -> tensor<128x32xf32>
  return %r : tensor<128x32xf32>
}

// -----

// A transposed left operand, or a transpose with another reader, stays a
// kernel of its own (a producer is never fused into a matmul: it would run
// once per column of the other operand).
// CHECK-LABEL: func.func @transpose_not_folded(
// CHECK:         twintrack.dispatch "elementwise_{{[0-9]+}}" kind<elementwise>
// CHECK:           linalg.transpose
// CHECK:         twintrack.dispatch "elementwise_{{[0-9]+}}" kind<elementwise>
// CHECK:           linalg.transpose
// CHECK:         twintrack.dispatch "matmul_horizontal_{{[0-9]+}}" kind<matmul_horizontal>
// CHECK-NOT:       indexing_maps
// CHECK:         return
// EXPLAIN: remark: kept apart: linalg.transpose feeds a matmul (prologue fusion is not generated)
// EXPLAIN: remark: kept apart: linalg.transpose feeds a matmul (prologue fusion is not generated)
func.func @transpose_not_folded(%x: tensor<64x128xf32>, %w: tensor<32x64xf32>) -> (tensor<128x32xf32>, tensor<64x32xf32>) {
  %zero = arith.constant 0.0 : f32
  %ex = tensor.empty() : tensor<128x64xf32>
  %xt = linalg.transpose ins(%x : tensor<64x128xf32>) outs(%ex : tensor<128x64xf32>) permutation = [1, 0]
  %ew = tensor.empty() : tensor<64x32xf32>
  %wt = linalg.transpose ins(%w : tensor<32x64xf32>) outs(%ew : tensor<64x32xf32>) permutation = [1, 0]
  %e = tensor.empty() : tensor<128x32xf32>
  %f = linalg.fill ins(%zero : f32) outs(%e : tensor<128x32xf32>) -> tensor<128x32xf32>
  %m = linalg.matmul ins(%xt, %wt : tensor<128x64xf32>, tensor<64x32xf32>) outs(%f : tensor<128x32xf32>) -> tensor<128x32xf32>
  %x64 = tensor.extract_slice %x[0, 0] [64, 64] [1, 1] : tensor<64x128xf32> to tensor<64x64xf32>
  %e2 = tensor.empty() : tensor<64x32xf32>
  %f2 = linalg.fill ins(%zero : f32) outs(%e2 : tensor<64x32xf32>) -> tensor<64x32xf32>
  %m2 = linalg.matmul ins(%x64, %wt : tensor<64x64xf32>, tensor<64x32xf32>) outs(%f2 : tensor<64x32xf32>) -> tensor<64x32xf32>
  return %m, %m2 : tensor<128x32xf32>, tensor<64x32xf32>
}

// -----

#id = affine_map<(d0, d1) -> (d0, d1)>
#col = affine_map<(d0, d1) -> (d1)>

// Rule 3, continued: GELU reads the biased result twice (x * 0.5 and
// erf(x)). The single-use rule stops at the bias; once GELU's ops have
// grouped, the group joins the matmul's dispatch as more epilogue.
// CHECK-LABEL: func.func @linear_gelu(
// CHECK:         %[[Y:.*]] = twintrack.dispatch "matmul_{{[0-9]+}}" kind<matmul>
// CHECK:           linalg.matmul
// CHECK-COUNT-3:   linalg.generic
// CHECK:           twintrack.yield
// CHECK-NEXT:    }
// CHECK-NEXT:    return %[[Y]]
// EXPLAIN: remark: fused as the matmul's epilogue: saves 32768 bytes and a launch
// EXPLAIN: remark: fused into the matmul's epilogue, reading its result 2 times: saves 32768 bytes and a launch
func.func @linear_gelu(%x: tensor<128x64xf32>, %w: tensor<64x32xf32>, %b: tensor<32xf32>) -> tensor<128x32xf32> {
  %zero = arith.constant 0.0 : f32
  %half = arith.constant 0.5 : f32
  %e = tensor.empty() : tensor<128x32xf32>
  %f = linalg.fill ins(%zero : f32) outs(%e : tensor<128x32xf32>) -> tensor<128x32xf32>
  %m = linalg.matmul ins(%x, %w : tensor<128x64xf32>, tensor<64x32xf32>) outs(%f : tensor<128x32xf32>) -> tensor<128x32xf32>
  %biased = linalg.generic {indexing_maps = [#id, #col, #id], iterator_types = ["parallel", "parallel"]}
      ins(%m, %b : tensor<128x32xf32>, tensor<32xf32>) outs(%e : tensor<128x32xf32>) {
  ^bb0(%v: f32, %c: f32, %o: f32):
    %s = arith.addf %v, %c : f32
    linalg.yield %s : f32
  } -> tensor<128x32xf32>
  %halved = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%biased : tensor<128x32xf32>) outs(%e : tensor<128x32xf32>) {
  ^bb0(%v: f32, %o: f32):
    %h = arith.mulf %v, %half : f32
    linalg.yield %h : f32
  } -> tensor<128x32xf32>
  %gelu = linalg.generic {indexing_maps = [#id, #id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%biased, %halved : tensor<128x32xf32>, tensor<128x32xf32>) outs(%e : tensor<128x32xf32>) {
  ^bb0(%v: f32, %h: f32, %o: f32):
    %erf = math.erf %v : f32
    %one = arith.addf %erf, %half : f32
    %g = arith.mulf %h, %one : f32
    linalg.yield %g : f32
  } -> tensor<128x32xf32>
  return %gelu : tensor<128x32xf32>
}

// -----

// Rule 4: matmuls reading one activation (Q, K, V projections) share a
// dispatch, which reads it once.
// CHECK-LABEL: func.func @qkv(
// CHECK:         %[[R:.*]]:3 = twintrack.dispatch "matmul_horizontal_{{[0-9]+}}" kind<matmul_horizontal> (%{{.*}} : tensor<64x32xf32>, tensor<32x32xf32>, tensor<32x32xf32>, tensor<32x32xf32>)
// CHECK-COUNT-3:   linalg.matmul
// CHECK:         return %[[R]]#0, %[[R]]#1, %[[R]]#2
// EXPLAIN: remark: fused horizontally with a matmul reading the same 8192-byte input: one kernel saves a launch (3.000 us)
// EXPLAIN: remark: fused horizontally with a matmul reading the same 8192-byte input: one kernel saves a launch (3.000 us)
// With room for one input tensor per dispatch, the matmuls cannot share one.
// NARROW-LABEL: func.func @qkv(
// NARROW-COUNT-3: twintrack.dispatch "matmul_{{[0-9]+}}" kind<matmul>
func.func @qkv(%x: tensor<64x32xf32>, %wq: tensor<32x32xf32>, %wk: tensor<32x32xf32>, %wv: tensor<32x32xf32>)
    -> (tensor<64x32xf32>, tensor<64x32xf32>, tensor<64x32xf32>) {
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<64x32xf32>
  %f = linalg.fill ins(%zero : f32) outs(%e : tensor<64x32xf32>) -> tensor<64x32xf32>
  %q = linalg.matmul ins(%x, %wq : tensor<64x32xf32>, tensor<32x32xf32>) outs(%f : tensor<64x32xf32>) -> tensor<64x32xf32>
  %k = linalg.matmul ins(%x, %wk : tensor<64x32xf32>, tensor<32x32xf32>) outs(%f : tensor<64x32xf32>) -> tensor<64x32xf32>
  %v = linalg.matmul ins(%x, %wv : tensor<64x32xf32>, tensor<32x32xf32>) outs(%f : tensor<64x32xf32>) -> tensor<64x32xf32>
  return %q, %k, %v : tensor<64x32xf32>, tensor<64x32xf32>, tensor<64x32xf32>
}

// -----

#id = affine_map<(d0, d1) -> (d0, d1)>

// Negative of rule 4: two horizontal pairs whose epilogues read each
// other's matmuls (a complex matmul's re*re - im*im and re*im + im*re;
// each epilogue joins the first matmul it reads, in program order).
// Each pair alone is convex, but as two dispatches each would wait for the
// other ("operand does not dominate"): the second pair stays apart, as the
// first pair's dispatch would sit between its matmuls.
// CHECK-LABEL: func.func @crossed_epilogues(
// CHECK-COUNT-3: twintrack.dispatch
// CHECK-NOT:     twintrack.dispatch
// CHECK:         return
// EXPLAIN: remark: fused horizontally with a matmul reading the same 4096-byte input
// EXPLAIN: remark: kept apart: an op or a dispatch outside would sit between them (horizontally with a matmul
func.func @crossed_epilogues(%x: tensor<32x32xf32>, %y: tensor<32x32xf32>, %a: tensor<32x32xf32>,
                             %b: tensor<32x32xf32>, %c: tensor<32x32xf32>, %d: tensor<32x32xf32>)
    -> (tensor<32x32xf32>, tensor<32x32xf32>) {
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<32x32xf32>
  %f = linalg.fill ins(%zero : f32) outs(%e : tensor<32x32xf32>) -> tensor<32x32xf32>
  %m1 = linalg.matmul ins(%x, %a : tensor<32x32xf32>, tensor<32x32xf32>) outs(%f : tensor<32x32xf32>) -> tensor<32x32xf32>
  %m4 = linalg.matmul ins(%y, %d : tensor<32x32xf32>, tensor<32x32xf32>) outs(%f : tensor<32x32xf32>) -> tensor<32x32xf32>
  %m2 = linalg.matmul ins(%x, %b : tensor<32x32xf32>, tensor<32x32xf32>) outs(%f : tensor<32x32xf32>) -> tensor<32x32xf32>
  %m3 = linalg.matmul ins(%y, %c : tensor<32x32xf32>, tensor<32x32xf32>) outs(%f : tensor<32x32xf32>) -> tensor<32x32xf32>
  %e1 = linalg.generic {indexing_maps = [#id, #id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%m1, %m3 : tensor<32x32xf32>, tensor<32x32xf32>) outs(%e : tensor<32x32xf32>) {
  ^bb0(%p: f32, %q: f32, %o: f32):
    %r = arith.subf %p, %q : f32
    linalg.yield %r : f32
  } -> tensor<32x32xf32>
  %e4 = linalg.generic {indexing_maps = [#id, #id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%m4, %m2 : tensor<32x32xf32>, tensor<32x32xf32>) outs(%e : tensor<32x32xf32>) {
  ^bb0(%p: f32, %q: f32, %o: f32):
    %r = arith.addf %p, %q : f32
    linalg.yield %r : f32
  } -> tensor<32x32xf32>
  return %e1, %e4 : tensor<32x32xf32>, tensor<32x32xf32>
}

// -----

// Rule 4 with ops between the matmuls that read the first one, one
// through the other (reshapes no dispatch takes): the dispatch takes the
// second matmul's place, and both readers move after it, in their order.
// CHECK-LABEL: func.func @readers_between(
// CHECK:         %[[H:.*]]:2 = twintrack.dispatch "matmul_horizontal_{{[0-9]+}}"
// CHECK:         %[[U:.*]] = tensor.expand_shape %[[H]]#0
// CHECK:         %[[V:.*]] = tensor.collapse_shape %[[U]]
// CHECK:         return %[[H]]#1, %[[V]]
func.func @readers_between(%x: tensor<32x32xf32>, %a: tensor<32x32xf32>, %b: tensor<32x32xf32>)
    -> (tensor<32x32xf32>, tensor<1024xf32>) {
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<32x32xf32>
  %f = linalg.fill ins(%zero : f32) outs(%e : tensor<32x32xf32>) -> tensor<32x32xf32>
  %m1 = linalg.matmul ins(%x, %a : tensor<32x32xf32>, tensor<32x32xf32>) outs(%f : tensor<32x32xf32>) -> tensor<32x32xf32>
  %u = tensor.expand_shape %m1 [[0], [1, 2]] output_shape [32, 32, 1] : tensor<32x32xf32> into tensor<32x32x1xf32>
  %v = tensor.collapse_shape %u [[0, 1, 2]] : tensor<32x32x1xf32> into tensor<1024xf32>
  %m2 = linalg.matmul ins(%x, %b : tensor<32x32xf32>, tensor<32x32xf32>) outs(%f : tensor<32x32xf32>) -> tensor<32x32xf32>
  return %m2, %v : tensor<32x32xf32>, tensor<1024xf32>
}

// -----

// Rule 4 twice, the second pair split by the first one's dispatch: %m3
// reads %m1 and moves after the first dispatch, %m4 stays before it; the
// second dispatch takes the place of its last op as the block now stands.
// CHECK-LABEL: func.func @pair_split_by_a_dispatch(
// CHECK:         %[[A:.*]]:2 = twintrack.dispatch "matmul_horizontal_{{[0-9]+}}" kind<matmul_horizontal> (%arg0, %arg1, %arg2 :
// CHECK:         %[[B:.*]]:2 = twintrack.dispatch "matmul_horizontal_{{[0-9]+}}" kind<matmul_horizontal> (%[[A]]#0, %arg4, %arg3 :
// CHECK:         return %[[A]]#1, %[[B]]#0, %[[B]]#1
func.func @pair_split_by_a_dispatch(%x: tensor<32x32xf32>, %a: tensor<32x32xf32>, %b: tensor<32x32xf32>,
                                    %y: tensor<32x32xf32>, %w: tensor<32x32xf32>)
    -> (tensor<32x32xf32>, tensor<32x32xf32>, tensor<32x32xf32>) {
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<32x32xf32>
  %f = linalg.fill ins(%zero : f32) outs(%e : tensor<32x32xf32>) -> tensor<32x32xf32>
  %m1 = linalg.matmul ins(%x, %a : tensor<32x32xf32>, tensor<32x32xf32>) outs(%f : tensor<32x32xf32>) -> tensor<32x32xf32>
  %m3 = linalg.matmul ins(%m1, %w : tensor<32x32xf32>, tensor<32x32xf32>) outs(%f : tensor<32x32xf32>) -> tensor<32x32xf32>
  %m4 = linalg.matmul ins(%y, %w : tensor<32x32xf32>, tensor<32x32xf32>) outs(%f : tensor<32x32xf32>) -> tensor<32x32xf32>
  %m2 = linalg.matmul ins(%x, %b : tensor<32x32xf32>, tensor<32x32xf32>) outs(%f : tensor<32x32xf32>) -> tensor<32x32xf32>
  return %m2, %m3, %m4 : tensor<32x32xf32>, tensor<32x32xf32>, tensor<32x32xf32>
}

// -----

#id = affine_map<(d0, d1) -> (d0, d1)>
#row = affine_map<(d0, d1) -> (d0)>

// Negative of rule 3: an fp16 matmul narrows its f32 accumulator (epilogue);
// the softmax after it widens the result again. That widening is no
// epilogue (the kernel would store twice the bytes, and each reader load
// them): the reductions widen the f16 scores as they read them.
// CHECK-LABEL: func.func @widening_after_matmul(
// CHECK:         %[[S:.*]] = twintrack.dispatch "matmul_{{[0-9]+}}" kind<matmul> ({{.*}}) -> (tensor<64x64xf16>)
// CHECK:           linalg.matmul
// CHECK:           arith.truncf
// CHECK-NOT:       arith.extf
// CHECK:         twintrack.dispatch "reduction_{{[0-9]+}}" kind<reduction> (%[[S]] :
// CHECK:           arith.extf
// EXPLAIN: remark: fused as the matmul's epilogue
// EXPLAIN: remark: kept apart from the matmul: it widens the result (16 -> 32 bits an element), which its readers can do as they load
func.func @widening_after_matmul(%q: tensor<64x32xf16>, %k: tensor<32x64xf16>) -> tensor<64xf32> {
  %zero = arith.constant 0.0 : f32
  %acc0 = tensor.empty() : tensor<64x64xf32>
  %acc = linalg.fill ins(%zero : f32) outs(%acc0 : tensor<64x64xf32>) -> tensor<64x64xf32>
  %s32 = linalg.matmul ins(%q, %k : tensor<64x32xf16>, tensor<32x64xf16>) outs(%acc : tensor<64x64xf32>) -> tensor<64x64xf32>
  %e16 = tensor.empty() : tensor<64x64xf16>
  %s16 = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%s32 : tensor<64x64xf32>) outs(%e16 : tensor<64x64xf16>) {
  ^bb0(%v: f32, %o: f16):
    %n = arith.truncf %v : f32 to f16
    linalg.yield %n : f16
  } -> tensor<64x64xf16>
  %w = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%s16 : tensor<64x64xf16>) outs(%acc0 : tensor<64x64xf32>) {
  ^bb0(%v: f16, %o: f32):
    %x = arith.extf %v : f16 to f32
    linalg.yield %x : f32
  } -> tensor<64x64xf32>
  %er = tensor.empty() : tensor<64xf32>
  %init = linalg.fill ins(%zero : f32) outs(%er : tensor<64xf32>) -> tensor<64xf32>
  %sum = linalg.generic {indexing_maps = [#id, #row], iterator_types = ["parallel", "reduction"]}
      ins(%w : tensor<64x64xf32>) outs(%init : tensor<64xf32>) {
  ^bb0(%v: f32, %a: f32):
    %r = arith.addf %v, %a : f32
    linalg.yield %r : f32
  } -> tensor<64xf32>
  return %sum : tensor<64xf32>
}

// -----

#id = affine_map<(d0, d1) -> (d0, d1)>

// Rule 3 through a widening: the fp16 result is widened for an op computed
// in f32 (batch norm's opmath) and rounded to fp16 again before anything
// else reads it. Nothing wide is ever stored: the whole chain is the
// matmul's epilogue.
// CHECK-LABEL: func.func @widened_and_narrowed_after_matmul(
// CHECK:         twintrack.dispatch "matmul_{{[0-9]+}}" kind<matmul> ({{.*}}) -> (tensor<64x64xf16>)
// CHECK:           linalg.matmul
// CHECK-NOT:     twintrack.dispatch
// CHECK:           arith.extf
// CHECK-NOT:     twintrack.dispatch
// CHECK:           arith.mulf
// CHECK-NOT:     twintrack.dispatch
// CHECK:         return
func.func @widened_and_narrowed_after_matmul(%q: tensor<64x32xf16>, %k: tensor<32x64xf16>) -> tensor<64x64xf16> {
  %zero = arith.constant 0.0 : f32
  %acc0 = tensor.empty() : tensor<64x64xf32>
  %acc = linalg.fill ins(%zero : f32) outs(%acc0 : tensor<64x64xf32>) -> tensor<64x64xf32>
  %s32 = linalg.matmul ins(%q, %k : tensor<64x32xf16>, tensor<32x64xf16>) outs(%acc : tensor<64x64xf32>) -> tensor<64x64xf32>
  %e16 = tensor.empty() : tensor<64x64xf16>
  %s16 = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%s32 : tensor<64x64xf32>) outs(%e16 : tensor<64x64xf16>) {
  ^bb0(%v: f32, %o: f16):
    %n = arith.truncf %v : f32 to f16
    linalg.yield %n : f16
  } -> tensor<64x64xf16>
  %w = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%s16 : tensor<64x64xf16>) outs(%acc0 : tensor<64x64xf32>) {
  ^bb0(%v: f16, %o: f32):
    %x = arith.extf %v : f16 to f32
    %y = arith.mulf %x, %x : f32
    linalg.yield %y : f32
  } -> tensor<64x64xf32>
  %r = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%w : tensor<64x64xf32>) outs(%e16 : tensor<64x64xf16>) {
  ^bb0(%v: f32, %o: f16):
    %n = arith.truncf %v : f32 to f16
    linalg.yield %n : f16
  } -> tensor<64x64xf16>
  return %r : tensor<64x64xf16>
}

// -----

#id = affine_map<(d0, d1) -> (d0, d1)>

// Rule 3 through a clamp's diamonds: each bound is a compare and a select
// that both read the value before it (ReLU6). The first pair joins the
// matmul as a fan-out reader; the second pair reads the first select, and
// joins in turn. No op is left to recompute them: one dispatch.
// CHECK-LABEL: func.func @clamped_after_matmul(
// CHECK:         twintrack.dispatch "matmul_{{[0-9]+}}" kind<matmul>
// CHECK-NOT:     twintrack.dispatch
// CHECK:           arith.select
// CHECK-NOT:     twintrack.dispatch
// CHECK:           arith.select
// CHECK-NOT:     twintrack.dispatch
// CHECK:         return
func.func @clamped_after_matmul(%a: tensor<64x32xf32>, %b: tensor<32x64xf32>) -> tensor<64x64xf32> {
  %zero = arith.constant 0.0 : f32
  %six = arith.constant 6.0 : f32
  %e = tensor.empty() : tensor<64x64xf32>
  %eb = tensor.empty() : tensor<64x64xi1>
  %acc = linalg.fill ins(%zero : f32) outs(%e : tensor<64x64xf32>) -> tensor<64x64xf32>
  %m = linalg.matmul ins(%a, %b : tensor<64x32xf32>, tensor<32x64xf32>) outs(%acc : tensor<64x64xf32>) -> tensor<64x64xf32>
  %y = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%m : tensor<64x64xf32>) outs(%e : tensor<64x64xf32>) {
  ^bb0(%v: f32, %o: f32):
    %d = arith.mulf %v, %v : f32
    linalg.yield %d : f32
  } -> tensor<64x64xf32>
  %low = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%y : tensor<64x64xf32>) outs(%eb : tensor<64x64xi1>) {
  ^bb0(%v: f32, %o: i1):
    %c = arith.cmpf olt, %v, %zero : f32
    linalg.yield %c : i1
  } -> tensor<64x64xi1>
  %r1 = linalg.generic {indexing_maps = [#id, #id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%low, %y : tensor<64x64xi1>, tensor<64x64xf32>) outs(%e : tensor<64x64xf32>) {
  ^bb0(%c: i1, %v: f32, %o: f32):
    %r = arith.select %c, %zero, %v : f32
    linalg.yield %r : f32
  } -> tensor<64x64xf32>
  %high = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%r1 : tensor<64x64xf32>) outs(%eb : tensor<64x64xi1>) {
  ^bb0(%v: f32, %o: i1):
    %c = arith.cmpf ogt, %v, %six : f32
    linalg.yield %c : i1
  } -> tensor<64x64xi1>
  %r2 = linalg.generic {indexing_maps = [#id, #id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%high, %r1 : tensor<64x64xi1>, tensor<64x64xf32>) outs(%e : tensor<64x64xf32>) {
  ^bb0(%c: i1, %v: f32, %o: f32):
    %r = arith.select %c, %six, %v : f32
    linalg.yield %r : f32
  } -> tensor<64x64xf32>
  return %r2 : tensor<64x64xf32>
}

// -----

// Negative: the second matmul reads the first one's result (through an op
// outside both): one dispatch would have to wait for itself. Kept apart.
// CHECK-LABEL: func.func @dependent_matmuls(
// CHECK-COUNT-2: twintrack.dispatch "matmul_{{[0-9]+}}" kind<matmul>
// EXPLAIN: remark: kept apart from the matmul it reads: a matmul is not an epilogue
// EXPLAIN: remark: kept apart: one matmul reads the other's result
func.func @dependent_matmuls(%x: tensor<32x32xf32>, %w: tensor<32x32xf32>) -> tensor<32x32xf32> {
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<32x32xf32>
  %f = linalg.fill ins(%zero : f32) outs(%e : tensor<32x32xf32>) -> tensor<32x32xf32>
  %a = linalg.matmul ins(%x, %w : tensor<32x32xf32>, tensor<32x32xf32>) outs(%f : tensor<32x32xf32>) -> tensor<32x32xf32>
  %b = linalg.matmul ins(%x, %a : tensor<32x32xf32>, tensor<32x32xf32>) outs(%f : tensor<32x32xf32>) -> tensor<32x32xf32>
  return %b : tensor<32x32xf32>
}

// -----

#id = affine_map<(d0, d1) -> (d0, d1)>
#row = affine_map<(d0, d1) -> (d0)>

// Rule 5: a mean, then a variance reading it per row, share a row-wise
// dispatch (the mean is returned too). A reduction read by ops over other
// rows stays apart.
// CHECK-LABEL: func.func @two_reductions(
// CHECK:         %[[R:.*]]:2 = twintrack.dispatch "reduction_rows_{{[0-9]+}}" kind<reduction_rows>
// CHECK:         twintrack.dispatch "elementwise_{{[0-9]+}}" kind<elementwise>
// CHECK:         return %[[R]]#1, %{{.*}}, %[[R]]#0
// NOROWS-LABEL: func.func @two_reductions(
// NOROWS-COUNT-2: twintrack.dispatch "reduction_{{[0-9]+}}" kind<reduction>
func.func @two_reductions(%x: tensor<16x64xf32>) -> (tensor<16xf32>, tensor<16x64xf32>, tensor<16xf32>) {
  %zero = arith.constant 0.0 : f32
  %er = tensor.empty() : tensor<16xf32>
  %e = tensor.empty() : tensor<16x64xf32>
  %si = linalg.fill ins(%zero : f32) outs(%er : tensor<16xf32>) -> tensor<16xf32>
  %sum = linalg.generic {indexing_maps = [#id, #row], iterator_types = ["parallel", "reduction"]}
      ins(%x : tensor<16x64xf32>) outs(%si : tensor<16xf32>) {
  ^bb0(%v: f32, %s: f32):
    %r = arith.addf %v, %s : f32
    linalg.yield %r : f32
  } -> tensor<16xf32>
  %sq = linalg.generic {indexing_maps = [#id, #row, #row], iterator_types = ["parallel", "reduction"]}
      ins(%x, %sum : tensor<16x64xf32>, tensor<16xf32>) outs(%si : tensor<16xf32>) {
  ^bb0(%v: f32, %m: f32, %s: f32):
    %d = arith.subf %v, %m : f32
    %p = arith.mulf %d, %d : f32
    %r = arith.addf %p, %s : f32
    linalg.yield %r : f32
  } -> tensor<16xf32>
  %copy = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%x : tensor<16x64xf32>) outs(%e : tensor<16x64xf32>) {
  ^bb0(%v: f32, %o: f32):
    linalg.yield %v : f32
  } -> tensor<16x64xf32>
  return %sq, %copy, %sum : tensor<16xf32>, tensor<16x64xf32>, tensor<16xf32>
}

// -----

#id = affine_map<(d0, d1) -> (d0, d1)>
#row = affine_map<(d0, d1) -> (d0)>
#r1 = affine_map<(d0) -> (d0)>

// Rule 5 through a per-row op: the mean is the sum divided per row (kept
// apart from its readers where recomputing it per element costs more than
// it saves: COSTLY); the variance and the normalization read the mean, not
// the sum, and still join the sum's row-wise dispatch.
// COSTLY-LABEL: func.func @mean_then_variance(
// COSTLY:         twintrack.dispatch "reduction_rows_{{[0-9]+}}" kind<reduction_rows>
// COSTLY-NOT:     twintrack.dispatch
// COSTLY:         return
func.func @mean_then_variance(%x: tensor<16x64xf32>) -> tensor<16x64xf32> {
  %zero = arith.constant 0.0 : f32
  %n = arith.constant 64.0 : f32
  %er = tensor.empty() : tensor<16xf32>
  %e = tensor.empty() : tensor<16x64xf32>
  %si = linalg.fill ins(%zero : f32) outs(%er : tensor<16xf32>) -> tensor<16xf32>
  %sum = linalg.generic {indexing_maps = [#id, #row], iterator_types = ["parallel", "reduction"]}
      ins(%x : tensor<16x64xf32>) outs(%si : tensor<16xf32>) {
  ^bb0(%v: f32, %s: f32):
    %r = arith.addf %v, %s : f32
    linalg.yield %r : f32
  } -> tensor<16xf32>
  %mean = linalg.generic {indexing_maps = [#r1, #r1], iterator_types = ["parallel"]}
      ins(%sum : tensor<16xf32>) outs(%er : tensor<16xf32>) {
  ^bb0(%s: f32, %o: f32):
    %m = arith.divf %s, %n : f32
    linalg.yield %m : f32
  } -> tensor<16xf32>
  %sq = linalg.generic {indexing_maps = [#id, #row, #row], iterator_types = ["parallel", "reduction"]}
      ins(%x, %mean : tensor<16x64xf32>, tensor<16xf32>) outs(%si : tensor<16xf32>) {
  ^bb0(%v: f32, %m: f32, %s: f32):
    %d = arith.subf %v, %m : f32
    %p = arith.mulf %d, %d : f32
    %r = arith.addf %p, %s : f32
    linalg.yield %r : f32
  } -> tensor<16xf32>
  %out = linalg.generic {indexing_maps = [#id, #row, #row, #id], iterator_types = ["parallel", "parallel"]}
      ins(%x, %mean, %sq : tensor<16x64xf32>, tensor<16xf32>, tensor<16xf32>) outs(%e : tensor<16x64xf32>) {
  ^bb0(%v: f32, %m: f32, %q: f32, %o: f32):
    %d = arith.subf %v, %m : f32
    %r = arith.mulf %d, %q : f32
    linalg.yield %r : f32
  } -> tensor<16x64xf32>
  return %out : tensor<16x64xf32>
}

// -----

#id = affine_map<(d0, d1) -> (d0, d1)>
#row = affine_map<(d0, d1) -> (d0)>

// Negative of rule 5: the row sums are read by an op over other rows (16 x 32,
// not 16 x 64): no row-wise dispatch.
// CHECK-LABEL: func.func @other_rows(
// CHECK:         twintrack.dispatch "reduction_{{[0-9]+}}" kind<reduction>
// CHECK:         twintrack.dispatch "elementwise_{{[0-9]+}}" kind<elementwise>
// EXPLAIN: remark: kept apart from the reduction it reads (16 rows of 64): a linalg.generic over 16x32 does not run over the same 16 rows of 64
func.func @other_rows(%x: tensor<16x64xf32>, %y: tensor<16x32xf32>) -> tensor<16x32xf32> {
  %zero = arith.constant 0.0 : f32
  %er = tensor.empty() : tensor<16xf32>
  %e = tensor.empty() : tensor<16x32xf32>
  %si = linalg.fill ins(%zero : f32) outs(%er : tensor<16xf32>) -> tensor<16xf32>
  %sum = linalg.generic {indexing_maps = [#id, #row], iterator_types = ["parallel", "reduction"]}
      ins(%x : tensor<16x64xf32>) outs(%si : tensor<16xf32>) {
  ^bb0(%v: f32, %s: f32):
    %r = arith.addf %v, %s : f32
    linalg.yield %r : f32
  } -> tensor<16xf32>
  %scaled = linalg.generic {indexing_maps = [#id, #row, #id], iterator_types = ["parallel", "parallel"]}
      ins(%y, %sum : tensor<16x32xf32>, tensor<16xf32>) outs(%e : tensor<16x32xf32>) {
  ^bb0(%v: f32, %s: f32, %o: f32):
    %r = arith.mulf %v, %s : f32
    linalg.yield %r : f32
  } -> tensor<16x32xf32>
  return %scaled : tensor<16x32xf32>
}

// -----

#id = affine_map<(d0, d1) -> (d0, d1)>
#row = affine_map<(d0, d1) -> (d0)>
#col = affine_map<(d0, d1) -> (d1)>

// Negative: the bias add is the matmul's epilogue, so it cannot also join the
// row sum that reads it: one dispatch holds one matmul or one reduction.
// CHECK-LABEL: func.func @two_roots(
// CHECK:         %[[M:.*]] = twintrack.dispatch "matmul_{{[0-9]+}}" kind<matmul>
// CHECK:           linalg.matmul
// CHECK:           arith.addf
// CHECK:         twintrack.dispatch "reduction_{{[0-9]+}}" kind<reduction> (%[[M]] :
// EXPLAIN: remark: fused as the matmul's epilogue
// EXPLAIN: remark: kept apart from the matmul it reads: a reduction is not an epilogue
func.func @two_roots(%x: tensor<32x16xf32>, %w: tensor<16x64xf32>, %b: tensor<64xf32>) -> tensor<32xf32> {
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<32x64xf32>
  %f = linalg.fill ins(%zero : f32) outs(%e : tensor<32x64xf32>) -> tensor<32x64xf32>
  %m = linalg.matmul ins(%x, %w : tensor<32x16xf32>, tensor<16x64xf32>) outs(%f : tensor<32x64xf32>) -> tensor<32x64xf32>
  %y = linalg.generic {indexing_maps = [#id, #col, #id], iterator_types = ["parallel", "parallel"]}
      ins(%m, %b : tensor<32x64xf32>, tensor<64xf32>) outs(%e : tensor<32x64xf32>) {
  ^bb0(%v: f32, %c: f32, %o: f32):
    %s = arith.addf %v, %c : f32
    linalg.yield %s : f32
  } -> tensor<32x64xf32>
  %er = tensor.empty() : tensor<32xf32>
  %si = linalg.fill ins(%zero : f32) outs(%er : tensor<32xf32>) -> tensor<32xf32>
  %sum = linalg.generic {indexing_maps = [#id, #row], iterator_types = ["parallel", "reduction"]}
      ins(%y : tensor<32x64xf32>) outs(%si : tensor<32xf32>) {
  ^bb0(%v: f32, %s: f32):
    %r = arith.addf %v, %s : f32
    linalg.yield %r : f32
  } -> tensor<32xf32>
  return %sum : tensor<32xf32>
}

// -----

#ids = affine_map<(d0, d1, d2) -> (d0, d1)>
#id3 = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
#byposition = affine_map<(d0, d1, d2) -> (d1, d2)>
#position = affine_map<(d0, d1) -> (d0)>
#id2 = affine_map<(d0, d1) -> (d0, d1)>

// Rule 5 with gathers (BERT's embeddings before their layernorm): token rows
// looked up at the current column, plus position rows looked up over 16x32
// and broadcast over the batch, then the row sums and the centering that
// reads them: one row-wise dispatch. The position lookup does not run over
// the 2x16 rows, but elementwise fusion inlines it into the sum reading it.
// CHECK-LABEL: func.func @embedding_rows(
// CHECK:         %[[D:.*]] = twintrack.dispatch "reduction_rows_{{[0-9]+}}" kind<reduction_rows>
// CHECK-NOT:     twintrack.dispatch
// CHECK:         return %[[D]]
// EXPLAIN: remark: fused row-wise with the reduction it reads (32 rows of 32): one block per row reads the row once (gathered elements: once per step reading them)
// NOROWS-LABEL: func.func @embedding_rows(
// NOROWS-COUNT-2: twintrack.dispatch "{{reduction|elementwise}}_{{[0-9]+}}" kind<{{reduction|elementwise}}>
func.func @embedding_rows(%ids: tensor<2x16xi64>, %positions: tensor<16xi64>, %words: tensor<128x32xf32>,
                          %table: tensor<64x32xf32>) -> tensor<2x16x32xf32> {
  %zero = arith.constant 0.0 : f32
  %e3 = tensor.empty() : tensor<2x16x32xf32>
  %e2 = tensor.empty() : tensor<16x32xf32>
  %er = tensor.empty() : tensor<2x16xf32>
  %tokens = linalg.generic {indexing_maps = [#ids, #id3], iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%ids : tensor<2x16xi64>) outs(%e3 : tensor<2x16x32xf32>) {
  ^bb0(%id: i64, %o: f32):
    %row = arith.index_cast %id : i64 to index
    %column = linalg.index 2 : index
    %v = tensor.extract %words[%row, %column] : tensor<128x32xf32>
    linalg.yield %v : f32
  } -> tensor<2x16x32xf32>
  %placed = linalg.generic {indexing_maps = [#position, #id2], iterator_types = ["parallel", "parallel"]}
      ins(%positions : tensor<16xi64>) outs(%e2 : tensor<16x32xf32>) {
  ^bb0(%p: i64, %o: f32):
    %row = arith.index_cast %p : i64 to index
    %column = linalg.index 1 : index
    %v = tensor.extract %table[%row, %column] : tensor<64x32xf32>
    linalg.yield %v : f32
  } -> tensor<16x32xf32>
  %x = linalg.generic {indexing_maps = [#id3, #byposition, #id3], iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%tokens, %placed : tensor<2x16x32xf32>, tensor<16x32xf32>) outs(%e3 : tensor<2x16x32xf32>) {
  ^bb0(%a: f32, %b: f32, %o: f32):
    %s = arith.addf %a, %b : f32
    linalg.yield %s : f32
  } -> tensor<2x16x32xf32>
  %si = linalg.fill ins(%zero : f32) outs(%er : tensor<2x16xf32>) -> tensor<2x16xf32>
  %sum = linalg.generic {indexing_maps = [#id3, #ids], iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%x : tensor<2x16x32xf32>) outs(%si : tensor<2x16xf32>) {
  ^bb0(%v: f32, %s: f32):
    %r = arith.addf %v, %s : f32
    linalg.yield %r : f32
  } -> tensor<2x16xf32>
  %centered = linalg.generic {indexing_maps = [#id3, #ids, #id3], iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%x, %sum : tensor<2x16x32xf32>, tensor<2x16xf32>) outs(%e3 : tensor<2x16x32xf32>) {
  ^bb0(%v: f32, %s: f32, %o: f32):
    %r = arith.subf %v, %s : f32
    linalg.yield %r : f32
  } -> tensor<2x16x32xf32>
  return %centered : tensor<2x16x32xf32>
}

// -----

#id = affine_map<(d0, d1) -> (d0, d1)>
#row = affine_map<(d0, d1) -> (d0)>

// Negative of rule 5 with gathers: the op reading the row sums also gathers
// one at a computed row, which another row's block computes.
// CHECK-LABEL: func.func @gather_from_sums(
// CHECK:         twintrack.dispatch "reduction_{{[0-9]+}}" kind<reduction>
// CHECK:         twintrack.dispatch "elementwise_{{[0-9]+}}" kind<elementwise>
// EXPLAIN: remark: kept apart from the reduction it reads (16 rows of 64): a gather reads a tensor the dispatch computes (other rows' values)
func.func @gather_from_sums(%x: tensor<16x64xf32>, %partner: tensor<16xi64>) -> tensor<16x64xf32> {
  %zero = arith.constant 0.0 : f32
  %er = tensor.empty() : tensor<16xf32>
  %e = tensor.empty() : tensor<16x64xf32>
  %si = linalg.fill ins(%zero : f32) outs(%er : tensor<16xf32>) -> tensor<16xf32>
  %sum = linalg.generic {indexing_maps = [#id, #row], iterator_types = ["parallel", "reduction"]}
      ins(%x : tensor<16x64xf32>) outs(%si : tensor<16xf32>) {
  ^bb0(%v: f32, %s: f32):
    %r = arith.addf %v, %s : f32
    linalg.yield %r : f32
  } -> tensor<16xf32>
  %out = linalg.generic {indexing_maps = [#id, #row, #row, #id], iterator_types = ["parallel", "parallel"]}
      ins(%x, %sum, %partner : tensor<16x64xf32>, tensor<16xf32>, tensor<16xi64>) outs(%e : tensor<16x64xf32>) {
  ^bb0(%v: f32, %s: f32, %p: i64, %o: f32):
    %row = arith.index_cast %p : i64 to index
    %other = tensor.extract %sum[%row] : tensor<16xf32>
    %d = arith.subf %s, %other : f32
    %r = arith.mulf %v, %d : f32
    linalg.yield %r : f32
  } -> tensor<16x64xf32>
  return %out : tensor<16x64xf32>
}

// -----

#id = affine_map<(d0, d1) -> (d0, d1)>
#row = affine_map<(d0, d1) -> (d0)>

// Negative of rule 5: a body op the row kernel does not emit (tensor.dim)
// keeps the reader apart, and the explanation names it.
// CHECK-LABEL: func.func @body_not_emitted(
// CHECK:         twintrack.dispatch "reduction_{{[0-9]+}}" kind<reduction>
// CHECK:         twintrack.dispatch "elementwise_{{[0-9]+}}" kind<elementwise>
// EXPLAIN: remark: kept apart from the reduction it reads (16 rows of 64): a linalg.generic over 16x64 computes tensor.dim, which the row kernel does not emit
func.func @body_not_emitted(%x: tensor<16x64xf32>, %t: tensor<?xf32>) -> tensor<16x64xf32> {
  %zero = arith.constant 0.0 : f32
  %c0 = arith.constant 0 : index
  %er = tensor.empty() : tensor<16xf32>
  %e = tensor.empty() : tensor<16x64xf32>
  %si = linalg.fill ins(%zero : f32) outs(%er : tensor<16xf32>) -> tensor<16xf32>
  %sum = linalg.generic {indexing_maps = [#id, #row], iterator_types = ["parallel", "reduction"]}
      ins(%x : tensor<16x64xf32>) outs(%si : tensor<16xf32>) {
  ^bb0(%v: f32, %s: f32):
    %r = arith.addf %v, %s : f32
    linalg.yield %r : f32
  } -> tensor<16xf32>
  %out = linalg.generic {indexing_maps = [#id, #row, #id], iterator_types = ["parallel", "parallel"]}
      ins(%x, %sum : tensor<16x64xf32>, tensor<16xf32>) outs(%e : tensor<16x64xf32>) {
  ^bb0(%v: f32, %s: f32, %o: f32):
    %n = tensor.dim %t, %c0 : tensor<?xf32>
    %ni = arith.index_cast %n : index to i32
    %nf = arith.sitofp %ni : i32 to f32
    %d = arith.divf %s, %nf : f32
    %r = arith.subf %v, %d : f32
    linalg.yield %r : f32
  } -> tensor<16x64xf32>
  return %out : tensor<16x64xf32>
}
