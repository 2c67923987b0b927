"""The frontend's decomposition table: what `run_decompositions` rewrites
the exported graph with, before torch-mlir imports it.

Each module here is one family of entries (registry.py says how an entry
is registered and how it declines). The table is built in layers:

1. torch.export's core ATen table;
2. the families of PROVIDERS, in that order, each entry falling back to
   what the table held for its op where it declines;
3. torch-mlir's own table, for ops none of these name (so that its
   importer needs no second decomposition run);
4. PyTorch's full table, for ops torch-mlir has no op for at all
   (`_decompositions_of_unknown_ops`).

The order of PROVIDERS matters where two families name one op; a later
family wraps an earlier one:
- `half_reductions` and `exact` replace core entries (acc_type
  accumulation; PyTorch's exact gelu/elu, layer norm's statistics in f32);
- `scatters` before `eager`: eager's bools-through-int32 wraps the
  positive-dim scatters (scatter_add, index_add, scatter_reduce, index_put);
- `eager` before `edges`: the 0-d argmax/argmin/amax/amin of `edges`
  wraps eager's NaN-aware reductions;
- the others name disjoint ops; they follow in a fixed order so the table
  is the same in every process.
Built once per process (materializing the core table alone takes 0.1 s);
`program_table` hands each export a copy, with the attention entry its
program allows.
"""

from __future__ import annotations

import functools

import torch

from ...phases import phase
from . import (attention, eager, edges, exact, half_reductions, indexing, linalg, random, scans, scatters, signs,
               sorts, special, views)
from .registry import falling_back

PROVIDERS = (half_reductions, exact, scans, sorts, scatters, eager, views, signs, edges, special, linalg, indexing,
             random)


def program_table(program: torch.export.ExportedProgram) -> dict:
    """The table for one program: the frontend's, plus attention in its own
    dtype where that is safe for this program (attention.py)."""
    with phase("decomposition table (once per process)"):
        table = frontend_table()
    table.update(attention.entry_for(program))
    return table


def frontend_table() -> dict:
    """A copy of the frontend's table (the FX passes retrace with it too)."""
    return dict(_built_table())


@functools.cache
def _built_table() -> dict:
    from torch_mlir.extras.fx_decomp_util import get_decomposition_table
    table = dict(torch.export.default_decompositions())
    for provider in PROVIDERS:
        table.update(provider.FAMILY.over(table))
    for op, decomposition in get_decomposition_table().items():
        table.setdefault(op, decomposition)
    table.update(_decompositions_of_unknown_ops(table))
    return table


def _decompositions_of_unknown_ops(table: dict) -> dict:
    """PyTorch's own decomposition (its full table, not only the core-ATen
    one) of every op that torch-mlir has no op for and nothing above
    decomposes: torch-mlir would import it as an opaque `torch.operator`,
    which no stage lowers (addmv, std_mean, logsumexp, block_diag, the
    random distributions, ...). Whether the decomposition then lowers is
    up to its own ops; the op could not have lowered as it was. An entry
    of ours that declines (std_mean over float32) falls back to it."""
    from torch._decomp import decomposition_table

    from ...bindings import new_context
    torch_dialect = new_context("torch_mlir")  # asks the dialect which ops it defines
    return {op: falling_back(table[op], decomposition) if op in table else decomposition
            for op, decomposition in decomposition_table.items()
            if isinstance(op, torch._ops.OpOverload)
            and not torch_dialect.is_registered_operation(_torch_mlir_name(op))}


def _torch_mlir_name(op: torch._ops.OpOverload) -> str:
    """The op name torch-mlir's importer gives `op` (aten::add.Tensor is torch.aten.add.Tensor)."""
    name = op._schema.name.replace("::", ".")
    return f"torch.{name}.{op._schema.overload_name}" if op._schema.overload_name else f"torch.{name}"
