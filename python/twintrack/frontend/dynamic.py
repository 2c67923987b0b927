"""The dims a compile leaves open, given to torch.export and read back from
its graph as shape expressions over their names (twintrack.dynamic_shapes)."""

from __future__ import annotations

import torch

from ..calling import TensorSpec
from ..dialect import SIZE_BOUNDS_ATTR
from ..dynamic_shapes import DynamicDim, concrete_shape
from ..errors import CompilerError, UsageError


def export_dims(dims: list[DynamicDim], inputs: int) -> list[dict | None]:
    """torch.export's dynamic_shapes entry of each of `inputs` inputs: one
    torch.export.Dim per name (one name, one symbol), a divisor as a
    multiple of a Dim of its own."""
    made: dict[str, object] = {}
    entries: list[dict | None] = [None] * inputs
    for dim in dims:
        if dim.name not in made:
            made[dim.name] = _torch_dim(dim)
        entry = entries[dim.input] = entries[dim.input] or {}
        entry[dim.dim] = made[dim.name]
    return entries


def _torch_dim(dim: DynamicDim):
    if dim.multiple == 1:
        return torch.export.Dim(dim.name, min=dim.low, max=dim.high)
    blocks = torch.export.Dim(f"{dim.name}_blocks", min=max(1, -(-dim.low // dim.multiple)),
                              max=dim.high // dim.multiple)
    return blocks * dim.multiple


class ShapeNames:
    """torch.export's shape symbols as the names of the dims given: a size
    of the graph (a SymInt) becomes an int or an expression over them."""

    def __init__(self, dims: list[DynamicDim], placeholders: list[torch.Tensor]):
        import sympy

        from torch.utils._sympy.functions import FloorDiv
        self._substitutions = {}
        for dim in dims:
            size = placeholders[dim.input].shape[dim.dim]
            if not isinstance(size, torch.SymInt):
                raise UsageError(f"--dynamic: the model fixes input {dim.input} dim {dim.dim} ({dim.name}) "
                                 f"at {size}; it cannot vary")
            if size.node.expr.is_number:  # a guard during the decompositions replaced the symbol
                raise UsageError(f"--dynamic: {dim.name} (input {dim.input} dim {dim.dim}) became the constant "
                                 f"{int(size.node.expr)} as twintrack decomposed the model: a decomposition "
                                 "needs that size at compile time (a sorting network's stages, say); compile it static")
            name = sympy.Symbol(dim.name, integer=True, positive=True)
            coefficient, symbol = size.node.expr.as_coeff_Mul()
            self._substitutions[symbol] = name if coefficient == 1 else FloorDiv(name, int(coefficient))

    def shape(self, tensor: torch.Tensor) -> tuple[int | str, ...]:
        return tuple(self.size(size) for size in tensor.shape)

    def size(self, size) -> int | str:
        if not isinstance(size, torch.SymInt):
            return int(size)
        from torch.utils._sympy.printers import PythonPrinter
        expression = size.node.expr.xreplace(self._substitutions)
        if expression.is_number:
            return int(expression)
        unnamed = {str(s) for s in expression.free_symbols} - {str(s) for s in self._substitutions.values()
                                                                for s in s.free_symbols}
        if unnamed:
            raise CompilerError("fx", [f"a size depends on {', '.join(sorted(unnamed))}, which no --dynamic dim names"])
        return PythonPrinter().doprint(expression)


STRICT_SYMBOLIC_ATTR = "torch.assume_strict_symbolic_shapes"  # torch-mlir's: no run-time broadcast checks


def mark_dynamic_entry(module, arguments: list[TensorSpec], dims: list[DynamicDim]) -> None:
    """The entry point of a dynamic-shape import, marked for the stages:
    - torch-mlir's `torch.assume_strict_symbolic_shapes`: a dynamic size
      never broadcasts at run time (torch.export specializes or guards a
      dim that would), so the linalg lowering emits plain loops instead of
      bodies that test each dynamic size for 1 and gather (which the row
      kernels and the vectorizer refuse). torch-mlir's importer sets it for
      `import_program`, not for the frozen import twintrack uses;
    - `twintrack.arg_size_bounds`: each argument's largest sizes, each
      dim's expression at its names' upper ends (sizes grow with the names
      they are made of), for the passes that plan memory (plan-workspace)."""
    from torch_mlir import ir
    highs = {dim.name: dim.high - dim.high % dim.multiple for dim in dims}
    with module.context:
        bounds = [ir.DenseI64ArrayAttr.get(list(concrete_shape(spec.shape, highs))) for spec in arguments]
        entry = next(op for op in module.body.operations if op.operation.name == "func.func")
        entry.operation.attributes[SIZE_BOUNDS_ATTR] = ir.ArrayAttr.get(bounds)
        entry.operation.attributes[STRICT_SYMBOLIC_ATTR] = ir.UnitAttr.get()
