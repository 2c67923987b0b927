"""Run-time guards: what eager checks while it runs, the compiled program
checks too, instead of trapping or reading past a buffer.

- Integer division (div with rounding, fmod, remainder) by zero raises, as
  eager raises; the division itself runs on a divisor of 1 there, so the CPU
  never traps (SIGFPE). INT_MIN / -1 wraps (eager's own CPU kernel traps).
- An index out of range (embedding, index_select, gather, advanced
  indexing) raises IndexError, as eager does; the read itself takes a
  clamped index, so no memory outside the tensor is touched.

Each guard rewrites its op in the exported FX graph and adds a 0-d bool
"violated" flag, which the calling convention returns as an extra result
and checks after the call (calling.Guard). Both targets get the rewrite.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from .graph_edit import NodeBuilder
from .naming import located

aten = torch.ops.aten
fx = torch.fx


@dataclass(frozen=True)
class Violation:
    flag: fx.Node      # 0-d bool: the check failed somewhere
    kind: str          # 'division' or 'index'
    message: str       # "aten.embedding at model.py:12: index out of range"


def _integer(node) -> bool:
    value = node.meta.get("val") if isinstance(node, fx.Node) else None
    return isinstance(value, torch.Tensor) and not value.is_floating_point() and not value.is_complex() \
        and value.dtype != torch.bool


def _dtype(value) -> torch.dtype | None:
    """A node's dtype (a tensor's), or None for a number."""
    value = value.meta.get("val") if isinstance(value, fx.Node) else None
    return value.dtype if isinstance(value, torch.Tensor) else None


def _guard_division(graph: fx.Graph, node: fx.Node) -> Violation | None:
    dividend, divisor = node.args[:2]
    if not (_integer(node) and _integer(divisor)):
        return None
    new = NodeBuilder(graph, node)
    zero = new(aten.eq.Scalar, divisor, 0)
    minus_one = new(aten.eq.Scalar, divisor, -1)
    safe_divisor = new(aten.masked_fill.Scalar, divisor, new(aten.logical_or.default, zero, minus_one), 1)
    node.args = (dividend, safe_divisor, *node.args[2:])
    if node.target is aten.div.Tensor_mode:  # x / -1 == -x, wrapping at INT_MIN as two's complement does
        after = NodeBuilder(graph, node, after=True)
        promoted = dividend
        if _dtype(dividend) != node.meta["val"].dtype:  # a bool or narrower dividend: -x in the result's type
            promoted = after(aten._to_copy.default, dividend, dtype=node.meta["val"].dtype)
        chosen = after(aten.where.self, minus_one, after(aten.neg.default, promoted), node)
        node.replace_all_uses_with(chosen, delete_user_cb=lambda user: user is not chosen)
    return Violation(new(aten.any.default, zero), "division", f"{located(node)}: integer division by zero")


def _guard_index(graph: fx.Graph, node: fx.Node, index: fx.Node, size: int, wraps: bool,
                 replace: Callable[[fx.Node], None]) -> Violation | None:
    """`index` must lie in [0, size) (or [-size, size) where negatives wrap)."""
    if not _integer(index) or size == 0:
        return None
    low = -size if wraps else 0
    new = NodeBuilder(graph, node)
    outside = new(aten.logical_or.default, new(aten.lt.Scalar, index, low), new(aten.ge.Scalar, index, size))
    replace(new(aten.clamp.default, index, low, size - 1))
    return Violation(new(aten.any.default, outside), "index", f"{located(node)}: index out of range")


def _embedding(graph, node):
    weight, index = node.args[:2]
    return [_guard_index(graph, node, index, weight.meta["val"].shape[0], False,
                         lambda safe: _set_arg(node, 1, safe))]


def _along_dim(position: int):
    """index_select(x, dim, index) and gather(x, dim, index): the index is args[2]."""
    def guard(graph, node):
        source, dim, index = node.args[:3]
        shape = source.meta["val"].shape
        size = shape[dim] if shape else 1
        return [_guard_index(graph, node, index, size, False, lambda safe: _set_arg(node, position, safe))]
    return guard


def _advanced_index(graph, node):
    source, indices = node.args[:2]
    shape = source.meta["val"].shape
    violations = []
    for dim, index in enumerate(indices):
        if index is not None and dim < len(shape):
            violations.append(_guard_index(graph, node, index, shape[dim], True,
                                           lambda safe, dim=dim: _set_index(node, dim, safe)))
    return violations


def _set_arg(node: fx.Node, position: int, value: fx.Node) -> None:
    args = list(node.args)
    args[position] = value
    node.args = tuple(args)


def _set_index(node: fx.Node, dim: int, value: fx.Node) -> None:
    indices = list(node.args[1])
    indices[dim] = value
    node.args = (node.args[0], indices, *node.args[2:])


DIVISIONS = (aten.div.Tensor_mode, aten.fmod.Tensor, aten.remainder.Tensor, aten.floor_divide.default)
INDEXING = {aten.embedding.default: _embedding, aten.index_select.default: _along_dim(2),
            aten.gather.default: _along_dim(2), aten.index.Tensor: _advanced_index}


def add_guards(program: torch.export.ExportedProgram) -> list[Violation]:
    """Rewrite the guarded ops of `program` in place; their flags, in graph order."""
    graph, violations = program.graph, []
    for node in list(graph.nodes):
        if node.op != "call_function":
            continue
        if node.target in DIVISIONS:
            violations.append(_guard_division(graph, node))
        elif node.target in INDEXING:
            violations += INDEXING[node.target](graph, node)
    return [v for v in violations if v is not None]

