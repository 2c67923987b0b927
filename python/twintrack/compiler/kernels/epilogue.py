"""An elementwise epilogue a matmul kernel applies to each result before it
stores it: the body of the linalg.generic that consumed the matmul's result
(bias, activation, residual, a narrowing cast).

The pass that finds the generic describes its body (`twintrack.compiler.passes.
generic_body`): each op with its operands as references, and the op itself.
The kernel generators rebuild it per output element (`EpilogueWriter`,
`clone_body`): each op is cloned from the generic's body through an
`IRMapping` from its operands to the kernel's values, so any arith/math op
is carried over unchanged."""

from __future__ import annotations

from dataclasses import dataclass, replace

from mlir import ir
from mlir.dialects import llvm, memref

from .builder import KernelBuilder

# A value an epilogue op reads: ("arg", k) the generic's k-th input (the
# accumulator or a loaded tensor element), ("op", i) the i-th op's result,
# ("index", d) loop index d, ("const", op) an arith.constant from outside
# the generic, ("captured", i) a buffer gathered from.
Ref = tuple


@dataclass(frozen=True)
class EpilogueInput:
    memref_type: str | None   # None: the matmul's accumulator
    dims: tuple[int, ...] = ()  # the loop dimensions its indexing map reads, in order


@dataclass(frozen=True)
class BodyOp:
    """One op of a linalg.generic's body: its name, its operands as
    references, and the op itself (`source`), which is cloned to rebuild
    it. `asm`, where set, replaces the op by that inline PTX (f32 operands
    $1.., result $0)."""
    name: str
    operands: tuple[Ref, ...]
    source: ir.Operation
    asm: str | None = None

    @property
    def result_type(self) -> str:
        return str(self.source.results[0].type)

    @property
    def operand_types(self) -> tuple[str, ...]:
        return tuple(str(v.type) for v in self.source.operands)

    def signature(self) -> tuple:
        """What a kernel built from this op depends on, whichever site's op
        it is: its name, references, PTX, types and attributes (a compare's
        predicate, a constant's value)."""
        source = self.source
        attributes = tuple((name, str(source.attributes[name])) for name in source.attributes)
        return (self.name, self.operands, self.asm, self.operand_types,
                tuple(str(r.type) for r in source.results), attributes)


def uncast(ops: tuple[BodyOp, ...], ref: Ref) -> Ref:
    """The value `ref` widens or narrows, through any chain of extf and
    truncf (a half-precision op computes in f32 between the two:
    passes/half_precision.py). Constants and infinities stay what they are."""
    while ref[0] == "op" and ops[ref[1]].name in ("arith.extf", "arith.truncf"):
        ref = ops[ref[1]].operands[0]
    return ref


@dataclass(frozen=True)
class Epilogue:
    inputs: tuple[EpilogueInput, ...]
    ops: tuple[BodyOp, ...]
    result: Ref
    captured: tuple[str, ...] = ()  # memref types of buffers the body gathers from: ("captured", i)

    def tensor_inputs(self) -> list[tuple[int, EpilogueInput]]:
        """(position, input) of each input read from memory (not the accumulator)."""
        return [(k, inp) for k, inp in enumerate(self.inputs) if inp.memref_type is not None]

    def without_op(self, index: int, replacement: Ref) -> Epilogue:
        """The epilogue with op `index` taken out, its readers (and the
        result, if it was that op) reading `replacement` instead."""
        def renumbered(ref: Ref) -> Ref:
            if ref == ("op", index):
                return replacement
            return ("op", ref[1] - 1) if ref[0] == "op" and ref[1] > index else ref
        ops = tuple(replace(op, operands=tuple(map(renumbered, op.operands)))
                    for i, op in enumerate(self.ops) if i != index)
        return replace(self, ops=ops, result=renumbered(self.result))

    def signature(self) -> tuple:
        """The epilogue as a kernel built from it depends on, whichever site it is read off."""
        return self.inputs, tuple(op.signature() for op in self.ops), self.result, self.captured


