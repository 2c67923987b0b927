//===- DispatchRegions.cpp - fusion inside dispatches, and dissolving them -===//

#include "twintrack/Passes.h"

#include "mlir/Dialect/Linalg/Transforms/Transforms.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/IRMapping.h"
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

/// An all-parallel generic on tensors that writes each output element for
/// element and reads no output in its payload: ops of one loop nest that the
/// merge below can put in one generic, each computed once per element.
bool isMergeable(Operation *op) {
  auto generic = dyn_cast_or_null<linalg::GenericOp>(op);
  if (!generic || !generic.hasPureTensorSemantics() || generic.getNumLoops() == 0 ||
      generic.getNumParallelLoops() != generic.getNumLoops())
    return false;
  return llvm::all_of(generic.getDpsInitsMutable(), [&](OpOperand &init) {
    return generic.getMatchingIndexingMap(&init).isIdentity() && !generic.payloadUsesValueFromOperand(&init);
  });
}

/// Whether two mergeable generics run over the same iterations: equal static
/// ranges, and a dynamic range only where both outputs are tensor.empty of
/// the same size values.
bool sameDomain(linalg::GenericOp a, linalg::GenericOp b) {
  SmallVector<int64_t> ranges = a.getStaticLoopRanges();
  if (ranges != b.getStaticLoopRanges())
    return false;
  if (!llvm::is_contained(ranges, ShapedType::kDynamic))
    return true;
  auto emptyA = a.getDpsInits()[0].getDefiningOp<tensor::EmptyOp>();
  auto emptyB = b.getDpsInits()[0].getDefiningOp<tensor::EmptyOp>();
  return emptyA && emptyB && emptyA.getType().getShape() == emptyB.getType().getShape() &&
         llvm::equal(emptyA.getDynamicSizes(), emptyB.getDynamicSizes());
}

/// `operand` reads its producer's result element for element, over the same
/// iterations: the merge shares the producer's value instead of a copy.
bool readsInPlace(OpOperand *operand) {
  Operation *producer = operand->get().getDefiningOp();
  auto consumer = dyn_cast<linalg::GenericOp>(operand->getOwner());
  return isMergeable(producer) && consumer && isMergeable(consumer) &&
         sameDomain(cast<linalg::GenericOp>(producer), consumer) &&
         consumer.getMatchingIndexingMap(operand).isIdentity();
}

bool isElementwise(DispatchOp dispatch) { return dispatch && dispatch.getKind() == DispatchKind::elementwise; }

bool inElementwiseDispatch(Operation *op) { return isElementwise(op->getParentOfType<DispatchOp>()); }

bool fusesInDispatch(OpOperand *operand) {
  if (!fusesNoContraction(operand) || !staysBounded(operand))
    return false;
  // In an elementwise dispatch, ops over the same iterations are left to
  // mergeElementwiseNests, which computes each value once for all its readers.
  return !inElementwiseDispatch(operand->getOwner()) || !readsInPlace(operand);
}

/// The payload ops a merged generic may hold (register pressure).
constexpr size_t kMaxMergedPayloadOps = 256;

