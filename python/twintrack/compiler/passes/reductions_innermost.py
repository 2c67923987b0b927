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

from .generic_body import permute_loops
from .ir_helpers import PythonPass, nested_ops


def innermost_order(iterators: list[str]) -> list[int]:
    """The new loop order (old dim of each new position): parallel dims, then reductions."""
    parallel = [d for d, kind in enumerate(iterators) if kind != "reduction"]
    return parallel + [d for d, kind in enumerate(iterators) if kind == "reduction"]


def _iterators(op: ir.Operation) -> list[str]:
    return [str(it).removeprefix("#linalg.iterator_type<").removesuffix(">")
            for it in ir.ArrayAttr(op.attributes["iterator_types"])]


@dataclass(frozen=True)
class ReductionsInnermost(PythonPass):
    name = "reductions-innermost"

    def _run(self, module: ir.Operation, pass_) -> None:
        for op in nested_ops(module, lambda o: o.name == "linalg.generic"):
            order = innermost_order(_iterators(op))
            if order != sorted(order):
                permute_loops(op, order)
