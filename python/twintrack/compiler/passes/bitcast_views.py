"""bitcast-views: `x.view(dtype)` between dtypes of one width reinterprets
each element's bits, and becomes an elementwise `arith.bitcast`.

torch-mlir imports the view as `torch.aten.view.dtype`, which its linalg
conversion leaves illegal (the user saw "failed to legalize
'torch.constant.int'"). On the torch backend contract (a `tool =
"torch-mlir-opt"` stage) this pass rewrites it as

    %b = torch_c.to_builtin_tensor %x      : tensor<..xf32>
    %c = linalg.generic ins(%b) { arith.bitcast : f32 to i32 }
    %r = torch_c.from_builtin_tensor %c    : !torch.vtensor<[..],si32>

which the linalg stage carries through. A view to a dtype of another width (it changes the last
dim's size) reaches it as same-width views, shifts and masks (frontend/decomp/views.py).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .ir_helpers import PythonPass
from .torch_ir import ops_named, torch_ir

VIEW_DTYPE = "torch.aten.view.dtype"
_TORCH_TO_BUILTIN = {"si": "i", "ui": "i"}
_VTENSOR = re.compile(r"!torch\.vtensor<\[([^\]]*)\],([a-z]+)(\d+)>")


def builtin_tensor_type(vtensor_type):
    """!torch.vtensor<[?,4],si32> -> tensor<?x4xi32> (signless), or None where it is not ranked."""
    ir = torch_ir()
    match = _VTENSOR.fullmatch(str(vtensor_type))
    if match is None:
        return None
    sizes, kind, width = match.groups()
    dynamic = ir.ShapedType.get_dynamic_size()
    shape = [dynamic if s == "?" else int(s) for s in sizes.split(",")] if sizes else []
    element = f"{_TORCH_TO_BUILTIN.get(kind, kind)}{width}"
    return ir.RankedTensorType.get(shape, ir.Type.parse(element))


def _element_width(tensor_type) -> int:
    ir = torch_ir()
    element = ir.RankedTensorType(tensor_type).element_type
    return ir.IntegerType(element).width if isinstance(element, ir.IntegerType) else ir.FloatType(element).width


def _load_conversion_dialect(context) -> None:
    """torch_c is loaded by the passes that use it, not registered for
    Python: a pass depending on it, run on an empty module, loads it."""
    ir = torch_ir()
    from torch_mlir.passmanager import PassManager
    with context, ir.Location.unknown():
        PassManager.parse("builtin.module(torch-func-backend-type-conversion)").run(ir.Module.create().operation)


def _elementwise_bitcast(value, result_type):
    """A linalg.generic bitcasting each element of `value` to `result_type`'s element type."""
    ir = torch_ir()
    from torch_mlir.dialects import arith, linalg, tensor
    result_type = ir.RankedTensorType(result_type)
    rank = result_type.rank
    sizes = [tensor.DimOp(value, arith.ConstantOp(ir.IndexType.get(), d).result).result
             if result_type.is_dynamic_dim(d) else size for d, size in enumerate(result_type.shape)]
    empty = tensor.EmptyOp(sizes, result_type.element_type).result
    identity = ir.AffineMapAttr.get(ir.AffineMap.get_identity(rank))
    parallel = ir.Attribute.parse("#linalg.iterator_type<parallel>")
    generic = linalg.GenericOp([result_type], [value], [empty], ir.ArrayAttr.get([identity, identity]),
                               ir.ArrayAttr.get([parallel] * rank))
    payload = generic.regions[0].blocks.append(ir.RankedTensorType(value.type).element_type, result_type.element_type)
    with ir.InsertionPoint(payload):
        linalg.YieldOp([arith.BitcastOp(result_type.element_type, payload.arguments[0]).result])
    return generic.results[0]


def _bitcast(view) -> None:
    with view.location:
        _bitcast_here(view)


def _bitcast_here(view) -> None:
    ir = torch_ir()
    source, result = builtin_tensor_type(view.operands[0].type), builtin_tensor_type(view.results[0].type)
    if source is None or result is None or source.shape != result.shape \
            or _element_width(source) != _element_width(result):
        return
    with ir.InsertionPoint(view):
        builtin = ir.Operation.create("torch_c.to_builtin_tensor", results=[source], operands=[view.operands[0]])
        cast = _elementwise_bitcast(builtin.results[0], result)
        back = ir.Operation.create("torch_c.from_builtin_tensor", results=[view.results[0].type], operands=[cast])
    view.results[0].replace_all_uses_with(back.results[0])
    view.erase()


@dataclass(frozen=True)
class BitcastViews(PythonPass):
    """Runs in torch-mlir's bindings (a `tool = "torch-mlir-opt"` stage)."""

    name = "bitcast-views"
    binding = "torch_mlir"

    def _run(self, op, pass_) -> None:
        views = ops_named(op, VIEW_DTYPE)
        if views:
            _load_conversion_dialect(op.context)
        for view in views:
            _bitcast(view)
