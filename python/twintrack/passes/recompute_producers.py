"""recompute-producers: give each consumer its own copy of a cheap elementwise
producer, so that elementwise fusion can fold it in.

linalg-fuse-elementwise-ops fuses a producer only into its single consumer.
softmax's exp(x - max) feeds both the sum and the division, layernorm's
(x - mean) both the variance and the output: each then becomes a full tensor
written and read back. Recomputing a few flops per element costs far less
than that round trip through memory.
"""

from __future__ import annotations

from dataclasses import dataclass

from mlir import ir

MAX_BODY_OPS = 8  # recompute only cheap producers


def _is_cheap_elementwise(op: ir.Operation) -> bool:
    if op.name != "linalg.generic" or len(op.results) != 1:
        return False
    iterators = [str(a) for a in op.attributes["iterator_types"]]
    if any("reduction" in it for it in iterators):
        return False
    return len(list(op.regions[0].blocks[0].operations)) <= MAX_BODY_OPS


@dataclass(frozen=True)
class RecomputeProducers:
    name = "recompute-producers"

    def add_to(self, pm) -> None:
        pm.add(self._run, name="RecomputeProducers", argument=self.name)

    def _run(self, module: ir.Operation, pass_) -> None:
        producers = []

        def collect(op: ir.Operation):
            if _is_cheap_elementwise(op):
                producers.append(op)
            return ir.WalkResult.ADVANCE

        module.walk(collect)
        for producer in producers:
            uses = [(use.owner, use.operand_number) for use in producer.results[0].uses]
            consumers = [owner for owner, _ in uses]
            if len(uses) < 2 or any(getattr(c, "name", None) != "linalg.generic" for c in consumers):
                continue
            for consumer, operand in uses[1:]:
                copy = producer.clone(ir.InsertionPoint(consumer))
                consumer.operands[operand] = copy.results[0]
