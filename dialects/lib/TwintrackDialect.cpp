//===- TwintrackDialect.cpp - the twintrack dialect and its ops ----------===//

#include "twintrack/TwintrackDialect.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/DialectImplementation.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace mlir::twintrack;

#include "twintrack/TwintrackOpsDialect.cpp.inc"

#include "twintrack/TwintrackEnums.cpp.inc"

#define GET_ATTRDEF_CLASSES
#include "twintrack/TwintrackAttrs.cpp.inc"

void TwintrackDialect::initialize() {
  addAttributes<
#define GET_ATTRDEF_LIST
#include "twintrack/TwintrackAttrs.cpp.inc"
      >();
  addOperations<
#define GET_OP_LIST
#include "twintrack/TwintrackOps.cpp.inc"
      >();
}

//===----------------------------------------------------------------------===//
// DispatchOp
//===----------------------------------------------------------------------===//

void DispatchOp::build(OpBuilder &builder, OperationState &state, StringRef label, DispatchKind kind,
                       TypeRange resultTypes, ValueRange inputs) {
  state.addAttribute(getLabelAttrName(state.name), builder.getStringAttr(label));
  state.addAttribute(getKindAttrName(state.name), DispatchKindAttr::get(builder.getContext(), kind));
  state.addOperands(inputs);
  state.addTypes(resultTypes);
  Region *body = state.addRegion();
  Block *entry = new Block();
  body->push_back(entry);
  for (Value input : inputs)
    entry->addArgument(input.getType(), input.getLoc());
}

LogicalResult DispatchOp::verify() {
  Block &entry = getBody().front();
  if (entry.getNumArguments() != getInputs().size())
    return emitOpError() << "has " << getInputs().size() << " inputs but its region takes "
                         << entry.getNumArguments() << " arguments";
  for (auto [index, pair] : llvm::enumerate(llvm::zip(getInputs(), entry.getArguments()))) {
    auto [input, argument] = pair;
    if (input.getType() != argument.getType())
      return emitOpError() << "input #" << index << " has type " << input.getType()
                           << " but region argument #" << index << " has type " << argument.getType();
  }
  if (entry.empty())
    return emitOpError() << "region must end in twintrack.yield";
  auto yield = dyn_cast<YieldOp>(entry.back());
  if (!yield)
    return emitOpError() << "region must end in twintrack.yield";
  if (yield.getValues().getTypes() != getResultTypes())
    return yield.emitOpError() << "yields (" << yield.getValues().getTypes() << ") but the dispatch returns ("
                               << getResultTypes() << ")";
  return success();
}

#define GET_OP_CLASSES
#include "twintrack/TwintrackOps.cpp.inc"
