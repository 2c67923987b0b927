"""A kernel built once per compile and cloned for each site that repeats it.

A model's repeated layers ask a generator for the same kernel again and
again (ViT's 12 layers: 49 matmul launches, a dozen distinct); building
one through the bindings costs 50-100 ms, and outlining then shares the
identical modules anyway. So the first site's launch is kept with the
values it reads from outside (its roles: A, B, C, the epilogue's tensors,
the host's tensor maps, in a fixed order), and a later site with the same
key gets a clone whose reads of those values are rewired to its own. A
clone is made only where every other value the launch reads from outside
is a constant (its grid, its shared memory, constants placed before it)
defined earlier in the block the new site is in; otherwise the site is
built as usual.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass

from mlir import ir


@dataclass(frozen=True)
class _Built:
    launch: ir.Operation
    roles: tuple[ir.Value, ...]
    outside: tuple[ir.Value, ...]  # the other values it reads from outside


class LaunchReuse:
    """The launches built in one pass run, by key."""

    def __init__(self):
        self._built: dict[Hashable, _Built] = {}

    def launch(self, key: Hashable | None, before: ir.Operation, kernel: str, roles: Sequence[ir.Value],
               build: Callable[[], ir.Operation]) -> ir.Operation:
        """The launch of `kernel` right before `before`: a clone of the one
        built for `key` with `roles` in place of its roles, or `build()`'s
        (kept for the sites after it). A None key is always built."""
        if key is None:
            return build()
        built = self._built.get(key)
        if built is not None and all(_defined_before(value, before) for value in built.outside):
            return _clone(built, before, kernel, roles)
        launch = build()
        if built is None:
            self._built[key] = _Built(launch, tuple(roles), _read_from_outside(launch, set(roles)))
        return launch


def _read_from_outside(launch: ir.Operation, roles: set[ir.Value]) -> tuple[ir.Value, ...]:
    """The values `launch` and the ops in it read that neither they define nor `roles` holds."""
    defined: set[ir.Value] = set()
    read: dict[ir.Value, None] = {}

    def visit(op: ir.Operation):
        for region in op.regions:
            for block in region.blocks:
                defined.update(block.arguments)
        defined.update(op.results)
        read.update((value, None) for value in op.operands)
        return ir.WalkResult.ADVANCE
    launch.walk(visit)
    return tuple(value for value in read if value not in defined and value not in roles)


def _defined_before(value: ir.Value, before: ir.Operation) -> bool:
    """Is `value` a constant defined earlier in `before`'s block (so the
    clone may read it too)? Anything else the first launch reads from
    outside (a size the host computed for that site) keeps the site from
    being cloned."""
    owner = value.owner
    if not isinstance(owner, (ir.Operation, ir.OpView)) or owner.operation.name != "arith.constant":
        return False
    owner = owner.operation
    return owner.block == before.block and owner.is_before_in_block(before)


def _clone(built: _Built, before: ir.Operation, kernel: str, roles: Sequence[ir.Value]) -> ir.Operation:
    """`built`'s launch cloned before `before`, reading `roles` for its roles, named `kernel`."""
    clone = built.launch.clone(ip=ir.InsertionPoint(before))
    mapping = dict(zip(built.roles, roles))

    def rewire(op: ir.Operation):
        operands = op.operands
        for index, value in enumerate(operands):
            replacement = mapping.get(value)
            if replacement is not None:
                operands[index] = replacement
        return ir.WalkResult.ADVANCE
    clone.walk(rewire)
    for name in ("module", "function"):
        clone.attributes[name] = ir.FlatSymbolRefAttr.get(kernel)
    return clone
