"""The FX passes: the exported, decomposed program rewritten for torch-mlir,
in the order of PIPELINE.

Every pass has one interface, `run(program, report) -> program`: it
takes the ExportedProgram, returns the program rewritten (most passes edit
the graph module, and where they must the constants, in place and return
the same program; the calling convention returns a new one with its new
signature), and records in the `FxReport` what later passes and the
calling convention need to know. The order matters:

- zero-size values fold first: later passes and torch-mlir's lowerings
  divide by the zero extent;
- Python numbers the model returns (arithmetic on `.item()` reads) become
  0-d tensor ops before anything looks for what is left of symbols;
- complex values become real pairs, and results whose length depends on
  the data get a bound, before `refuse unsupported` looks for what is left
  of either; arguments and results stored in another order than their
  shape's are taken in memory order, after the first (a pair has its own
  layout) and, for results, after the second (a bounded result is cut);
- reshapes of dynamic shapes become flattens and unflattens, which
  torch-mlir lowers with every size known;
- the run-time guards (and what they flag) come after the rewrites, so
  they see the final ops;
- names, bfloat16 constants and tensor metadata are bookkeeping for
  torch-mlir's importer, once the graph no longer changes;
- the calling convention last: it reads the final outputs and the report.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from ...calling import CallingConvention
from ...phases import phase
from ..decomp import frontend_table
from .bfloat16_constants import bfloat16_constants_as_float32
from .bounded_outputs import bound_data_dependent_results
from .calling_convention import functional_results
from .complex_pairs import carry_complex_as_pairs, complex_inputs_as_pairs
from .guards import add_guards
from .name_ops import name_ops_in_locations
from .tensor_metadata import refresh_tensor_metadata
from .unsigned_operands import convert_unsigned_operands
from .scalar_results import scalar_results_as_tensors
from .storage_order import arguments_in_storage_order, results_in_storage_order
from .symbolic_views import views_as_dim_groups
from .unsupported import refuse_unsupported
from .zero_size import fold_zero_size_values


@dataclass
class FxReport:
    """What the passes found, for the calling convention: `spec` names the
    model in messages; `checks` asks for the run-time guards."""
    spec: str
    checks: bool = True
    complex_outputs: set[int] = field(default_factory=set)   # output positions holding complex pairs
    complex_arguments: set[str] = field(default_factory=set)  # the inputs the caller passes as pairs
    storage_orders: dict = field(default_factory=dict)          # input name -> its dims in memory order
    result_orders: dict = field(default_factory=dict)           # output position -> its dims in memory order
    lengths: dict = field(default_factory=dict)                # output position -> its count node
    violations: list = field(default_factory=list)             # the guards' flags, in graph order
    calling: CallingConvention | None = None


Program = torch.export.ExportedProgram


@dataclass(frozen=True)
class FxPass:
    name: str
    run: Callable[[Program, FxReport], Program]


def _complex_pairs(program: Program, report: FxReport) -> Program:
    inputs = complex_inputs_as_pairs(program)
    report.complex_arguments = {node.name for node in inputs}
    report.complex_outputs = carry_complex_as_pairs(program, frontend_table(), inputs)
    return program


def _storage_order(program: Program, report: FxReport) -> Program:
    report.storage_orders = arguments_in_storage_order(program)
    return program


def _bounded_results(program: Program, report: FxReport) -> Program:
    report.lengths = bound_data_dependent_results(program, frontend_table())
    return program


def _results_in_storage_order(program: Program, report: FxReport) -> Program:
    report.result_orders = results_in_storage_order(program, set(report.complex_outputs) | set(report.lengths))
    return program


def _guards(program: Program, report: FxReport) -> Program:
    report.violations = add_guards(program) if report.checks else []
    return program


def _calling_convention(program: Program, report: FxReport) -> Program:
    functional, report.calling = functional_results(program, report.spec, report.violations,
                                                    report.complex_outputs, report.lengths, report.complex_arguments,
                                                    report.storage_orders, report.result_orders)
    return functional


def _in_place(rewrite: Callable[[Program], None]) -> Callable[[Program, FxReport], Program]:
    """A pass that edits the program in place and needs nothing from the report."""
    def run(program: Program, report: FxReport) -> Program:
        rewrite(program)
        return program
    return run


PIPELINE = (
    FxPass("fold zero-size values", _in_place(fold_zero_size_values)),
    FxPass("numbers returned as tensors", _in_place(scalar_results_as_tensors)),
    FxPass("complex as pairs", _complex_pairs),
    FxPass("arguments in storage order", _storage_order),
    FxPass("bound data-dependent results", _bounded_results),
    FxPass("results in storage order", _results_in_storage_order),
    FxPass("views of dynamic shapes", _in_place(views_as_dim_groups)),
    FxPass("refuse unsupported", _in_place(refuse_unsupported)),
    FxPass("unsigned operands", _in_place(convert_unsigned_operands)),
    FxPass("guards", _guards),
    FxPass("name ops", _in_place(name_ops_in_locations)),
    FxPass("bfloat16 constants", _in_place(bfloat16_constants_as_float32)),
    FxPass("tensor metadata", _in_place(refresh_tensor_metadata)),
    FxPass("calling convention", _calling_convention),
)


def run_pipeline(program: Program, report: FxReport) -> Program:
    """Every pass of PIPELINE on `program`, in order, each timed as `fx: NAME`:
    the program the last returns."""
    for fx_pass in PIPELINE:
        with phase(f"fx: {fx_pass.name}"):
            program = fx_pass.run(program, report)
    return program
