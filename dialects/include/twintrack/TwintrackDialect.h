//===- TwintrackDialect.h - the twintrack dialect ---------------*- C++ -*-===//

#ifndef TWINTRACK_TWINTRACKDIALECT_H
#define TWINTRACK_TWINTRACKDIALECT_H

#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/Attributes.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Dialect.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/OpImplementation.h"
#include "mlir/Interfaces/ControlFlowInterfaces.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

#include "twintrack/TwintrackOpsDialect.h.inc"

#include "twintrack/TwintrackEnums.h.inc"

#define GET_ATTRDEF_CLASSES
#include "twintrack/TwintrackAttrs.h.inc"

#define GET_OP_CLASSES
#include "twintrack/TwintrackOps.h.inc"

#endif // TWINTRACK_TWINTRACKDIALECT_H
