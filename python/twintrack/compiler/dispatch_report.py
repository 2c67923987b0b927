"""The dispatch report: what each twintrack.dispatch of the fusion stage does.

The GPU target reports real kernels (kernel report, from PTX); this is the
same view one level up, for any target: per dispatch, the torch ops it
covers, the bytes crossing its boundary (each input read and each result
written once: the floor of its traffic) and its flops (the iteration domain
of each linalg op times the float ops of its body, named ops generalized
first so matmuls and convolutions count 2 per multiply-add).
"""

from __future__ import annotations

import math

from mlir import ir, passmanager

from ..dialect import operation_text
from ..locations import brief_source, location_source_key, short_location
from .passes.ir_helpers import elementwise_flops, nested_ops, shaped_bytes

DISPATCH_OP = "twintrack.dispatch"


def dispatch_report(module) -> list[dict]:
    """One entry per twintrack.dispatch of a fusion-stage module (not changed)."""
    with module.context:
        generalized = ir.Module.parse(operation_text(module, print_generic_op_form=True, enable_debug_info=True))
        passmanager.PassManager.parse("builtin.module(linalg-generalize-named-ops)").run(generalized.operation)
    dispatches = nested_ops(generalized.operation, lambda op: op.name == DISPATCH_OP)
    originals = nested_ops(module.operation, lambda op: op.name == DISPATCH_OP)
    return [{**_entry(index, dispatch), "sources": {"mlir": operation_text(original, large_elements_limit=16)}}
            for index, (dispatch, original) in enumerate(zip(dispatches, originals))]


def _entry(index: int, dispatch: ir.Operation) -> dict:
    # The linalg ops carry the torch ops' locations; constants and index
    # arithmetic take whichever location CSE left them.
    body_ops = nested_ops(dispatch, lambda op: op.name == "linalg.generic")
    locations = dict.fromkeys(brief_source(w) for w in (short_location(op.location) for op in body_ops) if ":" in w)
    keys = dict.fromkeys(k for k in (location_source_key(op.location) for op in body_ops) if k)
    boundary = [v.type for v in dispatch.operands] + [r.type for r in dispatch.results]
    return {
        "index": index, "name": ir.StringAttr(dispatch.attributes["label"]).value, "kind": "dispatch",
        "source_ops": list(locations), "source_keys": list(keys),
        "bytes": sum(shaped_bytes(t) for t in boundary if isinstance(t, ir.ShapedType) and t.has_static_shape),
        "flops": sum(_generic_flops(op) for op in body_ops),
    }


def _generic_flops(generic: ir.Operation) -> int:
    per_point = sum(elementwise_flops(op) for op in nested_ops(generic)[1:])
    return per_point * math.prod(_loop_bounds(generic)) if per_point else 0


def _loop_bounds(generic: ir.Operation) -> list[int]:
    """Each loop's trip count, read off an operand dimension indexed by that loop alone."""
    maps = [ir.AffineMapAttr(a).value for a in ir.ArrayAttr(generic.attributes["indexing_maps"])]
    bounds = [1] * maps[0].n_dims
    for operand, indexing in zip(generic.operands, maps):
        shape = operand.type.shape if isinstance(operand.type, ir.ShapedType) else []
        for size, expr in zip(shape, indexing.results):
            if isinstance(expr, ir.AffineDimExpr):
                bounds[expr.position] = size
    return bounds
