//===- CAPI.cpp - C API of the twintrack dialect --------------------------===//

#include "twintrack-c/Dialects.h"

#include "mlir/CAPI/IR.h"
#include "mlir/CAPI/Registration.h"
#include "mlir/CAPI/Support.h"
#include "twintrack/Passes.h"
#include "twintrack/TwintrackDialect.h"

MLIR_DEFINE_CAPI_DIALECT_REGISTRATION(Twintrack, twintrack, mlir::twintrack::TwintrackDialect)

void twintrackRegisterPasses(void) { mlir::twintrack::registerTwintrackPasses(); }

bool twintrackAttributeIsADispatchKind(MlirAttribute attr) {
  return mlir::isa<mlir::twintrack::DispatchKindAttr>(unwrap(attr));
}

MlirStringRef twintrackDispatchKindAttrGetName(MlirAttribute attr) {
  auto kind = mlir::cast<mlir::twintrack::DispatchKindAttr>(unwrap(attr));
  return wrap(mlir::twintrack::stringifyDispatchKind(kind.getValue()));
}
