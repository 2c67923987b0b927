//===- FoldConstantGenerics.cpp - linalg.generic on constants to constants --===//
//
// A generic whose inputs are all splat constants computes one value for every
// element: its payload is folded on those values (each op's own folder, as the
// canonicalizer folds scalars) and the generic becomes a splat constant.
// Decompositions compute on constants this way: a bounded loop unrolled for
// the GPU leaves its step counter a 0-d constant, and the index arithmetic on
// it stays a chain of 0-d generics that every kernel reading it recomputes.
//
//===----------------------------------------------------------------------===//

#include "twintrack/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/IR/Matchers.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

namespace mlir::twintrack {
#define GEN_PASS_DEF_FOLDCONSTANTGENERICS
#include "twintrack/Passes.h.inc"
} // namespace mlir::twintrack

using namespace mlir;

namespace {

/// The single value of a splat or scalar constant, or null.
Attribute splatValue(Value value) {
  Attribute constant;
  if (!matchPattern(value, m_Constant(&constant)))
    return {};
  if (auto elements = dyn_cast<SplatElementsAttr>(constant))
    return elements.getSplatValue<Attribute>();
  return isa<ShapedType>(value.getType()) ? Attribute() : constant;
}

/// The payload's yielded values, each folded to an attribute from the
/// inputs' values; failure where an op does not fold that way.
FailureOr<SmallVector<Attribute>> foldPayload(linalg::GenericOp generic, ArrayRef<Attribute> inputs) {
  Block &payload = generic.getRegion().front();
  DenseMap<Value, Attribute> known;
  for (auto [argument, value] : llvm::zip(payload.getArguments(), inputs))
    known[argument] = value;
  auto valueOf = [&](Value value) -> Attribute {
    if (Attribute attribute = known.lookup(value))
      return attribute;
    return value.getParentBlock() == &payload ? Attribute() : splatValue(value);
  };
  for (Operation &op : payload.without_terminator()) {
    if (op.getNumRegions() != 0 || isa<linalg::IndexOp>(op))
      return failure();
    SmallVector<Attribute> operands = llvm::map_to_vector(op.getOperands(), valueOf);
    if (llvm::is_contained(operands, Attribute()))
      return failure();
    SmallVector<OpFoldResult> folded;
    if (failed(op.fold(operands, folded)) || folded.size() != op.getNumResults())
      return failure();
    for (auto [result, fold] : llvm::zip(op.getResults(), folded)) {
      Attribute attribute = isa<Attribute>(fold) ? cast<Attribute>(fold) : valueOf(cast<Value>(fold));
      if (!attribute)
        return failure();
      known[result] = attribute;
    }
  }
  SmallVector<Attribute> yielded = llvm::map_to_vector(payload.getTerminator()->getOperands(), valueOf);
  if (llvm::is_contained(yielded, Attribute()))
    return failure();
  return yielded;
}

struct FoldSplatGeneric : OpRewritePattern<linalg::GenericOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(linalg::GenericOp generic, PatternRewriter &rewriter) const override {
    if (!generic.hasPureTensorSemantics() || generic.getNumParallelLoops() != generic.getNumLoops())
      return failure();
    for (OpOperand &init : generic.getDpsInitsMutable())
      if (generic.payloadUsesValueFromOperand(&init))
        return failure();
    SmallVector<Attribute> inputs = llvm::map_to_vector(generic.getDpsInputs(), splatValue);
    if (llvm::is_contained(inputs, Attribute()))
      return failure();
    FailureOr<SmallVector<Attribute>> yielded = foldPayload(generic, inputs);
    if (failed(yielded))
      return failure();
    SmallVector<Value> constants;
    for (auto [result, value] : llvm::zip(generic->getResults(), *yielded)) {
      auto type = cast<RankedTensorType>(result.getType());
      if (!type.hasStaticShape() || !isa<TypedAttr>(value) || cast<TypedAttr>(value).getType() != type.getElementType())
        return failure();
      constants.push_back(arith::ConstantOp::create(rewriter, generic.getLoc(), DenseElementsAttr::get(type, value)));
    }
    rewriter.replaceOp(generic, constants);
    return success();
  }
};

struct FoldConstantGenericsPass : public twintrack::impl::FoldConstantGenericsBase<FoldConstantGenericsPass> {
  void runOnOperation() override {
    RewritePatternSet patterns(&getContext());
    patterns.add<FoldSplatGeneric>(&getContext());
    if (failed(applyPatternsGreedily(getOperation(), std::move(patterns))))
      getOperation()->emitWarning("folding generics of constants did not converge");
  }
};

} // namespace