/// One generic computing all of `members` (mergeable, one domain, in program
/// order, each reading earlier members in place), at the last member's place
/// and with its location (as upstream's fusion gives the consumer's):
/// each member's payload once, its inputs read once, and an output for each
/// result something outside the members reads.
void mergeNest(ArrayRef<linalg::GenericOp> members) {
  linalg::GenericOp last = members.back();
  DenseSet<Operation *> isMember;
  for (linalg::GenericOp member : members)
    isMember.insert(member);
  SmallVector<Value> inputs, kept, inits;
  SmallVector<AffineMap> inputMaps;
  llvm::DenseMap<std::pair<Value, AffineMap>, unsigned> inputIndex;
  for (linalg::GenericOp member : members) {
    for (OpOperand *input : member.getDpsInputOperands()) {
      if (isMember.contains(input->get().getDefiningOp()))
        continue;
      auto key = std::make_pair(input->get(), member.getMatchingIndexingMap(input));
      if (inputIndex.try_emplace(key, inputs.size()).second) {
        inputs.push_back(key.first);
        inputMaps.push_back(key.second);
      }
    }
    for (auto [result, init] : llvm::zip(member->getResults(), member.getDpsInits()))
      if (llvm::any_of(result.getUsers(), [&](Operation *user) { return !isMember.contains(user); })) {
        kept.push_back(result);
        inits.push_back(init);
      }
  }
  OpBuilder builder(last);
  SmallVector<AffineMap> maps(inputMaps);
  maps.append(inits.size(), builder.getMultiDimIdentityMap(last.getNumLoops()));
  SmallVector<utils::IteratorType> iterators(last.getNumLoops(), utils::IteratorType::parallel);
  auto merged = linalg::GenericOp::create(
      builder, last.getLoc(), TypeRange(ValueRange(kept)), inputs, inits, maps, iterators,
      [&](OpBuilder &body, Location loc, ValueRange arguments) {
        IRMapping mapping;
        DenseMap<Value, Value> elementOf; // a member's result -> its value at this element
        for (linalg::GenericOp member : members) {
          Block &payload = member.getRegion().front();
          for (OpOperand *input : member.getDpsInputOperands()) {
            BlockArgument argument = payload.getArgument(input->getOperandNumber());
            if (isMember.contains(input->get().getDefiningOp()))
              mapping.map(argument, elementOf.lookup(input->get()));
            else
              mapping.map(argument, arguments[inputIndex.lookup(
                                        std::make_pair(input->get(), member.getMatchingIndexingMap(input)))]);
          }
          for (Operation &op : payload.without_terminator())
            body.clone(op, mapping);
          for (auto [result, yielded] : llvm::zip(member->getResults(), payload.getTerminator()->getOperands()))
            elementOf[result] = mapping.lookupOrDefault(yielded);
        }
        SmallVector<Value> yielded = llvm::map_to_vector(kept, [&](Value result) { return elementOf.lookup(result); });
        linalg::YieldOp::create(body, loc, yielded);
      });
  for (auto [result, replacement] : llvm::zip(kept, merged->getResults()))
    result.replaceAllUsesWith(replacement);
  for (linalg::GenericOp member : llvm::reverse(members))
    member->erase();
}

/// Whether `value` is the result of one of `members`.
bool definedBy(ArrayRef<linalg::GenericOp> members, Value value) {
  auto producer = value.getDefiningOp<linalg::GenericOp>();
  return producer && llvm::is_contained(members, producer);
}

/// Whether `candidate` can join `members`: the same iterations, every read
/// of a member in place, no member's result as its output (the member goes),
/// and the payloads together within the bound.
bool joins(ArrayRef<linalg::GenericOp> members, linalg::GenericOp candidate, size_t payload) {
  if (!sameDomain(members.front(), candidate) || payload + payloadOps(candidate) > kMaxMergedPayloadOps)
    return false;
  auto isMember = [&](Value value) { return definedBy(members, value); };
  return llvm::none_of(candidate.getDpsInits(), isMember) &&
         llvm::all_of(candidate.getDpsInputOperands(), [&](OpOperand *input) {
           return !isMember(input->get()) || candidate.getMatchingIndexingMap(input).isIdentity();
         });
}

/// The elementwise generics of an elementwise dispatch that run over the same
/// iterations become one multi-result generic. Upstream's fusion copies a
/// producer with several readers into each of them, and copies of copies
/// compound (each op of a chain holding all the chain before it); merged, a
/// value is computed once and the nest reads each input once. A run of
/// members ends before an op outside it that reads one of them.
void mergeElementwiseNests(DispatchOp dispatch) {
  SmallVector<linalg::GenericOp> members;
  size_t payload = 0;
  auto flush = [&] {
    if (members.size() > 1)
      mergeNest(members);
    members.clear();
    payload = 0;
  };
  SmallVector<Operation *> ops = llvm::map_to_vector(dispatch.getBody().front(), [](Operation &op) { return &op; });
  for (Operation *op : ops) {
    if (isMergeable(op)) {
      auto generic = cast<linalg::GenericOp>(op);
      if (!members.empty() && !joins(members, generic, payload))
        flush();
      members.push_back(generic);
      payload += payloadOps(generic);
      continue;
    }
    WalkResult readsMember = op->walk([&](Operation *nested) {
      bool reads = llvm::any_of(nested->getOperands(), [&](Value operand) { return definedBy(members, operand); });
      return reads ? WalkResult::interrupt() : WalkResult::advance();
    });
    if (readsMember.wasInterrupted())
      flush();
  }
  flush();
}

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
      if (isElementwise(dispatch))
        mergeElementwiseNests(dispatch);
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
