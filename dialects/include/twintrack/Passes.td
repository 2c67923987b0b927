//===- Passes.td - twintrack passes ----------------------------*- tablegen -*-===//

#ifndef TWINTRACK_PASSES
#define TWINTRACK_PASSES

include "mlir/Pass/PassBase.td"

def FormDispatches : Pass<"twintrack-form-dispatches", "::mlir::func::FuncOp"> {
  let summary = "Group linalg-on-tensors ops into twintrack.dispatch regions, by a cost model";
  let description = [{
    Every linalg op on tensors ends up in exactly one `twintrack.dispatch`,
    the unit that becomes one kernel. Groups grow along producer/consumer
    edges when the cost model says the fusion pays:

    - an elementwise producer into an elementwise or reduction consumer
      (elementwise chains; softmax and layernorm producers). A producer with
      several consumers is recomputed in each (cloned into each dispatch);
    - an elementwise consumer into a matmul or convolution (an epilogue:
      bias, activation, residual);
    - matmuls reading the same input (horizontal fusion, e.g. Q/K/V
      projections of one activation);
    - a reduction along rows and the ops reading its per-row result, when
      all run over the same rows (`row-fusion`: layernorm's mean, variance
      and normalization, softmax's max, sum and division become one
      row-wise dispatch, `reduction_rows_N`).

    Before grouping, a transpose of the last two dims feeding a matmul's
    right operand (a linear layer's weight) is folded into the matmul's
    indexing maps (`transposed-operands`): the matmul reads the untransposed
    tensor, and the transpose's kernel and its copy go.

    The cost of a fusion is the flops it recomputes: a producer read R times
    per element by its consumer's loops runs R times (a matmul reads each
    element of A once per column of B, so producers are never fused into
    matmuls). Its gain is the bytes that no longer go through memory. Both
    are turned into time on a roofline: `bandwidth` (bytes/s) and `flop-rate`
    (flop/s), plus `launch-overhead` (s) for each kernel a fusion removes;
    twintrack fills them in from lowering/targets/<target>.toml. Pressure
    limits bound what one kernel may hold: `max-inputs` tensors read and
    `max-body-ops` arithmetic ops per element (live values in registers).
    Fills and empty tensors initialising an op are copied into its dispatch.

    With `explain`, every decision is reported as a remark on the consumer.
  }];
  let dependentDialects = ["::mlir::twintrack::TwintrackDialect"];
  let options = [
    Option<"bandwidth", "bandwidth", "double", /*default=*/"4.0e12",
           "memory bandwidth of the target, bytes per second">,
    Option<"flopRate", "flop-rate", "double", /*default=*/"5.0e13",
           "arithmetic rate of the target, floating-point ops per second">,
    Option<"launchOverhead", "launch-overhead", "double", /*default=*/"3.0e-6",
           "cost of one more kernel launch, seconds (what merging two kernels saves)">,
    Option<"maxInputs", "max-inputs", "unsigned", /*default=*/"12",
           "most tensors one dispatch may read (register and parameter pressure)">,
    Option<"maxBodyOps", "max-body-ops", "unsigned", /*default=*/"64",
           "most arithmetic ops per element in one dispatch (register pressure of the fused kernel)">,
    Option<"explain", "explain", "bool", /*default=*/"false",
           "report every fusion decision as a remark">,
    Option<"fuse", "fuse", "bool", /*default=*/"true",
           "when false, every op gets a dispatch of its own (no fusion at all)">,
    Option<"epilogues", "epilogues", "bool", /*default=*/"true",
           "fuse elementwise consumers into matmuls (only where the target's kernels apply epilogues)">,
    Option<"transposedOperands", "transposed-operands", "bool", /*default=*/"true",
           "a matmul reads a transposed operand through its indexing maps instead of a transpose kernel">,
    Option<"rowFusion", "row-fusion", "bool", /*default=*/"true",
           "put a reduction along rows and the ops reading its per-row result into one dispatch (only where the target generates row-wise kernels)">,
    Option<"dynamicExtent", "dynamic-extent", "int64_t", /*default=*/"256",
           "the size a dim known only at run time (a dynamic shape) is priced at">,
    Option<"horizontal", "horizontal", "bool", /*default=*/"true",
           "put matmuls reading one tensor into one dispatch (only where the target generates such kernels)">,
  ];
}

def FoldConstantGenerics : Pass<"twintrack-fold-constant-generics", "::mlir::func::FuncOp"> {
  let summary = "A linalg.generic whose inputs are splat constants becomes a splat constant";
  let description = [{
    Its payload is folded on the inputs' values, each op by its own folder;
    a generic whose payload does not fold (an op without a folder, an index)
    is left alone. Decompositions compute on 0-d constants (an unrolled
    loop's step counter and the index arithmetic on it): folded, no kernel
    recomputes them, and fusion does not copy their chains.
  }];
  let dependentDialects = ["::mlir::arith::ArithDialect"];
}

def FuseInDispatches : Pass<"twintrack-fuse-in-dispatches", "::mlir::func::FuncOp"> {
  let summary = "Elementwise fusion of linalg ops, within each twintrack.dispatch only";
  let description = [{
    Upstream's producer/consumer elementwise fusion and reshape propagation,
    applied inside each dispatch: the ops a dispatch groups merge into as few
    linalg ops as they can, and nothing crosses a dispatch boundary. A
    transpose next to an elementwise generic is generalized first, so it
    merges too (a permute followed by a scale is one kernel). A matmul
    or convolution and the reshapes around it are left alone, so they stay
    named ops for the kernel generators (an elementwise epilogue stays a
    separate op in the matmul's dispatch). In an elementwise dispatch the
    generics over the same iterations then become one multi-result generic,
    each value computed once for all that read it (upstream's fusion would
    copy a producer into each reader, and copies of copies compound).
  }];
  let dependentDialects = ["::mlir::linalg::LinalgDialect", "::mlir::tensor::TensorDialect",
                           "::mlir::affine::AffineDialect"];
}

def DissolveDispatches : Pass<"twintrack-dissolve-dispatches", "::mlir::func::FuncOp"> {
  let summary = "Inline every twintrack.dispatch region where the dispatch was";
  let description = [{
    Bufferization and the loop lowerings work on plain linalg ops: each
    dispatch's body replaces it, its inputs taking the place of its block
    arguments.
  }];
}

#endif // TWINTRACK_PASSES
