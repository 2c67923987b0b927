/*===- twintrack-c/Dialects.h - C API of the twintrack dialect ------------===*/

#ifndef TWINTRACK_C_DIALECTS_H
#define TWINTRACK_C_DIALECTS_H

#include "mlir-c/IR.h"

#ifdef __cplusplus
extern "C" {
#endif

MLIR_DECLARE_CAPI_DIALECT_REGISTRATION(Twintrack, twintrack);

/// Register twintrack's passes (twintrack-form-dispatches, ...) in the global
/// pass registry, so textual pipelines can name them.
MLIR_CAPI_EXPORTED void twintrackRegisterPasses(void);

/// Is `attr` a #twintrack.dispatch_kind<...> attribute?
MLIR_CAPI_EXPORTED bool twintrackAttributeIsADispatchKind(MlirAttribute attr);

/// The name of a #twintrack.dispatch_kind attribute's case ("reduction_rows");
/// static storage, valid as long as the program runs.
MLIR_CAPI_EXPORTED MlirStringRef twintrackDispatchKindAttrGetName(MlirAttribute attr);

/// #nvvm.shape<m, n, k>, the shape of an mma.sync or wgmma (the upstream
/// Python bindings have no builder for it).
MLIR_CAPI_EXPORTED MlirAttribute twintrackNVVMMMAShapeAttrGet(MlirContext ctx, int m, int n, int k);

/// #gpu.loop_dim_map mapping a parallel loop dimension to `processor` (a
/// gpu::Processor value) with identity map and bound (no Python builder).
MLIR_CAPI_EXPORTED MlirAttribute twintrackGPULoopDimMapAttrGet(MlirContext ctx, int processor);

#ifdef __cplusplus
}
#endif

#endif /* TWINTRACK_C_DIALECTS_H */
