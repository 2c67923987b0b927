//===- TwintrackDialect.td - the twintrack dialect -------------*- tablegen -*-===//
//
// twintrack's own ops: dispatch regions (the ops that become one kernel),
// formed by the fusion pass on linalg-on-tensors, and the kind of kernel
// each dispatch is (an enum attribute the kernel generators read).
//
//===----------------------------------------------------------------------===//

#ifndef TWINTRACK_DIALECT
#define TWINTRACK_DIALECT

include "mlir/IR/AttrTypeBase.td"
include "mlir/IR/EnumAttr.td"
include "mlir/IR/OpBase.td"

def Twintrack_Dialect : Dialect {
  let name = "twintrack";
  let summary = "twintrack's dispatch regions";
  let description = [{
    A `twintrack.dispatch` groups the ops that one kernel computes. Fusion
    decides the groups; each target then emits one kernel per dispatch.
  }];
  let cppNamespace = "::mlir::twintrack";
  let useDefaultAttributePrinterParser = 1;
}

// The kinds of dispatch twintrack-form-dispatches makes: the kind of its
// root op(s), and how several roots share it. Each label it prints is a
// kind's name and a number (`reduction_rows_2`).
def Twintrack_DispatchKindEnum : I32Enum<"DispatchKind", "the kind of kernel a dispatch is", [
    // no reduction or matmul
    I32EnumCase<"elementwise", 0>,
    // one reduction
    I32EnumCase<"reduction", 1>,
    // reductions along rows and the ops reading their per-row results
    I32EnumCase<"reduction_rows", 2>,
    // several reductions, whose results no other op of the dispatch reads
    I32EnumCase<"reduction_horizontal", 3>,
    // one matmul or convolution, with its epilogue
    I32EnumCase<"matmul", 4>,
    // matmuls reading one tensor
    I32EnumCase<"matmul_horizontal", 5>,
  ]> {
  let cppNamespace = "::mlir::twintrack";
}

// #twintrack.dispatch_kind<reduction_rows>: on a twintrack.dispatch, and on
// each linalg op twintrack-dissolve-dispatches takes out of one.
def Twintrack_DispatchKindAttr : EnumAttr<Twintrack_Dialect, Twintrack_DispatchKindEnum, "dispatch_kind"> {
  let assemblyFormat = "`<` $value `>`";
}

class Twintrack_Op<string mnemonic, list<Trait> traits = []>
    : Op<Twintrack_Dialect, mnemonic, traits>;

#endif // TWINTRACK_DIALECT
