//===- FormDispatches.cpp - cost-model fusion into twintrack.dispatch ------===//
//
// Groups the linalg ops of a function, and those of each loop or branch body
// among themselves, into dispatch regions. Decisions are
// made per producer, in program order, then groups are outlined (the rule
// numbers are those of test/dialect/form-dispatches.mlir):
//   1.-2. an elementwise producer is merged into its only consumer, or, with
//      several consumers, recomputed in each of them, when the bytes it no
//      longer moves outweigh the flops it recomputes (on the target's
//      roofline);
//   3. a matmul/convolution takes its only consumer as an epilogue when that
//      consumer is elementwise and reads the result element for element;
//      then the elementwise group reading its epilogue's result (through
//      several uses: GELU reads x twice) joins it too;
//   5. a reduction along rows and the ops reading its per-row result share a
//      row-wise dispatch when all run over the same rows;
//   4. matmuls reading one tensor share a dispatch (horizontal fusion).
// Before that, a transposed right operand of a matmul is read through the
// matmul's indexing maps instead of being copied by a transpose.
// A dispatch holds at most one reduction or one matmul (several for
// horizontal and row-wise fusion), stays convex (no outside op between two
// of its ops), reads at most max-inputs tensors and computes at most
// max-body-ops ops per element (register pressure).
//
//===----------------------------------------------------------------------===//

#include "twintrack/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Linalg/Transforms/Transforms.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/IR/TypeUtilities.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"
#include "mlir/Transforms/RegionUtils.h"
#include "llvm/ADT/EquivalenceClasses.h"
#include "llvm/ADT/SetVector.h"
#include "llvm/ADT/SmallVectorExtras.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FormatVariadic.h"

#include <numeric>

namespace mlir::twintrack {
#define GEN_PASS_DEF_FORMDISPATCHES
#include "twintrack/Passes.h.inc"
} // namespace mlir::twintrack

using namespace mlir;
using namespace mlir::twintrack;

namespace {

enum class Kind { Elementwise, Reduction, Contraction, Fill };

/// How two groups come together: along a producer/consumer edge; side by
/// side (matmuls reading one input); or as steps of one row-wise program
/// (reductions over the same rows, and the ops that read their results).
enum class MergeMode { ProducerConsumer, Horizontal, RowWise };

Kind classify(linalg::LinalgOp op) {
  if (isa<linalg::FillOp>(op.getOperation()))
    return Kind::Fill;
  if (linalg::isaContractionOpInterface(op) || linalg::isaConvolutionOpInterface(op))
    return Kind::Contraction;
  return op.getNumReductionLoops() == 0 ? Kind::Elementwise : Kind::Reduction;
}

bool isReshape(Operation *op) { return isa<tensor::ExpandShapeOp, tensor::CollapseShapeOp>(op); }

/// Reshapes are views: they group like elementwise ops and cost nothing.
Kind kindOf(Operation *op) {
  auto linalgOp = dyn_cast<linalg::LinalgOp>(op);
  return linalgOp ? classify(linalgOp) : Kind::Elementwise;
}

/// The use a value reaches through a chain of single-use reshapes (which are
/// appended to `chain`); `use` itself when it is not a reshape.
OpOperand *throughReshapes(OpOperand *use, SmallVectorImpl<Operation *> &chain) {
  while (isReshape(use->getOwner()) && use->getOwner()->getResult(0).hasOneUse()) {
    chain.push_back(use->getOwner());
    use = &*use->getOwner()->getResult(0).getUses().begin();
  }
  return use;
}

const char *kindName(Kind kind) {
  switch (kind) {
  case Kind::Elementwise: return "elementwise";
  case Kind::Reduction: return "reduction";
  case Kind::Contraction: return "matmul";
  case Kind::Fill: return "fill";
  }
  return "op";
}

/// A size known only at run time (a dynamic dim), as the cost model prices
/// it: `dynamicExtent`, the pass option.
int64_t estimated(int64_t size, int64_t dynamicExtent) {
  return ShapedType::isDynamic(size) ? dynamicExtent : size;
}

/// Elements of a ranked tensor (its dynamic dims estimated), or -1.
int64_t elements(Type type, int64_t dynamicExtent) {
  auto shaped = dyn_cast<RankedTensorType>(type);
  if (!shaped)
    return -1;
  int64_t count = 1;
  for (int64_t size : shaped.getShape())
    count *= estimated(size, dynamicExtent);
  return count;
}

int64_t bytes(Type type, int64_t dynamicExtent) {
  auto shaped = dyn_cast<RankedTensorType>(type);
  int64_t count = elements(type, dynamicExtent);
  if (!shaped || count < 0)
    return -1;
  return count * std::max<int64_t>(1, shaped.getElementTypeBitWidth() / 8);
}

/// Bits of a shaped type's element (a scalar's own): an elementwise chain
/// reading element for element keeps the element count, so whether it
/// widens is a question of element width alone (estimated sizes of dynamic
/// dims differ across a reshape: (?x128) against (?x?x128)).
unsigned elementBits(Type type) {
  Type element = getElementTypeOrSelf(type);
  return element.isIntOrFloat() ? element.getIntOrFloatBitWidth() : 64; // index and the like: a machine word
}

/// Iterations of the op's loop nest (its dynamic bounds estimated).
int64_t iterations(linalg::LinalgOp op, int64_t dynamicExtent) {
  int64_t total = 1;
  for (int64_t range : op.getStaticLoopRanges())
    total *= estimated(range, dynamicExtent);
  return total;
}

/// Floating-point work per loop iteration (casts, compares and selects are
/// free, and so is integer arithmetic: index math, a causal mask's compare
/// of row and key, which a recomputing consumer does for next to nothing).
int64_t flopsPerIteration(linalg::LinalgOp op) {
  int64_t count = 0;
  op->getRegion(0).walk([&](Operation *inner) {
    if (isa<arith::ConstantOp, arith::ExtFOp, arith::TruncFOp, arith::CmpFOp, arith::SelectOp,
            arith::BitcastOp, arith::SIToFPOp, arith::FPToSIOp, linalg::YieldOp, linalg::IndexOp>(inner))
      return;
    bool floating =
        llvm::any_of(inner->getResultTypes(), [](Type t) { return isa<FloatType>(getElementTypeOrSelf(t)); });
    if (floating && isa<arith::ArithDialect, math::MathDialect>(inner->getDialect()))
      count += 1;
  });
  return count;
}

/// Operands, and values its regions use from above (a linalg body may use an
/// outside constant): what a copy of `op` in an isolated region must receive.
SmallVector<Value> valuesRead(Operation *op) {
  SmallVector<Value> values(op->getOperands());
  SetVector<Value> captured;
  getUsedValuesDefinedAbove(op->getRegions(), captured);
  llvm::append_range(values, captured);
  return values;
}

bool isCloneableInit(Operation *op) {
  if (isa<tensor::EmptyOp, arith::ConstantOp>(op))
    return true;
  auto fill = dyn_cast<linalg::FillOp>(op);
  return fill && llvm::all_of(fill->getOperands(), [](Value v) {
           Operation *def = v.getDefiningOp();
           return def && isCloneableInit(def);
         });
}

struct FormDispatchesPass : public twintrack::impl::FormDispatchesBase<FormDispatchesPass> {
  using FormDispatchesBase::FormDispatchesBase;

