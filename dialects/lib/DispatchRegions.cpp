//===- DispatchRegions.cpp - fusion inside dispatches, and dissolving them -===//

#include "twintrack/Passes.h"

#include "mlir/Dialect/Linalg/Transforms/Transforms.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

namespace mlir::twintrack {
#define GEN_PASS_DEF_FUSEINDISPATCHES
#define GEN_PASS_DEF_DISSOLVEDISPATCHES
#include "twintrack/Passes.h.inc"
} // namespace mlir::twintrack

using namespace mlir;
using namespace mlir::twintrack;

namespace {

constexpr llvm::StringLiteral kDispatchAttr = "twintrack.dispatch";
constexpr llvm::StringLiteral kDispatchKindAttr = "twintrack.dispatch_kind";

bool isContraction(Operation *op) {
  auto linalgOp = dyn_cast_or_null<linalg::LinalgOp>(op);
  return linalgOp && (linalg::isaContractionOpInterface(linalgOp) || linalg::isaConvolutionOpInterface(linalgOp));
}

/// Fuse across `operand` unless a matmul or convolution is on either side
/// (directly or through the reshape being folded): those stay named ops.
bool fusesNoContraction(OpOperand *operand) {
  Operation *producer = operand->get().getDefiningOp();
  Operation *consumer = operand->getOwner();
  auto touchesContraction = [](Operation *op) {
    if (!op)
      return false;
    if (isContraction(op))
      return true;
    if (isa<tensor::ExpandShapeOp, tensor::CollapseShapeOp>(op))
      return isContraction(op->getOperand(0).getDefiningOp()) ||
             llvm::any_of(op->getUsers(), [](Operation *user) { return isContraction(user); });
    return false;
  };
  return !touchesContraction(producer) && !touchesContraction(consumer);
}

/// Fusing a producer that has other users copies its payload into the
/// consumer and keeps the producer too. Each copy is small, but copies of
/// copies compound: in a chain where every value feeds two later ops
/// (square-and-multiply, a polynomial recurrence), the merged ops hold 2^n
/// copies of the first ones before CSE can share them. And the greedy
/// driver's cost grows with the merged payloads, superlinearly: a 64-step
/// recurrence (about 300 elementwise ops) took over 5 minutes in this pass
/// with a 256-op bound, 40 s with these. A producer with other users is
/// copied only while its payload is small, and no merged payload passes the
/// second bound; a fusion past either is declined: both ops stay kernels.
constexpr size_t kMaxCopiedPayloadOps = 64;
constexpr size_t kMaxFusedPayloadOps = 96;

size_t payloadOps(Operation *op) {
  if (!op || op->getNumRegions() != 1 || op->getRegion(0).empty())
    return 0;
  return op->getRegion(0).front().getOperations().size();
}

bool staysBounded(OpOperand *operand) {
  Operation *producer = operand->get().getDefiningOp();
  size_t produced = payloadOps(producer);
  if (producer && !producer->hasOneUse() && produced > kMaxCopiedPayloadOps)
    return false;
  return produced + payloadOps(operand->getOwner()) <= kMaxFusedPayloadOps;
}

bool fusesInDispatch(OpOperand *operand) { return fusesNoContraction(operand) && staysBounded(operand); }

/// The op producing `value`, looking through reshapes (reshape propagation
/// moves them out of the way once the ops around them are generics).
Operation *producerThroughReshapes(Value value) {
  Operation *producer = value.getDefiningOp();
  while (isa_and_nonnull<tensor::ExpandShapeOp, tensor::CollapseShapeOp>(producer))
    producer = producer->getOperand(0).getDefiningOp();
  return producer;
}

/// Transposes next to an elementwise generic of their dispatch become
/// generics, which elementwise fusion merges (named transposes it leaves
/// alone); a transpose alone keeps its name.
void generalizeTransposesBesideGenerics(DispatchOp dispatch) {
  IRRewriter rewriter(dispatch.getContext());
  SmallVector<linalg::TransposeOp> transposes;
  dispatch.getBody().walk([&](linalg::TransposeOp transpose) {
    bool producerIsGeneric = isa_and_nonnull<linalg::GenericOp>(producerThroughReshapes(transpose.getInput()));
    bool consumerIsGeneric = llvm::any_of(transpose->getUsers(), [](Operation *user) { return isa<linalg::GenericOp>(user); });
    if (producerIsGeneric || consumerIsGeneric)
      transposes.push_back(transpose);
  });
  for (linalg::TransposeOp transpose : transposes) {
    rewriter.setInsertionPoint(transpose);
    (void)linalg::generalizeNamedOp(rewriter, cast<linalg::LinalgOp>(transpose.getOperation()));
  }
}

struct FuseInDispatchesPass : public twintrack::impl::FuseInDispatchesBase<FuseInDispatchesPass> {
  void runOnOperation() override {
    getOperation()->walk([](DispatchOp dispatch) { generalizeTransposesBesideGenerics(dispatch); });
    RewritePatternSet patterns(&getContext());
    linalg::populateElementwiseOpsFusionPatterns(patterns, fusesInDispatch);
    linalg::populateFoldReshapeOpsByExpansionPatterns(patterns, fusesNoContraction);
    FrozenRewritePatternSet frozen(std::move(patterns));
    getOperation()->walk([&](DispatchOp dispatch) {
      if (failed(applyPatternsGreedily(dispatch.getBody(), frozen)))
        dispatch.emitWarning("elementwise fusion did not converge in this dispatch");
    });
  }
};

/// `op`, taken out of `dispatch`, keeps its label and (if it has one) its kind.
void markWithDispatch(Operation &op, DispatchOp dispatch) {
  op.setAttr(kDispatchAttr, dispatch.getLabelAttr());
  if (DispatchKindAttr kind = dispatch.getKindAttr())
    op.setAttr(kDispatchKindAttr, kind);
}

struct DissolveDispatchesPass : public twintrack::impl::DissolveDispatchesBase<DissolveDispatchesPass> {
  void runOnOperation() override {
    SmallVector<DispatchOp> dispatches;
    getOperation()->walk([&](DispatchOp dispatch) { dispatches.push_back(dispatch); });
    for (DispatchOp dispatch : dispatches) {
      Block &body = dispatch.getBody().front();
      auto yield = cast<YieldOp>(body.getTerminator());
      for (auto [argument, input] : llvm::zip(body.getArguments(), dispatch.getInputs()))
        argument.replaceAllUsesWith(input);
      // Each op keeps the name of its dispatch and its kind: kernel
      // generators find the grouping (the name) and what kind of kernel it
      // is (the kind) again after bufferization.
      for (Operation &op : body.without_terminator())
        if (isa<linalg::LinalgOp>(op))
          markWithDispatch(op, dispatch);
      dispatch.replaceAllUsesWith(yield.getValues());
      yield.erase();
      dispatch->getBlock()->getOperations().splice(Block::iterator(dispatch), body.getOperations());
      dispatch.erase();
    }
  }
};

} // namespace
