"""torch.export's bookkeeping of composite ops, done once per process
instead of once per export.

Every `run_decompositions` asks torch for the functional composite
(CompositeImplicitAutograd) ops of every op namespace, and for each
namespace torch first looks up every composite op of the C++ dispatcher
again: about 0.1 s a call on this machine, more with each namespace a
library adds. The answer changes only when ops are registered, so it is
kept, keyed by the namespaces and the dispatcher's composite registrations.

Then torch overrides the Python kernels of every composite op in the
table for the trace, about 500 of them, each with a dozen registrations
made and undone. An entry that decomposes an op into its own composite
kernel does what the op does without one, so only the other entries are
installed (about 60).

Both apply only inside `fast_composite_ops()`, around twintrack's own
export: the user's torch is left as it was.
"""

from __future__ import annotations

import functools
from contextlib import contextmanager

import torch
from torch.export import decomp_utils, exported_program

_LISTED: dict = {}


def _valid_composite_ops(list_them) -> set:
    registrations = torch._C._dispatch_get_registrations_for_dispatch_key("CompositeImplicitAutograd")
    key = (tuple(torch.ops._dir), len(registrations))
    if _LISTED.get("key") != key:
        _LISTED.update(key=key, ops=frozenset(list_them()))
    return set(_LISTED["ops"])  # a fresh set: torch's callers remove from it


def _decomposes_as_itself(decomposition) -> bool:
    """torch's default entry for a composite op: a call of its own composite kernel."""
    return (isinstance(decomposition, functools.partial)
            and getattr(decomposition.func, "__name__", "") == "_special_op_to_decompose_cia")


@contextmanager
def fast_composite_ops():
    listing = exported_program._collect_all_valid_cia_ops
    override = exported_program._override_composite_implicit_decomp

    def listed():
        return _valid_composite_ops(listing)

    def overriding(ops_to_callable: dict):
        return override({op: f for op, f in ops_to_callable.items() if not _decomposes_as_itself(f)})

    patches = [(exported_program, "_collect_all_valid_cia_ops", listed),
               (decomp_utils, "_collect_all_valid_cia_ops", listed),
               (exported_program, "_override_composite_implicit_decomp", overriding)]
    saved = [(module, name, getattr(module, name)) for module, name, _ in patches]
    for module, name, replacement in patches:
        setattr(module, name, replacement)
    try:
        yield
    finally:
        for module, name, original in saved:
            setattr(module, name, original)