  void runOnOperation() override;

private:
  // state for one block
  DenseMap<Operation *, unsigned> position;
  unsigned nextLabel = 0; // dispatches are numbered through the function
  llvm::EquivalenceClasses<Operation *> groups;
  DenseSet<Operation *> recomputed; // producers copied into each consumer's dispatch

  void formIn(Block &block);
  void foldTransposedOperands(Block &block);
  void decideProducer(linalg::LinalgOp producer);
  void decideEpilogue(linalg::LinalgOp producer);
  void extendEpilogue(linalg::LinalgOp producer);
  void appendEpilogue(linalg::LinalgOp producer, StringRef how);
  void decideHorizontal(Block &block);
  void extendEpiloguesToFanOut(ArrayRef<linalg::LinalgOp> ops);
  bool joinReaderGroup(linalg::LinalgOp matmul);
  bool tryMerge(Operation *a, Operation *b, StringRef why, MergeMode mode = MergeMode::ProducerConsumer);
  void decideRows(ArrayRef<linalg::LinalgOp> ops);
  std::string whyNotRows(ArrayRef<Operation *> group, ArrayRef<int64_t> rows, int64_t inner);
  bool inlinedIntoReaders(Operation *op, const DenseSet<Operation *> &group);
  SmallVector<Operation *> withRecomputedProducers(ArrayRef<Operation *> group);
  SmallVector<Operation *> groupOf(Operation *op);
  Kind rootKind(ArrayRef<Operation *> group, unsigned &roots);
  DispatchKind dispatchKindOf(ArrayRef<Operation *> group);
  bool convex(ArrayRef<Operation *> group);
  SetVector<Value> inputsOf(ArrayRef<Operation *> group);
  void outline(ArrayRef<Operation *> group, unsigned index);
  void explainDecision(Operation *at, const Twine &message) {
    if (explain)
      at->emitRemark(message);
  }
  double seconds(double byteCount, double flopCount) const { return byteCount / bandwidth + flopCount / flopRate; }
};

/// How many times the consumer's loops read each element of `operand`; for
/// dynamic shapes, the product of the loops its map does not use (a
/// projection; -1 for other maps).
int64_t readsPerElement(linalg::LinalgOp consumer, OpOperand &operand, int64_t dynamicExtent) {
  auto shaped = dyn_cast<RankedTensorType>(operand.get().getType());
  SmallVector<int64_t> ranges = consumer.getStaticLoopRanges();
  if (shaped && shaped.hasStaticShape() && !llvm::any_of(ranges, ShapedType::isDynamic)) {
    int64_t count = shaped.getNumElements(), loops = iterations(consumer, dynamicExtent);
    return count > 0 && loops > 0 ? std::max<int64_t>(1, loops / count) : -1;
  }
  AffineMap map = consumer.getMatchingIndexingMap(&operand);
  if (!map.isProjectedPermutation())
    return -1;
  int64_t reads = 1;
  for (unsigned loop = 0; loop < ranges.size(); ++loop)
    if (!map.isFunctionOfDim(loop))
      reads *= estimated(ranges[loop], dynamicExtent);
  return reads;
}

void FormDispatchesPass::decideProducer(linalg::LinalgOp producer) {
  Value result = producer->getResult(0);
  SmallVector<OpOperand *> uses = llvm::map_to_vector(result.getUses(), [](OpOperand &use) { return &use; });
  if (uses.empty() || producer->getNumResults() != 1)
    return;
  // The producer together with what was already fused into it: recomputing
  // it recomputes them all, so they must all be elementwise.
  SmallVector<Operation *> chain = groupOf(producer);
  if (llvm::any_of(chain, [](Operation *op) { return kindOf(op) != Kind::Elementwise; })) {
    if (epilogues)
      extendEpilogue(producer); // it is a matmul's epilogue: it stays with the matmul
    return;
  }
  int64_t producerFlops = 0;
  for (Operation *op : chain)
    if (auto linalgOp = dyn_cast<linalg::LinalgOp>(op))
      producerFlops += flopsPerIteration(linalgOp) * std::max<int64_t>(0, iterations(linalgOp, dynamicExtent));
  int64_t resultBytes = bytes(result.getType(), dynamicExtent);
  if (resultBytes < 0)
    return;
  // The producer's kernel disappears: its reads, its write and its launch.
  // Each read of its result by a consumer's loops becomes a recomputation
  // from the producer's inputs instead.
  int64_t inputBytes = 0;
  for (Value input : producer.getDpsInputs())
    if (isa<RankedTensorType>(input.getType()))
      inputBytes += bytes(input.getType(), dynamicExtent);
  double recomputedFlops = -double(producerFlops), savedBytes = double(resultBytes + inputBytes);
  SmallVector<Operation *> reshapes;
  Operation *onlyConsumer = nullptr;
  for (OpOperand *direct : uses) {
    OpOperand *use = uses.size() == 1 ? throughReshapes(direct, reshapes) : direct;
    auto consumer = dyn_cast<linalg::LinalgOp>(use->getOwner());
    if (!consumer || use->getOwner()->getBlock() != producer->getBlock() || consumer.isDpsInit(use)) {
      if (!use->getOwner()->hasTrait<OpTrait::IsTerminator>()) // a returned result is simply an output
        explainDecision(producer, llvm::formatv("kept apart: its result is used by {0}, not read by a linalg op",
                                                use->getOwner()->getName()));
      return;
    }
    if (classify(consumer) == Kind::Contraction) {
      explainDecision(consumer, llvm::formatv("kept apart: {0} feeds a matmul (prologue fusion is not generated)",
                                              producer->getName()));
      return;
    }
    int64_t reads = readsPerElement(consumer, *use, dynamicExtent);
    if (reads < 0) {
      explainDecision(consumer, "kept apart: it reads a dynamic shape through a map that is not a projection");
      return;
    }
    recomputedFlops += double(producerFlops) * reads;
    savedBytes += double(resultBytes - inputBytes) * reads;
    onlyConsumer = consumer;
  }
  double gain = seconds(savedBytes, 0) + launchOverhead, cost = seconds(0, recomputedFlops);
  std::string numbers =
      llvm::formatv("saves {0} bytes and a launch ({1:f3} us), recomputes {2} flops ({3:f3} us)",
                    int64_t(savedBytes), gain * 1e6, int64_t(recomputedFlops), cost * 1e6);
  if (gain <= cost) {
    explainDecision(producer, llvm::formatv("kept apart from its {0} consumer(s): {1}", uses.size(), numbers));
    return;
  }
  if (uses.size() == 1) {
    Operation *previous = producer;
    for (Operation *reshape : reshapes) {
      tryMerge(previous, reshape, "with the reshape between producer and consumer");
      previous = reshape;
    }
    tryMerge(previous, onlyConsumer,
             llvm::formatv("into its consumer {0}: {1}", onlyConsumer->getName(), numbers).str());
    return;
  }
  recomputed.insert(chain.begin(), chain.end());
  explainDecision(producer, llvm::formatv("recomputed in each of its {0} consumers: {1}", uses.size(), numbers));
}

void FormDispatchesPass::decideEpilogue(linalg::LinalgOp producer) {
  if (producer->getNumResults() != 1 || !producer->getResult(0).hasOneUse())
    return;
  appendEpilogue(producer, "as the matmul's epilogue");
}

void FormDispatchesPass::extendEpilogue(linalg::LinalgOp producer) {
  if (producer->getNumResults() == 1 && producer->getResult(0).hasOneUse())
    appendEpilogue(producer, "into the matmul's epilogue");
}

bool narrowsAgain(Value wide, unsigned narrowBits, int64_t dynamicExtent, int depth = 16);

/// Merge the only consumer of `producer` (a matmul or the end of its
/// epilogue) into its dispatch, if it is elementwise and reads element for element.
void FormDispatchesPass::appendEpilogue(linalg::LinalgOp producer, StringRef how) {
  SmallVector<Operation *> reshapes;
  OpOperand &use = *throughReshapes(&*producer->getResult(0).getUses().begin(), reshapes);
  auto consumer = dyn_cast<linalg::LinalgOp>(use.getOwner());
  if (!consumer || consumer->getBlock() != producer->getBlock() || consumer.isDpsInit(&use))
    return;
  if (classify(consumer) != Kind::Elementwise) {
    explainDecision(consumer, llvm::formatv("kept apart from the matmul it reads: a {0} is not an epilogue",
                                            kindName(classify(consumer))));
    return;
  }
  if (readsPerElement(consumer, use, dynamicExtent) != 1 || !consumer.getMatchingIndexingMap(&use).isPermutation()) {
    explainDecision(consumer, "kept apart: reads the matmul result other than element for element");
    return;
  }
  int64_t resultBytes = bytes(producer->getResult(0).getType(), dynamicExtent);
  unsigned resultBits = elementBits(producer->getResult(0).getType());
  if (consumer->getNumResults() == 1 && elementBits(consumer->getResult(0).getType()) > resultBits &&
      !narrowsAgain(consumer->getResult(0), resultBits, dynamicExtent)) {
    // The matmul would store the wider values and every reader load them;
    // each reader can widen the narrow result in registers instead.
    explainDecision(consumer, llvm::formatv("kept apart from the matmul: it widens the result ({0} -> {1} bits an "
                                            "element), which its readers can do as they load",
                                            resultBits, elementBits(consumer->getResult(0).getType())));
    return;
  }
  int64_t saved = 2 * resultBytes;
  Operation *previous = producer;
  for (Operation *reshape : reshapes) {
    tryMerge(previous, reshape, "with the reshape between matmul and epilogue");
    previous = reshape;
  }
  tryMerge(previous, consumer,
           llvm::formatv("{0}: saves {1} bytes and a launch ({2:f3} us), recomputes nothing", how, saved,
                         (seconds(saved, 0) + launchOverhead) * 1e6)
               .str());
}

/// The linalg ops reading `value`, directly or through reshapes (appended to
/// `reshapes`); false if another kind of op reads it.
bool linalgReaders(Value value, SmallVectorImpl<OpOperand *> &reads, SmallVectorImpl<Operation *> &reshapes) {
  for (OpOperand &use : value.getUses()) {
    Operation *user = use.getOwner();
    if (isReshape(user)) {
      reshapes.push_back(user);
      if (!linalgReaders(user->getResult(0), reads, reshapes))
        return false;
    } else if (isa<linalg::LinalgOp>(user)) {
      reads.push_back(&use);
    } else {
      return false;
    }
  }
  return true;
}

/// Is a widened epilogue value (f16 -> f32 for batch norm or GELU's
/// opmath) only ever read, element for element, by elementwise ops that
/// bring it back to at most `narrowBits` an element before anything else
/// sees it? Then the whole chain can join the matmul and nothing wide is stored.
bool narrowsAgain(Value wide, unsigned narrowBits, int64_t dynamicExtent, int depth) {
  SmallVector<OpOperand *> reads;
  SmallVector<Operation *> reshapes;
  if (depth == 0 || !linalgReaders(wide, reads, reshapes) || reads.empty())
    return false;
  return llvm::all_of(reads, [&](OpOperand *read) {
    auto reader = cast<linalg::LinalgOp>(read->getOwner());
    if (classify(reader) != Kind::Elementwise || reader.isDpsInit(read) || reader->getNumResults() != 1 ||
        readsPerElement(reader, *read, dynamicExtent) != 1 || !reader.getMatchingIndexingMap(read).isPermutation())
      return false;
    Value result = reader->getResult(0);
    return elementBits(result.getType()) <= narrowBits || narrowsAgain(result, narrowBits, dynamicExtent, depth - 1);
  });
}

/// A matmul's epilogue whose result several ops read (GELU reads x twice)
/// was left at the first rule, which follows single uses. Once the readers
/// have grouped among themselves, an elementwise group that is the only
/// reader, element for element, joins the matmul: its kernel applies it all.
/// The joined group may itself be read by the next one (a clamp: compare
/// and select, for each bound), which joins in turn.
void FormDispatchesPass::extendEpiloguesToFanOut(ArrayRef<linalg::LinalgOp> ops) {
  for (linalg::LinalgOp op : ops)
    if (classify(op) == Kind::Contraction)
      while (joinReaderGroup(op)) {
      }
}

/// Join the one elementwise group reading the end of `matmul`'s epilogue,
/// if there is one; whether it joined. Its ops are computed once there, no
/// longer recomputed in their readers.
bool FormDispatchesPass::joinReaderGroup(linalg::LinalgOp matmul) {
  SmallVector<Operation *> group = groupOf(matmul);
  Operation *last = group.back();
  if (last->getNumResults() != 1 || group.size() < 2) // only past an epilogue: a bare matmul took none
    return false;
  SmallVector<OpOperand *> reads;
  SmallVector<Operation *> reshapes;
  if (!linalgReaders(last->getResult(0), reads, reshapes) || reads.empty())
    return false;
  Operation *reader = reads.front()->getOwner();
  if (groups.isEquivalent(matmul, reader))
    return false;
  SmallVector<Operation *> readerGroup = groupOf(reader);
  bool oneElementwiseGroup = llvm::all_of(reads, [&](OpOperand *read) {
    auto consumer = cast<linalg::LinalgOp>(read->getOwner());
    return groups.isEquivalent(reader, consumer) && !consumer.isDpsInit(read) &&
           readsPerElement(consumer, *read, dynamicExtent) == 1 && consumer.getMatchingIndexingMap(read).isPermutation();
  });
  if (!oneElementwiseGroup || llvm::any_of(readerGroup, [](Operation *o) { return kindOf(o) != Kind::Elementwise; }))
    return false;
  int64_t resultBytes = bytes(last->getResult(0).getType(), dynamicExtent);
  Operation *end = readerGroup.back();
  unsigned resultBits = elementBits(last->getResult(0).getType());
  if (end->getNumResults() == 1 && elementBits(end->getResult(0).getType()) > resultBits &&
      !narrowsAgain(end->getResult(0), resultBits, dynamicExtent))
    return false; // it would store wider values (see appendEpilogue)
  Operation *previous = last;
  for (Operation *reshape : reshapes) {
    tryMerge(previous, reshape, "with the reshape between matmul and epilogue");
    previous = reshape;
  }
  std::string times = reads.size() == 1 ? std::string("once") : llvm::formatv("{0} times", reads.size()).str();
  bool joined = tryMerge(previous, reader,
                         llvm::formatv("into the matmul's epilogue, reading its result {0}: saves {1} bytes and a "
                                       "launch ({2:f3} us), recomputes nothing",
                                       times, 2 * resultBytes, (seconds(2 * resultBytes, 0) + launchOverhead) * 1e6)
                             .str());
  if (joined)
    for (Operation *op : readerGroup)
      recomputed.erase(op);
  return joined;
}

/// "2x16x32": loop ranges as the explanations print them.
std::string sizeText(int64_t size) { return ShapedType::isDynamic(size) ? "?" : std::to_string(size); }

std::string shapeText(ArrayRef<int64_t> ranges) { return llvm::join(llvm::map_range(ranges, sizeText), "x"); }

/// Can the row-wise kernel emit this op of `generic`'s body? Plain
/// arithmetic, the loop indices, and single elements read from a tensor
/// defined outside the body (a gather: an embedding lookup), which the kernel
/// loads element by element.
bool rowKernelEmits(Operation &inner, linalg::GenericOp generic) {
  if (isa<arith::ArithDialect, math::MathDialect>(inner.getDialect()) || isa<linalg::IndexOp>(inner))
    return true;
  auto gather = dyn_cast<tensor::ExtractOp>(inner);
  return gather && !generic.getRegion().isAncestor(gather.getTensor().getParentRegion());
}

/// The tensors `op`'s body gathers elements from.
SmallVector<Value> gatheredTensors(Operation *op) {
  SmallVector<Value> tensors;
  op->walk([&](tensor::ExtractOp gather) { tensors.push_back(gather.getTensor()); });
  return tensors;
}

/// The loop ranges of a generic that a row-wise kernel can run (static or
/// dynamic): all
/// loops parallel but perhaps the last (a reduction along the row), the
/// output indexed by all loops (by all but the reduced one for a
/// reduction), every input by a projection, a body the kernel emits. Empty
/// if it is none; `whyNot` then says why.
SmallVector<int64_t> rowWiseRanges(Operation *op, std::string &whyNot) {
  auto refuse = [&](std::string why) {
    whyNot = std::move(why);
    return SmallVector<int64_t>();
  };
  auto generic = dyn_cast<linalg::GenericOp>(op);
  if (!generic || generic.getNumDpsInits() != 1 || !generic.hasPureTensorSemantics())
    return refuse(llvm::formatv("{0} is not a linalg.generic with one output", op->getName()));
  // A dynamic range (kDynamic) matches any other: the group's ops are
  // linked through their operands, whose sizes agree at run time.
  SmallVector<int64_t> ranges = generic.getStaticLoopRanges();
  if (ranges.empty())
    return refuse("a linalg.generic has no loops");
  std::string over = "a linalg.generic over " + shapeText(ranges);
  unsigned loops = ranges.size(), reductions = generic.getNumReductionLoops();
  if (reductions > 1)
    return refuse(llvm::formatv("{0} reduces along {1} loops (a row-wise kernel, along its last only)", over,
                                reductions));
  if (reductions == 1 && generic.getIteratorTypesArray().back() != utils::IteratorType::reduction)
    return refuse(over + " reduces along another loop than its last");
  AffineMap output = generic.getMatchingIndexingMap(generic.getDpsInitOperand(0));
  if (output != AffineMap::getMultiDimIdentityMap(loops, generic.getContext()).getMajorSubMap(loops - reductions))
    return refuse(over + " writes its output out of loop order");
  if (!llvm::all_of(generic.getIndexingMapsArray(), [](AffineMap map) { return map.isProjectedPermutation(); }))
    return refuse(over + " reads an input through a map that is not a projection");
  for (Operation &inner : generic.getBody()->without_terminator())
    if (!rowKernelEmits(inner, generic))
      return refuse(llvm::formatv("{0} computes {1}, which the row kernel does not emit", over, inner.getName()));
  return ranges;
}

/// Will elementwise fusion (twintrack-fuse-in-dispatches) inline `op` into
/// its readers in `group`: it is elementwise, each reader is a generic of
/// the group reading it through a projection, and nothing outside reads it
/// (but other dispatches' copies of a recomputed producer).
bool FormDispatchesPass::inlinedIntoReaders(Operation *op, const DenseSet<Operation *> &group) {
  if (cast<linalg::GenericOp>(op).getNumReductionLoops() != 0)
    return false;
  bool read = false;
  for (OpOperand &use : op->getResult(0).getUses()) {
    if (!group.contains(use.getOwner())) {
      if (recomputed.contains(op))
        continue;
      return false;
    }
    auto reader = dyn_cast<linalg::GenericOp>(use.getOwner());
    if (!reader || reader.isDpsInit(&use) || !reader.getMatchingIndexingMap(&use).isProjectedPermutation())
      return false;
    read = true;
  }
  return read;
}

/// Why the ops of `group` cannot run as one row-wise kernel over `rows`
/// rows of `inner` elements; empty when they can. Each op iterates rows ×
/// inner, or the rows alone (a per-row scalar, like 1/sqrt(var + eps)), or
/// is inlined into the ops reading it (an embedding lookup over positions,
/// broadcast over the batch). A gather reads a tensor from outside: the
/// block of one row does not see the other rows' results.
std::string FormDispatchesPass::whyNotRows(ArrayRef<Operation *> group, ArrayRef<int64_t> rows, int64_t inner) {
  SmallVector<int64_t> full(rows);
  full.push_back(inner);
  DenseSet<Operation *> inGroup(group.begin(), group.end());
  for (Operation *op : group) {
    std::string why;
    SmallVector<int64_t> ranges = rowWiseRanges(op, why);
    if (ranges.empty())
      return why;
    if (ranges != full && ArrayRef<int64_t>(ranges) != rows && !inlinedIntoReaders(op, inGroup))
      return llvm::formatv("a linalg.generic over {0} does not run over the same {1} rows of {2}", shapeText(ranges),
                           shapeText(rows), sizeText(inner));
    if (llvm::any_of(gatheredTensors(op), [&](Value table) { return inGroup.contains(table.getDefiningOp()); }))
      return "a gather reads a tensor the dispatch computes (other rows' values)";
  }
  return "";
}

/// `group` and the recomputed producers its dispatch will copy in.
SmallVector<Operation *> FormDispatchesPass::withRecomputedProducers(ArrayRef<Operation *> group) {
  SetVector<Operation *> all(group.begin(), group.end());
  for (size_t i = 0; i < all.size(); ++i)
    for (Value read : valuesRead(all[i]))
      if (Operation *def = read.getDefiningOp(); def && recomputed.contains(def))
        all.insert(def);
  return all.takeVector();
}

/// Rule 5: a reduction along rows and the ops reading its per-row result,
/// directly or through per-row ops (the next reduction of layernorm's
/// variance, reading the mean; softmax's normalization)
/// run as one row-wise program: one block per row reads the row once and
/// keeps the per-row values in registers. Gathers in the bodies (embedding
/// lookups before a layernorm) are loaded element by element, in each step
/// that reads them.
void FormDispatchesPass::decideRows(ArrayRef<linalg::LinalgOp> ops) {
  for (linalg::LinalgOp op : ops) {
    if (classify(op) != Kind::Reduction || op->getNumResults() != 1)
      continue;
    std::string misfit;
    SmallVector<int64_t> ranges = rowWiseRanges(op, misfit);
    if (ranges.size() < 2) {
      // A reduction to a scalar has no rows; another one says why it is not row-wise, if anything reads it.
      if (ranges.empty() && llvm::any_of(op->getUsers(), [](Operation *user) { return isa<linalg::LinalgOp>(user); }))
        explainDecision(op, llvm::formatv("kept apart from the ops reading its result: not row-wise: {0}", misfit));
      continue;
    }
    ArrayRef<int64_t> rows = ArrayRef<int64_t>(ranges).drop_back();
    int64_t inner = ranges.back();
    // Its linalg readers, looking through producers that each of their
    // consumers recomputes (those are copied into the consumers' dispatches).
    // Other users (a return, a reshape) read the dispatch's result.
    SmallVector<Operation *> readers;
    std::function<void(Value)> collect = [&](Value value) {
      for (OpOperand &use : value.getUses()) {
        auto reader = dyn_cast<linalg::LinalgOp>(use.getOwner());
        if (!reader || reader.isDpsInit(&use) || reader->getBlock() != op->getBlock())
          continue;
        if (recomputed.contains(reader) && whyNotRows({reader}, rows, inner).empty()) {
          for (Value result : reader->getResults())
            collect(result);
          continue;
        }
        if (llvm::is_contained(readers, reader.getOperation()))
          continue;
        readers.push_back(reader);
        // A per-row op (layernorm's mean = sum / n) hands the rows on: what
        // reads it (the variance's reduction, the normalization) reads them too.
        std::string notRowWise;
        if (classify(reader) == Kind::Elementwise && rowWiseRanges(reader, notRowWise) == rows)
          for (Value result : reader->getResults())
            collect(result);
      }
    };
    collect(op->getResult(0));
    misfit = whyNotRows(withRecomputedProducers(groupOf(op)), rows, inner);
    if (!misfit.empty()) {
      if (!readers.empty())
        explainDecision(op, llvm::formatv("kept apart from the {0} op(s) reading its per-row result: {1}",
                                          readers.size(), misfit));
      continue;
    }
    int64_t saved = 2 * bytes(op->getResult(0).getType(), dynamicExtent);
    std::string rowCount = llvm::any_of(rows, ShapedType::isDynamic)
                               ? shapeText(rows)
                               : std::to_string(std::accumulate(rows.begin(), rows.end(), int64_t(1),
                                                                std::multiplies<int64_t>()));
    for (Operation *reader : readers) {
      // The two groups together: a reader may gather from the reduction's result.
      SmallVector<Operation *> both = groupOf(op);
      llvm::append_range(both, groupOf(reader));
      SmallVector<Operation *> merged = withRecomputedProducers(both);
      misfit = whyNotRows(merged, rows, inner);
      if (!misfit.empty()) {
        explainDecision(reader, llvm::formatv("kept apart from the reduction it reads ({0} rows of {1}): {2}",
                                              rowCount, sizeText(inner), misfit));
        continue;
      }
      bool gathers = llvm::any_of(merged, [](Operation *o) { return !gatheredTensors(o).empty(); });
      tryMerge(op, reader,
               llvm::formatv("row-wise with the reduction it reads ({0} rows of {1}): one block per row reads the "
                             "row once{2}; saves {3} bytes and a launch ({4:f3} us)",
                             rowCount, sizeText(inner), gathers ? " (gathered elements: once per step reading them)" : "",
                             saved, (seconds(saved, 0) + launchOverhead) * 1e6)
                   .str(),
               MergeMode::RowWise);
    }
  }
}

void FormDispatchesPass::decideHorizontal(Block &block) {
  // Matmuls that read one tensor: one dispatch reads it once.
  DenseMap<Value, SmallVector<Operation *>> readers;
  for (Operation &op : block)
    if (auto linalgOp = dyn_cast<linalg::LinalgOp>(&op); linalgOp && classify(linalgOp) == Kind::Contraction)
      for (Value input : linalgOp.getDpsInputs())
        readers[input].push_back(&op);
  for (auto &[input, ops] : readers)
    for (Operation *other : llvm::drop_begin(ops))
      tryMerge(ops.front(), other,
               llvm::formatv("horizontally with a matmul reading the same {0}-byte input: one kernel saves a "
                             "launch ({1:f3} us) and fills the GPU with both grids; the input comes from DRAM once",
                             bytes(input.getType(), dynamicExtent), launchOverhead * 1e6)
                   .str(),
               MergeMode::Horizontal);
}

SmallVector<Operation *> FormDispatchesPass::groupOf(Operation *op) {
  SmallVector<Operation *> found(groups.findLeader(op), groups.member_end());
  llvm::sort(found, [&](Operation *a, Operation *b) { return position[a] < position[b]; });
  return found;
}

Kind FormDispatchesPass::rootKind(ArrayRef<Operation *> group, unsigned &roots) {
  Kind kind = Kind::Elementwise;
  roots = 0;
  for (Operation *op : group) {
    Kind k = kindOf(op);
    if (k == Kind::Reduction || k == Kind::Contraction) {
      ++roots;
      kind = k;
    }
  }
  return kind;
}

/// The kind of kernel `group` is: that of its reduction or matmul roots;
/// row-wise when an op of the group reads a reduction's result (rule 5,
/// even with a single reduction: RMSNorm); horizontal with several roots.
DispatchKind FormDispatchesPass::dispatchKindOf(ArrayRef<Operation *> group) {
  DenseSet<Operation *> inGroup(group.begin(), group.end());
  unsigned roots = 0;
  Kind kind = rootKind(group, roots);
  auto readsReduction = [&](Operation *op) {
    return llvm::any_of(op->getOperands(), [&](Value v) {
      Operation *def = v.getDefiningOp();
      return def && inGroup.contains(def) && kindOf(def) == Kind::Reduction;
    });
  };
  switch (kind) {
  case Kind::Contraction:
    return roots > 1 ? DispatchKind::matmul_horizontal : DispatchKind::matmul;
  case Kind::Reduction:
    if (llvm::any_of(group, readsReduction))
      return DispatchKind::reduction_rows;
    // Row fusion also groups reductions that read another's result only
    // through a recomputed producer, which is no op of the group.
    return roots > 1 ? DispatchKind::reduction_horizontal : DispatchKind::reduction;
  case Kind::Elementwise:
  case Kind::Fill:
    break;
  }
  return DispatchKind::elementwise;
}

/// No op outside the group is both reached from it and reaching it. An op
/// of another group runs in that group's dispatch: reaching it reaches the
/// whole group (two groups reading each other's results would each wait
/// for the other).
bool FormDispatchesPass::convex(ArrayRef<Operation *> group) {
  DenseSet<Operation *> inGroup(group.begin(), group.end());
  // Producers recomputed in each consumer do not sit between: every
  // dispatch reading them gets its own copy.
  SmallVector<Operation *> reached(group.begin(), group.end());
  while (!reached.empty())
    for (Operation *user : reached.pop_back_val()->getUsers())
      if (recomputed.contains(user) && inGroup.insert(user).second)
        reached.push_back(user);
  SmallVector<Operation *> work;
  DenseSet<Operation *> outside;
  auto reach = [&](Operation *op) {
    if (!outside.insert(op).second)
      return;
    work.push_back(op);
    if (recomputed.contains(op)) // copied into each reader's dispatch: no group of its own
      return;
    for (auto member = groups.findLeader(op); member != groups.member_end(); ++member)
      if (!inGroup.contains(*member) && outside.insert(*member).second)
        work.push_back(*member);
  };
  for (Operation *op : inGroup)
    for (Operation *user : op->getUsers())
      if (!inGroup.contains(user))
        reach(user);
  while (!work.empty()) {
    Operation *op = work.pop_back_val();
    for (Operation *user : op->getUsers()) {
      if (inGroup.contains(user))
        return false;
      if (user->getBlock() == op->getBlock())
        reach(user);
    }
  }
  return true;
}

/// Does any op of `to` read a result of an op of `from`?
bool reads(ArrayRef<Operation *> to, ArrayRef<Operation *> from) {
  DenseSet<Operation *> producers(from.begin(), from.end());
  return llvm::any_of(to, [&](Operation *op) {
    return llvm::any_of(valuesRead(op), [&](Value v) { return producers.contains(v.getDefiningOp()); });
  });
}

bool FormDispatchesPass::tryMerge(Operation *a, Operation *b, StringRef why, MergeMode mode) {
  bool horizontal = mode == MergeMode::Horizontal;
  groups.insert(a);
  groups.insert(b);
  Operation *reportAt = position[a] > position[b] ? a : b;
  if (groups.isEquivalent(a, b))
    return true;
  SmallVector<Operation *> groupA = groupOf(a), groupB = groupOf(b);
  if (horizontal && (reads(groupA, groupB) || reads(groupB, groupA))) {
    explainDecision(reportAt, llvm::formatv("kept apart: one matmul reads the other's result ({0})", why));
    return false;
  }
  SmallVector<Operation *> merged = groupA;
  llvm::append_range(merged, groupB);
  unsigned roots = 0;
  Kind kind = rootKind(merged, roots);
  bool severalRootsAllowed =
      (horizontal && kind == Kind::Contraction && llvm::all_of(merged, [](Operation *op) {
         Kind k = kindOf(op);
         return k == Kind::Contraction || k == Kind::Elementwise || k == Kind::Fill;
       })) ||
      (mode == MergeMode::RowWise && kind == Kind::Reduction); // decideRows checked the row shapes
  if (roots > 1 && !severalRootsAllowed) {
    explainDecision(reportAt, llvm::formatv("kept apart: one dispatch holds one reduction or matmul ({0})", why));
    return false;
  }
  if (!convex(merged)) {
    explainDecision(reportAt, llvm::formatv("kept apart: an op or a dispatch outside would sit between them ({0})", why));
    return false;
  }
  int64_t bodyOps = 0;
  for (Operation *op : merged)
    if (auto linalgOp = dyn_cast<linalg::LinalgOp>(op))
      bodyOps += flopsPerIteration(linalgOp);
  if (bodyOps > int64_t(maxBodyOps)) {
    explainDecision(reportAt, llvm::formatv("kept apart: the kernel would compute {0} ops per element, over "
                                            "max-body-ops={1} (register pressure) ({2})",
                                            bodyOps, unsigned(maxBodyOps), why));
    return false;
  }
  if (inputsOf(merged).size() > maxInputs) {
    explainDecision(reportAt, llvm::formatv("kept apart: the dispatch would read more than {0} tensors ({1})",
                                            unsigned(maxInputs), why));
    return false;
  }
  groups.unionSets(a, b);
  explainDecision(reportAt, llvm::formatv("fused {0}", why));
  return true;
}

/// Values a group reads from outside, after copying in cloneable producers
/// (empty tensors, fills, constants, recomputed elementwise ops).
SetVector<Value> FormDispatchesPass::inputsOf(ArrayRef<Operation *> group) {
  DenseSet<Operation *> inGroup(group.begin(), group.end());
  SetVector<Value> inputs; // in the order the group first reads them
  DenseSet<Operation *> copied;
  std::function<void(Value)> visit = [&](Value value) {
    Operation *def = value.getDefiningOp();
    if (def && inGroup.contains(def))
      return;
    if (def && def->getBlock() == group.front()->getBlock() && (isCloneableInit(def) || recomputed.contains(def))) {
      if (copied.insert(def).second)
        for (Value read : valuesRead(def))
          visit(read);
      return;
    }
    inputs.insert(value);
  };
  for (Operation *op : group)
    for (Value read : valuesRead(op))
      visit(read);
  return inputs;
}

/// The ops of the dispatch's block that read its results, directly or
/// through one another, and sit before it move just after it, in their
/// order. The dispatch takes the place of its group's last op, so readers
/// of an earlier op may sit before it, and so may their own readers
/// (convexity keeps all of them from feeding the group).
void moveReadersAfter(DispatchOp dispatch) {
  Block *block = dispatch->getBlock();
  SetVector<Operation *> readers;
  SmallVector<Operation *> work{dispatch};
  while (!work.empty())
    for (Operation *user : work.pop_back_val()->getUsers())
      if (Operation *reader = block->findAncestorOpInBlock(*user);
          reader && reader->isBeforeInBlock(dispatch) && readers.insert(reader))
        work.push_back(reader);
  SmallVector<Operation *> ordered = readers.takeVector();
  llvm::sort(ordered, [](Operation *a, Operation *b) { return a->isBeforeInBlock(b); });
  Operation *anchor = dispatch;
  for (Operation *reader : ordered) {
    reader->moveAfter(anchor);
    anchor = reader;
  }
}

void FormDispatchesPass::outline(ArrayRef<Operation *> group, unsigned index) {
  DenseSet<Operation *> inGroup(group.begin(), group.end());
  SetVector<Value> inputs = inputsOf(group);
  // A producer recomputed in each consumer reads on behalf of those
  // consumers: it counts as outside only through consumers outside.
  std::function<bool(Operation *)> readOutside = [&](Operation *user) {
    if (inGroup.contains(user))
      return false;
    if (!recomputed.contains(user))
      return true;
    return llvm::any_of(user->getUsers(), readOutside);
  };
  SmallVector<Value> results;
  for (Operation *op : group)
    for (Value result : op->getResults())
      if (llvm::any_of(result.getUsers(), readOutside))
        results.push_back(result);

  DispatchKind kind = dispatchKindOf(group);
  std::string label = llvm::formatv("{0}_{1}", stringifyDispatchKind(kind), index);
  // The group's last op in the block as it is now: an earlier dispatch may
  // have moved some of the group past it (moveReadersAfter).
  Operation *last = *llvm::max_element(group, [](Operation *a, Operation *b) { return a->isBeforeInBlock(b); });
  OpBuilder builder(last);
  auto dispatch = DispatchOp::create(builder, last->getLoc(), label, kind, TypeRange(ValueRange(results)),
                                     inputs.getArrayRef());
  Block &body = dispatch.getBody().front();
  IRMapping mapping;
  for (auto [input, argument] : llvm::zip(inputs, body.getArguments()))
    mapping.map(input, argument);

  // Copy in the cloneable producers the group needs, and the group, in
  // program order (a recomputed producer may read a group op's result).
  SetVector<Operation *> copied;
  std::function<void(Value)> collect = [&](Value value) {
    Operation *def = value.getDefiningOp();
    if (mapping.contains(value) || !def || inGroup.contains(def) || copied.contains(def))
      return;
    for (Value operand : valuesRead(def))
      collect(operand);
    copied.insert(def);
  };
  for (Operation *op : group)
    for (Value operand : valuesRead(op))
      collect(operand);
  SmallVector<Operation *> ordered(copied.begin(), copied.end());
  llvm::append_range(ordered, group);
  llvm::stable_sort(ordered, [&](Operation *a, Operation *b) { return position[a] < position[b]; });
  builder.setInsertionPointToStart(&body);
  for (Operation *op : ordered)
    builder.clone(*op, mapping);
  YieldOp::create(builder, last->getLoc(),
                          llvm::map_to_vector(results, [&](Value v) { return mapping.lookup(v); }));

  for (auto [old, replacement] : llvm::zip(results, dispatch.getResults()))
    old.replaceAllUsesWith(replacement);
  moveReadersAfter(dispatch);
  // The originals go, with the recomputed producers that still read them
  // (those feed only this group now: every reader has its own copy).
  SetVector<Operation *> dead(group.begin(), group.end());
  for (size_t i = 0; i < dead.size(); ++i)
    for (Operation *user : dead[i]->getUsers())
      if (recomputed.contains(user))
        dead.insert(user);
  SmallVector<Operation *> lastFirst(dead.begin(), dead.end());
  llvm::sort(lastFirst, [&](Operation *a, Operation *b) { return position[a] > position[b]; });
  for (Operation *op : lastFirst) {
    recomputed.erase(op); // its address may be reused by the next dispatch op
    op->erase();
  }
}

/// Is `transpose` a swap of its last two dims (leading dims in place)?
bool swapsLastTwoDims(linalg::TransposeOp transpose) {
  ArrayRef<int64_t> permutation = transpose.getPermutation();
  size_t rank = permutation.size();
  if (rank < 2 || permutation[rank - 1] != int64_t(rank - 2) || permutation[rank - 2] != int64_t(rank - 1))
    return false;
  for (size_t d = 0; d + 2 < rank; ++d)
    if (permutation[d] != int64_t(d))
      return false;
  return true;
}

/// The matmul's maps with its right operand read transposed: B(k, n) becomes Bt(n, k).
ArrayAttr withTransposedRightOperand(linalg::LinalgOp matmul) {
  SmallVector<AffineMap> maps = matmul.getIndexingMapsArray();
  AffineMap right = maps[1];
  SmallVector<AffineExpr> results(right.getResults());
  std::swap(results[results.size() - 1], results[results.size() - 2]);
  maps[1] = AffineMap::get(right.getNumDims(), 0, results, matmul->getContext());
  return Builder(matmul->getContext()).getAffineMapArrayAttr(maps);
}

void FormDispatchesPass::foldTransposedOperands(Block &block) {
  for (Operation &op : llvm::make_early_inc_range(block)) {
    auto matmul = dyn_cast<linalg::LinalgOp>(&op);
    if (!matmul || !isa<linalg::MatmulOp, linalg::BatchMatmulOp>(&op) || !matmul.hasPureTensorSemantics())
      continue;
    bool defaultMaps = matmul.getIndexingMapsArray() == (isa<linalg::MatmulOp>(&op)
                                                             ? linalg::MatmulOp::getDefaultIndexingMaps(op.getContext())
                                                             : linalg::BatchMatmulOp::getDefaultIndexingMaps(op.getContext()));
    auto transpose = op.getOperand(1).getDefiningOp<linalg::TransposeOp>();
    if (!defaultMaps || !transpose || !transpose->getResult(0).hasOneUse() || !swapsLastTwoDims(transpose))
      continue;
    explainDecision(&op, llvm::formatv("reads its right operand transposed: the transpose's kernel goes "
                                       "(saves {0} bytes and a launch)",
                                       2 * bytes(transpose->getResult(0).getType(), dynamicExtent)));
    op.setAttr("indexing_maps", withTransposedRightOperand(matmul));
    op.setOperand(1, transpose.getInput());
    Operation *init = transpose.getInit().getDefiningOp();
    transpose->erase();
    if (init && init->use_empty() && isCloneableInit(init))
      init->erase();
  }
}

void FormDispatchesPass::formIn(Block &block) {
  if (fuse && transposedOperands)
    foldTransposedOperands(block);
  position.clear();
  groups = {};
  recomputed.clear();
  SmallVector<linalg::LinalgOp> ops;
  for (auto [index, op] : llvm::enumerate(block)) {
    position[&op] = index;
    auto linalgOp = dyn_cast<linalg::LinalgOp>(&op);
    if (linalgOp && linalgOp.hasPureTensorSemantics() && !isCloneableInit(&op)) {
      ops.push_back(linalgOp);
      groups.insert(&op);
    }
  }
  if (fuse) {
    for (linalg::LinalgOp op : ops) {
      Kind kind = classify(op);
      if (kind == Kind::Elementwise)
        decideProducer(op);
      else if (kind == Kind::Contraction && epilogues)
        decideEpilogue(op);
    }
    if (epilogues)
      extendEpiloguesToFanOut(ops);
    if (rowFusion)
      decideRows(ops);
    if (horizontal)
      decideHorizontal(block);
  }

  // Recomputed producers are copied into their consumers' dispatches; each
  // remaining group becomes one dispatch.
  SmallVector<SmallVector<Operation *>> outlined;
  DenseSet<Operation *> seen;
  for (linalg::LinalgOp op : ops)
    if (!recomputed.contains(op) && seen.insert(groups.getLeaderValue(op)).second)
      outlined.push_back(groupOf(op));
  for (ArrayRef<Operation *> group : outlined) {
    SmallVector<Operation *> kept(llvm::make_filter_range(group, [&](Operation *op) { return !recomputed.contains(op); }));
    if (!kept.empty())
      outline(kept, nextLabel++);
  }
  // Originals that every consumer now recomputes, and inits nobody uses.
  for (Operation &op : llvm::make_early_inc_range(llvm::reverse(block)))
    if ((recomputed.contains(&op) || isCloneableInit(&op)) && op.use_empty())
      op.erase();
}

/// A block of the function or of its loops and branches, at any depth; not
/// one inside another op (a linalg payload's loop computes an element).
bool inControlFlowOnly(Block *block) {
  for (Operation *op = block->getParentOp(); !isa<func::FuncOp>(op); op = op->getParentOp())
    if (!isa<scf::WhileOp, scf::ForOp, scf::IfOp>(op))
      return false;
  return true;
}

void FormDispatchesPass::runOnOperation() {
  // Unused results first (the argmax torch-mlir computes beside a max):
  // the rules look at single-result ops.
  RewritePatternSet patterns(&getContext());
  linalg::populateEraseUnusedOperandsAndResultsPatterns(patterns);
  if (failed(applyPatternsGreedily(getOperation(), std::move(patterns))))
    getOperation()->emitWarning("unused linalg results were not all erased");
  // The function's body and the bodies of its loops and branches: a loop's
  // ops fuse among themselves (nothing crosses into or out of a loop).
  nextLabel = 0;
  SmallVector<Block *> blocks;
  getOperation()->walk<WalkOrder::PreOrder>([&](Block *block) {
    if (inControlFlowOnly(block))
      blocks.push_back(block);
  });
  for (Block *block : blocks)
    formIn(*block);
}

} // namespace
