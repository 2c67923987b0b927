//===- TwintrackDialect.td - the twintrack dialect -------------*- tablegen -*-===//
//
// twintrack's own ops: dispatch regions (the ops that become one kernel),
// formed by the fusion pass on linalg-on-tensors.
//
//===----------------------------------------------------------------------===//

#ifndef TWINTRACK_DIALECT
#define TWINTRACK_DIALECT

include "mlir/IR/OpBase.td"

def Twintrack_Dialect : Dialect {
  let name = "twintrack";
  let summary = "twintrack's dispatch regions";
  let description = [{
    A `twintrack.dispatch` groups the ops that one kernel computes. Fusion
    decides the groups; each target then emits one kernel per dispatch.
  }];
  let cppNamespace = "::mlir::twintrack";
}

class Twintrack_Op<string mnemonic, list<Trait> traits = []>
    : Op<Twintrack_Dialect, mnemonic, traits>;

#endif // TWINTRACK_DIALECT
