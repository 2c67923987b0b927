"""serial-small-loops: of the loops upstream affine-parallelize proved
parallel (its dependence analysis: no iteration reads what another
writes), keep parallel only those that are a nest's outermost loop and
whose nest has elements enough to pay for starting the threads; the others
become affine.for again (an inner one would start threads per iteration
of the loops around it).

A parallel loop becomes tasks on MLIR's async runtime in the llvm stage
(with more than one thread), and starting and joining them costs about
0.1 ms, so a nest over fewer than the host's `parallel-min-elements`
(lowering/targets/cpu.toml) stays one loop, as does every nest when
there is one thread. Each loop kept parallel records why
(`twintrack.schedule`); --explain-schedule prints each outermost parallel
loop, kept or not, and why.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from mlir import ir
from mlir.dialects import affine

from ..kernels.cpu_matmul import SCHEDULE_ATTR
from ..target import DEFAULT_LOWERING_DIR, cpu_target
from .ir_helpers import PythonPass, nested_ops
from .kernel_fallback import record_schedule


def _constant(affine_map: ir.AffineMap) -> int | None:
    results = list(affine_map.results)
    if len(results) != 1 or affine_map.n_dims or affine_map.n_symbols:
        return None
    try:
        return ir.AffineConstantExpr(results[0]).value
    except ValueError:
        return None


def _parallel_range(op: ir.Operation) -> tuple[int, int, int] | None:
    """(lower, upper, step) of a one-dimensional affine.parallel with constant bounds."""
    steps = list(ir.ArrayAttr(op.attributes["steps"]))
    if len(steps) != 1 or len(op.regions[0].blocks[0].arguments) != 1:
        return None
    lower = _constant(ir.AffineMapAttr(op.attributes["lowerBoundsMap"]).value)
    upper = _constant(ir.AffineMapAttr(op.attributes["upperBoundsMap"]).value)
    if lower is None or upper is None:
        return None
    return lower, upper, ir.IntegerAttr(steps[0]).value


def _span(loop: ir.Operation) -> int | None:
    """upper - lower of an affine.for, when it is a constant: constant
    bounds, or both the same map of the same operands but for a constant
    (a tile's inner loop, from i to i + 32)."""
    lower_map = ir.AffineMapAttr(loop.attributes["lowerBoundMap"]).value
    upper_map = ir.AffineMapAttr(loop.attributes["upperBoundMap"]).value
    lower, upper = _constant(lower_map), _constant(upper_map)
    if lower is not None and upper is not None:
        return upper - lower
    lower_count = lower_map.n_dims + lower_map.n_symbols
    operands = list(loop.operands)
    if len(lower_map.results) != 1 or len(upper_map.results) != 1 or \
            operands[:lower_count] != operands[lower_count:lower_count + upper_map.n_dims + upper_map.n_symbols] or \
            (lower_map.n_dims, lower_map.n_symbols) != (upper_map.n_dims, upper_map.n_symbols):
        return None
    try:
        return ir.AffineConstantExpr(upper_map.results[0] - lower_map.results[0]).value
    except ValueError:
        return None


def _elements(block: ir.Block) -> int:
    """The innermost iterations of the loops in `block`, times their steps
    (a vectorized loop's elements); loops without constant bounds count one
    iteration (their work is unknown: it does not argue for threads)."""
    total = 0
    for op in block.operations:
        if op.operation.name != "affine.for":
            continue
        loop = op.operation
        step = ir.IntegerAttr(loop.attributes["step"]).value
        span = _span(loop)
        trips = -(-span // step) if span is not None else 1
        inner = _elements(loop.regions[0].blocks[0])
        total += trips * (inner if inner else step)
    return total


def _why_serial(trips: int, elements: int, threads: int, target) -> str:
    if trips < threads:
        return f"{trips} iterations for {threads} threads"
    return f"{elements} elements, under the {target.parallel_min_elements} that pay for starting {threads} threads"


def _as_serial_loop(op: ir.Operation, lower: int, upper: int, step: int) -> None:
    """The affine.parallel `op` as an affine.for over the same range."""
    body = op.regions[0].blocks[0]
    with ir.InsertionPoint(op), op.location:
        loop = affine.AffineForOp(lower, upper, step)
        with ir.InsertionPoint(loop.body):
            terminator = affine.AffineYieldOp([])
    body.arguments[0].replace_all_uses_with(loop.induction_variable)
    for inner in list(body.operations)[:-1]:  # all but its affine.yield
        inner.operation.move_before(terminator)
    op.erase()


@dataclass(frozen=True)
class SerialSmallLoops(PythonPass):
    name = "serial-small-loops"
    lowering_dir: str = str(DEFAULT_LOWERING_DIR)  # where the host description is read (--lowering-dir)
    threads: int = 1

    def _run(self, module: ir.Operation, pass_) -> None:
        target = cpu_target(Path(self.lowering_dir))
        number = 0
        for op in nested_ops(module, lambda o: o.name == "affine.parallel"):
            bounds = _parallel_range(op)
            if bounds is None:
                continue  # a form this pass does not read: it stays as affine-parallelize made it
            lower, upper, step = bounds
            trips = -(-(upper - lower) // step)
            inner = _elements(op.regions[0].blocks[0])
            elements = trips * (inner if inner else step)
            outermost = op.parent.name == "func.func"  # an inner one would start threads per outer iteration
            if self.threads > 1 and outermost and elements >= target.parallel_min_elements \
                    and trips >= self.threads:
                reason = (f"loops: {trips} iterations in parallel on {self.threads} threads: no dependence between "
                          f"them (affine-parallelize), and {elements} elements pay for starting the threads")
                op.attributes[SCHEDULE_ATTR] = ir.StringAttr.get(reason)
                record_schedule(module, op.location, f"loop_{number}", reason, ())
            else:
                if self.threads > 1 and outermost:
                    record_schedule(module, op.location, f"loop_{number}", "loops: serial, though no dependence "
                                    "between iterations: " + _why_serial(trips, elements, self.threads, target), ())
                _as_serial_loop(op, lower, upper, step)
            number += 1
