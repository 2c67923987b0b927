//===- Passes.h - twintrack passes ------------------------------*- C++ -*-===//

#ifndef TWINTRACK_PASSES_H
#define TWINTRACK_PASSES_H

#include "mlir/Dialect/Affine/IR/AffineOps.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/Pass/Pass.h"
#include "twintrack/TwintrackDialect.h"

namespace mlir::twintrack {

#define GEN_PASS_DECL
#include "twintrack/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "twintrack/Passes.h.inc"

} // namespace mlir::twintrack

#endif // TWINTRACK_PASSES_H
