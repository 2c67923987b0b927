//===- TwintrackOps.td - twintrack ops -------------------------*- tablegen -*-===//

#ifndef TWINTRACK_OPS
#define TWINTRACK_OPS

include "twintrack/TwintrackDialect.td"
include "mlir/IR/RegionKindInterface.td"
include "mlir/Interfaces/ControlFlowInterfaces.td"
include "mlir/Interfaces/SideEffectInterfaces.td"

def Twintrack_DispatchOp : Twintrack_Op<"dispatch", [
    IsolatedFromAbove, RecursiveMemoryEffects]> {
  let summary = "ops that become one kernel";
  let description = [{
    The region computes the results from the inputs, which it receives as
    block arguments (one per input, same types): the region is isolated from
    above, so everything a kernel reads is an explicit input. It ends in a
    `twintrack.yield` of one value per result.

    The label names the dispatch: reports show it, and
    twintrack-dissolve-dispatches leaves it on the ops it takes out, so their
    group is found again. `kind` says what kind of kernel it is, for the
    kernel generators: twintrack-form-dispatches always sets it; a dispatch
    written by hand may leave it out.

    ```mlir
    %y = twintrack.dispatch "bias_relu" kind<elementwise> (%x, %b : tensor<4x8xf32>, tensor<8xf32>) -> (tensor<4x8xf32>) {
    ^bb0(%xa: tensor<4x8xf32>, %ba: tensor<8xf32>):
      ...
      twintrack.yield %r : tensor<4x8xf32>
    }
    ```
  }];
  let arguments = (ins StrAttr:$label, OptionalAttr<Twintrack_DispatchKindAttr>:$kind,
                       Variadic<AnyType>:$inputs);
  let results = (outs Variadic<AnyType>:$results);
  let regions = (region SizedRegion<1>:$body);
  let assemblyFormat = [{
    $label (`kind` `` $kind^)? ` ` `(` ($inputs^ `:` type($inputs))? `)` `->` `(` type($results) `)` $body attr-dict
  }];
  let hasVerifier = 1;
  let skipDefaultBuilders = 1;
  let builders = [
    OpBuilder<(ins "::llvm::StringRef":$label, "::mlir::twintrack::DispatchKind":$kind,
                   "::mlir::TypeRange":$resultTypes, "::mlir::ValueRange":$inputs)>
  ];
}

def Twintrack_YieldOp : Twintrack_Op<"yield", [
    Pure, ReturnLike, Terminator, HasParent<"DispatchOp">]> {
  let summary = "the values a dispatch returns";
  let arguments = (ins Variadic<AnyType>:$values);
  let assemblyFormat = "($values^ `:` type($values))? attr-dict";
}

#endif // TWINTRACK_OPS
