"""What torch-mlir takes in but cannot lower, refused with a clear error
before it can take the process down."""

from __future__ import annotations

import torch

from ...errors import UsageError
from .naming import located

aten = torch.ops.aten


COMPLEX_DTYPES = (torch.complex32, torch.complex64, torch.complex128)
# torch-mlir's importer has no type for these (uint32 it imports; uint8 is ui8)
UNIMPORTED_DTYPES = (torch.uint16, torch.uint64)


def refuse_unsupported(program: torch.export.ExportedProgram) -> None:
    """Raise UsageError for what torch-mlir takes in but cannot lower,
    where it would kill the process instead of failing, naming the first op
    concerned and the model line it comes from:
    - complex numbers: torch-mlir imports complex tensors, but no stage
      after it lowers them (MLIR asserts in Type::getIntOrFloatBitWidth and
      the process aborts at 'fusion');
    - uint16 and uint64 tensors (hash_tensor's result): torch-mlir's
      importer has no type for them;
    - shapes that depend on the data (nonzero, masked_select): the static
      pipeline has no size to give them (a segfault at 'torch' for a 0-d one);
    - a reshaping view of a zero-size tensor: torch-mlir divides by the
      zero extent (SIGFPE at 'linalg');
    - a view between bool and a dtype of another width (its last dim
      changes size): decomp/views.py takes the other dtypes' views."""
    for node in program.graph.nodes:
        if node.op != "call_function":
            continue
        problem = _unsupported(node)
        if problem:
            raise UsageError(f"{problem} are not supported: {located(node)}")


RESHAPING_VIEWS = (aten.view.default, aten._unsafe_view.default, aten.reshape.default, aten.as_strided.default,
                   aten.unfold.default, aten.im2col.default)


def _unsupported(node) -> str | None:
    values = [n.meta.get("val") for n in [node, *node.all_input_nodes]]
    if any(holds_complex(v) for v in values):
        return "complex dtypes"
    unimported = sorted({str(d).removeprefix("torch.") for v in values for d in _dtypes(v) if d in UNIMPORTED_DTYPES})
    if unimported:
        return f"{' and '.join(unimported)} tensors"
    if any(data_dependent(v) for v in values):
        return "shapes that depend on the data"
    if node.target in RESHAPING_VIEWS and any(isinstance(v, torch.Tensor) and v.numel() == 0 for v in values):
        return "reshaping views of zero-size tensors"
    if node.target == aten.view.dtype and _changes_width(values[0], values[1]):
        return "views to a dtype of another width (x.view(dtype) reinterpreting bytes)"
    return None


def _changes_width(result, source) -> bool:
    return isinstance(result, torch.Tensor) and isinstance(source, torch.Tensor) \
        and result.dtype.itemsize != source.dtype.itemsize


def data_dependent(value) -> bool:
    """Whether a value's shape has a size known only from the data (an
    unbacked symbol); an input's symbolic size (a dynamic dim) is not."""
    from torch.fx.experimental.symbolic_shapes import free_unbacked_symbols
    if isinstance(value, (tuple, list)):
        return any(data_dependent(v) for v in value)
    return isinstance(value, torch.Tensor) and bool(free_unbacked_symbols(value))


def holds_complex(value) -> bool:
    """Whether an FX node's value (a tensor, or a tuple/list of them) is complex."""
    return any(d in COMPLEX_DTYPES for d in _dtypes(value))


def _dtypes(value) -> list[torch.dtype]:
    """The dtypes of an FX node's value: a tensor's, or those of a tuple/list of them."""
    if isinstance(value, (tuple, list)):
        return [d for v in value for d in _dtypes(v)]
    return [value.dtype] if isinstance(value, torch.Tensor) else []
