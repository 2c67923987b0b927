//===- CAPI.cpp - C API of the twintrack dialect --------------------------===//

#include "twintrack-c/Dialects.h"

#include "mlir/CAPI/IR.h"
#include "mlir/CAPI/Registration.h"
#include "mlir/CAPI/Support.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "twintrack/Passes.h"
#include "twintrack/TwintrackDialect.h"

MLIR_DEFINE_CAPI_DIALECT_REGISTRATION(Twintrack, twintrack, mlir::twintrack::TwintrackDialect)

void twintrackRegisterPasses(void) { mlir::twintrack::registerTwintrackPasses(); }

bool twintrackAttributeIsADispatchKind(MlirAttribute attr) {
  return mlir::isa<mlir::twintrack::DispatchKindAttr>(unwrap(attr));
}

MlirAttribute twintrackNVVMMMAShapeAttrGet(MlirContext ctx, int m, int n, int k) {
  mlir::MLIRContext *context = unwrap(ctx);
  context->getOrLoadDialect("nvvm");
  return wrap(mlir::NVVM::MMAShapeAttr::get(context, m, n, k));
}

MlirAttribute twintrackGPULoopDimMapAttrGet(MlirContext ctx, int processor) {
  mlir::MLIRContext *context = unwrap(ctx);
  context->getOrLoadDialect("gpu");
  mlir::AffineMap identity = mlir::AffineMap::getMultiDimIdentityMap(1, context);
  return wrap(mlir::gpu::ParallelLoopDimMappingAttr::get(context, static_cast<mlir::gpu::Processor>(processor),
                                                         identity, identity));
}

MlirStringRef twintrackDispatchKindAttrGetName(MlirAttribute attr) {
  auto kind = mlir::cast<mlir::twintrack::DispatchKindAttr>(unwrap(attr));
  return wrap(mlir::twintrack::stringifyDispatchKind(kind.getValue()));
}
