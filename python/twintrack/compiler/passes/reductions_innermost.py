"""reductions-innermost: reorder each linalg.generic's loops so its
reduction dims come after all its parallel dims.

convert-linalg-to-parallel-loops keeps a generic's loop order, so a
reduction over a middle dim (torch.sum(x, dim=1) of a 3-D tensor) became
scf.parallel(d0) { scf.for(d1) { scf.parallel(d2) } }: gpu-distribute maps
only the outer parallel loop, and one block did all of it. With the
reductions innermost, every output element is a parallel iteration and
its reduction a loop inside it.

Legal for any generic: parallel dims are independent, and each output
element still reduces over the same elements in the same order (the
reduction dims keep their relative order). The op is changed in place:
its indexing maps are composed with the permutation, its iterator types
permuted, and the body's linalg.index ops renumbered."""

from __future__ import annotations

from dataclasses import dataclass

from mlir import ir

from .generic_body import indexing_maps
from .ir_helpers import PythonPass, nested_ops


def innermost_order(iterators: list[str]) -> list[int]:
    """The new loop order (old dim of each new position): parallel dims, then reductions."""
    parallel = [d for d, kind in enumerate(iterators) if kind != "reduction"]
    return parallel + [d for d, kind in enumerate(iterators) if kind == "reduction"]


def _iterators(op: ir.Operation) -> list[str]:
    return [str(it).removeprefix("#linalg.iterator_type<").removesuffix(">")
            for it in ir.ArrayAttr(op.attributes["iterator_types"])]


def _reorder(op: ir.Operation, order: list[int]) -> None:
    new_position = {old: new for new, old in enumerate(order)}
    rank = len(order)
    # Old dim d is new dim new_position[d]: substitute it into every map's results.
    renaming = ir.AffineMap.get(rank, 0, [ir.AffineDimExpr.get(new_position[d]) for d in range(rank)])
    maps = [ir.AffineMap.get(rank, m.n_symbols, [e.compose(renaming) for e in m.results]) for m in indexing_maps(op)]
    op.attributes["indexing_maps"] = ir.ArrayAttr.get([ir.AffineMapAttr.get(m) for m in maps])
    iterators = ir.ArrayAttr(op.attributes["iterator_types"])
    op.attributes["iterator_types"] = ir.ArrayAttr.get([iterators[old] for old in order])
    i64 = ir.IntegerType.get_signless(64)
    for index in nested_ops(op, lambda o: o.name == "linalg.index"):
        dim = ir.IntegerAttr(index.attributes["dim"]).value
        index.attributes["dim"] = ir.IntegerAttr.get(i64, new_position[dim])


@dataclass(frozen=True)
class ReductionsInnermost(PythonPass):
    name = "reductions-innermost"

    def _run(self, module: ir.Operation, pass_) -> None:
        for op in nested_ops(module, lambda o: o.name == "linalg.generic"):
            order = innermost_order(_iterators(op))
            if order != sorted(order):
                _reorder(op, order)
