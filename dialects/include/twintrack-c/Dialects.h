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

#ifdef __cplusplus
}
#endif

#endif /* TWINTRACK_C_DIALECTS_H */
