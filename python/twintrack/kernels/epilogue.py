"""An elementwise epilogue a matmul kernel applies to each result before it
stores it: the body of the linalg.generic that consumed the matmul's result
(bias, activation, residual, a narrowing cast), as plain data.

The pass that finds the generic describes it (`twintrack.passes.
gpu_matmul_kernels`); the kernel generators emit it per output element with
`EpilogueWriter`, in MLIR's generic op form, so any arith/math op is carried
over unchanged."""

from __future__ import annotations

from dataclasses import dataclass

from .mlir_text import MlirWriter

# A value an epilogue op reads: ("arg", k) the generic's k-th input (the
# accumulator or a loaded tensor element), ("op", i) the i-th op's result,
# ("const", "0.0 : f32", "f32") a constant from outside the generic (its
# attribute and type).
Ref = tuple


@dataclass(frozen=True)
class EpilogueInput:
    memref_type: str | None   # None: the matmul's accumulator
    dims: tuple[int, ...] = ()  # the loop dimensions its indexing map reads, in order


@dataclass(frozen=True)
class BodyOp:
    """One op of a linalg.generic's body, re-emitted in MLIR's generic form."""
    name: str
    operands: tuple[Ref, ...]
    operand_types: tuple[str, ...]
    result_type: str
    attributes: str           # '{fastmath = #arith.fastmath<none>}' or ''


@dataclass(frozen=True)
class Epilogue:
    inputs: tuple[EpilogueInput, ...]
    ops: tuple[BodyOp, ...]
    result: Ref
    captured: tuple[str, ...] = ()  # memref types of buffers the body gathers from: ("captured", i)

    def tensor_inputs(self) -> list[tuple[int, EpilogueInput]]:
        """(position, input) of each input read from memory (not the accumulator)."""
        return [(k, inp) for k, inp in enumerate(self.inputs) if inp.memref_type is not None]


class EpilogueWriter:
    """Emits an epilogue for one output element. Its tensor inputs are the
    kernel function's arguments <tensors><k> (%E<k>), the buffers it gathers
    from <tensors>c<i>."""

    def __init__(self, epilogue: Epilogue, writer: MlirWriter, tensors: str = "%E"):
        self.epilogue, self.w, self.tensors = epilogue, writer, tensors

    def apply(self, accumulator: str, loop_indices: list[str]) -> str:
        """The epilogue's value for the element at `loop_indices` (batch?, row, col)."""
        values: dict[Ref, str] = {}
        values.update({("index", d): index for d, index in enumerate(loop_indices)})
        values.update({("captured", i): f"{self.tensors}c{i}" for i in range(len(self.epilogue.captured))})
        for k, inp in enumerate(self.epilogue.inputs):
            if inp.memref_type is None:
                values[("arg", k)] = accumulator
            else:
                indices = ", ".join(loop_indices[d] for d in inp.dims)
                values[("arg", k)] = self.w.op(f"memref.load {self.tensors}{k}[{indices}] : {inp.memref_type}")
        return emit_body(self.w, self.epilogue.ops, self.epilogue.result, values)


def emit_body(w: MlirWriter, ops: tuple[BodyOp, ...], result: Ref, values: dict[Ref, str]) -> str:
    """Emit a body's ops, its ("arg", k) and ("index", d) refs read from
    `values`; the SSA name of the result."""
    values = dict(values)
    for i, op in enumerate(ops):
        if op.name == "linalg.index":
            values[("op", i)] = values[op.operands[0]]
            continue
        operands = ", ".join(_value(w, ref, values) for ref in op.operands)
        values[("op", i)] = w.op(f'"{op.name}"({operands}) {op.attributes} : '
                                 f'({", ".join(op.operand_types)}) -> {op.result_type}')
    return _value(w, result, values)


def _value(w: MlirWriter, ref: Ref, values: dict) -> str:
    if ref[0] == "const":  # generic form: any attribute (a bool prints as `false`)
        return w.op(f'"arith.constant"() {{value = {ref[1]}}} : () -> {ref[2]}')
    return values[ref]
