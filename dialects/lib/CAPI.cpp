//===- CAPI.cpp - C API of the twintrack dialect --------------------------===//

#include "twintrack-c/Dialects.h"

#include "mlir/CAPI/Registration.h"
#include "twintrack/Passes.h"
#include "twintrack/TwintrackDialect.h"

MLIR_DEFINE_CAPI_DIALECT_REGISTRATION(Twintrack, twintrack, mlir::twintrack::TwintrackDialect)

void twintrackRegisterPasses(void) { mlir::twintrack::registerTwintrackPasses(); }