class IRMapping:
    """Values of the source IR -> values in the kernel being built: clones
    an op with its operands replaced (the bindings expose no IRMapping)."""

    def __init__(self):
        self._values: dict[ir.Value, ir.Value] = {}

    def map(self, source: ir.Value, value: ir.Value) -> None:
        self._values[source] = value

    def lookup(self, source: ir.Value) -> ir.Value:
        return self._values.get(source, source)

    def clone(self, op: ir.Operation, operands: list[ir.Value] | None = None) -> ir.Operation:
        """`op` cloned at the current insertion point, reading `operands`
        (default: its own, each mapped); its results mapped to the clone's."""
        copy = op.clone()
        for k, value in enumerate(operands if operands is not None else [self.lookup(v) for v in op.operands]):
            copy.operands[k] = value
        for original, result in zip(op.results, copy.results):
            self.map(original, result)
        return copy


class EpilogueWriter:
    """Builds an epilogue for one output element; its tensor inputs are
    `tensors[k]` (k: the input's position), read at the element's indices."""

    def __init__(self, epilogue: Epilogue, writer: KernelBuilder, tensors: dict[int, ir.Value],
                 captured: list[ir.Value] = ()):
        self.epilogue, self.w, self.tensors, self.captured = epilogue, writer, tensors, list(captured)

    def load_inputs(self, loop_indices: list[ir.Value], known: dict[int, ir.Value] | None = None) -> dict[int, ir.Value]:
        """The tensor inputs' elements at `loop_indices`, by input position;
        those `known` (the same everywhere the caller applies it) as given."""
        known = known or {}
        return {k: known[k] if k in known else memref.load(self.tensors[k], [loop_indices[d] for d in inp.dims])
                for k, inp in self.epilogue.tensor_inputs()}

    def apply(self, accumulator: ir.Value, loop_indices: list[ir.Value],
              loaded: dict[int, ir.Value] | None = None, known: dict[int, ir.Value] | None = None) -> ir.Value:
        """The epilogue's value for the element at `loop_indices` (batch?,
        row, col); its tensor inputs as `loaded` there (`load_inputs`), or
        loaded now (but for those `known`)."""
        values: dict[Ref, ir.Value] = {("index", d): index for d, index in enumerate(loop_indices)}
        values.update({("captured", i): buffer for i, buffer in enumerate(self.captured)})
        loaded = self.load_inputs(loop_indices, known) if loaded is None else loaded
        for k, inp in enumerate(self.epilogue.inputs):
            values[("arg", k)] = accumulator if inp.memref_type is None else loaded[k]
        return clone_body(self.w, self.epilogue.ops, self.epilogue.result, values)


def clone_body(w: KernelBuilder, ops: tuple[BodyOp, ...], result: Ref, values: dict[Ref, ir.Value]) -> ir.Value:
    """Rebuild a body's ops at the current insertion point, its ("arg", k),
    ("index", d) and ("captured", i) refs read from `values`; the result."""
    return clone_values(w, ops, values, [result])[0]


def clone_values(w: KernelBuilder, ops: tuple[BodyOp, ...], values: dict[Ref, ir.Value],
                 wanted: list[Ref]) -> list[ir.Value]:
    """The `wanted` refs of a body, rebuilding only the ops they depend on
    (see `clone_body`)."""
    values = dict(values)
    mapping = IRMapping()
    for i in sorted(_needed(ops, wanted)):
        op = ops[i]
        if op.name == "linalg.index":
            values[("op", i)] = values[op.operands[0]]
            continue
        operands = [_value(w, ref, values) for ref in op.operands]
        if op.asm is not None:
            values[("op", i)] = _inline_asm(op, operands)
        else:
            values[("op", i)] = mapping.clone(op.source, operands).results[0]
    return [_value(w, ref, values) for ref in wanted]


def _needed(ops: tuple[BodyOp, ...], wanted: list[Ref]) -> set[int]:
    """The ops the `wanted` refs are computed from."""
    needed, pending = set(), [ref for ref in wanted if ref[0] == "op"]
    while pending:
        index = pending.pop()[1]
        if index not in needed:
            needed.add(index)
            pending += [ref for ref in ops[index].operands if ref[0] == "op"]
    return needed


def _value(w: KernelBuilder, ref: Ref, values: dict) -> ir.Value:
    if ref[0] == "const":
        return w.constant_of(ref[1])
    return values[ref]


def _inline_asm(op: BodyOp, operands: list[ir.Value]) -> ir.Value:
    constraints = ",".join(["=f"] + ["f"] * len(operands))
    return llvm.inline_asm(op.source.results[0].type, operands, op.asm, constraints)
